package kitchen_test

import (
	"bytes"
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/gokitchen/kitchen"
	"github.com/gokitchen/kitchen/backend"
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/tensor"
)

func f32s(dt dtype.DType, v []float32, shape ...int) *tensor.Tensor {
	return must(tensor.FromFloat32(dt, v, shape...))
}

func ramp(n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(i%11) - 5
	}
	return v
}

// TestBadInput checks that each kind of bad argument is a typed error that
// names the operation and the parameter, on every backend, with no result.
func TestBadInput(t *testing.T) {
	ctx := context.Background()
	x := f32s(kitchen.BFloat16, ramp(12), 3, 4)
	q := must(tensor.FromInt8([]int8{1, 2, 3, 4, 5, 6}, 2, 3))
	s1 := f32s(kitchen.Float32, []float32{0.5})
	type call func(opts ...kitchen.Option) (*tensor.Tensor, error)
	rowwise := func(x *tensor.Tensor) call {
		return func(opts ...kitchen.Option) (*tensor.Tensor, error) {
			q, _, err := kitchen.QuantizeInt8Rowwise(ctx, x, opts...)
			return q, err
		}
	}
	tensorwise := func(x *tensor.Tensor, more ...kitchen.Option) call {
		return func(opts ...kitchen.Option) (*tensor.Tensor, error) {
			q, _, err := kitchen.QuantizeInt8Tensorwise(ctx, x, append(more, opts...)...)
			return q, err
		}
	}
	deq := func(q, s *tensor.Tensor, out dtype.DType, more ...kitchen.Option) call {
		return func(opts ...kitchen.Option) (*tensor.Tensor, error) {
			return kitchen.DequantizeInt8To(ctx, q, s, out, append(more, opts...)...)
		}
	}
	cases := []struct {
		name  string
		op    backend.Op
		call  call
		param string
		err   error
	}{
		{"nil x", backend.QuantizeRowwise, rowwise(nil), "x", backend.ErrNil},
		{"empty x", backend.QuantizeRowwise, rowwise(f32s(kitchen.Float32, nil, 0, 4)), "x", backend.ErrEmpty},
		{"int8 x", backend.QuantizeTensorwise, tensorwise(q), "x", backend.ErrDType},
		{"scalar x rowwise", backend.QuantizeRowwise, rowwise(f32s(kitchen.Float32, []float32{1}, []int{}...)), "x", backend.ErrShape},
		{"rowwise with scale", backend.QuantizeRowwise, func(o ...kitchen.Option) (*tensor.Tensor, error) {
			return rowwise(x)(append(o, kitchen.WithScale(1))...)
		}, "scale", backend.ErrOption},
		{"zero scale", backend.QuantizeTensorwise, tensorwise(x, kitchen.WithScale(0)), "scale", backend.ErrScale},
		{"negative scale", backend.QuantizeTensorwise, tensorwise(x, kitchen.WithScale(-1)), "scale", backend.ErrScale},
		{"NaN scale", backend.QuantizeTensorwise, tensorwise(x, kitchen.WithScale(float32(math.NaN()))), "scale", backend.ErrScale},
		{"infinite scale", backend.QuantizeTensorwise, tensorwise(x, kitchen.WithScale(float32(math.Inf(1)))), "scale", backend.ErrScale},
		{"zero scale tensor", backend.QuantizeTensorwise, tensorwise(x, kitchen.WithScaleTensor(f32s(kitchen.BFloat16, []float32{0}))), "scale", backend.ErrScale},
		{"infinite scale tensor", backend.QuantizeTensorwise, tensorwise(x, kitchen.WithScaleTensor(f32s(kitchen.Float16, []float32{1e6}))), "scale", backend.ErrScale},
		{"two-element scale tensor", backend.QuantizeTensorwise, tensorwise(x, kitchen.WithScaleTensor(f32s(kitchen.Float32, []float32{1, 2}))), "scale", backend.ErrShape},
		{"int8 scale tensor", backend.QuantizeTensorwise, tensorwise(x, kitchen.WithScaleTensor(must(tensor.FromInt8([]int8{1})))), "scale", backend.ErrDType},
		{"scale twice", backend.QuantizeTensorwise, tensorwise(x, kitchen.WithScale(1), kitchen.WithScaleTensor(s1)), "scale", backend.ErrOption},
		{"nil q", backend.DequantizeDType, deq(nil, s1, kitchen.Float32), "q", backend.ErrNil},
		{"float q", backend.DequantizeDType, deq(x, s1, kitchen.Float32), "q", backend.ErrDType},
		{"nil scale", backend.DequantizeDType, deq(q, nil, kitchen.Float32), "scale", backend.ErrNil},
		{"empty scale", backend.DequantizeDType, deq(q, f32s(kitchen.Float32, nil), kitchen.Float32), "scale", backend.ErrEmpty},
		{"1-D row scale", backend.DequantizeDType, deq(q, f32s(kitchen.Float32, []float32{1, 2}), kitchen.Float32), "scale", backend.ErrShape},
		{"wrong row count", backend.DequantizeDType, deq(q, f32s(kitchen.Float32, []float32{1, 2, 3}, 3, 1), kitchen.Float32), "scale", backend.ErrShape},
		{"transposed scale", backend.DequantizeDType, deq(q, f32s(kitchen.Float32, ramp(6), 3, 2), kitchen.Float32), "scale", backend.ErrShape},
		{"int8 scale", backend.DequantizeDType, deq(q, must(tensor.FromInt8([]int8{1})), kitchen.Float32), "scale", backend.ErrDType},
		{"int8 out", backend.DequantizeDType, deq(q, s1, kitchen.Int8), "out_dtype", backend.ErrDType},
		{"stochastic dequantize", backend.DequantizeDType, deq(q, s1, kitchen.Float16, kitchen.WithStochasticRounding(3)), "stochastic_rounding", backend.ErrOption},
		{"scale option on dequantize", backend.DequantizeDType, deq(q, s1, kitchen.Float16, kitchen.WithScaleTensor(s1)), "scale", backend.ErrOption},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, name := range backendsFor(c.op) {
				out, err := c.call(kitchen.UsingBackend(name))
				var ae *backend.ArgError
				if !errors.As(err, &ae) || !errors.Is(err, c.err) || ae.Param != c.param || ae.Op != c.op {
					t.Fatalf("%s: got %v; want %v on %s of %s", name, err, c.err, c.param, c.op)
				}
				if out != nil {
					t.Errorf("%s: partial result returned with the error", name)
				}
				if msg := err.Error(); !strings.Contains(msg, string(c.op)) || !strings.Contains(msg, c.param) {
					t.Errorf("%s: message %q does not name the operation and parameter", name, msg)
				}
			}
		})
	}
}

// TestNonFiniteNamesRow puts NaN or an infinity in one row of x and checks
// that every quantize form reports that row and returns nothing.
func TestNonFiniteNamesRow(t *testing.T) {
	ctx := context.Background()
	bad := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))}
	shapes := []struct {
		shape []int
		index int // flat index of the bad element
		row   int
	}{{[]int{5, 4}, 13, 3}, {[]int{2, 3, 4}, 1*12 + 1*4 + 2, 4}, {[]int{7}, 6, 0}}
	forms := []struct {
		name string
		run  func(x *tensor.Tensor, opts ...kitchen.Option) (*tensor.Tensor, *tensor.Tensor, error)
	}{
		{"rowwise", func(x *tensor.Tensor, o ...kitchen.Option) (*tensor.Tensor, *tensor.Tensor, error) {
			return kitchen.QuantizeInt8Rowwise(ctx, x, o...)
		}},
		{"tensorwise", func(x *tensor.Tensor, o ...kitchen.Option) (*tensor.Tensor, *tensor.Tensor, error) {
			return kitchen.QuantizeInt8Tensorwise(ctx, x, o...)
		}},
		{"tensorwise supplied", func(x *tensor.Tensor, o ...kitchen.Option) (*tensor.Tensor, *tensor.Tensor, error) {
			return kitchen.QuantizeInt8Tensorwise(ctx, x, append(o, kitchen.WithScale(0.1))...)
		}},
		{"rowwise stochastic", func(x *tensor.Tensor, o ...kitchen.Option) (*tensor.Tensor, *tensor.Tensor, error) {
			return kitchen.QuantizeInt8Rowwise(ctx, x, append(o, kitchen.WithStochasticRounding(9))...)
		}},
	}
	for _, dt := range dtype.Floats() {
		for _, s := range shapes {
			for _, b := range bad {
				v := ramp(tensor.Numel(s.shape))
				v[s.index] = b
				x := f32s(dt, v, s.shape...)
				for _, f := range forms {
					op := backend.QuantizeRowwise
					if strings.HasPrefix(f.name, "tensorwise") {
						op = backend.QuantizeTensorwise
					}
					for _, name := range backendsFor(op) {
						q, scale, err := f.run(x, kitchen.UsingBackend(name))
						var ae *backend.ArgError
						if !errors.As(err, &ae) || !errors.Is(err, backend.ErrNonFinite) || ae.Row != s.row || ae.Param != "x" {
							t.Fatalf("%v %v %v %s on %s: got %v, want NaN or infinity in row %d", dt, s.shape, b, f.name, name, err, s.row)
						}
						if q != nil || scale != nil {
							t.Fatalf("%s on %s: partial result", f.name, name)
						}
					}
				}
			}
		}
	}
}

// TestInputsUnchanged checks that no operation writes to its inputs.
func TestInputsUnchanged(t *testing.T) {
	ctx := context.Background()
	for _, dt := range dtype.Floats() {
		x := f32s(dt, ramp(64), 4, 16)
		before := bytes.Clone(must(x.Bytes()))
		for _, name := range backendsFor(backend.QuantizeRowwise) {
			q, s, err := kitchen.QuantizeInt8Rowwise(ctx, x, kitchen.UsingBackend(name), kitchen.WithStochasticRounding(5))
			if err != nil {
				t.Fatal(err)
			}
			qb, sb := bytes.Clone(must(q.Bytes())), bytes.Clone(must(s.Bytes()))
			if _, err := kitchen.DequantizeInt8To(ctx, q, s, dt, kitchen.UsingBackend(name)); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(qb, must(q.Bytes())) || !bytes.Equal(sb, must(s.Bytes())) {
				t.Errorf("%s: dequantize modified its inputs", name)
			}
		}
		for _, name := range backendsFor(backend.QuantizeTensorwise) {
			if _, _, err := kitchen.QuantizeInt8Tensorwise(ctx, x, kitchen.UsingBackend(name)); err != nil {
				t.Fatal(err)
			}
		}
		if !bytes.Equal(before, must(x.Bytes())) {
			t.Errorf("%v: quantize modified x", dt)
		}
	}
}

// TestZeroRowsUseTinyNormal checks the contract's all-zero rows: the scale
// is 1e-30 and q is zero; and a row after a zero row is unaffected.
func TestZeroRowsUseTinyNormal(t *testing.T) {
	ctx := context.Background()
	for _, dt := range dtype.Floats() {
		x := f32s(dt, []float32{0, 0, 0, 0, 1, -2, 3, -127}, 2, 4)
		for _, name := range backendsFor(backend.QuantizeRowwise) {
			q, s, err := kitchen.QuantizeInt8Rowwise(ctx, x, kitchen.UsingBackend(name))
			if err != nil {
				t.Fatal(err)
			}
			qs, ss := must(q.Int8s()), must(s.Float32s())
			if ss[0] != 1e-30 || ss[1] != 1 {
				t.Errorf("%v on %s: scales %v", dt, name, ss)
			}
			if want := []int8{0, 0, 0, 0, 1, -2, 3, -127}; string(int8Bytes(qs)) != string(int8Bytes(want)) {
				t.Errorf("%v on %s: q %v, want %v", dt, name, qs, want)
			}
		}
	}
}

func int8Bytes(v []int8) []byte {
	b := make([]byte, len(v))
	for i, x := range v {
		b[i] = byte(x)
	}
	return b
}

// TestScalarInput quantizes a rank-0 tensor tensor-wise (row-wise needs a
// last dimension) on every backend.
func TestScalarInput(t *testing.T) {
	for _, dt := range dtype.Floats() {
		x := f32s(dt, []float32{-2.5}, []int{}...)
		for _, name := range backendsFor(backend.QuantizeTensorwise) {
			q, s, err := kitchen.QuantizeInt8Tensorwise(context.Background(), x, kitchen.UsingBackend(name))
			if err != nil {
				t.Fatalf("%v on %s: %v", dt, name, err)
			}
			if qs, ss := must(q.Int8s()), must(s.Float32s()); q.Rank() != 0 || qs[0] != -127 || ss[0] != float32(2.5)/127 {
				t.Errorf("%v on %s: q %v scale %v", dt, name, qs, ss)
			}
		}
	}
}

// TestContextOverride checks the scoped override through the public API.
func TestContextOverride(t *testing.T) {
	ctx := kitchen.WithBackend(context.Background(), "nosuch")
	x := f32s(kitchen.Float32, []float32{1, 2})
	_, _, err := kitchen.QuantizeInt8Rowwise(ctx, x)
	var nf *backend.BackendNotFoundError
	if !errors.As(err, &nf) || nf.Name != "nosuch" {
		t.Fatalf("scoped unknown backend: %v", err)
	}
	var ran string
	if _, _, err := kitchen.QuantizeInt8Rowwise(ctx, x, kitchen.UsingBackend("eager"), kitchen.ReportBackend(&ran)); err != nil || ran != "eager" {
		t.Fatalf("explicit over scoped: %q %v", ran, err)
	}
}
