package ascend_test

import (
	"context"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/gokitchen/kitchen"
	"github.com/gokitchen/kitchen/backend"
	"github.com/gokitchen/kitchen/backend/ascend"
	"github.com/gokitchen/kitchen/backend/cpu"
	"github.com/gokitchen/kitchen/backend/eager"
	"github.com/gokitchen/kitchen/internal/ascendsim"
	"github.com/gokitchen/kitchen/tensor"
)

// The tests run against the CANN simulator (internal/ascendsim), built with
// the system C compiler. With KITCHEN_ASCEND_HARDWARE=1 they run against the
// CANN installation that the default search finds instead, and skip what
// only the simulator can do (counters, fault injection).
const envHardware = "KITCHEN_ASCEND_HARDWARE"

func onHardware() bool { return os.Getenv(envHardware) == "1" }

// cannPlatform reports whether CANN can be loaded on this platform at all;
// elsewhere every load fails with the reason platformReason.
func cannPlatform() bool {
	return runtime.GOOS == "linux" && (runtime.GOARCH == "amd64" || runtime.GOARCH == "arm64")
}

const platformReason = "CANN runs on linux/amd64 and linux/arm64, not " + runtime.GOOS + "/" + runtime.GOARCH

func TestMain(m *testing.M) {
	code := m.Run()
	ascendsim.Cleanup()
	os.Exit(code)
}

// env is one loaded runtime and a registry holding eager, cpu and ascend.
type env struct {
	t   testing.TB
	sim string // the simulator's directory; "" on hardware
	rt  *ascend.Runtime
	dev *ascend.Device
	reg *backend.Registry
	ctx context.Context
}

// options returns where the tests find CANN: the simulator, built now, or
// the installed CANN on hardware.
func options(t testing.TB) (ascend.Options, string) {
	t.Helper()
	if onHardware() {
		return ascend.Options{}, ""
	}
	dir := ascendsim.Build(t)
	return ascend.Options{Dirs: []string{dir}}, dir
}

// simOptions is options for tests that inject faults, which only the
// simulator can: it skips them on hardware.
func simOptions(t testing.TB) (ascend.Options, string) {
	t.Helper()
	opts, dir := options(t)
	if dir == "" {
		t.Skip("needs the simulator to inject failures")
	}
	return opts, dir
}

func newEnv(t testing.TB) *env {
	t.Helper()
	opts, dir := options(t)
	reg := backend.NewRegistry(nil)
	for _, b := range []backend.Backend{eager.New(), cpu.New()} {
		if err := reg.Register(b); err != nil {
			t.Fatal(err)
		}
	}
	rt, err := ascend.Register(reg, opts)
	if err != nil {
		t.Fatalf("ascend.Register: %v", err)
	}
	t.Cleanup(func() {
		if err := rt.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return &env{t: t, sim: dir, rt: rt, dev: rt.Device(), reg: reg, ctx: context.Background()}
}

// needSim skips tests that read the simulator's counters or inject faults.
func (e *env) needSim() {
	e.t.Helper()
	if e.sim == "" {
		e.t.Skip("needs the CANN simulator (counters or fault injection)")
	}
}

func (e *env) stats() ascendsim.Stats {
	e.t.Helper()
	return ascendsim.ReadStats(e.t, e.sim)
}

// settle runs the garbage collector until the simulator's live counters
// stop changing, so that NPU tensors nobody released are freed, and returns
// the counters.
func (e *env) settle() ascendsim.Stats {
	e.t.Helper()
	prev, same := e.stats(), 0
	for range 200 {
		runtime.GC()
		time.Sleep(2 * time.Millisecond)
		cur := e.stats()
		if cur.SameLive(prev) {
			if same++; same == 3 {
				break
			}
		} else {
			same = 0
		}
		prev = cur
	}
	return prev
}

// up copies a host tensor to the NPU.
func (e *env) up(x *tensor.Tensor) *tensor.Tensor {
	e.t.Helper()
	y, err := x.To(e.dev)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(y.Release)
	return y
}

// down copies an NPU tensor to the host and releases it.
func (e *env) down(x *tensor.Tensor) *tensor.Tensor {
	e.t.Helper()
	if x == nil {
		return nil
	}
	if x.Device() != e.dev {
		e.t.Fatalf("%v is not on %v", x, e.dev)
	}
	y, err := x.To(tensor.CPU())
	if err != nil {
		e.t.Fatal(err)
	}
	x.Release()
	return y
}

// opts returns the options of a call through the env's registry.
func (e *env) opts(more ...kitchen.Option) []kitchen.Option {
	return append([]kitchen.Option{kitchen.WithRegistry(e.reg)}, more...)
}

// kitchenEager chooses the eager backend.
func kitchenEager() kitchen.Option { return kitchen.UsingBackend("eager") }

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
