module github.com/gokitchen/kitchen

go 1.26.0

require github.com/spf13/cobra v1.10.2

require (
	github.com/ebitengine/purego v0.11.3 // indirect
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/spf13/pflag v1.0.9 // indirect
	golang.org/x/sys v0.50.0 // indirect
	golang.org/x/term v0.48.0 // indirect
)
