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

// The cases of the ConvRot operations (quantize_int8_convrot_weight,
// quantize_and_rotate_rowwise, dequantize_int8_convrot_weight[_dtype]) and
// dequantize_int8_embedding. Their golden vectors are in
// testdata/golden/convrot.json (tools/golden/gen_convrot.py): PyTorch's
// results with the rotation as a matrix product, and the results in the
// contract's summation order (the "butterfly" fields), computed by the
// script on its own. Backends must give the latter exactly;
// internal/golden's TestConvRotWithinContract checks that they are within
// the contract's bound of the former.

// convRotGolden makes the call of a ConvRot golden vector of o and the
// outputs in the contract's summation order.
func convRotGolden(o backend.Operation) func(c *golden.Case) (Call, []output, bool) {
	return func(c *golden.Case) (Call, []output, bool) {
		if c.Op != o.Name() {
			return Call{}, nil, false
		}
		var call Call
		var want []output
		switch o.Name() {
		case op.QuantizeConvRotWeight.Name(), op.QuantizeAndRotateRowwise.Name():
			x := hostTensor(c.DType, c.X, c.Shape...)
			call = convRotQuantizeCall(o.Name() == op.QuantizeConvRotWeight.Name(), x, c.Group, c.Seed)
			want = []output{{dtype.Int8, c.Shape, c.QButterfly}, {dtype.Float32, c.ScaleShape, c.ScaleButterfly}}
		case op.DequantizeEmbedding.Name():
			q := hostTensor(dtype.Int8, c.Q, c.QShape...)
			s := hostTensor(c.ScaleDType, c.Scale, c.ScaleShape...)
			idx := hostTensor(c.IndicesDType, c.Indices, c.IndicesShape...)
			call = embeddingCall(q, s, idx, c.Group, c.OutDType)
			want = []output{{c.OutDType, c.OutShape, c.OutButterfly}}
		default:
			simple := o.Name() == op.DequantizeConvRotWeight.Name()
			q := hostTensor(dtype.Int8, c.Q, c.QShape...)
			s := hostTensor(c.ScaleDType, c.Scale, c.ScaleShape...)
			call = convRotDequantizeCall(simple, q, s, c.Group, c.OutDType)
			want = []output{{c.OutDType, c.OutShape, c.OutButterfly}}
		}
		call.Name = c.Name + ": " + call.Name
		return call, want, true
	}
}

func init() {
	add(op.QuantizeConvRotWeight, cases{
		golden:     convRotGolden(op.QuantizeConvRotWeight),
		random:     func(g *gen) Call { return convRotQuantizeCall(true, rotatableX(g, true), g.group, g.seed) },
		stochastic: true,
		bad:        func(*env) []badCall { return convRotQuantizeBad(true) },
		paths:      func(t *testing.T, e *env, tl *tally) { convRotQuantizePaths(true, t, e, tl) },
	})
	add(op.QuantizeAndRotateRowwise, cases{
		golden:     convRotGolden(op.QuantizeAndRotateRowwise),
		random:     func(g *gen) Call { return convRotQuantizeCall(false, rotatableX(g, false), g.group, g.seed) },
		stochastic: true,
		bad:        func(*env) []badCall { return convRotQuantizeBad(false) },
		paths:      func(t *testing.T, e *env, tl *tally) { convRotQuantizePaths(false, t, e, tl) },
	})
	for _, simple := range []bool{true, false} {
		var o backend.Operation = op.DequantizeConvRotWeightDType
		if simple {
			o = op.DequantizeConvRotWeight
		}
		add(o, cases{
			golden: convRotGolden(o),
			random: func(g *gen) Call { return convRotDequantizeRandom(simple, g) },
			bad:    func(*env) []badCall { return convRotDequantizeBad(simple) },
			paths:  func(t *testing.T, e *env, tl *tally) { convRotDequantizePaths(simple, t, e, tl) },
		})
	}
	add(op.DequantizeEmbedding, cases{
		golden: convRotGolden(op.DequantizeEmbedding),
		random: embeddingRandom,
		bad:    func(*env) []badCall { return embeddingBad() },
		paths:  embeddingPaths,
	})
}

// groups are the group sizes random cases use, with their weights: small
// groups are cheap and exercise every stage count up to 256.
var groups = []int{4, 4, 16, 16, 64, 256}

// rotatableX reshapes the case to rows whose length is a multiple of a
// group size (which it sets in g.group): 2-D for a weight, any rank
// otherwise.
func rotatableX(g *gen, weight bool) *tensor.Tensor {
	g.group = groups[g.pick(len(groups))]
	rows := 1
	for _, d := range g.shape[:len(g.shape)-1] {
		rows *= d
	}
	k := g.group * (1 + g.pick(3))
	switch {
	case weight || len(g.shape) == 2:
		g.shape = []int{rows, k}
	case len(g.shape) == 1:
		g.shape = []int{k}
	default:
		g.shape = []int{g.shape[0], rows / g.shape[0], k}
	}
	return g.x()
}

func convRotQuantizeCall(weight bool, x *tensor.Tensor, group int, seed int64) Call {
	if weight {
		return newCall(op.QuantizeConvRotWeight, fmt.Sprintf("%s of %v, group %d, seed %d", op.QuantizeConvRotWeight, x, group, seed),
			func(in []*tensor.Tensor) *op.ConvRotWeightArgs {
				return &op.ConvRotWeightArgs{Weight: in[0], Group: group, Seed: seed}
			}, x)
	}
	return newCall(op.QuantizeAndRotateRowwise, fmt.Sprintf("%s of %v, group %d, seed %d", op.QuantizeAndRotateRowwise, x, group, seed),
		func(in []*tensor.Tensor) *op.RotateRowwiseArgs {
			return &op.RotateRowwiseArgs{X: in[0], Group: group, Seed: seed}
		}, x)
}

func convRotQuantizeBad(weight bool) []badCall {
	param := "x"
	if weight {
		param = "weight"
	}
	call := func(x *tensor.Tensor, g int, seed int64) Call { return convRotQuantizeCall(weight, x, g, seed) }
	x := floats(dtype.BFloat16, ramp(32), 2, 16)
	bad := []badCall{
		{call(nil, 16, 0), param, backend.ErrNil, -1},
		{call(&tensor.Tensor{}, 16, 0), param, backend.ErrNil, -1},
		{call(floats(dtype.Float32, nil, 0, 16), 16, 0), param, backend.ErrEmpty, -1},
		{call(must(tensor.FromInt8(make([]int8, 32), 2, 16)), 16, 0), param, backend.ErrDType, -1},
		{call(floats(dtype.Float16, ramp(24), 2, 12), 16, 0), param, tensor.ErrShape, -1}, // K not a multiple of G
		{call(floats(dtype.Float32, []float32{1}, []int{}...), 4, 0), param, tensor.ErrShape, -1},
	}
	for _, g := range []int{0, 1, 2, 8, 32, -4, 12} {
		bad = append(bad, badCall{call(x, g, 0), "group_size", backend.ErrOption, -1})
	}
	if weight {
		bad = append(bad,
			badCall{call(floats(dtype.Float32, ramp(16), 16), 16, 0), param, tensor.ErrShape, -1},
			badCall{call(floats(dtype.Float32, ramp(64), 2, 2, 16), 16, 0), param, tensor.ErrShape, -1})
	}
	// NaN or infinity anywhere in a row makes every rotated value of its
	// group non-finite: the row is named.
	for _, dt := range dtype.Floats() {
		for i, b := range []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))} {
			v := ramp(5 * 16)
			v[3*16+i+5] = b
			bad = append(bad, badCall{call(floats(dt, v, 5, 16), 4, int64(i%2*7)), param, backend.ErrNonFinite, 3})
		}
	}
	// Finite float16 values whose rotation overflows float16: H_4 maps
	// (a, a, a, -a) to (2a, 0, 0, 0).
	v := make([]float32, 2*16)
	copy(v[16:], []float32{60000, 60000, 60000, -60000})
	return append(bad, badCall{call(floats(dtype.Float16, v, 2, 16), 4, 0), param, backend.ErrNonFinite, 1})
}

// convRotQuantizePaths: inputs split into parts for every group size, in
// both rounding modes, and a NaN in a late part.
func convRotQuantizePaths(weight bool, t *testing.T, e *env, tl *tally) {
	for i, dt := range dtype.Floats() {
		x := rotatableSplitX(dt, uint64(20+i))
		for j, g := range []int{4, 16, 64, 256} {
			seed := int64(j%2) * (1<<40 + 99)
			e.match(t, tl, convRotQuantizeCall(weight, hostTensor(dt, x, splitShape...), g, seed))
		}
		bad, row := lateNonFinite(dt, x, splitShape)
		e.fails(t, tl, badCall{convRotQuantizeCall(weight, hostTensor(dt, bad, splitShape...), 256, int64(i%2*5)),
			map[bool]string{true: "weight", false: "x"}[weight], backend.ErrNonFinite, row})
	}
	if !weight {
		g := &gen{raw: []byte("3-D activations"), shape: []int{3, 5, 64}}
		for _, dt := range dtype.Floats() {
			e.match(t, tl, convRotQuantizeCall(false, hostTensor(dt, g.values(dt, 3*5*64, 64, true), 3, 5, 64), 16, 0))
		}
	}
}

// rotatableSplitX is splitX with magnitudes capped at 1000, so that no
// rotation overflows even float16 (|rotate(x)| <= sqrt(G) * max|x|).
func rotatableSplitX(dt dtype.DType, seed uint64) []byte {
	x := splitX(dt, seed)
	for i := range len(x) / dt.Size() {
		if v := dtype.Load(x, dt, i); v > 1000 || v < -1000 {
			dtype.Store(x, dt, i, float32(math.Copysign(1000, float64(v))))
		}
	}
	return x
}

func convRotDequantizeCall(simple bool, q, scale *tensor.Tensor, group int, out dtype.DType) Call {
	if simple {
		return newCall(op.DequantizeConvRotWeight, fmt.Sprintf("%s of %v by %v, group %d", op.DequantizeConvRotWeight, q, scale, group),
			func(in []*tensor.Tensor) *op.ConvRotDequantizeArgs {
				return &op.ConvRotDequantizeArgs{DequantizeArgs: op.DequantizeArgs{Q: in[0], Scale: in[1]}, Group: group}
			}, q, scale)
	}
	return newCall(op.DequantizeConvRotWeightDType, fmt.Sprintf("%s of %v by %v, group %d, to %v", op.DequantizeConvRotWeightDType, q, scale, group, out),
		func(in []*tensor.Tensor) *op.ConvRotDequantizeDTypeArgs {
			return &op.ConvRotDequantizeDTypeArgs{ConvRotDequantizeArgs: op.ConvRotDequantizeArgs{DequantizeArgs: op.DequantizeArgs{Q: in[0], Scale: in[1]}, Group: group}, OutDType: out}
		}, q, scale)
}

// convRotDequantizeRandom dequantizes random q [N, K] by a scale of g's
// dtype and any allowed shape, finite or not.
func convRotDequantizeRandom(simple bool, g *gen) Call {
	g.group = groups[g.pick(len(groups))]
	rows := 1 + g.pick(9)
	shape := []int{rows, g.group * (1 + g.pick(3))}
	g.shape = shape
	sshape := scaleShapes(shape)[g.pick(4)]
	s := hostTensor(g.dt, g.values(g.dt, tensor.Numel(sshape), 1, g.pick(4) == 0), sshape...)
	return convRotDequantizeCall(simple, hostTensor(dtype.Int8, g.int8s(tensor.Numel(shape)), shape...), s, g.group, dtype.Floats()[g.pick(3)])
}

func convRotDequantizeBad(simple bool) []badCall {
	q := must(tensor.FromInt8(make([]int8, 32), 2, 16))
	s := floats(dtype.Float32, []float32{0.5, 0.25}, 2, 1)
	call := func(q, s *tensor.Tensor, g int, out dtype.DType) Call {
		return convRotDequantizeCall(simple, q, s, g, out)
	}
	bad := []badCall{
		{call(nil, s, 16, dtype.BFloat16), "q", backend.ErrNil, -1},
		{call(floats(dtype.Float32, ramp(32), 2, 16), s, 16, dtype.BFloat16), "q", backend.ErrDType, -1},
		{call(must(tensor.FromInt8(make([]int8, 32), 32)), floats(dtype.Float32, []float32{1}), 16, dtype.BFloat16), "q", tensor.ErrShape, -1},
		{call(must(tensor.FromInt8(make([]int8, 24), 2, 12)), s, 16, dtype.BFloat16), "q", tensor.ErrShape, -1},
		{call(q, nil, 16, dtype.BFloat16), "scale", backend.ErrNil, -1},
		{call(q, floats(dtype.Float32, []float32{1, 2, 3}, 3, 1), 16, dtype.BFloat16), "scale", tensor.ErrShape, -1},
		{call(q, must(tensor.FromInt8([]int8{1})), 16, dtype.BFloat16), "scale", backend.ErrDType, -1},
		{call(q, s, 8, dtype.BFloat16), "group_size", backend.ErrOption, -1},
		{call(q, s, 0, dtype.BFloat16), "group_size", backend.ErrOption, -1},
	}
	if !simple {
		bad = append(bad, badCall{call(q, s, 16, dtype.Int8), "out_dtype", backend.ErrDType, -1})
	}
	return bad
}

// convRotDequantizePaths: split inputs for every group size with per-row
// scales of every dtype (each must act as its value widened to float32),
// and one and full-shape scales.
func convRotDequantizePaths(simple bool, t *testing.T, e *env, tl *tally) {
	g := splitGen(30, dtype.Float32)
	n := tensor.Numel(splitShape)
	q := hostTensor(dtype.Int8, g.int8s(n), splitShape...)
	rows := splitShape[0]
	for j, sdt := range dtype.Floats() {
		v := make([]float32, rows)
		for r := range v {
			v[r] = float32(r%13+1) * 3.7e-3
		}
		s := floats(sdt, v, rows, 1)
		w := make([]float32, rows)
		for r := range w {
			w[r] = sdt.Round(v[r])
		}
		for _, grp := range []int{4, 16, 64, 256} {
			out := dtype.Floats()[(j+grp)%3]
			c := convRotDequantizeCall(simple, q, s, grp, out)
			e.match(t, tl, c)
			if sdt != dtype.Float32 {
				e.same(t, tl, c, convRotDequantizeCall(simple, q, floats(dtype.Float32, w, rows, 1), grp, out))
			}
		}
	}
	for _, s := range []*tensor.Tensor{floats(dtype.BFloat16, []float32{0.02}), hostTensor(dtype.Float16, g.values(dtype.Float16, n, 1, true), splitShape...)} {
		e.match(t, tl, convRotDequantizeCall(simple, q, s, 64, dtype.BFloat16))
	}
}

func embeddingCall(q, scale, indices *tensor.Tensor, group int, out dtype.DType) Call {
	return newCall(op.DequantizeEmbedding, fmt.Sprintf("%s of %v by %v at %v, group %d, to %v", op.DequantizeEmbedding, q, scale, indices, group, out),
		func(in []*tensor.Tensor) *op.EmbeddingArgs {
			return &op.EmbeddingArgs{Q: in[0], Scale: in[1], Indices: in[2], Group: group, OutDType: out}
		}, q, scale, indices)
}

// IndexTensor makes an int32 or int64 index tensor of the values v, of
// the shape given (default: [len(v)]), for the embedding operations.
func IndexTensor(dt dtype.DType, v []int64, shape ...int) *tensor.Tensor {
	b := make([]byte, len(v)*dt.Size())
	for i, x := range v {
		if dt == dtype.Int32 {
			binary.LittleEndian.PutUint32(b[4*i:], uint32(int32(x)))
		} else {
			binary.LittleEndian.PutUint64(b[8*i:], uint64(x))
		}
	}
	if shape == nil {
		shape = []int{len(v)}
	}
	return must(tensor.FromBytes(dt, b, shape...))
}

// embeddingRandom looks up random rows (repeats included) of a random
// table, rotated or not, with one scale or one per row.
func embeddingRandom(g *gen) Call {
	v := 1 + g.pick(20)
	group := []int{0, 0, 4, 16, 64}[g.pick(5)]
	d := 1 + g.pick(40)
	if group > 0 {
		d = group * (1 + g.pick(2))
	}
	q := hostTensor(dtype.Int8, g.int8s(v*d), v, d)
	sshape := [][]int{{}, {1}, {v, 1}}[g.pick(3)]
	s := hostTensor(g.dt, g.values(g.dt, tensor.Numel(sshape), 1, true), sshape...)
	n := 1 + g.pick(12)
	idx := make([]int64, n)
	for i := range idx {
		idx[i] = int64(g.pick(v))
	}
	ishape := [][]int{{n}, {1, n}, {n, 1}}[g.pick(3)]
	return embeddingCall(q, s, IndexTensor([]dtype.DType{dtype.Int32, dtype.Int64}[g.pick(2)], idx, ishape...), group, dtype.Floats()[g.pick(3)])
}

func embeddingBad() []badCall {
	q := must(tensor.FromInt8(make([]int8, 3*16), 3, 16))
	s := floats(dtype.Float32, []float32{0.5, 0.25, 1}, 3, 1)
	i32 := func(v ...int64) *tensor.Tensor { return IndexTensor(dtype.Int32, v) }
	call := func(q, s, idx *tensor.Tensor, g int, out dtype.DType) Call { return embeddingCall(q, s, idx, g, out) }
	return []badCall{
		{call(nil, s, i32(0), 0, dtype.Float32), "q", backend.ErrNil, -1},
		{call(floats(dtype.Float32, ramp(48), 3, 16), s, i32(0), 0, dtype.Float32), "q", backend.ErrDType, -1},
		{call(must(tensor.FromInt8(make([]int8, 48), 48)), s, i32(0), 0, dtype.Float32), "q", backend.ErrDType, -1},
		{call(q, nil, i32(0), 0, dtype.Float32), "scale", backend.ErrNil, -1},
		{call(q, floats(dtype.Float32, ramp(48), 3, 16), i32(0), 0, dtype.Float32), "scale", tensor.ErrShape, -1},
		{call(q, floats(dtype.Float32, []float32{1, 2}, 2, 1), i32(0), 0, dtype.Float32), "scale", tensor.ErrShape, -1},
		{call(q, s, nil, 0, dtype.Float32), "indices", backend.ErrNil, -1},
		{call(q, s, floats(dtype.Float32, []float32{0}), 0, dtype.Float32), "indices", backend.ErrDType, -1},
		{call(q, s, must(tensor.FromInt8([]int8{0}, 1)), 0, dtype.Float32), "indices", backend.ErrDType, -1},
		{call(q, s, i32(0), 8, dtype.Float32), "group_size", backend.ErrOption, -1},
		{call(q, s, i32(0), 64, dtype.Float32), "q", tensor.ErrShape, -1},
		{call(q, s, i32(0), 0, dtype.Int8), "out_dtype", backend.ErrDType, -1},
		{call(q, s, i32(0, 1, 3), 0, dtype.Float32), "indices", op.ErrIndex, -1},
		{call(q, s, i32(2, -1), 16, dtype.BFloat16), "indices", op.ErrIndex, -1},
		{call(q, s, IndexTensor(dtype.Int64, []int64{1, 1 << 40}), 0, dtype.Float16), "indices", op.ErrIndex, -1},
	}
}

// embeddingPaths: many lookups (split into parts), a bad index in a late
// part, and per-row scales of every dtype.
func embeddingPaths(t *testing.T, e *env, tl *tally) {
	g := splitGen(40, dtype.Float32)
	v, d := 300, 256
	q := hostTensor(dtype.Int8, g.int8s(v*d), v, d)
	n := 4096
	idx := make([]int64, n)
	for i := range idx {
		idx[i] = int64((i * 7919) % v)
	}
	for j, sdt := range dtype.Floats() {
		s := hostTensor(sdt, g.values(sdt, v, 1, true), v, 1)
		for _, grp := range []int{0, 64, 256} {
			e.match(t, tl, embeddingCall(q, s, IndexTensor([]dtype.DType{dtype.Int32, dtype.Int64}[j%2], idx, 64, 64), grp, dtype.Floats()[j]))
		}
	}
	bad := append([]int64(nil), idx...)
	bad[n-5] = int64(v)
	e.fails(t, tl, badCall{embeddingCall(q, floats(dtype.Float32, []float32{0.01}), IndexTensor(dtype.Int64, bad), 16, dtype.BFloat16), "indices", op.ErrIndex, -1})
}
