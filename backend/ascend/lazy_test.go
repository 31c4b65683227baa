package ascend_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/gokitchen/kitchen"
	"github.com/gokitchen/kitchen/backend"
	"github.com/gokitchen/kitchen/backend/ascend"
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/internal/ascendsim"
	"github.com/gokitchen/kitchen/op"
	"github.com/gokitchen/kitchen/tensor"
)

// The package registers "ascend" with backend.Default lazily: importing it
// must not load CANN, and the first need (ListBackends, a call that names
// "ascend", a dispatch on an npu tensor, DefaultDevice) must load it
// exactly once. backend.Default and AscendCL are per process and load once,
// so each scenario runs in a process of its own: the test binary started
// again with envChild naming the scenario, which TestLazyChild plays.
//
// Whether CANN is loaded is read from /proc/self/maps (a library that was
// never dlopened cannot have run aclInit), and how many times it was
// loaded from the simulator's aclInit counter, read only after the backend
// has loaded the library (reading it maps the library).
const (
	envChild  = "KITCHEN_ASCEND_TEST_CHILD"   // the scenario TestLazyChild plays
	envSimDir = "KITCHEN_ASCEND_TEST_SIM_DIR" // the simulator's directory, for its counters
)

// child plays scenario in a fresh process of the test binary, with env
// added to an environment cleared of the variables that steer the
// simulator, and fails t with the child's output unless it passes. Every
// scenario sets KITCHEN_ASCEND_LIB_DIR, so backend.Default's load searches
// that directory alone, whatever CANN the machine has.
func child(t *testing.T, scenario string, env ...string) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc/self/maps")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestLazyChild$", "-test.v", "-test.count=1")
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(name, "KITCHEN_SIM_"), name == ascend.EnvLibDir, name == envChild, name == envSimDir,
			name == "GORACE":
			continue
		}
		cmd.Env = append(cmd.Env, kv)
	}
	// Under -race the child would wait a second at exit for late reports.
	gorace := strings.TrimSpace(os.Getenv("GORACE") + " atexit_sleep_ms=0")
	cmd.Env = append(append(cmd.Env, envChild+"="+scenario, "GORACE="+gorace), env...)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestLazyChild") {
		t.Fatalf("scenario %s in a process of its own: %v\n%s", scenario, err, out)
	}
}

// simChild plays a scenario against the simulator, found through
// KITCHEN_ASCEND_LIB_DIR as backend.Default's load finds CANN.
func simChild(t *testing.T, scenario string, env ...string) {
	t.Helper()
	if onHardware() {
		t.Skip("counts the simulator's aclInit calls")
	}
	dir := ascendsim.Build(t)
	child(t, scenario, append([]string{ascend.EnvLibDir + "=" + dir, envSimDir + "=" + dir}, env...)...)
}

// TestLazyLoad checks, for each kind of first need, that nothing before it
// loads CANN and that it loads CANN once, for good: the needs after it load
// nothing more.
func TestLazyLoad(t *testing.T) {
	for _, scenario := range []string{"ListBackends", "explicit call", "DefaultDevice", "npu dispatch", "concurrent needs"} {
		t.Run(scenario, func(t *testing.T) { simChild(t, scenario) })
	}
}

// TestLazyUnavailableReason checks what backend.Default says about
// "ascend" when CANN cannot be used: the reason names the library file
// that failed and why, every way of asking gives the same reason, and a
// failed load is not tried again.
func TestLazyUnavailableReason(t *testing.T) {
	t.Run("no libraries", func(t *testing.T) {
		dir := t.TempDir()
		child(t, "no libraries", ascend.EnvLibDir+"="+dir)
	})
	t.Run("no libopapi.so", func(t *testing.T) {
		dir, sim := withoutOpAPI(t)
		child(t, "no libopapi.so", ascend.EnvLibDir+"="+dir, envSimDir+"="+sim)
	})
	t.Run("no device", func(t *testing.T) { simChild(t, "no device", ascendsim.EnvDevices+"=0") })
	t.Run("concurrent DefaultDevice", func(t *testing.T) {
		child(t, "concurrent DefaultDevice, no libraries", ascend.EnvLibDir+"="+t.TempDir())
	})
	t.Run("concurrent needs", func(t *testing.T) {
		// The first needs of a backend that fails to load, all at once: the
		// registry must load once and give every caller the reason (the
		// race detector checks the locking when run with -race).
		child(t, "concurrent needs, no libraries", ascend.EnvLibDir+"="+t.TempDir())
	})
}

// TestLazyChild plays one scenario of TestLazyLoad,
// TestLazyUnavailableReason or TestFinalize; run directly, it skips.
func TestLazyChild(t *testing.T) {
	scenario := os.Getenv(envChild)
	if scenario == "" {
		t.Skip("plays a scenario in a process of its own, for TestLazyLoad, TestLazyUnavailableReason and TestFinalize")
	}
	c := &lazyChild{t: t, ctx: context.Background(), sim: os.Getenv(envSimDir), lib: os.Getenv(ascend.EnvLibDir)}
	// Importing the package, and all that did not need "ascend" since,
	// loaded nothing.
	c.notLoaded("after importing the package")
	c.noNeed()
	c.notLoaded("after calls that do not need ascend")
	switch scenario {
	case "ListBackends":
		b := c.info()
		if !b.Available || b.Kind != "accelerator" || len(b.Capabilities) != len(ascend.New().Caps) {
			t.Fatalf("ascend after loading: %+v", b)
		}
		c.loadedOnce()
		c.everyNeed(1)
	case "explicit call":
		// The call names ascend, which loads to decline a host tensor.
		_, _, err := kitchen.QuantizeInt8Rowwise(c.ctx, c.host(), kitchen.UsingBackend(ascend.Name))
		var nc *backend.NoCapableBackendError
		if !errors.As(err, &nc) || len(nc.Declines) != 1 || nc.Declines[0].Backend != ascend.Name || nc.Declines[0].Param != "device" {
			t.Fatalf("naming ascend for a host tensor: %v, want ascend's device decline", err)
		}
		c.loadedOnce()
		c.everyNeed(1)
	case "DefaultDevice":
		dev, err := ascend.DefaultDevice()
		if err != nil || dev.String() != "npu:0" {
			t.Fatalf("DefaultDevice: %v, %v", dev, err)
		}
		c.loadedOnce()
		// The registry's load of ascend, on its first need, shares this one.
		c.everyNeed(1)
	case "npu dispatch":
		// An npu tensor from a runtime of its own (its Load is the first
		// aclInit): dispatching it through backend.Default loads the
		// default runtime (the second, a repeated aclInit) to run ascend.
		rt, err := ascend.Load(ascend.Options{Dirs: []string{c.lib}})
		if err != nil {
			t.Fatal(err)
		}
		defer rt.Close()
		x := must(c.host().To(rt.Device()))
		defer x.Release()
		c.loadedOnce()
		c.dispatch(x, "")
		if n := c.initCalls(); n != 2 {
			t.Fatalf("aclInit ran %d times after a dispatch on an npu tensor, want 2: Load's and the registry's", n)
		}
		c.everyNeed(2)
	case "concurrent needs":
		c.concurrently()
		c.loadedOnce()
		c.everyNeed(1)
	case "no libraries":
		reason := c.unavailable()
		tried := filepath.Join(c.lib, "libascendcl.so") + ": no such file"
		if !cannPlatform() {
			tried = platformReason
		}
		contains(t, "reason", reason, "cannot load libascendcl.so", tried, ascend.EnvLibDir)
		if strings.Contains(reason, "dynamic loader") {
			t.Errorf("reason %q: with %s set, only that directory is searched", reason, ascend.EnvLibDir)
		}
		_, err := ascend.DefaultDevice()
		var le *ascend.LibraryError
		if !errors.As(err, &le) || le.Library != "libascendcl.so" || strings.Join(le.Tried, "; ") != tried || le.Symbol != "" {
			t.Errorf("DefaultDevice: %#v, want a LibraryError for libascendcl.so, tried %q", err, tried)
		}
		c.notLoaded("after the failed load")
	case "no libopapi.so":
		reason := c.unavailable()
		contains(t, "reason", reason, "cannot load libopapi.so", filepath.Join(c.lib, "libopapi.so")+": no such file")
		if strings.Contains(reason, "libascendcl.so") || strings.Contains(reason, "libnnopbase.so") {
			t.Errorf("reason %q names libraries that loaded", reason)
		}
		if n := c.initCalls(); n != 0 {
			t.Errorf("aclInit ran %d times, though a library failed to load", n)
		}
	case "no device":
		reason := c.unavailable()
		contains(t, "reason", reason, "aclrtGetDeviceCount", "0 devices", filepath.Join(c.lib, "libascendcl.so"))
		if _, err := ascend.DefaultDevice(); !errors.Is(err, ascend.ErrNoDevice) {
			t.Errorf("DefaultDevice: %v, want ErrNoDevice", err)
		}
		c.loadedOnce()
	case "concurrent DefaultDevice, no libraries":
		// The default runtime's load is this package's own: the registry
		// is asked only once it has failed.
		var wg sync.WaitGroup
		errs := make([]error, 8)
		for i := range errs {
			wg.Go(func() { _, errs[i] = ascend.DefaultDevice() })
		}
		wg.Wait()
		for _, err := range errs[1:] {
			if err == nil || err.Error() != errs[0].Error() {
				t.Errorf("DefaultDevice at once: %v and %v, want one error", errs[0], err)
			}
		}
		contains(t, "reason", c.unavailable(), "cannot load libascendcl.so")
	case "concurrent needs, no libraries":
		c.concurrently()
		contains(t, "reason", c.unavailable(), "cannot load libascendcl.so")
	case "Finalize":
		c.finalize()
	case "Finalize fails":
		c.finalizeFails()
	case "Finalize first":
		c.finalizeFirst()
	default:
		t.Fatalf("unknown scenario %q", scenario)
	}
}

// lazyChild holds a scenario's process-wide facts.
type lazyChild struct {
	t   *testing.T
	ctx context.Context
	sim string // the simulator's directory, for its counters; "" when unused
	lib string // KITCHEN_ASCEND_LIB_DIR, where backend.Default's load looks
}

func (c *lazyChild) host() *tensor.Tensor {
	return must(tensor.FromFloat32(dtype.BFloat16, []float32{1, -2, 3, 0.5, 0, -7}, 2, 3))
}

// cannMapped reports whether any CANN library (by file name) is mapped
// into this process.
func (c *lazyChild) cannMapped() bool {
	c.t.Helper()
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		c.t.Fatal(err)
	}
	for _, line := range strings.Split(string(maps), "\n") {
		for _, lib := range ascendsim.Libraries {
			if strings.HasSuffix(line, "/"+lib) {
				return true
			}
		}
	}
	return false
}

func (c *lazyChild) notLoaded(when string) {
	c.t.Helper()
	if c.cannMapped() {
		c.t.Fatalf("%s, a CANN library is mapped into the process", when)
	}
}

// noNeed does what must not load CANN: calls on host tensors that leave
// the choice to the registry or name another backend, and configuring
// "ascend" in backend.Default.
func (c *lazyChild) noNeed() {
	c.t.Helper()
	var ran string
	q, s, err := kitchen.QuantizeInt8Rowwise(c.ctx, c.host(), kitchen.ReportBackend(&ran))
	if err != nil || ran != "cpu" {
		c.t.Fatalf("a host tensor: ran %q, %v; want cpu", ran, err)
	}
	if _, err := kitchen.DequantizeInt8(c.ctx, q, s, kitchen.UsingBackend("eager")); err != nil {
		c.t.Fatal(err)
	}
	if _, _, err := kitchen.QuantizeInt8Tensorwise(c.ctx, c.host(), kitchen.WithScaleTensor(must(tensor.FromFloat32(dtype.Float32, []float32{0.05}))), kitchen.UsingBackend("cpu")); err != nil {
		c.t.Fatal(err)
	}
	if err := backend.Default.SetEnabled(ascend.Name, true); err != nil {
		c.t.Fatal(err)
	}
	_ = ascend.New()
	_ = ascend.DefaultDirs()
}

// initCalls returns how many times this process has run aclInit.
func (c *lazyChild) initCalls() int64 {
	c.t.Helper()
	if c.sim == "" {
		c.t.Fatal("no simulator to count aclInit calls")
	}
	return ascendsim.ReadStats(c.t, c.sim).InitCalls
}

// loadedOnce checks that CANN is now loaded, once.
func (c *lazyChild) loadedOnce() {
	c.t.Helper()
	if !c.cannMapped() {
		c.t.Fatal("CANN is not loaded after its first need")
	}
	if n := c.initCalls(); n != 1 {
		c.t.Fatalf("aclInit ran %d times, want once", n)
	}
}

// info returns ascend's entry in backend.Default's list.
func (c *lazyChild) info() backend.Info {
	c.t.Helper()
	for _, b := range kitchen.ListBackends() {
		if b.Name == ascend.Name {
			return b
		}
	}
	c.t.Fatal("ascend is not in backend.Default")
	return backend.Info{}
}

// dispatch quantizes the npu tensor x through backend.Default, naming
// backend (or leaving the choice to the registry), and checks that ascend
// ran it.
func (c *lazyChild) dispatch(x *tensor.Tensor, name string) {
	c.t.Helper()
	var ran string
	opts := []kitchen.Option{kitchen.ReportBackend(&ran)}
	if name != "" {
		opts = append(opts, kitchen.UsingBackend(name))
	}
	q, s, err := kitchen.QuantizeInt8Rowwise(c.ctx, x, opts...)
	if err != nil || ran != ascend.Name {
		c.t.Fatalf("%v: ran %q, %v; want ascend", x, ran, err)
	}
	q.Release()
	s.Release()
}

// everyNeed meets every need of "ascend" once more and checks that
// aclInit has still run want times: loading happened once, for good.
func (c *lazyChild) everyNeed(want int64) {
	c.t.Helper()
	if b := c.info(); !b.Available {
		c.t.Fatalf("ascend unavailable: %s", b.Reason)
	}
	dev, err := ascend.DefaultDevice()
	if err != nil {
		c.t.Fatal(err)
	}
	x := must(c.host().To(dev))
	defer x.Release()
	c.dispatch(x, "")
	c.dispatch(x, ascend.Name)
	if n := c.initCalls(); n != want {
		c.t.Errorf("aclInit ran %d times after every need, want still %d", n, want)
	}
}

// concurrently meets the first need from several goroutines at once, each
// way of needing "ascend" at least twice.
func (c *lazyChild) concurrently() {
	c.t.Helper()
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range 12 {
		wg.Go(func() {
			<-start
			switch i % 3 {
			case 0:
				kitchen.ListBackends()
			case 1:
				kitchen.QuantizeInt8Rowwise(c.ctx, c.host(), kitchen.UsingBackend(ascend.Name))
			case 2:
				ascend.DefaultDevice()
			}
		})
	}
	close(start)
	wg.Wait()
}

// unavailable checks that ascend is unavailable in backend.Default, and
// that ListBackends, DefaultDevice and a call naming ascend give the same
// reason, again when asked again (a failed load is not retried), and
// returns it.
func (c *lazyChild) unavailable() string {
	c.t.Helper()
	b := c.info()
	if b.Available || b.Kind != "accelerator" || len(b.Capabilities) != 0 || b.Reason == "" {
		c.t.Fatalf("ascend: %+v, want unavailable with a reason and no capabilities", b)
	}
	c.t.Logf("reason: %s", b.Reason)
	_, err := ascend.DefaultDevice()
	if err == nil || strings.TrimPrefix(err.Error(), "ascend: ") != b.Reason {
		c.t.Errorf("DefaultDevice: %v, want the reason %q", err, b.Reason)
	}
	_, _, err = op.QuantizeRowwise.Run(c.ctx, backend.Default, &op.RowwiseArgs{X: c.host()}, ascend.Name)
	var nf *backend.BackendNotFoundError
	if !errors.As(err, &nf) || nf.Reason != "unavailable: "+b.Reason {
		c.t.Errorf("a call naming ascend: %v, want the reason %q", err, b.Reason)
	}
	if again := c.info(); again.Reason != b.Reason {
		c.t.Errorf("asked again, the reason is %q, was %q", again.Reason, b.Reason)
	}
	return b.Reason
}
