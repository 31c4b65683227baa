//go:build !race

package convert_test

const raceOn = false
