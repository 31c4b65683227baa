package backendtest

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/gokitchen/kitchen/backend"
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/internal/golden"
	"github.com/gokitchen/kitchen/op"
	"github.com/gokitchen/kitchen/tensor"
)

// The cases of dequantize_int8_simple and dequantize_int8_simple_dtype.
// The golden vectors are all of the _dtype form; _simple runs those with a
// float32 output.

func init() {
	for _, simple := range []bool{true, false} {
		var o backend.Operation = op.DequantizeDType
		if simple {
			o = op.Dequantize
		}
		add(o, cases{
			golden: func(c *golden.Case) (Call, []output, bool) { return dequantizeGolden(simple, c) },
			random: func(g *gen) Call { return dequantizeRandom(simple, g) },
			bad:    func(*env) []badCall { return dequantizeBad(simple) },
			paths:  func(t *testing.T, e *env, tl *tally) { dequantizePaths(simple, t, e, tl) },
		})
	}
}

// dequantizeCall is dequantize_int8_simple (simple, out ignored) or
// dequantize_int8_simple_dtype of q and scale.
func dequantizeCall(simple bool, q, scale *tensor.Tensor, out dtype.DType) Call {
	if simple {
		return newCall(op.Dequantize, fmt.Sprintf("%s of %v by %v", op.Dequantize, q, scale),
			func(in []*tensor.Tensor) *op.DequantizeArgs { return &op.DequantizeArgs{Q: in[0], Scale: in[1]} }, q, scale)
	}
	return newCall(op.DequantizeDType, fmt.Sprintf("%s of %v by %v to %v", op.DequantizeDType, q, scale, out),
		func(in []*tensor.Tensor) *op.DequantizeDTypeArgs {
			return &op.DequantizeDTypeArgs{DequantizeArgs: op.DequantizeArgs{Q: in[0], Scale: in[1]}, OutDType: out}
		}, q, scale)
}

func dequantizeGolden(simple bool, c *golden.Case) (Call, []output, bool) {
	if c.Op != op.DequantizeDType.Name() || simple && c.OutDType != dtype.Float32 {
		return Call{}, nil, false
	}
	if badScaleAt(c.ScaleDType, c.Scale) >= 0 {
		// A scale of zero (a float16 scale that underflowed): PyTorch
		// multiplies by it, kitchen refuses it (dequantizeBad's cases).
		return Call{}, nil, false
	}
	q := hostTensor(dtype.Int8, c.Q, c.QShape...)
	s := hostTensor(c.ScaleDType, c.Scale, c.ScaleShape...)
	call := dequantizeCall(simple, q, s, c.OutDType)
	call.Name = c.Name + ": " + call.Name
	return call, []output{{c.OutDType, c.QShape, c.Out}}, true
}

// scaleShapes are the scale shapes the contract allows for q of shape:
// one element (as a scalar and as [1]), one per row, and q's own.
func scaleShapes(shape []int) [][]int {
	row := append(append([]int(nil), shape[:len(shape)-1]...), 1)
	return [][]int{{}, {1}, row, shape}
}

// dequantizeRandom dequantizes random q by a scale of g's dtype and any
// allowed shape, with values of every kind. One case in four keeps them
// all, NaN, infinities, zeros and negative values included, which every
// backend must refuse alike (the first bad element); the others make each
// scale finite and > 0 (its magnitude, or 1), so that most cases compare
// outputs.
func dequantizeRandom(simple bool, g *gen) Call {
	sshape := scaleShapes(g.shape)[g.pick(4)]
	v := g.values(g.dt, tensor.Numel(sshape), 1, false)
	if g.pick(4) > 0 {
		v = positive(g.dt, v)
	}
	s := hostTensor(g.dt, v, sshape...)
	return dequantizeCall(simple, hostTensor(dtype.Int8, g.int8s(tensor.Numel(g.shape)), g.shape...), s, dtype.Floats()[g.pick(3)])
}

// positive replaces each element of dt in b by its magnitude, or by 1
// where that is not a finite number > 0.
func positive(dt dtype.DType, b []byte) []byte {
	for i := range len(b) / dt.Size() {
		v := float32(math.Abs(float64(dtype.Load(b, dt, i))))
		if !(v > 0 && v <= math.MaxFloat32) {
			v = 1
		}
		dtype.Store(b, dt, i, v)
	}
	return b
}

// badScaleAt returns the index of the first element of dt in b that is not
// a finite number > 0, or -1.
func badScaleAt(dt dtype.DType, b []byte) int {
	for i := range len(b) / dt.Size() {
		if v := dtype.Load(b, dt, i); !(v > 0 && v <= math.MaxFloat32) {
			return i
		}
	}
	return -1
}

func dequantizeBad(simple bool) []badCall {
	q := must(tensor.FromInt8([]int8{1, 2, 3, 4, 5, 6}, 2, 3))
	s1 := floats(dtype.Float32, []float32{0.5})
	call := func(q, s *tensor.Tensor) Call { return dequantizeCall(simple, q, s, dtype.BFloat16) }
	bad := []badCall{
		{call(nil, s1), "q", backend.ErrNil, -1},
		{call(&tensor.Tensor{}, s1), "q", backend.ErrNil, -1},
		{call(must(tensor.FromInt8(nil, 0, 3)), s1), "q", backend.ErrEmpty, -1},
		{call(floats(dtype.Float32, ramp(6), 2, 3), s1), "q", backend.ErrDType, -1},
		{call(must(tensor.Zeros(dtype.Uint8, 2, 3)), s1), "q", backend.ErrDType, -1},
		{call(q, nil), "scale", backend.ErrNil, -1},
		{call(q, &tensor.Tensor{}), "scale", backend.ErrNil, -1},
		{call(q, floats(dtype.Float32, nil)), "scale", backend.ErrEmpty, -1},
		{call(q, floats(dtype.Float32, []float32{1, 2})), "scale", tensor.ErrShape, -1},
		{call(q, floats(dtype.Float16, []float32{1, 2, 3}, 3, 1)), "scale", tensor.ErrShape, -1},
		{call(q, floats(dtype.BFloat16, ramp(6), 3, 2)), "scale", tensor.ErrShape, -1},
		{call(q, floats(dtype.Float32, []float32{1, 2}, 2, 1, 1)), "scale", tensor.ErrShape, -1},
		{call(q, floats(dtype.Float32, ramp(3), 3)), "scale", tensor.ErrShape, -1},
		{call(q, must(tensor.FromInt8([]int8{1}))), "scale", backend.ErrDType, -1},
		{call(q, must(tensor.Zeros(dtype.Int32, 2, 1))), "scale", backend.ErrDType, -1},
		{call(q, elsewhereTensor(dtype.Float32, 2, 1)), "scale", backend.ErrDevice, -1},
	}
	for _, c := range badScales(simple) {
		bad = append(bad, badCall{c.Call, "scale", backend.ErrScale, -1})
	}
	if !simple {
		bad = append(bad,
			badCall{dequantizeCall(false, q, s1, dtype.Int8), "out_dtype", backend.ErrDType, -1},
			badCall{dequantizeCall(false, q, s1, dtype.Int32), "out_dtype", backend.ErrDType, -1},
			badCall{dequantizeCall(false, q, s1, dtype.Invalid), "out_dtype", backend.ErrDType, -1},
		)
	}
	return bad
}

// badScale is a call with a scale that is not a finite number > 0, and
// the index of its first bad element.
type badScale struct {
	Call
	at int
}

// badScales are calls with a scale of every dtype and form that holds NaN,
// an infinity, zero, -0 or a negative value.
func badScales(simple bool) []badScale {
	q := must(tensor.FromInt8([]int8{1, 2, 3, 4, 5, 6}, 2, 3))
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	negZero := float32(math.Copysign(0, -1))
	var out []badScale
	for i, sdt := range dtype.Floats() {
		for _, c := range []struct {
			v     []float32
			shape []int
			at    int
		}{
			{[]float32{nan}, nil, 0},
			{[]float32{inf}, []int{1}, 0},
			{[]float32{-inf}, []int{1, 1}, 0},
			{[]float32{0}, nil, 0},
			{[]float32{negZero}, nil, 0},
			{[]float32{-0.5}, nil, 0},
			{[]float32{0.5, nan}, []int{2, 1}, 1},
			{[]float32{-1, 0}, []int{2, 1}, 0},
			{[]float32{0.5, 0.25, 1, 2, 0, 3}, []int{2, 3}, 4},
			{[]float32{0.5, 0.25, 1, 2, 3, -inf}, []int{2, 3}, 5},
		} {
			call := dequantizeCall(simple, q, floats(sdt, c.v, c.shape...), dtype.Floats()[(i+c.at)%3])
			call.Name += fmt.Sprintf(" (scale %v)", c.v)
			out = append(out, badScale{call, c.at})
		}
	}
	return out
}

// dequantizePaths: q split into parts with each form of scale, and scales
// of every float dtype, each of which must act as its values widened to
// float32 (a kernel that reads a float16 scale as bfloat16 fails).
func dequantizePaths(simple bool, t *testing.T, e *env, tl *tally) {
	g := splitGen(20, dtype.Float32)
	q := hostTensor(dtype.Int8, g.int8s(tensor.Numel(splitShape)), splitShape...)
	for i, sshape := range scaleShapes(splitShape)[1:] {
		for j, sdt := range dtype.Floats() {
			s := hostTensor(sdt, positive(sdt, g.values(sdt, tensor.Numel(sshape), 1, true)), sshape...)
			c := dequantizeCall(simple, q, s, dtype.Floats()[(i+j)%3])
			e.match(t, tl, c)
		}
	}
	// A bad scale is refused naming its first bad element, by every
	// backend alike, and a late one in a scale split into parts too.
	for _, c := range badScales(simple) {
		o := e.exec(t, c.Call, e.name, e.dev)
		tl.count(t, c.Call, o.declined, o.err)
		if want := fmt.Sprintf("element %d:", c.at); !o.declined && (o.err == nil || !strings.Contains(o.err.Error(), want)) {
			t.Errorf("%s: error %v, want one saying %q", c.Name, o.err, want)
		}
	}
	for i, sdt := range dtype.Floats() {
		for _, sshape := range scaleShapes(splitShape)[2:] {
			v := positive(sdt, g.values(sdt, tensor.Numel(sshape), 1, true))
			at := len(v)/sdt.Size() - 1 - i
			dtype.Store(v, sdt, at, []float32{0, float32(math.NaN()), -1}[i])
			c := dequantizeCall(simple, q, hostTensor(sdt, v, sshape...), dtype.Floats()[i])
			o := e.exec(t, c, e.name, e.dev)
			tl.count(t, c, o.declined, o.err)
			var ae *backend.ArgError
			if want := fmt.Sprintf("element %d:", at); !o.declined && (!errors.As(o.err, &ae) || !errors.Is(o.err, backend.ErrScale) || !strings.Contains(o.err.Error(), want)) {
				t.Errorf("%s with a bad scale element %d: error %v, want %v saying %q", c.Name, at, o.err, backend.ErrScale, want)
			}
		}
	}
	// A scalar q (there are no golden vectors of rank 0).
	for i, sdt := range dtype.Floats() {
		c := dequantizeCall(simple, must(tensor.FromInt8([]int8{-128}, []int{}...)), floats(sdt, []float32{0.3}, []int{}...), dtype.Floats()[(i+1)%3])
		e.match(t, tl, c)
	}
	g = &gen{raw: []byte("dequantize scales of every dtype, widened exactly"), shape: []int{5, 33}}
	q = hostTensor(dtype.Int8, g.int8s(5*33), g.shape...)
	for _, sshape := range scaleShapes(g.shape) {
		for i, sdt := range dtype.Floats() {
			s := hostTensor(sdt, positive(sdt, g.values(sdt, tensor.Numel(sshape), 1, true)), sshape...)
			wide := floats(dtype.Float32, must(s.Float32s()), sshape...)
			for j, out := range dtype.Floats() {
				if simple && j > 0 {
					break
				}
				c := dequantizeCall(simple, q, s, out)
				if (i+j)%2 == 0 {
					e.match(t, tl, c)
				}
				e.same(t, tl, c, dequantizeCall(simple, q, wide, out))
			}
		}
	}
}
