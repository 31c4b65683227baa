package ascend_test

import (
	"bytes"
	"math"
	"testing"

	"github.com/gokitchen/kitchen"
	"github.com/gokitchen/kitchen/backend"
	"github.com/gokitchen/kitchen/backend/ascend"
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/op"
	"github.com/gokitchen/kitchen/tensor"
)

// The contract saturates, q = clamp(rne(y), -128, 127), but CANN 8.1.RC1's
// aclnnQuantize does not for an int8 output (its kernel clips only for
// uint8), and the simulator, which follows it, wraps a quotient beyond the
// int8 range. The fused kernels clamp the quotient before aclnnQuantize
// wherever it can leave the range; these tests run each such case on the
// NPU against eager, and fail where a clamp is missing.

// tiny is float16's smallest subnormal, 2^-24.
const tiny = 0x1p-24

// TestQuantizeSaturates quantizes, with the fused kernels, tensors whose
// quotients x / t go beyond the int8 range: a supplied scale (a value or a
// tensor), and float16 rows whose scale rounds to a subnormal divisor, half
// the scale (a / t = 189 for a row of abs-max a = 189 * 2^-24), tensor-wise
// and row-wise. q must be the contract's, by checkFused's rules, which ask
// for equality wherever the quotient is exact in x's type, as every one of
// these is.
func TestQuantizeSaturates(t *testing.T) {
	e := newEnv(t)
	edges := []float32{1, -1, 3, -3, 0.5, 0.99609375, -1.00390625, 1.00390625, 0, 100, -100}
	for _, c := range []struct {
		name string
		op   backend.Operation
		dt   dtype.DType
		v    []float32
		sv   float32 // a supplied scale value, or 0
		st   bool    // supplied as a tensor
	}{
		// 1/128 is exact in every type: quotients 128 x.
		{"tensorwise bfloat16, scale value", op.QuantizeTensorwise, dtype.BFloat16, edges, 1.0 / 128, false},
		{"tensorwise float16, scale value", op.QuantizeTensorwise, dtype.Float16, edges, 1.0 / 128, false},
		{"tensorwise bfloat16, scale tensor", op.QuantizeTensorwise, dtype.BFloat16, edges, 1.0 / 128, true},
		{"tensorwise float16, scale tensor", op.QuantizeTensorwise, dtype.Float16, edges, 1.0 / 128, true},
		{"tensorwise float16, subnormal divisor", op.QuantizeTensorwise, dtype.Float16,
			[]float32{189 * tiny, -189 * tiny, 128 * tiny, -129 * tiny, 100 * tiny, 0}, 0, false},
		{"rowwise float16, subnormal divisor", op.QuantizeRowwise, dtype.Float16,
			[]float32{189 * tiny, -50 * tiny, 128 * tiny, -189 * tiny, 1 * tiny, 0}, 0, false},
	} {
		shape := []int{len(c.v)}
		if c.op == op.QuantizeRowwise {
			shape = []int{2, len(c.v) / 2}
		}
		x := must(tensor.FromFloat32(c.dt, c.v, shape...))
		cl := call{name: c.name, op: c.op, x: x}
		switch {
		case c.st:
			cl.s = must(tensor.FromFloat32(dtype.Float32, []float32{c.sv}))
		case c.sv != 0:
			cl.opts = []kitchen.Option{kitchen.WithScale(c.sv)}
		}
		want, _, err := e.run(cl, false, kitchenEager())
		if err != nil {
			t.Fatal(err)
		}
		got, ran, err := e.run(cl, true)
		if err != nil || ran != ascend.Name {
			t.Fatalf("%s: ran %q, %v", c.name, ran, err)
		}
		for i := range want {
			if !bytes.Equal(must(got[i].Bytes()), must(want[i].Bytes())) {
				t.Errorf("%s: output %d is %v, want eager's %v", c.name, i, must(got[i].Float32s()), must(want[i].Float32s()))
			}
		}
	}
}

// TestTensorwiseBFloat16NeedsNoClamp checks the reason tensor-wise
// bfloat16 quantization with the recalculated scale runs aclnnQuantize
// without a clamp: the quotient never leaves the range. Over every
// bfloat16 abs-max of a binade, a / rT(f32(a / 127)) is at most 127.33
// (the bound is 127.4961), and the NPU's q for the worst of them is the
// contract's 127.
func TestTensorwiseBFloat16NeedsNoClamp(t *testing.T) {
	e := newEnv(t)
	T := dtype.BFloat16
	worst, worstQ := float32(0), float32(0)
	for bits := uint32(0x3f80); bits < 0x4000; bits++ { // every bfloat16 in [1, 2)
		a := math.Float32frombits(bits << 16)
		if q := a / T.Round(a/127); q > worstQ {
			worst, worstQ = a, q
		}
	}
	if worstQ >= 127.4961 || worstQ <= 127 {
		t.Fatalf("largest quotient %g (abs-max %g): not what the bound in kernels.go says", worstQ, worst)
	}
	for _, scale := range []float32{1, 0x1p-60, 0x1p100} {
		x := must(tensor.FromFloat32(T, []float32{worst * scale, -worst * scale, 1.328125 * scale, 0}, 4))
		cl := call{name: "tensorwise bfloat16, largest quotient", op: op.QuantizeTensorwise, x: x}
		want, _, err := e.run(cl, false, kitchenEager())
		if err != nil {
			t.Fatal(err)
		}
		got, ran, err := e.run(cl, true)
		if err != nil || ran != ascend.Name {
			t.Fatalf("ran %q, %v", ran, err)
		}
		checkFused(t, cl.name, cl.op, x, got, want)
		if q := must(got[0].Int8s()); q[0] != 127 || q[1] != -127 {
			t.Errorf("abs-max %g: q %v, want ±127 for it", worst*scale, q)
		}
	}
}

// TestLinearQuantizationSaturates runs int8_linear on rows whose
// quantization leaves the int8 range before saturation: a bfloat16 row of
// abs-max 1.328125, whose quotient a / t = 127.25 rounds to 127.5 in
// bfloat16 and then to 128, and a float16 row whose divisor is subnormal
// (a / t = 189). The weight picks each row's first element, so the output
// is q[0] times the scales: eager's, bit for bit (float32 out).
func TestLinearQuantizationSaturates(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct {
		dt dtype.DType
		v  []float32
	}{
		{dtype.BFloat16, []float32{1.328125, 0.5, -1.328125, 1}},
		{dtype.Float16, []float32{189 * tiny, 3 * tiny, -189 * tiny, 0}},
	} {
		l := layer{
			x:   must(tensor.FromFloat32(c.dt, c.v, 2, 2)),
			w:   must(tensor.FromInt8([]int8{1, 0}, 1, 2)),
			ws:  must(tensor.FromFloat32(dtype.Float32, []float32{1}, 1)),
			out: dtype.Float32,
		}
		want, _, err := e.linear(l, false, kitchen.UsingBackend("eager"))
		if err != nil {
			t.Fatal(err)
		}
		got, ran, err := e.linear(l, true)
		if err != nil || ran != ascend.Name {
			t.Fatalf("%v: ran %q, %v", l, ran, err)
		}
		if !bytes.Equal(must(got.Bytes()), must(want.Bytes())) {
			t.Errorf("%v: %v, want eager's %v", l, must(got.Float32s()), must(want.Float32s()))
		}
		if y := must(want.Float32s()); !(y[0] > 0 && y[1] < 0) {
			t.Errorf("%v: eager gives %v; the case is meant to saturate to 127 and -128", l, y)
		}
	}
}
