//go:build linux && (amd64 || arm64)

package ascendsim_test

import (
	"debug/elf"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/gokitchen/kitchen/internal/ascendsim"
)

func TestMain(m *testing.M) {
	code := m.Run()
	ascendsim.Cleanup()
	os.Exit(code)
}

// exported lists the functions a shared library defines and exports.
func exported(t *testing.T, path string) []string {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, s := range syms {
		if s.Section != elf.SHN_UNDEF && elf.ST_TYPE(s.Info) == elf.STT_FUNC && elf.ST_BIND(s.Info) == elf.STB_GLOBAL {
			out = append(out, s.Name)
		}
	}
	slices.Sort(out)
	return out
}

// TestLibrariesExportCANNNames checks that each simulated library exports
// exactly the CANN functions that the real one of that name does (of those
// kitchen uses), plus, in libascendcl.so only, the simulator's own.
func TestLibrariesExportCANNNames(t *testing.T) {
	dir := ascendsim.Build(t)
	ops := []string{
		"aclnnCast", "aclnnAbs", "aclnnAmin", "aclnnAminmaxDim", "aclnnAll", "aclnnMaximum", "aclnnMul", "aclnnDiv", "aclnnAdd",
		"aclnnMuls", "aclnnDivs", "aclnnAdds", "aclnnClampMin", "aclnnClamp", "aclnnFloor", "aclnnIsFinite",
		"aclnnEqScalar", "aclnnGtScalar", "aclnnLogicalAnd", "aclnnLogicalNot", "aclnnInplaceFillScalar", "aclnnInplaceMaskedFillScalar",
		"aclnnInplaceCopy", "aclnnArange", "aclnnInplaceBitwiseAndScalar", "aclnnInplaceBitwiseXorTensor",
		"aclnnInplaceAdds", "aclnnInplaceAdd", "aclnnInplaceMuls", "aclnnInplaceFloorDivides", "aclnnFloorDivides",
		"aclnnFloorDivide", "aclnnPowScalarTensor", "aclnnDynamicQuantV2", "aclnnQuantize", "aclnnQuantMatmulV4",
		"aclnnExp", "aclnnIndexSelect",
	}
	var opapi []string
	for _, op := range ops {
		opapi = append(opapi, op, op+"GetWorkspaceSize")
	}
	want := map[string][]string{
		"libnnopbase.so": {"aclCreateIntArray", "aclCreateScalar", "aclCreateTensor", "aclDestroyAclOpExecutor",
			"aclDestroyIntArray", "aclDestroyScalar", "aclDestroyTensor", "aclSetAclOpExecutorRepeatable"},
		"libopapi.so": opapi,
	}
	for lib, names := range want {
		slices.Sort(names)
		if got := exported(t, filepath.Join(dir, lib)); !slices.Equal(got, names) {
			t.Errorf("%s exports %v,\nwant %v", lib, got, names)
		}
	}
	acl := exported(t, filepath.Join(dir, "libascendcl.so"))
	for _, name := range []string{"aclInit", "aclFinalize", "aclGetRecentErrMsg", "aclrtGetDeviceCount", "aclrtSetDevice",
		"aclrtResetDevice", "aclrtGetCurrentContext", "aclrtSetCurrentContext", "aclrtGetDeviceSatMode",
		"aclrtSetDeviceSatMode", "aclrtCreateStream", "aclrtDestroyStream", "aclrtSynchronizeStream", "aclrtMalloc",
		"aclrtFree", "aclrtMemcpy", "kitchenSimGetStats", "kitchenSimOpCount", "kitchenSimDeviceSatMode"} {
		if !slices.Contains(acl, name) {
			t.Errorf("libascendcl.so does not export %s", name)
		}
	}
	for _, name := range acl {
		if !strings.HasPrefix(name, "acl") && !strings.HasPrefix(name, "ksim_") && !strings.HasPrefix(name, "kitchenSim") {
			t.Errorf("libascendcl.so exports %s", name)
		}
	}
}

// rt binds the few runtime functions the tests below call directly.
type rt struct {
	init         func(unsafe.Pointer) int32
	setDevice    func(int32) int32
	malloc       func(*uintptr, uintptr, int32) int32
	free         func(uintptr) int32
	createStream func(*uintptr) int32
	sync         func(uintptr) int32
	toDevice     func(uintptr, uintptr, unsafe.Pointer, uintptr, int32) int32
	toHost       func(unsafe.Pointer, uintptr, uintptr, uintptr, int32) int32
	errMsg       func() string
	createTensor func(*int64, uint64, int32, *int64, int64, int32, *int64, uint64, uintptr) uintptr
	destroy      func(uintptr) int32
	castWS       func(uintptr, int32, uintptr, *uint64, *uintptr) int32
	cast         func(uintptr, uint64, uintptr, uintptr) int32
	repeatable   func(uintptr) int32
	destroyExec  func(uintptr) int32
	finalize     func() int32
	deviceCount  func(*uint32) int32
	quantWS      func(x, scales, zeroPoints uintptr, dtype, axis int32, out uintptr, ws *uint64, ex *uintptr) int32
	quant        func(uintptr, uint64, uintptr, uintptr) int32
	selectWS     func(self uintptr, dim int64, index, out uintptr, ws *uint64, ex *uintptr) int32
	indexSelect  func(uintptr, uint64, uintptr, uintptr) int32
}

func load(t *testing.T) *rt {
	t.Helper()
	return loadFrom(t, ascendsim.Build(t))
}

// loadFrom is load of the simulator built in dir.
func loadFrom(t *testing.T, dir string) *rt {
	t.Helper()
	var h [3]uintptr
	for i, lib := range ascendsim.Libraries {
		var err error
		if h[i], err = purego.Dlopen(filepath.Join(dir, lib), purego.RTLD_NOW|purego.RTLD_GLOBAL); err != nil {
			t.Fatal(err)
		}
	}
	r := &rt{}
	for _, b := range []struct {
		fn   any
		lib  int
		name string
	}{
		{&r.init, 0, "aclInit"}, {&r.setDevice, 0, "aclrtSetDevice"}, {&r.malloc, 0, "aclrtMalloc"},
		{&r.free, 0, "aclrtFree"}, {&r.createStream, 0, "aclrtCreateStream"}, {&r.sync, 0, "aclrtSynchronizeStream"},
		{&r.toDevice, 0, "aclrtMemcpy"}, {&r.toHost, 0, "aclrtMemcpy"}, {&r.errMsg, 0, "aclGetRecentErrMsg"},
		{&r.createTensor, 1, "aclCreateTensor"}, {&r.destroy, 1, "aclDestroyTensor"},
		{&r.castWS, 2, "aclnnCastGetWorkspaceSize"}, {&r.cast, 2, "aclnnCast"},
		{&r.repeatable, 1, "aclSetAclOpExecutorRepeatable"}, {&r.destroyExec, 1, "aclDestroyAclOpExecutor"},
		{&r.finalize, 0, "aclFinalize"}, {&r.deviceCount, 0, "aclrtGetDeviceCount"},
		{&r.quantWS, 2, "aclnnQuantizeGetWorkspaceSize"}, {&r.quant, 2, "aclnnQuantize"},
		{&r.selectWS, 2, "aclnnIndexSelectGetWorkspaceSize"}, {&r.indexSelect, 2, "aclnnIndexSelect"},
	} {
		purego.RegisterLibFunc(b.fn, h[b.lib], b.name)
	}
	if st := r.init(nil); st != 0 && st != 100002 {
		t.Fatalf("aclInit: %d", st)
	}
	r.errMsg()
	return r
}

// onThread runs f on a new OS thread, which ends with it.
func onThread(f func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		f()
	}()
	<-done
}

// TestContextIsPerThread checks that the runtime, like CANN's, refuses
// device calls from a thread with no current context.
func TestContextIsPerThread(t *testing.T) {
	r := load(t)
	onThread(func() {
		var p uintptr
		if st := r.malloc(&p, 64, 0); st != 107002 || !strings.Contains(r.errMsg(), "no current context") {
			t.Errorf("aclrtMalloc without a context: %d", st)
		}
		if st := r.setDevice(0); st != 0 {
			t.Errorf("aclrtSetDevice: %d", st)
			return
		}
		if st := r.malloc(&p, 64, 0); st != 0 {
			t.Errorf("aclrtMalloc: %d", st)
		}
		r.free(p)
	})
	onThread(func() {
		var p uintptr
		if st := r.malloc(&p, 64, 0); st != 107002 {
			t.Errorf("aclrtMalloc on another thread: %d, want 107002", st)
		}
	})
}

// TestOperatorsRunAtSynchronize queues a cast and checks that its result
// appears only after aclrtSynchronizeStream, and that freeing its input
// before then is reported when the stream runs.
func TestOperatorsRunAtSynchronize(t *testing.T) {
	r := load(t)
	dir := ascendsim.Build(t)
	onThread(func() {
		if st := r.setDevice(0); st != 0 {
			t.Errorf("aclrtSetDevice: %d", st)
			return
		}
		var stream, in, out uintptr
		r.createStream(&stream)
		r.malloc(&in, 4, 0)
		r.malloc(&out, 4, 0)
		src := []byte{1, 2, 3, 4}
		r.toDevice(in, 4, unsafe.Pointer(&src[0]), 4, 1)
		launch := func() bool {
			dims, strides := []int64{4}, []int64{1}
			a := r.createTensor(&dims[0], 1, 2, &strides[0], 0, 2, &dims[0], 1, in)  // int8
			b := r.createTensor(&dims[0], 1, 4, &strides[0], 0, 2, &dims[0], 1, out) // uint8
			var ws uint64
			var ex uintptr
			defer r.destroy(a)
			defer r.destroy(b)
			if st := r.castWS(a, 4, b, &ws, &ex); st != 0 {
				t.Errorf("aclnnCastGetWorkspaceSize: %d %s", st, r.errMsg())
				return false
			}
			if st := r.cast(0, 0, ex, stream); st != 0 {
				t.Errorf("aclnnCast: %d %s", st, r.errMsg())
				return false
			}
			return true
		}
		before := ascendsim.ReadStats(t, dir)
		if !launch() {
			return
		}
		got := make([]byte, 4)
		r.toHost(unsafe.Pointer(&got[0]), 4, out, 4, 2)
		if string(got) != "\x00\x00\x00\x00" {
			t.Errorf("before synchronizing: %v, want zeros", got)
		}
		if st := r.sync(stream); st != 0 {
			t.Errorf("aclrtSynchronizeStream: %d", st)
			return
		}
		r.toHost(unsafe.Pointer(&got[0]), 4, out, 4, 2)
		if string(got) != string(src) {
			t.Errorf("after synchronizing: %v, want %v", got, src)
		}
		d := ascendsim.ReadStats(t, dir).Sub(before)
		if d.Launches != 1 || d.Syncs != 1 || d.D2HCopies != 2 || d.LiveExecutors != 0 || d.LiveTensors != 0 {
			t.Errorf("counters %+v", d)
		}
		if !launch() {
			return
		}
		r.free(in)
		if st := r.sync(stream); st != 507899 || !strings.Contains(r.errMsg(), "not allocated") {
			t.Errorf("synchronizing after freeing an input: %d", st)
		}
		r.free(out)
	})
}

// castSetup makes the device current on this thread, a stream and the
// int8 -> uint8 cast of 4 elements from in to out, and returns the
// executor, which the caller runs or destroys; done releases the rest.
func (r *rt) castSetup(t *testing.T, in, out uintptr) (stream, ex uintptr, done func()) {
	t.Helper()
	if st := r.setDevice(0); st != 0 {
		t.Fatalf("aclrtSetDevice: %d", st)
	}
	r.createStream(&stream)
	dims, strides := []int64{4}, []int64{1}
	a := r.createTensor(&dims[0], 1, 2, &strides[0], 0, 2, &dims[0], 1, in)  // int8
	b := r.createTensor(&dims[0], 1, 4, &strides[0], 0, 2, &dims[0], 1, out) // uint8
	var ws uint64
	if st := r.castWS(a, 4, b, &ws, &ex); st != 0 {
		t.Fatalf("aclnnCastGetWorkspaceSize: %d %s", st, r.errMsg())
	}
	return stream, ex, func() { r.destroy(a); r.destroy(b) }
}

// TestExecutorDestroy checks aclDestroyAclOpExecutor as CANN documents it:
// only for an executor made repeatable, which then runs any number of
// times until destroyed.
func TestExecutorDestroy(t *testing.T) {
	r := load(t)
	dir := ascendsim.Build(t)
	onThread(func() {
		before := ascendsim.ReadStats(t, dir)
		var in, out uintptr
		r.setDevice(0)
		r.malloc(&in, 64, 0)
		r.malloc(&out, 64, 0)
		defer r.free(in)
		defer r.free(out)
		stream, ex, done := r.castSetup(t, in, out)
		defer done()
		if st := r.destroyExec(ex); st != 161002 || !strings.Contains(r.errMsg(), "not repeatable") {
			t.Errorf("destroying a non-repeatable executor: %d, want 161002", st)
		}
		if n := ascendsim.ReadStats(t, dir).Sub(before).LiveExecutors; n != 1 {
			t.Errorf("%d live executors, want the one not destroyed", n)
		}
		if st := r.repeatable(ex); st != 0 {
			t.Fatalf("aclSetAclOpExecutorRepeatable: %d", st)
		}
		for range 2 {
			if st := r.cast(0, 0, ex, stream); st != 0 {
				t.Fatalf("aclnnCast of a repeatable executor: %d %s", st, r.errMsg())
			}
		}
		if st := r.sync(stream); st != 0 {
			t.Fatalf("aclrtSynchronizeStream: %d", st)
		}
		if st := r.destroyExec(ex); st != 0 {
			t.Errorf("destroying a repeatable executor: %d %s", st, r.errMsg())
		}
		d := ascendsim.ReadStats(t, dir).Sub(before)
		if d.LiveExecutors != 0 || d.Launches != 2 {
			t.Errorf("counters %+v: want no live executor, 2 launches", d)
		}
	})
}

// TestUnalignedTensor places a tensor 8 bytes into an allocation: the
// operator fails when the stream runs it, as a kernel's unaligned access
// to global memory does.
func TestUnalignedTensor(t *testing.T) {
	r := load(t)
	onThread(func() {
		var in, out uintptr
		r.setDevice(0)
		r.malloc(&in, 64, 0)
		r.malloc(&out, 64, 0)
		defer r.free(in)
		defer r.free(out)
		stream, ex, done := r.castSetup(t, in, out+8)
		defer done()
		if st := r.cast(0, 0, ex, stream); st != 0 {
			t.Fatalf("aclnnCast: %d %s", st, r.errMsg())
		}
		if st := r.sync(stream); st != 507035 || !strings.Contains(r.errMsg(), "32-byte aligned") {
			t.Errorf("synchronizing an unaligned tensor: %d, want 507035", st)
		}
		_, ex, done2 := r.castSetup(t, in, out+32)
		defer done2()
		if st := r.cast(0, 0, ex, stream); st != 0 || r.sync(stream) != 0 {
			t.Errorf("a tensor 32 bytes into an allocation: %d %s", st, r.errMsg())
		}
	})
}

// TestInitCalls checks the aclInit counter: every call counts, a repeated
// one (which returns ACL_ERROR_REPEAT_INITIALIZE) and one failed by fault
// injection included.
func TestInitCalls(t *testing.T) {
	r := load(t) // aclInit has run at least once
	dir := ascendsim.Build(t)
	before := ascendsim.ReadStats(t, dir)
	if before.InitCalls < 1 {
		t.Fatalf("InitCalls %d after aclInit ran", before.InitCalls)
	}
	if st := r.init(nil); st != 100002 || !strings.Contains(r.errMsg(), "already initialized") {
		t.Errorf("second aclInit: %d, want 100002", st)
	}
	t.Setenv(ascendsim.EnvFail, "aclInit:100003:sim: bad configuration")
	if st := r.init(nil); st != 100003 || r.errMsg() != "sim: bad configuration" {
		t.Errorf("aclInit made to fail: %d", st)
	}
	if d := ascendsim.ReadStats(t, dir).Sub(before); d.InitCalls != 2 || !d.SameLive(ascendsim.Stats{}) {
		t.Errorf("after a repeated and a failed aclInit: %+v, want InitCalls 2 and nothing else live", d)
	}
}
