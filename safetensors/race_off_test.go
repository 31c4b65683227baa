//go:build !race

package safetensors

const raceOn = false
