//go:build linux && (amd64 || arm64)

package ascendsim_test

import (
	"encoding/binary"
	"math"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/gokitchen/kitchen/internal/ascendsim"
)

// session is a thread with device 0 current and a stream, on which a test
// queues operators on 1-D tensors and reads their results.
type session struct {
	t      *testing.T
	r      *rt
	stream uintptr
	mem    []uintptr
	ts     []uintptr
}

// open makes device 0 current on the calling (locked) thread and creates a
// stream; close releases what the session made.
func (r *rt) open(t *testing.T) *session {
	t.Helper()
	if st := r.setDevice(0); st != 0 {
		t.Fatalf("aclrtSetDevice: %d", st)
	}
	s := &session{t: t, r: r}
	if st := r.createStream(&s.stream); st != 0 {
		t.Fatalf("aclrtCreateStream: %d", st)
	}
	return s
}

func (s *session) close() {
	for _, x := range s.ts {
		s.r.destroy(x)
	}
	for _, p := range s.mem {
		s.r.free(p)
	}
}

// array allocates device memory holding b and returns its address.
func (s *session) array(b []byte) uintptr {
	var p uintptr
	if st := s.r.malloc(&p, uintptr(max(len(b), 1)), 0); st != 0 {
		s.t.Fatalf("aclrtMalloc: %d", st)
	}
	s.mem = append(s.mem, p)
	if len(b) > 0 {
		s.r.toDevice(p, uintptr(len(b)), unsafe.Pointer(&b[0]), uintptr(len(b)), 1)
	}
	return p
}

// tensor is an aclTensor of n elements of type dt at addr.
func (s *session) tensor(dt int32, addr uintptr, n int) uintptr {
	dims, strides := []int64{int64(n)}, []int64{1}
	x := s.r.createTensor(&dims[0], 1, dt, &strides[0], 0, 2, &dims[0], 1, addr)
	s.ts = append(s.ts, x)
	return x
}

// launch runs a first phase's executor: a workspace of the size asked,
// the second phase, and the stream synchronized.
func (s *session) launch(name string, st int32, ws uint64, ex uintptr, second func(uintptr, uint64, uintptr, uintptr) int32) {
	s.t.Helper()
	if st != 0 {
		s.t.Fatalf("%sGetWorkspaceSize: %d %s", name, st, s.r.errMsg())
	}
	var w uintptr
	if ws > 0 {
		w = s.array(make([]byte, ws))
	}
	if st := second(w, ws, ex, s.stream); st != 0 {
		s.t.Fatalf("%s: %d %s", name, st, s.r.errMsg())
	}
	if st := s.r.sync(s.stream); st != 0 {
		s.t.Fatalf("%s: aclrtSynchronizeStream: %d %s", name, st, s.r.errMsg())
	}
}

// read copies n bytes from addr to the host.
func (s *session) read(addr uintptr, n int) []byte {
	b := make([]byte, n)
	if st := s.r.toHost(unsafe.Pointer(&b[0]), uintptr(n), addr, uintptr(n), 2); st != 0 {
		s.t.Fatalf("aclrtMemcpy: %d", st)
	}
	return b
}

// cast runs aclnnCast of n elements of type from (bytes in) to type to,
// whose elements are size bytes, and returns the result.
func (s *session) cast(in []byte, from, to int32, n, size int) []byte {
	s.t.Helper()
	out := s.array(make([]byte, n*size))
	var ws uint64
	var ex uintptr
	st := s.r.castWS(s.tensor(from, s.array(in), n), to, s.tensor(to, out, n), &ws, &ex)
	s.launch("aclnnCast", st, ws, ex, s.r.cast)
	return s.read(out, n*size)
}

func float32s(v ...float32) []byte {
	b := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
	return b
}

func int8s(b []byte) []int8 {
	v := make([]int8, len(b))
	for i, c := range b {
		v[i] = int8(c)
	}
	return v
}

const (
	aclFloat = 0
	aclInt8  = 2
	aclInt32 = 3
)

// TestCastConversions checks aclnnCast's conversions to integers as CANN
// documents them: int32 to int8 wraps modulo 256 (the 8.1.RC1 kernel
// computes ((x + 128) mod 256) - 128, exact for inputs in (-2048, 1920)),
// and NaN from a floating-point type becomes 0 whatever
// KITCHEN_SIM_NAN_TO_INT says (that variable is for the quantize
// operators' roundings only). Out-of-range float values are truncated and
// wrap: nothing saturates.
func TestCastConversions(t *testing.T) {
	r := load(t)
	t.Setenv(ascendsim.EnvNaNToInt, "-128")
	onThread(func() {
		s := r.open(t)
		defer s.close()

		ints := []int32{0, 127, 128, 200, 255, 256, -128, -129, -200, 300, 1000, -1000, 1919, -2047}
		in := make([]byte, 4*len(ints))
		for i, v := range ints {
			binary.LittleEndian.PutUint32(in[4*i:], uint32(v))
		}
		got := int8s(s.cast(in, aclInt32, aclInt8, len(ints), 1))
		for i, v := range ints {
			if want := int8(v); got[i] != want { // Go's conversion keeps the low 8 bits
				t.Errorf("int32 %d cast to int8: %d, want %d (modulo 256)", v, got[i], want)
			}
		}

		nan := float32(math.NaN())
		floats := []float32{nan, -nan, 300.7, -129.9, 127.9, -0.9, 1e10, float32(math.Inf(1)), float32(math.Inf(-1))}
		want8 := []int8{0, 0, 44, 127, 127, 0, -1, -1, 0}
		got = int8s(s.cast(float32s(floats...), aclFloat, aclInt8, len(floats), 1))
		for i, f := range floats {
			if got[i] != want8[i] {
				t.Errorf("float32 %g cast to int8: %d, want %d", f, got[i], want8[i])
			}
		}
		b := s.cast(float32s(nan, -2.5), aclFloat, aclInt32, 2, 4)
		if v0, v1 := int32(binary.LittleEndian.Uint32(b)), int32(binary.LittleEndian.Uint32(b[4:])); v0 != 0 || v1 != -2 {
			t.Errorf("float32 NaN, -2.5 cast to int32: %d, %d, want 0, -2", v0, v1)
		}
	})
}

// TestQuantizeDoesNotClip checks aclnnQuantize's int8 output as the 8.1.RC1
// kernel computes it: the float32 quotient rounded half to even and cast,
// with no clipping (the kernel clips only for a uint8 output), so a
// quotient beyond the int8 range comes back wrapped; and NaN gives what
// KITCHEN_SIM_NAN_TO_INT says, 0 by default.
func TestQuantizeDoesNotClip(t *testing.T) {
	r := load(t)
	onThread(func() {
		s := r.open(t)
		defer s.close()
		quantize := func(x ...float32) []int8 {
			out := s.array(make([]byte, len(x)))
			var ws uint64
			var ex uintptr
			st := r.quantWS(s.tensor(aclFloat, s.array(float32s(x...)), len(x)), s.tensor(aclFloat, s.array(float32s(1)), 1),
				0, aclInt8, 0, s.tensor(aclInt8, out, len(x)), &ws, &ex)
			s.launch("aclnnQuantize", st, ws, ex, r.quant)
			return int8s(s.read(out, len(x)))
		}
		x := []float32{126.5, 127.4, 127.5, 128, 300, -128.4, -128.5, -129.5, 1e10, float32(math.NaN())}
		want := []int8{126, 127, -128, -128, 44, -128, -128, 126, -1, 0}
		got := quantize(x...)
		for i := range x {
			if got[i] != want[i] {
				t.Errorf("aclnnQuantize of %g by 1: %d, want %d", x[i], got[i], want[i])
			}
		}
		t.Setenv(ascendsim.EnvNaNToInt, "-128")
		if got := quantize(float32(math.NaN())); got[0] != -128 {
			t.Errorf("aclnnQuantize of NaN with %s=-128: %d", ascendsim.EnvNaNToInt, got[0])
		}
	})
}

// TestIndexSelect gathers rows of an int8 table [3, 2] by int32 indices,
// and checks that an index out of range makes the kernel fail when the
// stream runs it (what the NPU does is not documented; the simulator
// refuses, so a backend that does not check its indices fails its tests).
func TestIndexSelect(t *testing.T) {
	r := load(t)
	onThread(func() {
		s := r.open(t)
		defer s.close()
		table := s.array([]byte{1, 2, 3, 4, 5, 6})
		dims, strides := []int64{3, 2}, []int64{2, 1}
		x := r.createTensor(&dims[0], 2, aclInt8, &strides[0], 0, 2, &dims[0], 2, table)
		s.ts = append(s.ts, x)
		gather := func(idx ...int32) (uintptr, int32) {
			in := make([]byte, 4*len(idx))
			for i, v := range idx {
				binary.LittleEndian.PutUint32(in[4*i:], uint32(v))
			}
			out := s.array(make([]byte, 2*len(idx)))
			odims := []int64{int64(len(idx)), 2}
			o := r.createTensor(&odims[0], 2, aclInt8, &strides[0], 0, 2, &odims[0], 2, out)
			s.ts = append(s.ts, o)
			var ws uint64
			var ex uintptr
			if st := r.selectWS(x, 0, s.tensor(aclInt32, s.array(in), len(idx)), o, &ws, &ex); st != 0 {
				t.Fatalf("aclnnIndexSelectGetWorkspaceSize: %d %s", st, r.errMsg())
			}
			w := s.array(make([]byte, ws))
			if st := r.indexSelect(w, ws, ex, s.stream); st != 0 {
				t.Fatalf("aclnnIndexSelect: %d %s", st, r.errMsg())
			}
			return out, r.sync(s.stream)
		}
		out, st := gather(2, 0, 2)
		if got := s.read(out, 6); st != 0 || string(got) != string([]byte{5, 6, 1, 2, 5, 6}) {
			t.Errorf("rows 2, 0, 2: %v (status %d), want [5 6 1 2 5 6]", got, st)
		}
		if _, st := gather(1, 3); st != 361001 || !strings.Contains(r.errMsg(), "index 3 at position 1 is out of range") {
			t.Errorf("index 3 of 3 rows: status %d, want 361001 naming the index", st)
		}
	})
}

// cannConstants are the values CANN 8.1.RC1's headers give the constants
// the simulator defines in csrc/ksim.h: include/acl/acl_base.h (data
// types, format, ACL_ERROR_*), acl/acl_rt.h (copy kinds, overflow modes),
// acl/error_codes/rt_error_codes.h (ACL_ERROR_RT_*) and
// aclnn/opdev/op_errno.h (ACLNN_ERR_*).
var cannConstants = map[string]int64{
	"ACL_FLOAT": 0, "ACL_FLOAT16": 1, "ACL_INT8": 2, "ACL_INT32": 3, "ACL_UINT8": 4, "ACL_INT16": 6,
	"ACL_UINT16": 7, "ACL_UINT32": 8, "ACL_INT64": 9, "ACL_UINT64": 10, "ACL_DOUBLE": 11, "ACL_BOOL": 12,
	"ACL_BF16": 27, "ACL_FORMAT_ND": 2,
	"ACL_MEMCPY_HOST_TO_HOST": 0, "ACL_MEMCPY_HOST_TO_DEVICE": 1, "ACL_MEMCPY_DEVICE_TO_HOST": 2,
	"ACL_MEMCPY_DEVICE_TO_DEVICE":     3,
	"ACL_RT_OVERFLOW_MODE_SATURATION": 0, "ACL_RT_OVERFLOW_MODE_INFNAN": 1,
	"ACL_SUCCESS": 0, "ACL_ERROR_INVALID_PARAM": 100000, "ACL_ERROR_UNINITIALIZE": 100001,
	"ACL_ERROR_REPEAT_INITIALIZE": 100002,
	"ACL_ERROR_RT_PARAM_INVALID":  107000, "ACL_ERROR_RT_INVALID_DEVICEID": 107001, "ACL_ERROR_RT_CONTEXT_NULL": 107002,
	"ACL_ERROR_RT_STREAM_CONTEXT": 107003, "ACL_ERROR_RT_ADDR_UNALIGNED": 107008, "ACL_ERROR_RT_INVALID_HANDLE": 107017,
	"ACL_ERROR_RT_MEMORY_ALLOCATION": 207001, "ACL_ERROR_RT_NO_DEVICE": 207004,
	"ACL_ERROR_RT_INTERNAL_ERROR": 507000, "ACL_ERROR_RT_VECTOR_CORE_EXCEPTION": 507035,
	"ACL_ERROR_RT_DRV_INTERNAL_ERROR": 507899,
	"ACLNN_ERR_PARAM_NULLPTR":         161001, "ACLNN_ERR_PARAM_INVALID": 161002, "ACLNN_ERR_RUNTIME_ERROR": 361001,
	"ACLNN_ERR_INNER_NULLPTR": 561103,
}

// TestConstantsMatchCANNHeaders checks every enumerator csrc/ksim.h
// defines, names and values, against CANN's headers; the simulator uses
// each by name, so a wrong name gives a wrong code.
func TestConstantsMatchCANNHeaders(t *testing.T) {
	src, err := ascendsim.Source("ksim.h")
	if err != nil {
		t.Fatal(err)
	}
	defs := regexp.MustCompile(`(?m)^\s*(ACL[A-Z0-9_]*)\s*=\s*(\d+),`).FindAllStringSubmatch(string(src), -1)
	if len(defs) < 30 {
		t.Fatalf("found only %d constants in ksim.h", len(defs))
	}
	for _, d := range defs {
		v, _ := strconv.ParseInt(d[2], 10, 64)
		want, ok := cannConstants[d[1]]
		switch {
		case !ok:
			t.Errorf("ksim.h defines %s = %d, which is not in the table of CANN's constants", d[1], v)
		case v != want:
			t.Errorf("ksim.h defines %s = %d; CANN 8.1.RC1 defines it as %d", d[1], v, want)
		}
	}
}

const envFinalizeChild = "KITCHEN_ASCENDSIM_TEST_FINALIZE" // the simulator's directory, in the child

// TestFinalize checks aclFinalize in a process of its own (it ends
// AscendCL for the process): every call is counted, failed ones included;
// a failure injected with KITCHEN_SIM_FAIL leaves AscendCL running; after
// it succeeds, runtime calls fail with ACL_ERROR_UNINITIALIZE, aclInit is
// refused (once per process) and aclFinalize again fails.
func TestFinalize(t *testing.T) {
	dir := ascendsim.Build(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestFinalizeChild$", "-test.v", "-test.count=1")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "KITCHEN_SIM_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, envFinalizeChild+"="+dir, "GORACE=atexit_sleep_ms=0")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestFinalizeChild") {
		t.Fatalf("aclFinalize in a process of its own: %v\n%s", err, out)
	}
}

// TestFinalizeChild is TestFinalize's process; run directly, it skips.
func TestFinalizeChild(t *testing.T) {
	dir := os.Getenv(envFinalizeChild)
	if dir == "" {
		t.Skip("runs in a process of its own, for TestFinalize")
	}
	r := loadFrom(t, dir)
	before := ascendsim.ReadStats(t, dir)
	t.Setenv(ascendsim.EnvFail, "aclFinalize:100000:sim: not now")
	if st := r.finalize(); st != 100000 || r.errMsg() != "sim: not now" {
		t.Errorf("aclFinalize made to fail: %d", st)
	}
	t.Setenv(ascendsim.EnvFail, "")
	var n uint32
	if st := r.deviceCount(&n); st != 0 || n != 1 {
		t.Fatalf("aclrtGetDeviceCount after a failed aclFinalize: %d, %d devices", st, n)
	}
	if st := r.finalize(); st != 0 {
		t.Fatalf("aclFinalize: %d %s", st, r.errMsg())
	}
	if st := r.deviceCount(&n); st != 100001 || !strings.Contains(r.errMsg(), "aclInit has not been called") {
		t.Errorf("aclrtGetDeviceCount after aclFinalize: %d, want 100001", st)
	}
	onThread(func() {
		if st := r.setDevice(0); st != 100001 {
			t.Errorf("aclrtSetDevice after aclFinalize: %d, want 100001", st)
		}
	})
	if st := r.init(nil); st != 100002 || !strings.Contains(r.errMsg(), "finalized") {
		t.Errorf("aclInit after aclFinalize: %d, want 100002", st)
	}
	if st := r.finalize(); st != 100001 {
		t.Errorf("second aclFinalize: %d, want 100001", st)
	}
	if d := ascendsim.ReadStats(t, dir).Sub(before); d.FinalizeCalls != 3 || d.InitCalls != 1 {
		t.Errorf("counters %+v: want 3 aclFinalize calls (one failed, one refused) and 1 aclInit", d)
	}
}
