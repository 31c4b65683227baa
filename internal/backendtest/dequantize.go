package backendtest

import (
	"fmt"
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
// allowed shape, with values of every kind (NaN, infinities and negative
// scales included: dequantization does not check them).
func dequantizeRandom(simple bool, g *gen) Call {
	sshape := scaleShapes(g.shape)[g.pick(4)]
	s := hostTensor(g.dt, g.values(g.dt, tensor.Numel(sshape), 1, false), sshape...)
	return dequantizeCall(simple, hostTensor(dtype.Int8, g.int8s(tensor.Numel(g.shape)), g.shape...), s, dtype.Floats()[g.pick(3)])
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
	if !simple {
		bad = append(bad,
			badCall{dequantizeCall(false, q, s1, dtype.Int8), "out_dtype", backend.ErrDType, -1},
			badCall{dequantizeCall(false, q, s1, dtype.Int32), "out_dtype", backend.ErrDType, -1},
			badCall{dequantizeCall(false, q, s1, dtype.Invalid), "out_dtype", backend.ErrDType, -1},
		)
	}
	return bad
}

// dequantizePaths: q split into parts with each form of scale, and scales
// of every float dtype, each of which must act as its values widened to
// float32 (a kernel that reads a float16 scale as bfloat16 fails).
func dequantizePaths(simple bool, t *testing.T, e *env, tl *tally) {
	g := splitGen(20, dtype.Float32)
	q := hostTensor(dtype.Int8, g.int8s(tensor.Numel(splitShape)), splitShape...)
	for i, sshape := range scaleShapes(splitShape)[1:] {
		for j, sdt := range dtype.Floats() {
			s := hostTensor(sdt, g.values(sdt, tensor.Numel(sshape), 1, true), sshape...)
			c := dequantizeCall(simple, q, s, dtype.Floats()[(i+j)%3])
			e.match(t, tl, c)
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
			s := hostTensor(sdt, g.values(sdt, tensor.Numel(sshape), 1, true), sshape...)
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
