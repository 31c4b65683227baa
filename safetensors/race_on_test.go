//go:build race

package safetensors

// raceOn: the race detector makes byte loops over 100 MB slow.
const raceOn = true
