//go:build linux && (amd64 || arm64)

package ascendsim

import (
	"path/filepath"
	"sync"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"
)

func unsupported() string { return "" }

var probe struct {
	mu       sync.Mutex
	dir      string
	getStats func(out unsafe.Pointer)
	opCount  func(op string) int64
	satMode  func(device int32) int32
}

// bind loads libascendcl.so from dir (the very object the backend loaded,
// since the dynamic loader keeps one copy per path) and binds the
// simulator's test-only functions. It calls no CANN function (aclInit
// included), but it does map the library into the process: a test that
// checks whether the backend has loaded CANN must look before reading the
// counters.
func bind(tb testing.TB, dir string) {
	tb.Helper()
	probe.mu.Lock()
	defer probe.mu.Unlock()
	if probe.dir == dir {
		return
	}
	h, err := purego.Dlopen(filepath.Join(dir, "libascendcl.so"), purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		tb.Fatalf("CANN simulator: %v", err)
	}
	purego.RegisterLibFunc(&probe.getStats, h, "kitchenSimGetStats")
	purego.RegisterLibFunc(&probe.opCount, h, "kitchenSimOpCount")
	purego.RegisterLibFunc(&probe.satMode, h, "kitchenSimDeviceSatMode")
	probe.dir = dir
}

// ReadStats returns the counters of the simulator built in dir.
func ReadStats(tb testing.TB, dir string) Stats {
	tb.Helper()
	bind(tb, dir)
	var s Stats
	probe.getStats(unsafe.Pointer(&s))
	return s
}

// OpCount returns how many times the simulator built in dir has queued the
// named aclnn operator (for example "aclnnDynamicQuantV2").
func OpCount(tb testing.TB, dir, op string) int64 {
	tb.Helper()
	bind(tb, dir)
	return probe.opCount(op)
}

// SatMode returns the aclrtFloatOverflowMode of a device of the simulator
// built in dir (0 saturation, 1 INF/NaN).
func SatMode(tb testing.TB, dir string, device int) int {
	tb.Helper()
	bind(tb, dir)
	return int(probe.satMode(int32(device)))
}
