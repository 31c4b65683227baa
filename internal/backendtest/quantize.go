package backendtest

import (
	"encoding/binary"
	"fmt"
	"math"
	"testing"

	"github.com/gokitchen/kitchen/backend"
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/internal/golden"
	"github.com/gokitchen/kitchen/op"
	"github.com/gokitchen/kitchen/tensor"
)

// The cases of quantize_int8_rowwise and quantize_int8_tensorwise.

func init() {
	add(op.QuantizeRowwise, cases{
		golden:     func(c *golden.Case) (Call, []output, bool) { return quantizeGolden(op.QuantizeRowwise, c) },
		random:     func(g *gen) Call { return rowwiseCall(g.x(), g.seed) },
		stochastic: true,
		bad:        rowwiseBad,
		paths:      rowwisePaths,
	})
	add(op.QuantizeTensorwise, cases{
		golden:     func(c *golden.Case) (Call, []output, bool) { return quantizeGolden(op.QuantizeTensorwise, c) },
		random:     tensorwiseRandom,
		stochastic: true,
		bad:        tensorwiseBad,
		paths:      tensorwisePaths,
	})
}

func rowwiseCall(x *tensor.Tensor, seed int64) Call {
	return newCall(op.QuantizeRowwise, fmt.Sprintf("%s of %v, seed %d", op.QuantizeRowwise, x, seed),
		func(in []*tensor.Tensor) *op.RowwiseArgs { return &op.RowwiseArgs{X: in[0], Seed: seed} }, x)
}

// tensorwiseCall quantizes x with the scale tensor s, the scale value v,
// or (both nil) a recalculated scale.
func tensorwiseCall(x, s *tensor.Tensor, v *float32, seed int64) Call {
	how := "recalculated scale"
	switch {
	case s != nil && v != nil:
		how = fmt.Sprintf("scale %v and value %v", s, *v)
	case s != nil:
		how = fmt.Sprintf("scale %v", s)
	case v != nil:
		how = fmt.Sprintf("scale value %v", *v)
	}
	return newCall(op.QuantizeTensorwise, fmt.Sprintf("%s of %v, %s, seed %d", op.QuantizeTensorwise, x, how, seed),
		func(in []*tensor.Tensor) *op.TensorwiseArgs {
			return &op.TensorwiseArgs{X: in[0], Scale: in[1], ScaleValue: v, Seed: seed}
		}, x, s)
}

// quantizeGolden makes the call of a golden vector of o.
func quantizeGolden(o backend.Operation, c *golden.Case) (Call, []output, bool) {
	if c.Op != o.Name() {
		return Call{}, nil, false
	}
	x := hostTensor(c.DType, c.X, c.Shape...)
	want := []output{{dtype.Int8, c.Shape, c.Q}, {dtype.Float32, c.ScaleShape, c.Scale}}
	var call Call
	switch {
	case c.Op == op.QuantizeRowwise.Name():
		call = rowwiseCall(x, c.Seed)
	case c.ScaleMode == "value":
		call = tensorwiseCall(x, nil, &c.ScaleValue, c.Seed)
	case c.ScaleMode == "tensor":
		call = tensorwiseCall(x, floats(dtype.Float32, []float32{c.ScaleValue}), nil, c.Seed)
	default:
		call = tensorwiseCall(x, nil, nil, c.Seed)
	}
	call.Name = c.Name + ": " + call.Name
	return call, want, true
}

// tensorwiseRandom recalculates the scale, or supplies a value or a
// one-element tensor of any float dtype and shape.
func tensorwiseRandom(g *gen) Call {
	x := g.x()
	mode := g.pick(4)
	v := float32(math.Ldexp(1+float64(g.pick(7)), g.pick(40)-30))
	switch mode {
	case 2:
		return tensorwiseCall(x, nil, &v, g.seed)
	case 3:
		shape := [][]int{{}, {1}, {1, 1}}[g.pick(3)]
		return tensorwiseCall(x, floats(dtype.Floats()[g.pick(3)], []float32{v}, shape...), nil, g.seed)
	}
	return tensorwiseCall(x, nil, nil, g.seed)
}

// nonFinite is an input with one NaN or infinity at a known place, and
// the row the error must name.
type nonFinite struct {
	shape      []int
	index, row int
	bad        float32
}

func nonFiniteRows() []nonFinite {
	var out []nonFinite
	for _, b := range []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))} {
		out = append(out,
			nonFinite{[]int{5, 4}, 13, 3, b},
			nonFinite{[]int{2, 3, 4}, 1*12 + 1*4 + 2, 4, b},
			nonFinite{[]int{7}, 6, 0, b},
			nonFinite{[]int{1, 1}, 0, 0, b})
	}
	return out
}

// badX are the calls with a bad x, made by call.
func badX(call func(x *tensor.Tensor, seed int64) Call) []badCall {
	q := must(tensor.FromInt8([]int8{1, 2, 3, 4, 5, 6}, 2, 3))
	bad := []badCall{
		{call(nil, 0), "x", backend.ErrNil, -1},
		{call(&tensor.Tensor{}, 0), "x", backend.ErrNil, -1},
		{call(floats(dtype.Float32, nil, 0, 4), 0), "x", backend.ErrEmpty, -1},
		{call(floats(dtype.BFloat16, nil, 3, 0), 0), "x", backend.ErrEmpty, -1},
		{call(q, 0), "x", backend.ErrDType, -1},
		{call(must(tensor.Zeros(dtype.Int32, 2, 2)), 0), "x", backend.ErrDType, -1},
	}
	for _, dt := range dtype.Floats() {
		for i, nf := range nonFiniteRows() {
			v := ramp(tensor.Numel(nf.shape))
			v[nf.index] = nf.bad
			seed := int64(i % 2 * 9) // both rounding modes
			bad = append(bad, badCall{call(floats(dt, v, nf.shape...), seed), "x", backend.ErrNonFinite, nf.row})
		}
	}
	return bad
}

func rowwiseBad(*env) []badCall {
	return append(badX(rowwiseCall),
		badCall{rowwiseCall(floats(dtype.Float32, []float32{1}, []int{}...), 0), "x", tensor.ErrShape, -1})
}

func tensorwiseBad(*env) []badCall {
	x := floats(dtype.BFloat16, ramp(12), 3, 4)
	value := func(v float32) *float32 { return &v }
	scale := func(s *tensor.Tensor) Call { return tensorwiseCall(x, s, nil, 0) }
	bad := badX(func(x *tensor.Tensor, seed int64) Call { return tensorwiseCall(x, nil, nil, seed) })
	bad = append(bad,
		badCall{tensorwiseCall(x, nil, value(0), 0), "scale", backend.ErrScale, -1},
		badCall{tensorwiseCall(x, nil, value(float32(math.Copysign(0, -1))), 0), "scale", backend.ErrScale, -1},
		badCall{tensorwiseCall(x, nil, value(-1), 0), "scale", backend.ErrScale, -1},
		badCall{tensorwiseCall(x, nil, value(float32(math.NaN())), 0), "scale", backend.ErrScale, -1},
		badCall{tensorwiseCall(x, nil, value(float32(math.Inf(1))), 0), "scale", backend.ErrScale, -1},
		badCall{scale(floats(dtype.BFloat16, []float32{0})), "scale", backend.ErrScale, -1},
		badCall{scale(floats(dtype.Float32, []float32{-0.5})), "scale", backend.ErrScale, -1},
		badCall{scale(floats(dtype.Float16, []float32{1e6})), "scale", backend.ErrScale, -1}, // infinite in float16
		badCall{scale(floats(dtype.Float32, []float32{float32(math.NaN())}, 1, 1)), "scale", backend.ErrScale, -1},
		badCall{scale(floats(dtype.Float16, []float32{1e-9}, []int{}...)), "scale", backend.ErrScale, -1}, // zero in float16
		badCall{scale(floats(dtype.Float32, []float32{1, 2})), "scale", tensor.ErrShape, -1},
		badCall{scale(floats(dtype.Float32, nil)), "scale", backend.ErrEmpty, -1},
		badCall{scale(must(tensor.FromInt8([]int8{1}))), "scale", backend.ErrDType, -1},
		badCall{scale(&tensor.Tensor{}), "scale", backend.ErrNil, -1},
		badCall{scale(elsewhereTensor(dtype.Float32, 1)), "scale", backend.ErrDevice, -1},
		badCall{tensorwiseCall(x, floats(dtype.Float32, []float32{0.5}), value(1), 0), "scale", backend.ErrOption, -1},
	)
	// NaN is found whatever the scale's source.
	v := ramp(12)
	v[9] = float32(math.NaN())
	xn := floats(dtype.Float16, v, 3, 4)
	return append(bad,
		badCall{tensorwiseCall(xn, nil, value(0.1), 0), "x", backend.ErrNonFinite, 2},
		badCall{tensorwiseCall(xn, floats(dtype.BFloat16, []float32{0.1}), nil, 3), "x", backend.ErrNonFinite, 2},
	)
}

// splitX is an input of splitShape of finite adversarial values.
func splitX(dt dtype.DType, seed uint64) []byte {
	g := splitGen(seed, dt)
	return g.values(dt, tensor.Numel(g.shape), g.k(), true)
}

// lateNonFinite returns a copy of x with NaN in one element of a row in
// the last eighth of the tensor (the last part of a split call), and that
// row. A kernel that reports the row relative to its part, or stops
// looking after the first part, fails.
func lateNonFinite(dt dtype.DType, x []byte, shape []int) ([]byte, int) {
	b := append([]byte(nil), x...)
	rows, k := shape[0], shape[1]
	row := rows - 3
	dtype.Store(b, dt, row*k+k/3, float32(math.NaN()))
	return b, row
}

// rowwisePaths: inputs split into parts, in both rounding modes (a kernel
// that restarts the noise's element index in each part fails), and a NaN
// in a late part.
func rowwisePaths(t *testing.T, e *env, tl *tally) {
	for i, dt := range dtype.Floats() {
		x := splitX(dt, uint64(i))
		for _, seed := range []int64{0, 1<<40 + 12345} {
			c := rowwiseCall(hostTensor(dt, x, splitShape...), seed)
			e.match(t, tl, c)
		}
		bad, row := lateNonFinite(dt, x, splitShape)
		e.fails(t, tl, badCall{rowwiseCall(hostTensor(dt, bad, splitShape...), int64(i%2*5)), "x", backend.ErrNonFinite, row})
	}
}

// tensorwisePaths: inputs split into parts with a recalculated and a
// supplied scale, in both rounding modes; a NaN in a late part; and scale
// tensors of every float dtype and one-element shape (each must act as its
// value widened to float32).
func tensorwisePaths(t *testing.T, e *env, tl *tally) {
	for i, dt := range dtype.Floats() {
		x := splitX(dt, uint64(10+i))
		s := float32(0.37)
		for _, c := range []Call{
			tensorwiseCall(hostTensor(dt, x, splitShape...), nil, nil, 0),
			tensorwiseCall(hostTensor(dt, x, splitShape...), nil, nil, 1<<33+7),
			tensorwiseCall(hostTensor(dt, x, splitShape...), nil, &s, 99),
		} {
			e.match(t, tl, c)
		}
		bad, row := lateNonFinite(dt, x, splitShape)
		e.fails(t, tl, badCall{tensorwiseCall(hostTensor(dt, bad, splitShape...), nil, nil, int64(i%2*5)), "x", backend.ErrNonFinite, row})
		e.fails(t, tl, badCall{tensorwiseCall(hostTensor(dt, bad, splitShape...), nil, &s, 0), "x", backend.ErrNonFinite, row})
	}
	// A scalar x (there are no golden vectors of rank 0).
	for _, dt := range dtype.Floats() {
		x := floats(dt, []float32{-2.5}, []int{}...)
		scale := binary.LittleEndian.AppendUint32(nil, math.Float32bits(float32(2.5)/127))
		e.expect(t, tl, tensorwiseCall(x, nil, nil, 0), []output{{dtype.Int8, []int{}, []byte{0x81}}, {dtype.Float32, []int{}, scale}})
		for _, seed := range []int64{0, 3} {
			c := tensorwiseCall(x, floats(dt, []float32{0.3}, []int{}...), nil, seed)
			e.match(t, tl, c)
		}
	}
	g := &gen{raw: []byte("tensor-wise scales of every dtype"), shape: []int{4, 33}}
	for _, dt := range dtype.Floats() {
		x := hostTensor(dt, g.values(dt, 4*33, 33, true), 4, 33)
		for j, sdt := range dtype.Floats() {
			for _, v := range []float32{0.0123, 3.5e-3, 0.75} {
				shape := [][]int{{}, {1}, {1, 1}}[j]
				st := floats(sdt, []float32{v}, shape...)
				w := sdt.Round(v) // the scale's value, widened exactly
				seed := int64(j % 2 * 17)
				c := tensorwiseCall(x, st, nil, seed)
				e.match(t, tl, c)
				e.same(t, tl, c, tensorwiseCall(x, nil, &w, seed))
			}
		}
	}
}

// elsewhere is a device other than the one under test, for the
// wrong-device cases. It holds no memory; the calls fail before any is
// read.
type elsewhere struct{}

func (elsewhere) Type() string   { return "elsewhere" }
func (elsewhere) String() string { return "elsewhere" }
func (elsewhere) Alloc(dtype.DType, []int) (*tensor.Tensor, error) {
	return nil, fmt.Errorf("backendtest: elsewhere holds no memory")
}
func (elsewhere) Release(*tensor.Tensor) {}
func (elsewhere) CopyFromHost(*tensor.Tensor, []byte) error {
	return fmt.Errorf("backendtest: elsewhere holds no memory")
}
func (elsewhere) CopyToHost([]byte, *tensor.Tensor) error {
	return fmt.Errorf("backendtest: elsewhere holds no memory")
}

func elsewhereTensor(dt dtype.DType, shape ...int) *tensor.Tensor {
	return must(tensor.New(elsewhere{}, dt, shape, nil))
}
