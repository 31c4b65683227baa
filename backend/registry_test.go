package backend_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/gokitchen/kitchen/backend"
	"github.com/gokitchen/kitchen/backend/eager"
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/tensor"
)

// fake is an accelerator-kind backend with narrow constraints that counts
// its calls and computes through eager.
type fake struct {
	mu    sync.Mutex
	calls int
}

func (f *fake) backend(name string) backend.Backend {
	run := func(ctx context.Context, c *backend.Call) (backend.Result, error) {
		f.mu.Lock()
		f.calls++
		f.mu.Unlock()
		q, s, err := eager.Quantize(c)
		return backend.Result{Q: q, Scale: s}, err
	}
	return backend.Backend{Name: name, Kind: backend.Accelerator, Ops: map[backend.Op]backend.Capability{
		backend.QuantizeRowwise: {Run: run, Constraints: backend.Constraints{
			Devices: []string{"cpu"},
			DTypes:  map[string][]dtype.DType{backend.ParamX: {dtype.BFloat16}},
			Shapes:  []backend.ShapeRule{backend.ExactRank(backend.ParamX, 2), backend.DimDivisibleBy(backend.ParamX, -1, 16)},
			Calls:   []backend.CallRule{backend.StochasticRoundingOff()},
			Hardware: []backend.HardwareRule{{Desc: "device named cpu", OK: func(d tensor.Device) bool {
				return d.String() == "cpu"
			}}},
		}},
	}}
}

func newRegistry(t *testing.T, log *bytes.Buffer) (*backend.Registry, *fake) {
	t.Helper()
	var logger *slog.Logger
	if log != nil {
		logger = slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	r := backend.NewRegistry(logger)
	if err := r.Register(eager.New()); err != nil {
		t.Fatal(err)
	}
	f := &fake{}
	if err := r.Register(f.backend("fake")); err != nil {
		t.Fatal(err)
	}
	return r, f
}

func xOf(t *testing.T, dt dtype.DType, shape ...int) *tensor.Tensor {
	t.Helper()
	v := make([]float32, tensor.Numel(shape))
	for i := range v {
		v[i] = float32(i%7) - 3
	}
	x, err := tensor.FromFloat32(dt, v, shape...)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

func TestAutomaticSelection(t *testing.T) {
	var log bytes.Buffer
	r, _ := newRegistry(t, &log)
	ctx := context.Background()
	cases := []struct {
		name        string
		call        backend.Call
		want        string
		fakeDeclare string // the fake backend's refusal, when it declines
	}{
		{"accepted", backend.Call{X: xOf(t, dtype.BFloat16, 4, 32)}, "fake", ""},
		{"dtype", backend.Call{X: xOf(t, dtype.Float16, 4, 32)}, "eager", "fake: x: dtype float16 not in [bfloat16]"},
		{"rank", backend.Call{X: xOf(t, dtype.BFloat16, 2, 4, 32)}, "eager", "fake: x: shape [2 4 32] fails rank == 2"},
		{"divisible", backend.Call{X: xOf(t, dtype.BFloat16, 4, 33)}, "eager", "fake: x: shape [4 33] fails dim -1 divisible by 16"},
		{"stochastic", backend.Call{X: xOf(t, dtype.BFloat16, 4, 32), Seed: 7}, "eager", "fake: stochastic_rounding: requires off"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.call.Op = backend.QuantizeRowwise
			log.Reset()
			name, _, err := r.Select(ctx, &c.call, "")
			if err != nil || name != c.want {
				t.Fatalf("Select = %q, %v; want %q", name, err, c.want)
			}
			res, ran, err := r.Dispatch(ctx, &c.call, "")
			if err != nil || ran != c.want || res.Q == nil {
				t.Fatalf("Dispatch ran %q: %v", ran, err)
			}
			if !strings.Contains(log.String(), "backend="+c.want) {
				t.Errorf("debug log does not name the choice: %s", log.String())
			}
			if c.fakeDeclare != "" {
				// The fake's refusal is logged with the decision.
				if !strings.Contains(log.String(), strings.TrimPrefix(c.fakeDeclare, "fake: ")) {
					t.Errorf("debug log lacks the refusal %q: %s", c.fakeDeclare, log.String())
				}
				_, _, err := r.Dispatch(ctx, &c.call, "fake")
				var nc *backend.NoCapableBackendError
				if !errors.As(err, &nc) || len(nc.Declines) != 1 || nc.Declines[0].String() != c.fakeDeclare {
					t.Errorf("explicit fake: %v; want refusal %q", err, c.fakeDeclare)
				}
			}
		})
	}
}

func TestRefusalListsEveryBackend(t *testing.T) {
	r, _ := newRegistry(t, nil)
	r.MarkUnavailable("npu-thing", backend.Accelerator, "libthing.so: cannot open shared object file")
	if err := r.SetEnabled("eager", false); err != nil {
		t.Fatal(err)
	}
	c := backend.Call{Op: backend.QuantizeRowwise, X: xOf(t, dtype.Float16, 2, 16)}
	_, _, err := r.Dispatch(context.Background(), &c, "")
	var nc *backend.NoCapableBackendError
	if !errors.As(err, &nc) {
		t.Fatalf("got %v, want NoCapableBackendError", err)
	}
	got := fmt.Sprint(nc.Declines)
	want := "[fake: x: dtype float16 not in [bfloat16] npu-thing: unavailable: libthing.so: cannot open shared object file eager: disabled]"
	if got != want {
		t.Errorf("declines\n got %s\nwant %s", got, want)
	}
	if !strings.Contains(err.Error(), "no backend can run quantize_int8_rowwise on cpu") {
		t.Errorf("message: %v", err)
	}
	// Re-enabled, eager takes it again.
	if err := r.SetEnabled("eager", true); err != nil {
		t.Fatal(err)
	}
	if _, name, err := r.Dispatch(context.Background(), &c, ""); err != nil || name != "eager" {
		t.Errorf("after enabling: %q, %v", name, err)
	}
}

func TestExplicitErrors(t *testing.T) {
	r, _ := newRegistry(t, nil)
	r.MarkUnavailable("npu-thing", backend.Accelerator, "no device")
	ctx := context.Background()
	tw := backend.Call{Op: backend.QuantizeTensorwise, X: xOf(t, dtype.BFloat16, 4, 32)}

	var nf *backend.BackendNotFoundError
	if _, _, err := r.Dispatch(ctx, &tw, "nosuch"); !errors.As(err, &nf) || nf.Name != "nosuch" {
		t.Errorf("unknown backend: %v", err)
	}
	if _, _, err := r.Dispatch(ctx, &tw, "npu-thing"); !errors.As(err, &nf) || !strings.Contains(nf.Reason, "no device") {
		t.Errorf("unavailable backend: %v", err)
	}
	var ni *backend.NotImplementedError
	if _, _, err := r.Dispatch(ctx, &tw, "fake"); !errors.As(err, &ni) || ni.Op != backend.QuantizeTensorwise {
		t.Errorf("not implemented: %v", err)
	}
	if err := r.SetEnabled("fake", false); err != nil {
		t.Fatal(err)
	}
	rw := backend.Call{Op: backend.QuantizeRowwise, X: xOf(t, dtype.BFloat16, 4, 32)}
	if _, _, err := r.Dispatch(ctx, &rw, "fake"); !errors.As(err, &nf) || nf.Reason != "disabled" {
		t.Errorf("disabled backend: %v", err)
	}
	if err := r.SetEnabled("nosuch", true); !errors.As(err, &nf) {
		t.Errorf("SetEnabled(nosuch): %v", err)
	}
	if err := r.SetPriority("eager", "nosuch"); !errors.As(err, &nf) {
		t.Errorf("SetPriority(nosuch): %v", err)
	}
}

func TestScopedAndExplicitChoice(t *testing.T) {
	r, f := newRegistry(t, nil)
	c := backend.Call{Op: backend.QuantizeRowwise, X: xOf(t, dtype.BFloat16, 4, 32)}
	ctx := backend.WithBackend(context.Background(), "eager")
	if _, name, err := r.Dispatch(ctx, &c, ""); err != nil || name != "eager" {
		t.Errorf("scoped: %q, %v", name, err)
	}
	if _, name, err := r.Dispatch(ctx, &c, "fake"); err != nil || name != "fake" {
		t.Errorf("explicit over scoped: %q, %v", name, err)
	}
	if _, name, err := r.Dispatch(context.Background(), &c, ""); err != nil || name != "fake" {
		t.Errorf("outside the scope: %q, %v", name, err)
	}
	if f.calls != 2 {
		t.Errorf("fake ran %d times, want 2", f.calls)
	}
}

func TestPriorityAndList(t *testing.T) {
	r, _ := newRegistry(t, nil)
	r.MarkUnavailable("npu-thing", backend.Accelerator, "no device")
	names := func() string {
		var s []string
		for _, b := range r.ListBackends() {
			s = append(s, b.Name)
		}
		return strings.Join(s, ",")
	}
	if got := names(); got != "fake,npu-thing,eager" {
		t.Errorf("default order %s", got)
	}
	if err := r.SetPriority("eager"); err != nil {
		t.Fatal(err)
	}
	if got := names(); got != "eager,fake,npu-thing" {
		t.Errorf("order after SetPriority(eager): %s", got)
	}
	c := backend.Call{Op: backend.QuantizeRowwise, X: xOf(t, dtype.BFloat16, 4, 32)}
	if name, _, _ := r.Select(context.Background(), &c, ""); name != "eager" {
		t.Errorf("priority ignored: chose %q", name)
	}
	if err := r.SetPriority(); err != nil || names() != "fake,npu-thing,eager" {
		t.Errorf("reset priority: %v %s", err, names())
	}
	infos := r.ListBackends()
	if infos[1].Available || infos[1].Reason != "no device" || !infos[0].Available {
		t.Errorf("availability: %+v", infos)
	}
	want := []string{"devices: cpu", "x: [bfloat16]", "x: rank == 2", "x: dim -1 divisible by 16", "stochastic_rounding: off", "hardware: device named cpu"}
	if got := infos[0].Capabilities[backend.QuantizeRowwise]; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("capabilities\n got %q\nwant %q", got, want)
	}
}

func TestRegister(t *testing.T) {
	r, _ := newRegistry(t, nil)
	if err := r.Register(eager.New()); err == nil {
		t.Error("registered eager twice")
	}
	if err := r.Register(backend.Backend{Name: "x", Ops: map[backend.Op]backend.Capability{backend.Dequantize: {}}}); err == nil {
		t.Error("registered a capability without a kernel")
	}
	if err := r.Register(backend.Backend{Name: "y", Kind: backend.Kind(7)}); err == nil || backend.Kind(7).String() != "kind(7)" {
		t.Errorf("registered an unknown kind: %v", err)
	}
	r.MarkUnavailable("late", backend.Host, "not yet")
	_ = r.SetEnabled("late", false)
	b := eager.New()
	b.Name = "late"
	if err := r.Register(b); err != nil {
		t.Fatalf("register over an unavailable mark: %v", err)
	}
	for _, info := range r.ListBackends() {
		if info.Name == "late" && (!info.Available || !info.Disabled) {
			t.Errorf("late: %+v, want available and still disabled", info)
		}
	}
}

// TestConcurrentDispatch runs dispatch while the registry is being changed;
// the race detector checks the locking.
func TestConcurrentDispatch(t *testing.T) {
	r, _ := newRegistry(t, nil)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				c := backend.Call{Op: backend.QuantizeRowwise, X: xOf(t, dtype.BFloat16, 2, 16)}
				if _, _, err := r.Dispatch(context.Background(), &c, ""); err != nil {
					t.Error(err)
					return
				}
				switch (g + i) % 4 {
				case 0:
					_ = r.SetEnabled("fake", i%2 == 0)
				case 1:
					_ = r.SetPriority("eager")
				case 2:
					_ = r.SetPriority()
				case 3:
					_ = r.ListBackends()
				}
			}
		}()
	}
	wg.Wait()
}
