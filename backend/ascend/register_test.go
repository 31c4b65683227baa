package ascend_test

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gokitchen/kitchen/backend"
	"github.com/gokitchen/kitchen/backend/ascend"
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/internal/ascendsim"
	"github.com/gokitchen/kitchen/op"
	"github.com/gokitchen/kitchen/tensor"
)

func info(t *testing.T, reg *backend.Registry, name string) backend.Info {
	t.Helper()
	for _, b := range reg.ListBackends() {
		if b.Name == name {
			return b
		}
	}
	t.Fatalf("%s not in %+v", name, reg.ListBackends())
	return backend.Info{}
}

// unavailable registers from opts into a fresh registry, expects failure
// and returns the error and the reason ListBackends gives.
func unavailable(t *testing.T, opts ascend.Options) (string, error) {
	t.Helper()
	reg := backend.NewRegistry(nil)
	rt, err := ascend.Register(reg, opts)
	if err == nil {
		rt.Close()
		t.Fatal("Register succeeded")
	}
	b := info(t, reg, ascend.Name)
	if b.Available || b.Kind != "accelerator" || len(b.Capabilities) != 0 {
		t.Errorf("info %+v: want an unavailable accelerator without capabilities", b)
	}
	// A call that names it is refused with the same reason.
	x := must(tensor.FromFloat32(dtype.BFloat16, []float32{1, 2}))
	_, _, cerr := op.QuantizeRowwise.Run(t.Context(), reg, &op.RowwiseArgs{X: x}, ascend.Name)
	var nf *backend.BackendNotFoundError
	if !errors.As(cerr, &nf) || nf.Name != ascend.Name || nf.Reason != "unavailable: "+b.Reason {
		t.Errorf("a call naming the unavailable backend: %v, want BackendNotFoundError with reason %q", cerr, "unavailable: "+b.Reason)
	}
	t.Logf("reason: %s", b.Reason)
	return b.Reason, err
}

func contains(t *testing.T, what, s string, subs ...string) {
	t.Helper()
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			t.Errorf("%s %q does not mention %q", what, s, sub)
		}
	}
}

func TestRegisterWithoutLibrary(t *testing.T) {
	dir := t.TempDir()
	reason, err := unavailable(t, ascend.Options{Dirs: []string{dir}})
	var le *ascend.LibraryError
	if !errors.As(err, &le) || le.Library != "libascendcl.so" {
		t.Fatalf("got %v, want a LibraryError for libascendcl.so", err)
	}
	if !cannPlatform() {
		contains(t, "reason", reason, "libascendcl.so", platformReason)
		return
	}
	contains(t, "reason", reason, "libascendcl.so", filepath.Join(dir, "libascendcl.so"), "no such file", ascend.EnvLibDir)
}

// TestRegisterWithoutOneLibrary offers libascendcl.so and libnnopbase.so
// but not libopapi.so.
func TestRegisterWithoutOneLibrary(t *testing.T) {
	dir, _ := withoutOpAPI(t)
	reason, err := unavailable(t, ascend.Options{Dirs: []string{dir}})
	var le *ascend.LibraryError
	if !errors.As(err, &le) || le.Library != "libopapi.so" {
		t.Fatalf("got %v, want a LibraryError for libopapi.so", err)
	}
	contains(t, "reason", reason, filepath.Join(dir, "libopapi.so"), "no such file")
}

// TestRegisterLibraryLacksFunction offers, as libopapi.so, a library that
// loads but has none of the aclnn operators: the reason names the file and
// the first function missing.
func TestRegisterLibraryLacksFunction(t *testing.T) {
	if onHardware() {
		t.Skip("uses the simulator's libraries")
	}
	sim := ascendsim.Build(t)
	dir := t.TempDir()
	for lib, target := range map[string]string{
		"libascendcl.so": "libascendcl.so", "libnnopbase.so": "libnnopbase.so", "libopapi.so": "libnnopbase.so",
	} {
		if err := os.Symlink(filepath.Join(sim, target), filepath.Join(dir, lib)); err != nil {
			t.Fatal(err)
		}
	}
	reason, err := unavailable(t, ascend.Options{Dirs: []string{dir}})
	var le *ascend.LibraryError
	if !errors.As(err, &le) || le.Library != "libopapi.so" || !strings.HasPrefix(le.Symbol, "aclnn") ||
		len(le.Tried) != 1 || le.Tried[0] != filepath.Join(dir, "libopapi.so") {
		t.Fatalf("got %#v, want a LibraryError for an aclnn function of %s", err, filepath.Join(dir, "libopapi.so"))
	}
	contains(t, "reason", reason, filepath.Join(dir, "libopapi.so"), "has no function "+le.Symbol, "CANN 8.1")
}

func TestRegisterWithoutDevice(t *testing.T) {
	opts, dir := options(t)
	if dir == "" {
		t.Skip("needs the simulator to hide the devices")
	}
	t.Setenv(ascendsim.EnvDevices, "0")
	reason, err := unavailable(t, opts)
	if !errors.Is(err, ascend.ErrNoDevice) {
		t.Fatalf("got %v, want ErrNoDevice", err)
	}
	contains(t, "reason", reason, "aclrtGetDeviceCount", "0 devices", filepath.Join(dir, "libascendcl.so"))
}

func TestRegisterCallFails(t *testing.T) {
	opts, _ := simOptions(t)
	for _, c := range []struct {
		call string
		code int32
		msg  string
	}{
		{"aclInit", 100003, "sim: the configuration file is invalid"},
		{"aclrtGetDeviceCount", 507033, "sim: the driver is not loaded"},
	} {
		t.Run(c.call, func(t *testing.T) {
			t.Setenv(ascendsim.EnvFail, c.call+":"+itoa(c.code)+":"+c.msg)
			reason, err := unavailable(t, opts)
			var ae *ascend.Error
			if !errors.As(err, &ae) || ae.Call != c.call || ae.Code != c.code || ae.Message != c.msg {
				t.Fatalf("got %#v, want call %s, code %d, message %q", err, c.call, c.code, c.msg)
			}
			contains(t, "reason", reason, c.call, itoa(c.code), c.msg)
		})
	}
}

// TestOpenFails makes each call that opens the NPU fail in turn: Register
// does not open it (its Load runs nothing but aclInit and
// aclrtGetDeviceCount), so it succeeds; the first operation returns the error,
// resets the device if aclrtSetDevice succeeded, leaves nothing behind,
// and the next operation opens the NPU.
func TestOpenFails(t *testing.T) {
	opts, dir := simOptions(t)
	for _, c := range []struct {
		call    string
		code    int32
		msg     string
		satMode string // KITCHEN_SIM_SAT_MODE
	}{
		{"aclrtSetDevice", 107001, "sim: device 0 is held by another process", ""},
		{"aclrtGetCurrentContext", 107002, "sim: no context", ""},
		{"aclrtGetDeviceSatMode", 107000, "sim: no overflow mode", ""},
		{"aclrtSetDeviceSatMode", 107000, "sim: the mode is locked", "0"},
		{"aclrtCreateStream", 207001, "sim: no memory for a stream", ""},
	} {
		t.Run(c.call, func(t *testing.T) {
			t.Setenv(ascendsim.EnvSatMode, c.satMode)
			reg := backend.NewRegistry(nil)
			rt, err := ascend.Register(reg, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer rt.Close()
			before := ascendsim.ReadStats(t, dir)
			t.Setenv(ascendsim.EnvFail, c.call+":"+itoa(c.code)+":"+c.msg)
			_, err = rt.Device().Alloc(dtype.Float32, []int{4})
			var ae *ascend.Error
			if !errors.As(err, &ae) || ae.Call != c.call || ae.Code != c.code || ae.Message != c.msg {
				t.Fatalf("got %#v, want call %s, code %d, message %q", err, c.call, c.code, c.msg)
			}
			if c.satMode == "0" {
				contains(t, "error", err.Error(), "saturation mode", "INF/NaN")
			}
			if d := ascendsim.ReadStats(t, dir).Sub(before); d.DeviceRefs != 0 || !d.SameLive(ascendsim.Stats{}) {
				t.Errorf("after the failure: %d more aclrtSetDevice than aclrtResetDevice; %s", d.DeviceRefs, d.Live())
			}
			if err := rt.Device().Open(); !errors.As(err, &ae) || ae.Call != c.call {
				t.Errorf("Open: %v, want %s failing again", err, c.call)
			}
			t.Setenv(ascendsim.EnvFail, "")
			x, err := rt.Device().Alloc(dtype.Float32, []int{4})
			if err != nil {
				t.Fatalf("once %s works: %v", c.call, err)
			}
			x.Release()
			if got := ascendsim.SatMode(t, dir, 0); got != 1 {
				t.Errorf("device overflow mode %d after opening, want 1 (INF/NaN)", got)
			}
			if err := rt.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestOpenResetFails makes the stream and then the device reset fail while
// the NPU opens: both failures are reported.
func TestOpenResetFails(t *testing.T) {
	opts, _ := simOptions(t)
	rt, err := ascend.Load(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	t.Setenv(ascendsim.EnvFail, "aclrtCreateStream:207001:sim: no stream;aclrtResetDevice:507899:sim: no reset")
	err = rt.Device().Open()
	var ae *ascend.Error
	if !errors.As(err, &ae) || ae.Call != "aclrtCreateStream" {
		t.Fatalf("got %v, want aclrtCreateStream's error first", err)
	}
	contains(t, "error", err.Error(), "sim: no stream", "aclrtResetDevice", "sim: no reset")
}

// TestSaturationMode opens the NPU while the device computes in saturation
// mode: the backend switches it to INF/NaN mode before creating its stream.
func TestSaturationMode(t *testing.T) {
	opts, dir := options(t)
	if dir == "" {
		t.Skip("needs the simulator to set the mode")
	}
	t.Setenv(ascendsim.EnvSatMode, "0")
	if got := ascendsim.SatMode(t, dir, 0); got != 0 {
		t.Fatalf("simulated mode %d, want 0", got)
	}
	rt, err := ascend.Load(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	if got := ascendsim.SatMode(t, dir, 0); got != 0 {
		t.Errorf("Load changed the overflow mode to %d; only the first operation should open the NPU", got)
	}
	if err := rt.Device().Open(); err != nil {
		t.Fatal(err)
	}
	if got := ascendsim.SatMode(t, dir, 0); got != 1 {
		t.Errorf("overflow mode %d after opening, want 1 (INF/NaN)", got)
	}
}

func TestRegisterDevicePresent(t *testing.T) {
	e := newEnv(t)
	b := info(t, e.reg, ascend.Name)
	if !b.Available || b.Disabled || b.Kind != "accelerator" {
		t.Fatalf("info %+v: want an available accelerator", b)
	}
	if first := e.reg.ListBackends()[0].Name; first != ascend.Name {
		t.Errorf("priority order starts with %s, want ascend before cpu and eager", first)
	}
	if len(b.Capabilities) != len(ascend.New().Caps) {
		t.Errorf("%d capabilities listed, want %d", len(b.Capabilities), len(ascend.New().Caps))
	}
	for name, cs := range b.Capabilities {
		contains(t, name, strings.Join(cs, "; "), "devices: npu")
	}
	contains(t, "quantize constraints", strings.Join(b.Capabilities[op.QuantizeRowwise.Name()], "; "),
		"x: [float16, bfloat16]", "stochastic_rounding: off")
	if got := e.dev.String(); got != "npu:0" || e.dev.Type() != "npu" {
		t.Errorf("device %q of type %q", got, e.dev.Type())
	}
	if e.sim != "" {
		if libs := e.rt.Libraries(); libs[0] != filepath.Join(e.sim, "libascendcl.so") {
			t.Errorf("libraries %v, want the simulator's", libs)
		}
	}
}

// TestDefaultRegistration checks what backend.Default says about ascend on
// this machine once ListBackends has loaded it (lazy_test.go checks when it
// loads, in processes of their own).
func TestDefaultRegistration(t *testing.T) {
	var b *backend.Info
	for _, i := range backend.Default.ListBackends() {
		if i.Name == ascend.Name {
			b = &i
		}
	}
	if b == nil {
		t.Fatal("ascend is neither registered nor marked unavailable in backend.Default")
	}
	dev, err := ascend.DefaultDevice()
	if b.Available {
		if err != nil || dev == nil {
			t.Fatalf("ascend available, but DefaultDevice: %v", err)
		}
		t.Skipf("CANN with an NPU is installed here (%v)", dev)
	}
	if err == nil {
		t.Fatal("DefaultDevice succeeded while ascend is unavailable")
	}
	t.Logf("reason: %s", b.Reason)
	if b.Reason != strings.TrimPrefix(err.Error(), "ascend: ") {
		t.Errorf("reason %q differs from DefaultDevice's error %q", b.Reason, err)
	}
	if !cannPlatform() {
		contains(t, "reason", b.Reason, "libascendcl.so", platformReason)
	} else if os.Getenv(ascend.EnvLibDir) == "" && os.Getenv("ASCEND_HOME_PATH") == "" {
		contains(t, "reason", b.Reason, "libascendcl.so", "/usr/local/Ascend/ascend-toolkit/latest/lib64/libascendcl.so",
			"through the dynamic loader")
	}
}

func TestDefaultDirs(t *testing.T) {
	t.Setenv(ascend.EnvLibDir, "")
	t.Setenv("ASCEND_HOME_PATH", "/opt/cann")
	t.Setenv("ASCEND_TOOLKIT_HOME", "/opt/cann")
	t.Setenv("LD_LIBRARY_PATH", "/a:/opt/cann/lib64:/b")
	want := []string{"/opt/cann/lib64", "/usr/local/Ascend/ascend-toolkit/latest/lib64", "/a", "/b"}
	if got := ascend.DefaultDirs(); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("DefaultDirs() = %v, want %v", got, want)
	}
	t.Setenv(ascend.EnvLibDir, "/override")
	if got := ascend.DefaultDirs(); len(got) != 1 || got[0] != "/override" {
		t.Errorf("with %s set, DefaultDirs() = %v", ascend.EnvLibDir, got)
	}
}

// TestEnvLibDir loads through the default search, which backend.Default's
// lazy load uses, pointed at the simulator by KITCHEN_ASCEND_LIB_DIR.
func TestEnvLibDir(t *testing.T) {
	if onHardware() {
		t.Skip("uses the simulator")
	}
	dir := ascendsim.Build(t)
	t.Setenv(ascend.EnvLibDir, dir)
	reg := backend.NewRegistry(nil)
	rt, err := ascend.Register(reg, ascend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	if !info(t, reg, ascend.Name).Available {
		t.Error("not available")
	}
}

func itoa(v int32) string { return strconv.Itoa(int(v)) }

// withoutOpAPI returns a directory holding the simulator's libascendcl.so
// and libnnopbase.so but no libopapi.so, and the simulator's directory. It
// skips on hardware.
func withoutOpAPI(t *testing.T) (dir, sim string) {
	t.Helper()
	if onHardware() {
		t.Skip("uses the simulator's libraries")
	}
	sim = ascendsim.Build(t)
	dir = t.TempDir()
	for _, lib := range []string{"libascendcl.so", "libnnopbase.so"} {
		// Links, so the loader sees the simulator's own files.
		if err := os.Symlink(filepath.Join(sim, lib), filepath.Join(dir, lib)); err != nil {
			t.Fatal(err)
		}
	}
	return dir, sim
}
