package ascend

import (
	"errors"
	"os"
	"reflect"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/internal/ascendsim"
	"github.com/gokitchen/kitchen/tensor"
)

// load loads the simulator, or the installed CANN with
// KITCHEN_ASCEND_HARDWARE=1 (then dir is "").
func load(t *testing.T) (rt *Runtime, dir string) {
	t.Helper()
	opts := Options{}
	if os.Getenv("KITCHEN_ASCEND_HARDWARE") != "1" {
		dir = ascendsim.Build(t)
		opts.Dirs = []string{dir}
	}
	rt, err := Load(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := rt.Close(); err != nil {
			t.Error(err)
		}
	})
	return rt, dir
}

// TestPanicEndsSession panics inside an operation: the session still ends
// (its results freed, the device unlocked) and the panic comes back as an
// error.
func TestPanicEndsSession(t *testing.T) {
	rt, dir := load(t)
	d := rt.Device()
	if err := d.Open(); err != nil {
		t.Fatal(err)
	}
	var before ascendsim.Stats
	if dir != "" {
		before = ascendsim.ReadStats(t, dir)
	}
	var made *tensor.Tensor
	_, err := do(d, func(s *session) (int, error) {
		made, _, _ = s.result(dtype.Float32, []int{8})
		panic("boom")
	})
	if err == nil || !strings.Contains(err.Error(), "panicked: boom") {
		t.Fatalf("got %v, want the panic as an error", err)
	}
	if !d.mu.TryLock() {
		t.Fatal("the device is still locked")
	}
	d.mu.Unlock()
	if _, err := made.To(tensor.CPU()); err == nil || !strings.Contains(err.Error(), "released") {
		t.Errorf("the result of the failed operation: %v, want released", err)
	}
	if dir != "" {
		if d := ascendsim.ReadStats(t, dir).Sub(before); !d.SameLive(ascendsim.Stats{}) {
			t.Errorf("left on the device: %s", d.Live())
		}
	}
}

// TestLostMemoryWhileBusy drops a tensor while an operation holds the
// device: the garbage collector's cleanup does not wait for the device, and
// the allocation is freed when the operation ends.
func TestLostMemoryWhileBusy(t *testing.T) {
	rt, dir := load(t)
	if dir == "" {
		t.Skip("needs the simulator's counters")
	}
	d := rt.Device()
	if err := d.Open(); err != nil {
		t.Fatal(err)
	}
	before := ascendsim.ReadStats(t, dir)
	func() {
		if _, err := d.Alloc(dtype.Float32, []int{64}); err != nil {
			t.Fatal(err)
		}
	}()
	d.mu.Lock() // an operation under way
	for deadline := time.Now().Add(10 * time.Second); !d.hasLost(); {
		if time.Now().After(deadline) {
			d.unlock()
			t.Fatal("the collector did not report the dropped tensor")
		}
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
	if n := ascendsim.ReadStats(t, dir).Sub(before).LiveAllocs; n != 1 {
		t.Errorf("%d live allocations while the device is busy, want 1 (queued)", n)
	}
	d.unlock()
	if n := ascendsim.ReadStats(t, dir).Sub(before).LiveAllocs; n != 0 {
		t.Errorf("%d live allocations once the device is free, want 0", n)
	}
}

// TestAPIMatchesCANNHeader checks every function that api.symbols binds
// against the prototype of the same C function in
// internal/ascendsim/csrc/cann.h, which the simulator is compiled against:
// the number of parameters and results, and each one's C class and width as
// purego passes it.
func TestAPIMatchesCANNHeader(t *testing.T) {
	src, err := ascendsim.Source("cann.h")
	if err != nil {
		t.Fatal(err)
	}
	protos := map[string][]string{} // name: result type, then parameter types
	text := regexp.MustCompile(`(?s)/\*.*?\*/`).ReplaceAllString(string(src), "")
	re := regexp.MustCompile(`KSIM_API\s+([^;]*?)\b(\w+)\s*\(([^)]*)\)\s*;`)
	for _, m := range re.FindAllStringSubmatch(text, -1) {
		types := []string{m[1]}
		if p := strings.TrimSpace(m[3]); p != "void" && p != "" {
			for _, param := range strings.Split(p, ",") {
				// Drop the parameter's name: the last identifier.
				param = strings.TrimSpace(param)
				i := strings.LastIndexFunc(param, func(r rune) bool { return r == '*' || r == ' ' })
				types = append(types, param[:i+1])
			}
		}
		protos[m[2]] = types
	}
	if len(protos) < 80 {
		t.Fatalf("found %d prototypes in cann.h", len(protos))
	}
	if n := reflect.TypeOf(api{}).NumField(); n != numLibs {
		t.Fatalf("api embeds %d structs, one per library wants %d", n, numLibs)
	}
	var a api
	seen := map[string]bool{}
	for _, s := range a.symbols() {
		c, ok := protos[s.name]
		if !ok {
			t.Errorf("%s: no prototype in cann.h", s.name)
			continue
		}
		seen[s.name] = true
		f := reflect.TypeOf(s.fn).Elem()
		if f.NumIn() != len(c)-1 {
			t.Errorf("%s: %d parameters in Go, %d in C", s.name, f.NumIn(), len(c)-1)
			continue
		}
		if res := cClass(c[0]); (res == "void") != (f.NumOut() == 0) || (f.NumOut() == 1 && !goMatches(f.Out(0), c[0], true)) {
			t.Errorf("%s: result %v in Go, %q in C", s.name, f, c[0])
		}
		for i := range f.NumIn() {
			if !goMatches(f.In(i), c[i+1], false) {
				t.Errorf("%s: parameter %d is %v in Go, %q in C", s.name, i, f.In(i), c[i+1])
			}
		}
	}
	for name := range protos {
		if !seen[name] && name != "aclFinalize" { // simulated, never called
			t.Errorf("cann.h declares %s, which api does not bind", name)
		}
	}
}

// cClass reduces a C type to what its ABI is: "void", "ptr", or an integer
// kind named as Go names it.
func cClass(c string) string {
	c = strings.TrimSpace(strings.ReplaceAll(c, "const ", ""))
	c = strings.TrimSpace(strings.TrimPrefix(c, "const"))
	switch {
	case strings.HasSuffix(c, "*"), c == "aclrtStream", c == "aclrtContext":
		return "ptr"
	case c == "void":
		return "void"
	}
	switch c {
	case "int", "int32_t", "aclError", "aclnnStatus", "aclDataType", "aclFormat", "aclrtMemcpyKind",
		"aclrtMemMallocPolicy", "aclrtFloatOverflowMode":
		return "int32"
	case "uint32_t":
		return "uint32"
	case "int64_t":
		return "int64"
	case "uint64_t":
		return "uint64"
	case "size_t":
		return "uintptr"
	case "bool":
		return "bool"
	}
	return "unknown C type " + c
}

// goMatches reports whether the Go type g passes as the C type c does.
func goMatches(g reflect.Type, c string, result bool) bool {
	class := cClass(c)
	if class == "ptr" {
		switch g.Kind() {
		case reflect.Uintptr, reflect.UnsafePointer:
			return true
		case reflect.String: // a C string, returned only
			return result && strings.Contains(c, "char")
		case reflect.Pointer:
			// The pointee must match too: strip one level of indirection.
			base := strings.TrimSpace(c)
			base = strings.TrimSpace(base[:strings.LastIndex(base, "*")])
			return goMatches(g.Elem(), base, false)
		}
		return false
	}
	return class == g.Kind().String()
}

// TestQuantMatmulArguments checks the argument rules of aclnnQuantMatmulV4
// that int8Linear's routes are chosen by (its documentation's data type
// table for Atlas A2 and its limit on K): the operator, simulated or
// CANN's, accepts the three calls kitchen makes and refuses their
// neighbours with ACLNN_ERR_PARAM_INVALID.
func TestQuantMatmulArguments(t *testing.T) {
	rt, _ := load(t)
	d := rt.Device()
	const m, n, k = 2, 3, 4
	call := func(k, scaleN, ptN int, out int32) error {
		_, err := do(d, func(s *session) (struct{}, error) {
			var x1, x2, scale, pt, o arr
			err := first(
				func() error { return s.temporaries(aclInt8, m*k, &x1) },
				func() error { return s.temporaries(aclInt8, n*k, &x2) },
				func() error { return s.temporaries(aclFloat, scaleN, &scale) },
				func() error { return s.temporaries(aclFloat, max(ptN, 1), &pt) },
				func() error { return s.temporaries(out, m*n, &o) },
				func() error { return s.fill(x1, 1) },
				func() error { return s.fill(x2, 1) },
				func() error { return s.fill(scale, 1) },
				func() error { return s.fill(pt, 1) },
			)
			if err != nil {
				return struct{}{}, err
			}
			var p *arr
			if ptN > 0 {
				p = &pt
			}
			return struct{}{}, s.quantMatmul(x1.as(m, k), x2.as(n, k), true, scale, p, o.as(m, n))
		})
		return err
	}
	for _, c := range []struct {
		name          string
		k, scale, pt  int
		out           int32
		refusedByCANN bool
	}{
		{"float16 out, per-token and per-channel scales", k, n, m, aclFloat16, false},
		{"bfloat16 out, per-token scale, one scale", k, 1, m, aclBF16, false},
		{"int32 out", k, 1, 0, aclInt32, false},
		{"K = 65,535", 65535, 1, 0, aclInt32, false},
		{"float16 out without per-token scale", k, n, 0, aclFloat16, true},
		{"int32 out with per-token scale", k, 1, m, aclInt32, true},
		{"scale of neither 1 nor N elements", k, 2, m, aclBF16, true},
		{"per-token scale of other than M elements", k, 1, m + 1, aclBF16, true},
		{"K = 65,536", 65536, 1, 0, aclInt32, true},
	} {
		err := call(c.k, c.scale, c.pt, c.out)
		var ae *Error
		refused := errors.As(err, &ae) && ae.Call == "aclnnQuantMatmulV4GetWorkspaceSize" && ae.Code == 161002
		if refused != c.refusedByCANN || (!refused && err != nil) {
			t.Errorf("%s: %v, want refused %v", c.name, err, c.refusedByCANN)
		}
	}
}
