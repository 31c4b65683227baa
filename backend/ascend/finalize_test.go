package ascend_test

import (
	"errors"
	"os"
	"testing"

	"github.com/gokitchen/kitchen"
	"github.com/gokitchen/kitchen/backend"
	"github.com/gokitchen/kitchen/backend/ascend"
	"github.com/gokitchen/kitchen/internal/ascendsim"
)

// TestFinalize checks Finalize, which ends AscendCL for the process (so
// each scenario runs in a process of its own, as TestLazyLoad's do):
//
//   - "Finalize": refused while a runtime from Load is open, changing
//     nothing; once it is closed, Finalize closes backend.Default's runtime,
//     resets both devices and calls aclFinalize once (one library); after
//     it, operations fail with ErrClosed, Release is harmless, Load and
//     Register fail with ErrFinalized, and Finalize again does nothing.
//   - "Finalize fails": aclFinalize failing is reported, and a second
//     Finalize finishes.
//   - "Finalize first": before CANN was ever loaded, Finalize loads
//     nothing, and "ascend" is then unavailable for that reason.
func TestFinalize(t *testing.T) {
	for _, scenario := range []string{"Finalize", "Finalize fails", "Finalize first"} {
		t.Run(scenario, func(t *testing.T) { simChild(t, scenario) })
	}
}

func (c *lazyChild) stats() ascendsim.Stats {
	c.t.Helper()
	return ascendsim.ReadStats(c.t, c.sim)
}

func (c *lazyChild) finalize() {
	t := c.t
	rt, err := ascend.Load(ascend.Options{Dirs: []string{c.lib}})
	if err != nil {
		t.Fatal(err)
	}
	x := must(c.host().To(rt.Device()))
	dev, err := ascend.DefaultDevice()
	if err != nil {
		t.Fatal(err)
	}
	y := must(c.host().To(dev))
	c.dispatch(y, "")
	before := c.stats()
	if before.DeviceRefs != 2 || before.InitCalls != 2 {
		t.Fatalf("before Finalize: %+v, want 2 devices set and 2 aclInit calls", before)
	}

	// Refused while the runtime from Load is open: nothing changes.
	err = ascend.Finalize()
	if !errors.Is(err, ascend.ErrInUse) {
		t.Fatalf("Finalize with a runtime open: %v, want ErrInUse", err)
	}
	contains(t, "error", err.Error(), "1 runtime")
	c.dispatch(y, "")
	if _, err := rt.Device().AbsMaxRows(x, 3); err != nil {
		t.Fatalf("the open runtime after the refused Finalize: %v", err)
	}
	if d := c.stats().Sub(before); d.FinalizeCalls != 0 || d.DeviceRefs != 0 {
		t.Fatalf("a refused Finalize changed the counters: %+v", d)
	}

	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}
	if err := ascend.Finalize(); err != nil {
		t.Fatalf("Finalize: %v", err)
	}
	after := c.stats()
	if d := after.Sub(before); d.FinalizeCalls != 1 || after.DeviceRefs != 0 || d.InitCalls != 0 {
		t.Fatalf("after Finalize: %+v (change %+v), want one aclFinalize and no device set", after, d)
	}

	// After it: nothing reaches CANN, and nothing loads it again.
	if _, _, err := kitchen.QuantizeInt8Rowwise(c.ctx, y, kitchen.UsingBackend(ascend.Name)); !errors.Is(err, ascend.ErrClosed) {
		t.Errorf("ascend after Finalize: %v, want ErrClosed", err)
	}
	if _, err := dev.AbsMaxRows(y, 3); !errors.Is(err, ascend.ErrClosed) {
		t.Errorf("an NPU primitive after Finalize: %v, want ErrClosed", err)
	}
	if _, err := ascend.DefaultDevice(); !errors.Is(err, ascend.ErrClosed) {
		t.Errorf("DefaultDevice after Finalize: %v, want ErrClosed", err)
	}
	x.Release()
	y.Release()
	if _, err := ascend.Load(ascend.Options{Dirs: []string{c.lib}}); !errors.Is(err, ascend.ErrFinalized) {
		t.Errorf("Load after Finalize: %v, want ErrFinalized", err)
	}
	reg := backend.NewRegistry(nil)
	if _, err := ascend.Register(reg, ascend.Options{Dirs: []string{c.lib}}); !errors.Is(err, ascend.ErrFinalized) {
		t.Errorf("Register after Finalize: %v, want ErrFinalized", err)
	}
	if err := ascend.Finalize(); err != nil {
		t.Errorf("second Finalize: %v", err)
	}
	if d := c.stats().Sub(after); d.FinalizeCalls != 0 || d.InitCalls != 0 || d.LiveTensors != 0 || d.LiveExecutors != 0 {
		t.Errorf("CANN was called after Finalize: %+v", d)
	}
}

func (c *lazyChild) finalizeFails() {
	t := c.t
	if _, err := ascend.DefaultDevice(); err != nil {
		t.Fatal(err)
	}
	t.Setenv(ascendsim.EnvFail, "aclFinalize:100000:sim: not now")
	err := ascend.Finalize()
	var ae *ascend.Error
	if !errors.As(err, &ae) || ae.Call != "aclFinalize" || ae.Code != 100000 || ae.Message != "sim: not now" {
		t.Fatalf("Finalize with aclFinalize failing: %v", err)
	}
	os.Unsetenv(ascendsim.EnvFail)
	if err := ascend.Finalize(); err != nil {
		t.Fatalf("Finalize again: %v", err)
	}
	if s := c.stats(); s.FinalizeCalls != 2 || s.DeviceRefs != 0 {
		t.Errorf("counters %+v: want 2 aclFinalize calls (one failed) and no device set", s)
	}
}

func (c *lazyChild) finalizeFirst() {
	t := c.t
	if err := ascend.Finalize(); err != nil {
		t.Fatalf("Finalize before loading: %v", err)
	}
	c.notLoaded("after Finalize")
	contains(t, "reason", c.unavailable(), "finalized")
	if _, err := ascend.DefaultDevice(); !errors.Is(err, ascend.ErrFinalized) {
		t.Errorf("DefaultDevice: %v, want ErrFinalized", err)
	}
	if _, err := ascend.Load(ascend.Options{Dirs: []string{c.lib}}); !errors.Is(err, ascend.ErrFinalized) {
		t.Errorf("Load: %v, want ErrFinalized", err)
	}
	c.notLoaded("after Load and DefaultDevice")
}
