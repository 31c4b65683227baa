//go:build !(linux && (amd64 || arm64))

package ascendsim

import "testing"

func unsupported() string { return "it runs on linux/amd64 and linux/arm64 only" }

// ReadStats returns the counters of the simulator built in dir. Build skips
// on this platform, so it is never reached.
func ReadStats(tb testing.TB, dir string) Stats {
	tb.Helper()
	tb.Skip("CANN simulator: " + unsupported())
	return Stats{}
}

// OpCount returns how many times the simulator built in dir has queued the
// named aclnn operator. Build skips on this platform, so it is never reached.
func OpCount(tb testing.TB, dir, op string) int64 {
	tb.Helper()
	tb.Skip("CANN simulator: " + unsupported())
	return 0
}

// SatMode returns the aclrtFloatOverflowMode of a device of the simulator
// built in dir. Build skips on this platform, so it is never reached.
func SatMode(tb testing.TB, dir string, device int) int {
	tb.Helper()
	tb.Skip("CANN simulator: " + unsupported())
	return 0
}
