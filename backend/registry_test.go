package backend_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/gokitchen/kitchen/backend"
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/tensor"
)

// double is an operation declared by this test alone, as a new operation
// would be: the registry, constraints and refusals work for it unchanged.
var double = backend.Declare[*doubleArgs, doubled]("test_double", nil)

type doubleArgs struct {
	X    *tensor.Tensor
	Seed int64
}

func (a *doubleArgs) Device() tensor.Device { return a.X.Device() }

func (a *doubleArgs) Tensor(param string) *tensor.Tensor {
	if param == "x" {
		return a.X
	}
	return nil
}

func (a *doubleArgs) DType(param string) (dtype.DType, bool) {
	if t := a.Tensor(param); t != nil {
		return t.DType(), true
	}
	return 0, false
}

func (a *doubleArgs) Stochastic() bool { return a.Seed > 0 }

func (a *doubleArgs) Validate() error {
	if a.X == nil {
		return &backend.ArgError{Op: double.Name(), Param: "x", Row: -1, Err: backend.ErrNil}
	}
	return nil
}

type doubled struct{ Out *tensor.Tensor }

func (r doubled) Outputs() []*tensor.Tensor { return []*tensor.Tensor{r.Out} }

func runDouble(_ context.Context, a *doubleArgs) (doubled, error) {
	v, err := a.X.Float32s()
	if err != nil {
		return doubled{}, err
	}
	for i := range v {
		v[i] *= 2
	}
	out, err := tensor.FromFloat32(dtype.Float32, v, a.X.Shape()...)
	return doubled{out}, err
}

// fake is an accelerator-kind backend with narrow constraints that counts
// its calls.
type fake struct {
	mu    sync.Mutex
	calls int
}

func (f *fake) backend(name string) backend.Backend {
	run := func(ctx context.Context, a *doubleArgs) (doubled, error) {
		f.mu.Lock()
		f.calls++
		f.mu.Unlock()
		return runDouble(ctx, a)
	}
	return backend.Backend{Name: name, Kind: backend.Accelerator, Caps: []backend.Capability{
		double.Implement(backend.Constraints{
			Devices: []string{"cpu"},
			DTypes:  []backend.DTypeRule{{Param: "x", DTypes: []dtype.DType{dtype.BFloat16}}},
			Shapes:  []backend.ShapeRule{backend.ExactRank("x", 2), backend.DimDivisibleBy("x", -1, 16)},
			Calls:   []backend.CallRule{backend.StochasticRoundingOff()},
			Hardware: []backend.HardwareRule{{Desc: "device named cpu", OK: func(d tensor.Device) bool {
				return d.String() == "cpu"
			}}},
		}, run),
	}}
}

// reference is a reference-kind backend that takes every call.
func reference(name string) backend.Backend {
	return backend.Backend{Name: name, Kind: backend.Reference, Caps: []backend.Capability{
		double.Implement(backend.Constraints{}, runDouble),
	}}
}

func newRegistry(t *testing.T, log *bytes.Buffer) (*backend.Registry, *fake) {
	t.Helper()
	var logger *slog.Logger
	if log != nil {
		logger = slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	r := backend.NewRegistry(logger)
	if err := r.Register(reference("eager")); err != nil {
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
		call        doubleArgs
		want        string
		fakeDeclare string // the fake backend's refusal, when it declines
	}{
		{"accepted", doubleArgs{X: xOf(t, dtype.BFloat16, 4, 32)}, "fake", ""},
		{"dtype", doubleArgs{X: xOf(t, dtype.Float16, 4, 32)}, "eager", "fake: x: dtype float16 not in [bfloat16]"},
		{"rank", doubleArgs{X: xOf(t, dtype.BFloat16, 2, 4, 32)}, "eager", "fake: x: shape [2 4 32] fails rank == 2"},
		{"divisible", doubleArgs{X: xOf(t, dtype.BFloat16, 4, 33)}, "eager", "fake: x: shape [4 33] fails dim -1 divisible by 16"},
		{"stochastic", doubleArgs{X: xOf(t, dtype.BFloat16, 4, 32), Seed: 7}, "eager", "fake: stochastic_rounding: requires off"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			log.Reset()
			res, ran, err := double.Run(ctx, r, &c.call, "")
			if err != nil || ran != c.want || res.Out == nil {
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
				_, _, err := double.Run(ctx, r, &c.call, "fake")
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
	c := doubleArgs{X: xOf(t, dtype.Float16, 2, 16)}
	_, _, err := double.Run(context.Background(), r, &c, "")
	var nc *backend.NoCapableBackendError
	if !errors.As(err, &nc) {
		t.Fatalf("got %v, want NoCapableBackendError", err)
	}
	got := fmt.Sprint(nc.Declines)
	want := "[fake: x: dtype float16 not in [bfloat16] npu-thing: unavailable: libthing.so: cannot open shared object file eager: disabled]"
	if got != want {
		t.Errorf("declines\n got %s\nwant %s", got, want)
	}
	if w0, w1 := nc.Declines[0].Why(), nc.Declines[1].Why(); w0 != "x: dtype float16 not in [bfloat16]" || w1 != "unavailable: libthing.so: cannot open shared object file" {
		t.Errorf("Why: %q, %q", w0, w1)
	}
	if !strings.Contains(err.Error(), "no backend can run test_double on cpu") {
		t.Errorf("message: %v", err)
	}
	// Re-enabled, eager takes it again.
	if err := r.SetEnabled("eager", true); err != nil {
		t.Fatal(err)
	}
	if _, name, err := double.Run(context.Background(), r, &c, ""); err != nil || name != "eager" {
		t.Errorf("after enabling: %q, %v", name, err)
	}
}

func TestExplicitErrors(t *testing.T) {
	r, _ := newRegistry(t, nil)
	r.MarkUnavailable("npu-thing", backend.Accelerator, "no device")
	ctx := context.Background()
	tw := doubleArgs{X: xOf(t, dtype.BFloat16, 4, 32)}

	var nf *backend.BackendNotFoundError
	if _, _, err := double.Run(ctx, r, &tw, "nosuch"); !errors.As(err, &nf) || nf.Name != "nosuch" {
		t.Errorf("unknown backend: %v", err)
	}
	if _, _, err := double.Run(ctx, r, &tw, "npu-thing"); !errors.As(err, &nf) || !strings.Contains(nf.Reason, "no device") {
		t.Errorf("unavailable backend: %v", err)
	}
	var ni *backend.NotImplementedError
	if _, _, err := triple.Run(ctx, r, &tw, "fake"); !errors.As(err, &ni) || ni.Op != triple.Name() {
		t.Errorf("not implemented: %v", err)
	}
	if err := r.SetEnabled("fake", false); err != nil {
		t.Fatal(err)
	}
	if _, _, err := double.Run(ctx, r, &tw, "fake"); !errors.As(err, &nf) || nf.Reason != "disabled" {
		t.Errorf("disabled backend: %v", err)
	}
	if err := r.SetEnabled("nosuch", true); !errors.As(err, &nf) {
		t.Errorf("SetEnabled(nosuch): %v", err)
	}
	if err := r.SetPriority("eager", "nosuch"); !errors.As(err, &nf) {
		t.Errorf("SetPriority(nosuch): %v", err)
	}
}

// triple is a second test operation that no test backend implements.
var triple = backend.Declare[*doubleArgs, doubled]("test_triple", nil)

func TestDeclaredOnce(t *testing.T) {
	var names []string
	for _, o := range backend.Ops() {
		names = append(names, o.Name())
	}
	if !slices.Contains(names, "test_double") || !slices.Contains(names, "test_triple") {
		t.Errorf("Ops() = %v, want the test's operations", names)
	}
	defer func() {
		if recover() == nil {
			t.Error("declaring test_double twice did not panic")
		}
	}()
	backend.Declare[*doubleArgs, doubled]("test_double", nil)
}

func TestCancelledContext(t *testing.T) {
	r, f := newRegistry(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := double.Run(ctx, r, &doubleArgs{X: xOf(t, dtype.BFloat16, 4, 32)}, ""); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: %v", err)
	}
	if f.calls != 0 {
		t.Errorf("a kernel ran %d times under a cancelled context", f.calls)
	}
}

// TestLazy checks that a lazily registered backend loads only when the
// registry needs to know about it, once, and that a failure becomes the
// unavailable reason.
func TestLazy(t *testing.T) {
	r, _ := newRegistry(t, nil)
	var loads int
	err := r.RegisterLazy("acc", backend.Accelerator, []string{"npu"}, func() (backend.Backend, error) {
		loads++
		return reference("acc"), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.RegisterLazy("broken", backend.Accelerator, []string{"npu"}, func() (backend.Backend, error) {
		loads++
		return backend.Backend{}, errors.New("libthing.so: not found")
	}); err != nil {
		t.Fatal(err)
	}
	if err := r.RegisterLazy("acc", backend.Accelerator, nil, nil); err == nil {
		t.Error("registered acc twice")
	}
	ctx := context.Background()
	// A host call does not load accelerators for other devices.
	if _, name, err := double.Run(ctx, r, &doubleArgs{X: xOf(t, dtype.BFloat16, 4, 32)}, ""); err != nil || name != "fake" || loads != 0 {
		t.Fatalf("host call: %q, %v, %d loads", name, err, loads)
	}
	_, _, err = double.Run(ctx, r, &doubleArgs{X: xOf(t, dtype.Float16, 4, 32)}, "")
	if err != nil || loads != 0 {
		t.Fatalf("host call declined by fake: %v, %d loads", err, loads)
	}
	// Naming it loads it; it then runs like any backend.
	if _, name, err := double.Run(ctx, r, &doubleArgs{X: xOf(t, dtype.Float16, 4, 32)}, "acc"); err != nil || name != "acc" || loads != 1 {
		t.Fatalf("explicit call: %q, %v, %d loads", name, err, loads)
	}
	// Listing loads the rest, once.
	for range 2 {
		for _, b := range r.ListBackends() {
			if b.Name == "broken" && (b.Available || b.Reason != "libthing.so: not found") {
				t.Errorf("broken: %+v", b)
			}
		}
	}
	if loads != 2 {
		t.Errorf("%d loads, want 2", loads)
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
	c := doubleArgs{X: xOf(t, dtype.BFloat16, 4, 32)}
	if _, name, _ := double.Run(context.Background(), r, &c, ""); name != "eager" {
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
	if got := infos[0].Capabilities[double.Name()]; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("capabilities\n got %q\nwant %q", got, want)
	}
}

func TestRegister(t *testing.T) {
	r, _ := newRegistry(t, nil)
	if err := r.Register(reference("eager")); err == nil {
		t.Error("registered eager twice")
	}
	if err := r.Register(backend.Backend{Name: "x", Caps: []backend.Capability{{Op: double.Name()}}}); err == nil {
		t.Error("registered a capability without a kernel")
	}
	if err := r.Register(backend.Backend{Name: "x", Caps: []backend.Capability{
		double.Implement(backend.Constraints{}, runDouble), double.Implement(backend.Constraints{}, runDouble),
	}}); err == nil {
		t.Error("registered an operation twice in one backend")
	}
	if err := r.Register(backend.Backend{Name: "y", Kind: backend.Kind(7)}); err == nil || backend.Kind(7).String() != "kind(7)" {
		t.Errorf("registered an unknown kind: %v", err)
	}
	r.MarkUnavailable("late", backend.Host, "not yet")
	_ = r.SetEnabled("late", false)
	b := reference("late")
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
				c := doubleArgs{X: xOf(t, dtype.BFloat16, 2, 16)}
				if _, _, err := double.Run(context.Background(), r, &c, ""); err != nil {
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

// negate is a second test operation, one that takes caller-owned outputs,
// for what Op.Run does with them.
var negate = backend.Declare[*negateArgs, negated]("test_negate", nil)

type negateArgs struct {
	backend.Into[negated]
	X *tensor.Tensor
}

func (a *negateArgs) Device() tensor.Device { return a.X.Device() }

func (a *negateArgs) Tensor(param string) *tensor.Tensor {
	if param == "x" {
		return a.X
	}
	return nil
}

func (a *negateArgs) DType(string) (dtype.DType, bool) { return 0, false }

func (a *negateArgs) Validate() error { return nil }

type negated struct{ Out *tensor.Tensor }

func (r negated) Outputs() []*tensor.Tensor { return []*tensor.Tensor{r.Out} }

func (negated) WithOutputs(ts []*tensor.Tensor) negated { return negated{ts[0]} }

// TestDeliverLogsToRegistry checks that a kernel's result copied into the
// caller's output is logged to the registry's own logger, as dispatch is.
func TestDeliverLogsToRegistry(t *testing.T) {
	var log bytes.Buffer
	r := backend.NewRegistry(slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug})))
	// The kernel ignores the caller's output and returns a fresh tensor.
	err := r.Register(backend.Backend{Name: "eager", Kind: backend.Reference, Caps: []backend.Capability{
		negate.Implement(backend.Constraints{}, func(_ context.Context, a *negateArgs) (negated, error) {
			v, err := a.X.Float32s()
			if err != nil {
				return negated{}, err
			}
			for i := range v {
				v[i] = -v[i]
			}
			out, err := tensor.FromFloat32(dtype.Float32, v, a.X.Shape()...)
			return negated{out}, err
		}),
	}})
	if err != nil {
		t.Fatal(err)
	}
	mine := xOf(t, dtype.Float32, 4)
	args := &negateArgs{X: xOf(t, dtype.Float32, 4)}
	args.Out = negated{mine}
	res, _, err := negate.Run(context.Background(), r, args, "")
	if err != nil || res.Out != mine {
		t.Fatalf("got %v, %v; want the caller's tensor back", res.Out, err)
	}
	if !strings.Contains(log.String(), "copied into caller-owned outputs") {
		t.Errorf("the registry's log lacks the copy:\n%s", log.String())
	}
}

// explained is an operation whose Args are a backend.Explainer.
var explained = backend.Declare[*explainedArgs, doubled]("test_explained", nil)

type explainedArgs struct{ doubleArgs }

func (a *explainedArgs) Explain(err error) error { return fmt.Errorf("%w (explained)", err) }

// TestExplainer: Run passes a kernel's error through the Args' Explain,
// keeping what it wraps, and leaves a call that succeeds alone.
func TestExplainer(t *testing.T) {
	r := backend.NewRegistry(nil)
	bad := &backend.ArgError{Op: explained.Name(), Param: "x", Row: 1, Err: backend.ErrNonFinite}
	if err := r.Register(backend.Backend{Name: "eager", Kind: backend.Reference, Caps: []backend.Capability{
		explained.Implement(backend.Constraints{}, func(ctx context.Context, a *explainedArgs) (doubled, error) {
			if a.Seed == 1 {
				return doubled{}, bad
			}
			return runDouble(ctx, &a.doubleArgs)
		}),
	}}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var ae *backend.ArgError
	_, _, err := explained.Run(ctx, r, &explainedArgs{doubleArgs{X: xOf(t, dtype.Float32, 2, 4), Seed: 1}}, "")
	if !errors.As(err, &ae) || ae != bad || !strings.HasSuffix(err.Error(), "(explained)") {
		t.Errorf("failed call: %v, want the kernel's ArgError, explained", err)
	}
	if _, _, err := explained.Run(ctx, r, &explainedArgs{doubleArgs{X: xOf(t, dtype.Float32, 2, 4)}}, ""); err != nil {
		t.Errorf("good call: %v", err)
	}
}
