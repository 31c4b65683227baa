package kitchen_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/gokitchen/kitchen"
	"github.com/gokitchen/kitchen/backend"
	"github.com/gokitchen/kitchen/backend/eager"
	"github.com/gokitchen/kitchen/op"
	"github.com/gokitchen/kitchen/tensor"
)

// The tests here check the public API: options, contexts and the choice
// of backend. What each backend computes, and its argument errors, are
// the conformance suite's (internal/backendtest), run by each backend's
// own tests.

// call is one public function with its operands bound.
type call struct {
	op  string // the operation, which errors name
	via string // the function, where it is not the operation's own
	run func(ctx context.Context, opts ...kitchen.Option) ([]*tensor.Tensor, error)
}

func (c call) String() string {
	if c.via != "" {
		return c.op + " (" + c.via + ")"
	}
	return c.op
}

// publicCalls returns a valid call of every public operation.
func publicCalls() []call {
	x := must(tensor.FromFloat32(kitchen.BFloat16, []float32{1, -2, 3, 0.5, 0, 7}, 2, 3))
	q := must(tensor.FromInt8([]int8{1, 2, 3, 4, 5, 6}, 2, 3))
	s := must(tensor.FromFloat32(kitchen.Float32, []float32{0.5, 2}, 2, 1))
	x16 := must(tensor.FromFloat32(kitchen.BFloat16, make([]float32, 32), 2, 16))
	q16 := must(tensor.FromInt8(make([]int8, 32), 2, 16))
	qt := must(tensor.FromInt8([]int8{1, -128, 3, 127, -5, 6}, 3, 2))
	idx := must(tensor.FromFloat32(kitchen.Int32, []float32{1, 0, 1}, 3))
	ws := must(tensor.FromFloat32(kitchen.Float32, []float32{0.5, 2}, 2))
	layer := must(kitchen.PrepareInt8Linear(context.Background(), q, ws))
	two := func(a, b *tensor.Tensor, err error) ([]*tensor.Tensor, error) { return []*tensor.Tensor{a, b}, err }
	one := func(a *tensor.Tensor, err error) ([]*tensor.Tensor, error) { return []*tensor.Tensor{a}, err }
	return []call{
		{op: op.QuantizeRowwise.Name(), run: func(ctx context.Context, o ...kitchen.Option) ([]*tensor.Tensor, error) {
			return two(kitchen.QuantizeInt8Rowwise(ctx, x, o...))
		}},
		{op: op.QuantizeTensorwise.Name(), run: func(ctx context.Context, o ...kitchen.Option) ([]*tensor.Tensor, error) {
			return two(kitchen.QuantizeInt8Tensorwise(ctx, x, o...))
		}},
		{op: op.Dequantize.Name(), run: func(ctx context.Context, o ...kitchen.Option) ([]*tensor.Tensor, error) {
			return one(kitchen.DequantizeInt8(ctx, q, s, o...))
		}},
		{op: op.DequantizeDType.Name(), run: func(ctx context.Context, o ...kitchen.Option) ([]*tensor.Tensor, error) {
			return one(kitchen.DequantizeInt8To(ctx, q, s, kitchen.Float16, o...))
		}},
		{op: op.QuantizeAndRotateRowwise.Name(), run: func(ctx context.Context, o ...kitchen.Option) ([]*tensor.Tensor, error) {
			return two(kitchen.QuantizeInt8AndRotateRowwise(ctx, x16, append([]kitchen.Option{kitchen.WithConvRotGroup(16)}, o...)...))
		}},
		{op: op.QuantizeConvRotWeight.Name(), run: func(ctx context.Context, o ...kitchen.Option) ([]*tensor.Tensor, error) {
			return two(kitchen.QuantizeInt8ConvRotWeight(ctx, x16, append([]kitchen.Option{kitchen.WithConvRotGroup(16)}, o...)...))
		}},
		{op: op.DequantizeConvRotWeight.Name(), run: func(ctx context.Context, o ...kitchen.Option) ([]*tensor.Tensor, error) {
			return one(kitchen.DequantizeInt8ConvRotWeight(ctx, q16, s, append([]kitchen.Option{kitchen.WithConvRotGroup(16)}, o...)...))
		}},
		{op: op.DequantizeConvRotWeightDType.Name(), run: func(ctx context.Context, o ...kitchen.Option) ([]*tensor.Tensor, error) {
			return one(kitchen.DequantizeInt8ConvRotWeightTo(ctx, q16, s, kitchen.BFloat16, append([]kitchen.Option{kitchen.WithConvRotGroup(16)}, o...)...))
		}},
		{op: op.DequantizeEmbedding.Name(), run: func(ctx context.Context, o ...kitchen.Option) ([]*tensor.Tensor, error) {
			return one(kitchen.DequantizeInt8Embedding(ctx, q, s, idx, kitchen.Float32, o...))
		}},
		{op: op.MMInt8.Name(), run: func(ctx context.Context, o ...kitchen.Option) ([]*tensor.Tensor, error) {
			return one(kitchen.MMInt8(ctx, q, qt, o...))
		}},
		{op: op.Int8Linear.Name(), run: func(ctx context.Context, o ...kitchen.Option) ([]*tensor.Tensor, error) {
			return one(kitchen.Int8Linear(ctx, x, q, ws, o...))
		}},
		{op: op.Int8Linear.Name(), via: "PrepareInt8Linear", run: func(ctx context.Context, o ...kitchen.Option) ([]*tensor.Tensor, error) {
			l, err := kitchen.PrepareInt8Linear(ctx, q, ws, o...)
			if err != nil {
				return nil, err
			}
			defer l.Release()
			return one(l.Forward(ctx, x))
		}},
		{op: op.Int8Linear.Name(), via: "Int8Layer.Forward", run: func(ctx context.Context, o ...kitchen.Option) ([]*tensor.Tensor, error) {
			return one(layer.Forward(ctx, x, o...))
		}},
	}
}

// noOutputs fails t if a call that failed returned a tensor.
func noOutputs(t *testing.T, what string, outs []*tensor.Tensor) {
	t.Helper()
	for _, o := range outs {
		if o != nil {
			t.Errorf("%s: a result came back with the error", what)
		}
	}
}

// TestOptionErrors checks that an option the operation does not take, or
// an option with a bad value, is an *backend.ArgError wrapping
// backend.ErrOption that names the operation and the parameter, never
// ignored.
func TestOptionErrors(t *testing.T) {
	s1 := must(tensor.FromFloat32(kitchen.Float32, []float32{0.5}))
	takes := map[string][]string{ // the operation-specific options each call takes, by call
		op.QuantizeRowwise.Name():                     {"stochastic_rounding"},
		op.QuantizeTensorwise.Name():                  {"stochastic_rounding", "scale"},
		op.QuantizeAndRotateRowwise.Name():            {"stochastic_rounding"},
		op.QuantizeConvRotWeight.Name():               {"stochastic_rounding"},
		op.Int8Linear.Name():                          {"out_dtype", "input_act"},
		op.Int8Linear.Name() + " (PrepareInt8Linear)": {"out_dtype", "input_act"},
	}
	options := []struct {
		name  string
		opt   kitchen.Option
		param string
		valid bool // a valid value, so an error only where the operation does not take it
	}{
		{"WithStochasticRounding(3)", kitchen.WithStochasticRounding(3), "stochastic_rounding", true},
		{"WithStochasticRounding(0)", kitchen.WithStochasticRounding(0), "stochastic_rounding", false},
		{"WithStochasticRounding(-1)", kitchen.WithStochasticRounding(-1), "stochastic_rounding", false},
		{"WithScale(0.5)", kitchen.WithScale(0.5), "scale", true},
		{"WithScaleTensor(s)", kitchen.WithScaleTensor(s1), "scale", true},
		{"WithScaleTensor(nil)", kitchen.WithScaleTensor(nil), "scale", false},
		{"WithRegistry(nil)", kitchen.WithRegistry(nil), "registry", false},
		{"WithOutDType(0)", kitchen.WithOutDType(0), "out_dtype", false},
		{"WithInputAct(\"\")", kitchen.WithInputAct(""), "input_act", false},
		{"WithOutDType(Float16)", kitchen.WithOutDType(kitchen.Float16), "out_dtype", true},
		{"WithInputAct(gelu_tanh)", kitchen.WithInputAct("gelu_tanh"), "input_act", true},
		{"Into()", kitchen.Into(), "out", false},
		{"Into(nil, nil, nil)", kitchen.Into(nil, nil, nil), "out", false}, // more outputs than any operation has
	}
	ctx := context.Background()
	for _, c := range publicCalls() {
		for _, o := range options {
			outs, err := c.run(ctx, o.opt)
			if o.valid && strings.Contains(strings.Join(takes[c.String()], " "), o.param) {
				if err != nil {
					t.Errorf("%s with %s: %v", c, o.name, err)
				}
				continue
			}
			var ae *backend.ArgError
			if !errors.As(err, &ae) || !errors.Is(err, backend.ErrOption) || ae.Op != c.op || ae.Param != o.param {
				t.Errorf("%s with %s: got %v, want %v on %s", c, o.name, err, backend.ErrOption, o.param)
			}
			noOutputs(t, c.String()+" with "+o.name, outs)
		}
		outs, err := c.run(ctx, kitchen.Option{})
		if !errors.Is(err, backend.ErrOption) {
			t.Errorf("%s with the zero Option: got %v, want %v", c, err, backend.ErrOption)
		}
		noOutputs(t, c.String()+" with the zero Option", outs)
	}
}

// TestNilContext checks that a nil context is an error, not a panic.
func TestNilContext(t *testing.T) {
	for _, c := range publicCalls() {
		outs, err := c.run(nil) //nolint:staticcheck // the point of the test
		var ae *backend.ArgError
		if !errors.As(err, &ae) || !errors.Is(err, backend.ErrNil) || ae.Param != "ctx" || ae.Op != c.op {
			t.Errorf("%s: got %v, want %v on ctx", c, err, backend.ErrNil)
		}
		noOutputs(t, c.String(), outs)
	}
}

// TestCancelledContext checks that a call under a cancelled context does
// not run and returns the context's error.
func TestCancelledContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, c := range publicCalls() {
		for _, name := range []string{"", "cpu", "eager"} {
			var opts []kitchen.Option
			if name != "" {
				opts = append(opts, kitchen.UsingBackend(name))
			}
			outs, err := c.run(ctx, opts...)
			if !errors.Is(err, context.Canceled) {
				t.Errorf("%s on %q: got %v, want %v", c, name, err, context.Canceled)
			}
			noOutputs(t, c.String(), outs)
		}
	}
}

// TestContextOverride checks the scoped choice of backend: WithBackend
// applies to every call under the context, UsingBackend overrides it, and
// ReportBackend says which backend ran.
func TestContextOverride(t *testing.T) {
	for _, c := range publicCalls() {
		var ran string
		_, err := c.run(kitchen.WithBackend(context.Background(), "nosuch"), kitchen.ReportBackend(&ran))
		var nf *backend.BackendNotFoundError
		if !errors.As(err, &nf) || nf.Name != "nosuch" {
			t.Errorf("%s under WithBackend(nosuch): %v", c, err)
		}
		ctx := kitchen.WithBackend(context.Background(), "eager")
		if _, err := c.run(ctx, kitchen.ReportBackend(&ran)); err != nil || ran != "eager" {
			t.Errorf("%s under WithBackend(eager): ran on %q, %v", c, ran, err)
		}
		if _, err := c.run(ctx, kitchen.UsingBackend("cpu"), kitchen.ReportBackend(&ran)); err != nil || ran != "cpu" {
			t.Errorf("%s: UsingBackend(cpu) under WithBackend(eager): ran on %q, %v", c, ran, err)
		}
		if _, err := c.run(context.Background(), kitchen.ReportBackend(&ran)); err != nil || ran != "cpu" {
			t.Errorf("%s: the automatic choice for host tensors ran on %q, want cpu: %v", c, ran, err)
		}
	}
}

// TestWithRegistry checks that WithRegistry dispatches through the given
// registry instead of the default one.
func TestWithRegistry(t *testing.T) {
	reg := backend.NewRegistry(nil)
	if err := reg.Register(eager.New()); err != nil {
		t.Fatal(err)
	}
	for _, c := range publicCalls() {
		var ran string
		if _, err := c.run(context.Background(), kitchen.WithRegistry(reg), kitchen.ReportBackend(&ran)); err != nil || ran != "eager" {
			t.Errorf("%s with a registry of eager alone: ran on %q, %v", c, ran, err)
		}
		_, err := c.run(context.Background(), kitchen.WithRegistry(reg), kitchen.UsingBackend("cpu"))
		var nf *backend.BackendNotFoundError
		if !errors.As(err, &nf) || nf.Name != "cpu" {
			t.Errorf("%s: cpu from a registry without it: %v", c, err)
		}
	}
}

// TestReleasedTensors checks that a released tensor, of any size, is
// refused as an input and as an output, naming it, rather than read or
// written.
func TestReleasedTensors(t *testing.T) {
	ctx := context.Background()
	for _, n := range []int{4, 1 << 20} { // small, and large enough to be recycled
		x := must(kitchen.FromFloat32(kitchen.BFloat16, make([]float32, n), 2, n/2))
		q, s, err := kitchen.QuantizeInt8Rowwise(ctx, x)
		if err != nil {
			t.Fatal(err)
		}
		q.Release()
		if _, err := q.Bytes(); !errors.Is(err, tensor.ErrReleased) {
			t.Errorf("n=%d: Bytes of a released tensor: %v, want %v", n, err, tensor.ErrReleased)
		}
		var ae *backend.ArgError
		if _, err := kitchen.DequantizeInt8(ctx, q, s); !errors.As(err, &ae) || ae.Param != "q" || !errors.Is(err, backend.ErrNil) || !errors.Is(err, tensor.ErrReleased) {
			t.Errorf("n=%d: a released input: %v, want an ArgError on q", n, err)
		}
		if _, _, err := kitchen.QuantizeInt8Rowwise(ctx, x, kitchen.Into(q, s)); !errors.As(err, &ae) || ae.Param != "out_q" || !errors.Is(err, backend.ErrNil) || !errors.Is(err, tensor.ErrReleased) {
			t.Errorf("n=%d: a released output: %v, want an ArgError on out_q", n, err)
		}
	}
}

// TestRotationOverflowExplained: a finite weight whose rotation overflows
// its dtype is refused as not finite after the rotation (the contract),
// and the error says the rotation may be why.
func TestRotationOverflowExplained(t *testing.T) {
	w := must(tensor.FromFloat32(kitchen.Float32, []float32{3e38, 3e38, 1, 1, 1, 1, 1, 1}, 2, 4))
	_, _, err := kitchen.QuantizeInt8ConvRotWeight(context.Background(), w, kitchen.WithConvRotGroup(4))
	var ae *backend.ArgError
	if !errors.As(err, &ae) || !errors.Is(err, backend.ErrNonFinite) || ae.Row != 0 || !strings.Contains(err.Error(), "rotation") {
		t.Errorf("got %v, want ErrNonFinite in row 0 naming the rotation", err)
	}
	// Without a rotation a NaN is just a NaN.
	x := must(tensor.FromFloat32(kitchen.Float32, []float32{1, float32(math.NaN())}, 1, 2))
	if _, _, err := kitchen.QuantizeInt8Rowwise(context.Background(), x); !errors.Is(err, backend.ErrNonFinite) || strings.Contains(err.Error(), "rotation") {
		t.Errorf("got %v", err)
	}
	// int8_linear says so only where it rotates x.
	x = must(tensor.FromFloat32(kitchen.Float16, []float32{1, 1, 1, 1, 60000, 60000, 60000, -60000}, 2, 4))
	wq := must(tensor.FromInt8(make([]int8, 3*4), 3, 4))
	ws := must(tensor.FromFloat32(kitchen.Float32, []float32{0.5}))
	if _, err := kitchen.Int8Linear(context.Background(), x, wq, ws, kitchen.WithConvRot(4)); !errors.As(err, &ae) || !errors.Is(err, backend.ErrNonFinite) || ae.Row != 1 || !strings.Contains(err.Error(), "rotation") {
		t.Errorf("int8_linear with ConvRot: got %v, want ErrNonFinite in row 1 naming the rotation", err)
	}
	x = must(tensor.FromFloat32(kitchen.Float16, []float32{1, 1, 1, 1, 1, float32(math.Inf(1)), 1, 1}, 2, 4))
	if _, err := kitchen.Int8Linear(context.Background(), x, wq, ws); !errors.Is(err, backend.ErrNonFinite) || strings.Contains(err.Error(), "rotation") {
		t.Errorf("int8_linear without ConvRot: got %v", err)
	}
}
