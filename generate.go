package kitchen

//go:generate go run ./tools/tinydit -o testdata/tiny-dit.safetensors
