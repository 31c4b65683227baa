//go:build race

package convert_test

// raceOn: the race detector makes the tests' and the converter's loops
// over every value several times slower.
const raceOn = true
