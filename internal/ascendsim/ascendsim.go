// Package ascendsim builds kitchen's CANN ABI simulator for tests: three
// shared libraries with the names and exported C signatures of CANN's
// libascendcl.so, libnnopbase.so and libopapi.so, implementing the subset of
// the AscendCL runtime and of the aclnn operators that backend/ascend uses,
// with "device" memory in host RAM behind opaque addresses.
//
// Tests call Build to compile the C sources (embedded in this package) with
// the system C compiler, point backend/ascend at the returned directory, and
// read the simulator's counters with ReadStats. Environment variables, read
// by the simulator at every call, inject faults and choose between
// behaviours that CANN leaves undocumented:
//
//	KITCHEN_SIM_DEVICES=N                 report N devices (default 1; 0 for none)
//	KITCHEN_SIM_FAIL=name:code:message    make the named C function fail with code
//	                                      (several entries separated by ';');
//	                                      aclGetRecentErrMsg then returns message
//	KITCHEN_SIM_FAIL_ALLOC=N              make the Nth aclrtMalloc, and every later
//	                                      one, fail (counted from when the value was set)
//	KITCHEN_SIM_MINMAX_NAN=ignore         min/max reductions and aclnnMaximum skip NaN
//	                                      (as fmaxf does) instead of returning it
//	KITCHEN_SIM_NAN_TO_INT=N              NaN rounded to int8 inside aclnnQuantize and
//	                                      aclnnDynamicQuantV2 gives N, saturated
//	                                      (default 0; aclnnCast always gives 0)
//	KITCHEN_SIM_SAT_MODE=N                every device's aclrtFloatOverflowMode becomes N
//	                                      when the variable takes a new value (default 1,
//	                                      INF/NaN; 0 is saturation)
//
// README.md beside this file lists every simulated signature with the CANN
// header it comes from, and what each operator computes.
package ascendsim

import (
	"embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

//go:embed csrc/*.c csrc/*.h
var sources embed.FS

// Libraries are the file names of the simulated libraries, as CANN names
// them, in the order they must be loaded.
var Libraries = []string{"libascendcl.so", "libnnopbase.so", "libopapi.so"}

// The fault-injection and behaviour variables.
const (
	EnvDevices   = "KITCHEN_SIM_DEVICES"
	EnvFail      = "KITCHEN_SIM_FAIL"
	EnvFailAlloc = "KITCHEN_SIM_FAIL_ALLOC"
	EnvMinMaxNaN = "KITCHEN_SIM_MINMAX_NAN" // "ignore": min and max skip NaN
	EnvNaNToInt  = "KITCHEN_SIM_NAN_TO_INT" // the int8 NaN gives in the quantize operators
	EnvSatMode   = "KITCHEN_SIM_SAT_MODE"   // the devices' overflow mode
)

// Source returns one of the simulator's C sources, by file name (for
// example "cann.h", the CANN prototypes it implements).
func Source(name string) ([]byte, error) { return sources.ReadFile("csrc/" + name) }

var built struct {
	once sync.Once
	dir  string
	skip string
	err  error
}

// Build compiles the simulator, once per process, into a temporary
// directory and returns it. It skips tb when the machine has no C compiler
// or is not one the simulator supports, and fails tb when the compiler
// rejects the sources. The libraries stay loaded for the life of the
// process, so every test shares one build and one simulator state; call
// Cleanup from TestMain to remove the directory.
func Build(tb testing.TB) string {
	tb.Helper()
	built.once.Do(build)
	switch {
	case built.skip != "":
		tb.Skip(built.skip)
	case built.err != nil:
		tb.Fatal(built.err)
	}
	return built.dir
}

// Cleanup removes the directory Build made, if any.
func Cleanup() {
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
}

func build() {
	if reason := unsupported(); reason != "" {
		built.skip = "CANN simulator: " + reason
		return
	}
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		built.skip = fmt.Sprintf("CANN simulator: no C compiler to build it (%v)", err)
		return
	}
	dir, err := os.MkdirTemp("", "kitchen-ascendsim-")
	if err != nil {
		built.err = err
		return
	}
	built.dir = dir
	src := filepath.Join(dir, "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		built.err = err
		return
	}
	names, _ := sources.ReadDir("csrc")
	for _, n := range names {
		b, _ := sources.ReadFile("csrc/" + n.Name())
		if err := os.WriteFile(filepath.Join(src, n.Name()), b, 0o644); err != nil {
			built.err = err
			return
		}
	}
	// All state lives in libascendcl.so; the other two link against it and
	// find it beside themselves (or already loaded, by its soname).
	flags := []string{"-std=gnu11", "-O2", "-fPIC", "-shared", "-ffp-contract=off", "-fvisibility=hidden", "-Wall"}
	steps := []struct {
		lib, src string
		libs     []string
	}{
		{"libascendcl.so", "ascendcl.c", []string{"-lpthread"}},
		{"libnnopbase.so", "nnopbase.c", []string{"-L" + dir, "-lascendcl", "-Wl,-rpath,$ORIGIN"}},
		{"libopapi.so", "opapi.c", []string{"-L" + dir, "-lascendcl", "-lm", "-Wl,-rpath,$ORIGIN"}},
	}
	for _, s := range steps {
		args := append(append([]string{}, flags...), "-Wl,-soname,"+s.lib, "-o", filepath.Join(dir, s.lib), filepath.Join(src, s.src))
		args = append(args, s.libs...)
		out, err := exec.Command(cc, args...).CombinedOutput()
		if err != nil {
			built.err = fmt.Errorf("CANN simulator: %s %s: %v\n%s", cc, strings.Join(args, " "), err, out)
			return
		}
	}
}

// Stats are the simulator's counters (struct kitchenSimStats in the C
// sources, field for field).
type Stats struct {
	H2DCopies, H2DBytes int64 // aclrtMemcpy host to device
	D2HCopies, D2HBytes int64 // aclrtMemcpy device to host
	D2DCopies, D2DBytes int64 // aclrtMemcpy device to device

	LiveAllocs  int64 // aclrtMalloc not yet freed
	LiveBytes   int64
	TotalAllocs int64

	LiveTensors   int64 // aclCreateTensor not yet destroyed
	LiveScalars   int64 // aclCreateScalar not yet destroyed
	LiveIntArrays int64 // aclCreateIntArray not yet destroyed
	LiveExecutors int64 // executors made by a first phase and neither run nor destroyed

	Launches     int64 // second phases queued
	Syncs        int64 // aclrtSynchronizeStream calls
	PendingTasks int64 // queued operators not yet run

	DeviceRefs int64 // aclrtSetDevice calls not yet undone by aclrtResetDevice

	// InitCalls counts aclInit calls, failed and repeated ones included:
	// how many times a process loaded CANN (backend/ascend's Load calls it
	// once per Runtime).
	InitCalls int64
	// FinalizeCalls counts aclFinalize calls, failed ones included.
	FinalizeCalls int64
}

// Sub returns s - base, field by field.
func (s Stats) Sub(base Stats) Stats {
	return Stats{
		s.H2DCopies - base.H2DCopies, s.H2DBytes - base.H2DBytes,
		s.D2HCopies - base.D2HCopies, s.D2HBytes - base.D2HBytes,
		s.D2DCopies - base.D2DCopies, s.D2DBytes - base.D2DBytes,
		s.LiveAllocs - base.LiveAllocs, s.LiveBytes - base.LiveBytes, s.TotalAllocs - base.TotalAllocs,
		s.LiveTensors - base.LiveTensors, s.LiveScalars - base.LiveScalars,
		s.LiveIntArrays - base.LiveIntArrays, s.LiveExecutors - base.LiveExecutors,
		s.Launches - base.Launches, s.Syncs - base.Syncs, s.PendingTasks - base.PendingTasks,
		s.DeviceRefs - base.DeviceRefs,
		s.InitCalls - base.InitCalls, s.FinalizeCalls - base.FinalizeCalls,
	}
}

// Live reports the handles and allocations that are still held.
func (s Stats) Live() string {
	return fmt.Sprintf("allocations %d (%d bytes), tensors %d, scalars %d, int arrays %d, executors %d, pending tasks %d",
		s.LiveAllocs, s.LiveBytes, s.LiveTensors, s.LiveScalars, s.LiveIntArrays, s.LiveExecutors, s.PendingTasks)
}

// SameLive reports whether s holds exactly the handles and allocations that
// base does.
func (s Stats) SameLive(base Stats) bool {
	d := s.Sub(base)
	return d.LiveAllocs == 0 && d.LiveBytes == 0 && d.LiveTensors == 0 && d.LiveScalars == 0 &&
		d.LiveIntArrays == 0 && d.LiveExecutors == 0 && d.PendingTasks == 0
}
