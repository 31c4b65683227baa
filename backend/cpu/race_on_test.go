//go:build race

package cpu

// raceOn: the race detector makes the tests' scalar sweeps over
// millions of values many times slower, and finds nothing in them.
const raceOn = true
