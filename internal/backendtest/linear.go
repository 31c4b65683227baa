package backendtest

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"testing"

	"github.com/gokitchen/kitchen/backend"
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/internal/golden"
	"github.com/gokitchen/kitchen/op"
	"github.com/gokitchen/kitchen/quant"
	"github.com/gokitchen/kitchen/tensor"
)

// The cases of mm_int8 and int8_linear. Their golden vectors are in
// testdata/golden/linear.json (tools/golden/gen_linear.py).

func init() {
	add(op.MMInt8, cases{
		golden: mmGolden,
		random: mmRandom,
		bad:    func(*env) []badCall { return mmBad() },
		paths:  mmPaths,
	})
	add(op.Int8Linear, cases{
		golden: linearGolden,
		random: linearRandom,
		bad:    func(*env) []badCall { return linearBad() },
		paths:  linearPaths,
	})
}

func mmCall(a, b *tensor.Tensor) Call {
	return newCall(op.MMInt8, fmt.Sprintf("%s of %v and %v", op.MMInt8, a, b),
		func(in []*tensor.Tensor) *op.MMInt8Args { return &op.MMInt8Args{A: in[0], B: in[1]} }, a, b)
}

func mmGolden(c *golden.Case) (Call, []output, bool) {
	if c.Op != op.MMInt8.Name() {
		return Call{}, nil, false
	}
	call := mmCall(hostTensor(dtype.Int8, c.A, c.AShape...), hostTensor(dtype.Int8, c.B, c.BShape...))
	call.Name = c.Name + ": " + call.Name
	return call, []output{{dtype.Int32, c.OutShape, c.Out}}, true
}

// mmRandom multiplies random int8 matrices, -128 included.
func mmRandom(g *gen) Call {
	size := g.size()
	m, k, n := 1+g.pick(9*size), 1+g.pick(300*size), 1+g.pick(20*size)
	return mmCall(hostTensor(dtype.Int8, g.int8s(m*k), m, k), hostTensor(dtype.Int8, g.int8s(k*n), k, n))
}

func mmBad() []badCall {
	a := must(tensor.FromInt8(make([]int8, 6), 2, 3))
	b := must(tensor.FromInt8(make([]int8, 12), 3, 4))
	return []badCall{
		{mmCall(nil, b), "a", backend.ErrNil, -1},
		{mmCall(a, nil), "b", backend.ErrNil, -1},
		{mmCall(floats(dtype.Float32, ramp(6), 2, 3), b), "a", backend.ErrDType, -1},
		{mmCall(a, floats(dtype.BFloat16, ramp(12), 3, 4)), "b", backend.ErrDType, -1},
		{mmCall(must(tensor.FromInt8(make([]int8, 6), 6)), b), "a", tensor.ErrShape, -1},
		{mmCall(a, must(tensor.FromInt8(make([]int8, 8), 2, 4))), "b", tensor.ErrShape, -1},
		{mmCall(must(tensor.FromInt8(nil, 0, 3)), b), "a", backend.ErrEmpty, -1},
		{mmCall(a, elsewhereTensor(dtype.Int8, 3, 4)), "b", backend.ErrDevice, -1},
		{mmCall(must(tensor.Zeros(dtype.Int8, 1, op.MaxK+1)), must(tensor.Zeros(dtype.Int8, op.MaxK+1, 1))), "a", tensor.ErrShape, -1},
	}
}

// mmPaths: a product large enough to be split, and the extremes: every
// product -128·-128 at the largest K, and mixed signs.
func mmPaths(t *testing.T, e *env, tl *tally) {
	g := splitGen(50, dtype.Float32)
	m, k, n := 64, 1024, 96
	e.match(t, tl, mmCall(hostTensor(dtype.Int8, g.int8s(m*k), m, k), hostTensor(dtype.Int8, g.int8s(k*n + 1)[1:], k, n)))
	neg := make([]byte, op.MaxK*2)
	for i := range neg {
		neg[i] = 0x80 // -128
	}
	a := hostTensor(dtype.Int8, neg[:op.MaxK], 1, op.MaxK)
	want := make([]byte, 8)
	for j := range 2 {
		// Column 0 is all -128: 2^31 overflows int32 to -2^31, as the
		// contract's exact sum wraps at K = 131,072; column 1 alternates.
		v := int32(-1 << 31)
		if j == 1 {
			v = 0
		}
		want[4*j], want[4*j+1], want[4*j+2], want[4*j+3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
	}
	b := make([]byte, op.MaxK*2)
	for p := range op.MaxK {
		b[2*p] = 0x80
		b[2*p+1] = []byte{0x80, 0x7f}[p%2]
	}
	bt := hostTensor(dtype.Int8, b, op.MaxK, 2)
	c := mmCall(a, bt)
	e.match(t, tl, c)
	// -128·-128·65536 + -128·127·65536 = 65536·128 = 2^23.
	want[4], want[5], want[6], want[7] = 0, 0, 0x80, 0
	e.expect(t, tl, c, []output{{dtype.Int32, []int{1, 2}, want}})
}

// linearCall is int8_linear with its parameters.
func linearCall(x, w, ws, bias *tensor.Tensor, out dtype.DType, group int, act string) Call {
	return newCall(op.Int8Linear, fmt.Sprintf("%s of %v by %v (scale %v, bias %v) to %v, group %d, act %q", op.Int8Linear, x, w, ws, bias, out, group, act),
		func(in []*tensor.Tensor) *op.LinearArgs {
			return &op.LinearArgs{X: in[0], Weight: in[1], WeightScale: in[2], Bias: in[3], OutDType: out, Group: group, InputAct: act}
		}, x, w, ws, bias)
}

func linearGolden(c *golden.Case) (Call, []output, bool) {
	if c.Op != op.Int8Linear.Name() {
		return Call{}, nil, false
	}
	x := hostTensor(c.DType, c.X, c.Shape...)
	w := hostTensor(dtype.Int8, c.Weight, c.WeightShape...)
	ws := hostTensor(c.WeightScaleDType, c.WeightScale, c.WeightScaleShape...)
	var bias *tensor.Tensor
	if len(c.BiasShape) > 0 {
		bias = hostTensor(c.BiasDType, c.Bias, c.BiasShape...)
	}
	call := linearCall(x, w, ws, bias, c.OutDType, c.Group, c.InputAct)
	call.Name = c.Name + ": " + call.Name
	return call, []output{{c.OutDType, c.OutShape, c.Out}}, true
}

// linearRandom is a random layer: x of g's dtype, any rank, with or
// without activation, rotation and bias, every scale form.
func linearRandom(g *gen) Call {
	group := []int{0, 0, 0, 4, 16}[g.pick(5)]
	size := g.size()
	k := 1 + g.pick(200*size)
	if group > 0 {
		k = group * (1 + g.pick(4*size))
	}
	act := []string{"", "", op.ActGeluTanh, op.ActSwiGLU}[g.pick(4)]
	kx := k
	if act == op.ActSwiGLU {
		kx = 2 * k
	}
	rows := 1 + g.pick(7*size)
	shape := [][]int{{kx}, {rows, kx}, {2, rows, kx}}[g.pick(3)]
	g.shape = shape
	x := hostTensor(g.dt, g.values(g.dt, tensor.Numel(shape), kx, true), shape...)
	n := 1 + g.pick(17*size)
	w := hostTensor(dtype.Int8, g.int8s(n*k), n, k)
	sshape := [][]int{{}, {1}, {n}, {n, 1}}[g.pick(4)]
	sv := make([]float32, tensor.Numel(sshape))
	for i := range sv {
		sv[i] = float32(math.Ldexp(1+float64(g.pick(100))/64, -g.pick(12)))
	}
	ws := floats(dtype.Floats()[g.pick(3)], sv, sshape...)
	var bias *tensor.Tensor
	if g.pick(2) == 0 {
		bias = floats(dtype.Floats()[g.pick(3)], ramp(n), n)
	}
	return linearCall(x, w, ws, bias, dtype.Floats()[g.pick(3)], group, act)
}

func linearBad() []badCall {
	x := floats(dtype.BFloat16, ramp(32), 2, 16)
	w := must(tensor.FromInt8(make([]int8, 3*16), 3, 16))
	ws := floats(dtype.Float32, []float32{0.5, 0.25, 1}, 3, 1)
	call := func(x, w, ws, bias *tensor.Tensor) Call { return linearCall(x, w, ws, bias, dtype.BFloat16, 0, "") }
	bad := []badCall{
		{call(nil, w, ws, nil), "x", backend.ErrNil, -1},
		{call(must(tensor.FromInt8(make([]int8, 32), 2, 16)), w, ws, nil), "x", backend.ErrDType, -1},
		{call(floats(dtype.Float32, []float32{1}, []int{}...), w, ws, nil), "x", tensor.ErrShape, -1},
		{call(floats(dtype.Float32, ramp(30), 2, 15), w, ws, nil), "x", tensor.ErrShape, -1},
		{call(x, nil, ws, nil), "weight", backend.ErrNil, -1},
		{call(x, floats(dtype.Float32, ramp(48), 3, 16), ws, nil), "weight", backend.ErrDType, -1},
		{call(x, must(tensor.FromInt8(make([]int8, 48), 48)), ws, nil), "weight", backend.ErrDType, -1},
		{call(x, w, nil, nil), "weight_scale", backend.ErrNil, -1},
		{call(x, w, floats(dtype.Float32, []float32{1, 2}), nil), "weight_scale", tensor.ErrShape, -1},
		{call(x, w, floats(dtype.Float32, []float32{1, 2, 3}, 1, 3), nil), "weight_scale", tensor.ErrShape, -1},
		{call(x, w, floats(dtype.Float32, []float32{1, 0, 3}), nil), "weight_scale", backend.ErrScale, -1},
		{call(x, w, floats(dtype.BFloat16, []float32{-1}), nil), "weight_scale", backend.ErrScale, -1},
		{call(x, w, floats(dtype.Float16, []float32{1e6}), nil), "weight_scale", backend.ErrScale, -1},
		{call(x, w, floats(dtype.Float32, []float32{float32(math.NaN())}), nil), "weight_scale", backend.ErrScale, -1},
		{call(x, w, must(tensor.FromInt8([]int8{1})), nil), "weight_scale", backend.ErrDType, -1},
		{call(x, w, ws, floats(dtype.Float32, ramp(2), 2)), "bias", tensor.ErrShape, -1},
		{call(x, w, ws, floats(dtype.Float32, ramp(3), 3, 1)), "bias", tensor.ErrShape, -1},
		{call(x, w, ws, must(tensor.FromInt8([]int8{1, 2, 3}))), "bias", backend.ErrDType, -1},
		{call(x, w, ws, elsewhereTensor(dtype.Float32, 3)), "bias", backend.ErrDevice, -1},
		{linearCall(x, w, ws, nil, dtype.Int8, 0, ""), "out_dtype", backend.ErrDType, -1},
		{linearCall(x, w, ws, nil, dtype.BFloat16, 8, ""), "group_size", backend.ErrOption, -1},
		{linearCall(x, w, ws, nil, dtype.BFloat16, 64, ""), "weight", tensor.ErrShape, -1},
		{linearCall(x, w, ws, nil, dtype.BFloat16, 0, "relu"), "input_act", backend.ErrOption, -1},
		{linearCall(x, w, ws, nil, dtype.BFloat16, 0, op.ActSwiGLU), "x", tensor.ErrShape, -1},
		{linearCall(floats(dtype.Float32, ramp(30), 2, 15), w, ws, nil, dtype.BFloat16, 0, op.ActSwiGLU), "x", tensor.ErrShape, -1},
	}
	// NaN or infinity in x, before or after the activation, names the row.
	for _, dt := range dtype.Floats() {
		v := ramp(3 * 16)
		v[2*16+5] = float32(math.Inf(-1))
		xb := floats(dt, v, 3, 16)
		bad = append(bad,
			badCall{call(xb, w, ws, nil), "x", backend.ErrNonFinite, 2},
			badCall{linearCall(xb, w, ws, nil, dtype.Float32, 16, ""), "x", backend.ErrNonFinite, 2},
			badCall{linearCall(floats(dt, v, 3, 16), w, ws, nil, dtype.Float16, 0, op.ActGeluTanh), "x", backend.ErrNonFinite, 2})
	}
	return bad
}

// linearPaths: a layer large enough to be split, with each option, and
// weight scales of every dtype (each must act as its value widened).
func linearPaths(t *testing.T, e *env, tl *tally) {
	g := splitGen(60, dtype.Float32)
	m, k, n := 64, 256, 80
	w := hostTensor(dtype.Int8, g.int8s(n*k), n, k)
	sv := make([]float32, n)
	for i := range sv {
		sv[i] = float32(i%9+1) * 1.3e-3
	}
	for i, dt := range dtype.Floats() {
		x := hostTensor(dt, rotatableSplitX(dt, uint64(70+i))[:m*2*k*dt.Size()], m, 2*k)
		xk, _ := x.Reshape(2*m, k)
		// More rows than the cpu backend's few-row path takes with any
		// kernel set (192 at most): the weight packed whole by the call.
		xm := hostTensor(dt, rotatableSplitX(dt, uint64(75+i))[:256*k*dt.Size()], 256, k)
		e.match(t, tl, linearCall(xm, w, floats(dtype.Float32, sv, n, 1), floats(dt, ramp(n), n), dtype.BFloat16, 0, ""))
		for j, sdt := range dtype.Floats() {
			ws := floats(sdt, sv, n, 1)
			bias := floats(dtype.Floats()[(i+j)%3], ramp(n), n)
			for _, c := range []Call{
				linearCall(xk, w, ws, nil, dtype.BFloat16, 0, ""),
				linearCall(xk, w, ws, bias, dtype.Float32, 64, op.ActGeluTanh),
				linearCall(x, w, ws, bias, dtype.Float16, 256, op.ActSwiGLU),
			} {
				e.match(t, tl, c)
			}
			wv := make([]float32, n)
			for r := range wv {
				wv[r] = sdt.Round(sv[r])
			}
			e.same(t, tl, linearCall(xk, w, ws, nil, dtype.Float32, 0, ""), linearCall(xk, w, floats(dtype.Float32, wv, n), nil, dtype.Float32, 0, ""))
		}
	}
	linearPreparedPaths(t, e, tl)
	linearWrapPath(t, e, tl)
}

// linearWrapPath: a row of x that quantizes to all -128 times a weight
// channel of -128 at K = op.MaxK sums to 2^31, which int32 wraps to -2^31;
// the epilogue must read it as 2^31 (quant.AccFloat), not give the
// output the wrong sign. The other channels (all 127) sum to -128·127·K.
// 33 channels: a whole block of a vector epilogue (16 or 32 channels) and
// a tail, so a kernel's conversion would be caught as well as Go's.
func linearWrapPath(t *testing.T, e *env, tl *tally) {
	const v = -1.328125 // exact in bfloat16
	xb := make([]float32, op.MaxK)
	for i := range xb {
		xb[i] = v
	}
	// The contract's row quantization, to check that x does give -128:
	// y = rT(-1.328125 / rT(1.328125/127)) is -127.5, which rounds to -128.
	bf := dtype.BFloat16
	xs := float32(-v) / 127
	if q := quant.RoundHalfEven(bf.Round(float32(v) / bf.Round(xs))); q != -128 {
		t.Fatalf("x quantizes to %d, want -128", q)
	}
	const n = 33
	w := make([]byte, n*op.MaxK)
	for i := range w {
		w[i] = 0x7f
		if i < op.MaxK {
			w[i] = 0x80
		}
	}
	sv := make([]float32, n)
	for i := range sv {
		sv[i] = 0.01
	}
	ws := floats(dtype.Float32, sv, n)
	c := float32(xs * 0.01)
	want := make([]byte, 4*n)
	binary.LittleEndian.PutUint32(want, math.Float32bits(float32(float32(1<<31)*c)))
	for j := 1; j < n; j++ {
		binary.LittleEndian.PutUint32(want[4*j:], math.Float32bits(float32(float32(-128*127*op.MaxK)*c)))
	}
	call := linearCall(floats(bf, xb, 1, op.MaxK), hostTensor(dtype.Int8, w, n, op.MaxK), ws, nil, dtype.Float32, 0, "")
	e.expect(t, tl, call, []output{{dtype.Float32, []int{1, n}, want}})
}

// How a prepared-weight case uses its op.PackedWeight.
const (
	packedTwice    = iota // made for the weight, the call run twice: the second reuses the backend's layout
	packedOther           // made for another tensor: op.ErrPacked
	packedReleased        // released before the call: op.ErrReleased
)

// packedLinearCall is int8_linear with a PackedWeight for its weight (as
// moved to the device), used as mode says. Run twice, the first call
// makes the backend's layout and the second, whose outputs count, reads
// it; the reference ignores it, so the two must agree byte for byte.
func packedLinearCall(x, w, ws, bias *tensor.Tensor, out dtype.DType, group int, act string, mode int) Call {
	var p *op.PackedWeight // set for each run, before the arguments are made
	c := newCall(op.Int8Linear, fmt.Sprintf("%s of %v by %v (scale %v, bias %v) to %v, group %d, act %q, prepared (mode %d)",
		op.Int8Linear, x, w, ws, bias, out, group, act, mode),
		func(in []*tensor.Tensor) *op.LinearArgs {
			return &op.LinearArgs{X: in[0], Weight: in[1], WeightScale: in[2], Bias: in[3], OutDType: out, Group: group, InputAct: act, Packed: p}
		}, x, w, ws, bias)
	run := c.run
	c.run = func(ctx context.Context, r *backend.Registry, name string, in, outs []*tensor.Tensor) (backend.Result, string, error) {
		p = op.NewPackedWeight(in[1])
		switch mode {
		case packedOther:
			p = op.NewPackedWeight(must(tensor.Zeros(dtype.Int8, in[1].Shape()...)))
		case packedReleased:
			p.Release()
		case packedTwice:
			res, ran, err := run(ctx, r, name, in, nil)
			if err != nil {
				return res, ran, err
			}
			for _, t := range res.Outputs() {
				t.Release()
			}
		}
		return run(ctx, r, name, in, outs)
	}
	return c
}

// linearPreparedPaths: a prepared weight gives the plain weight's bytes
// on every path a backend has (one row, a few, many; K odd and N not a
// multiple of any panel), reused from call to call, and one made for
// another weight, or released, is an error.
func linearPreparedPaths(t *testing.T, e *env, tl *tally) {
	g := splitGen(61, dtype.Float32)
	for _, s := range [][3]int{{1, 256, 80}, {3, 255, 33}, {17, 512, 50}, {40, 512, 50}, {130, 257, 70}} {
		m, k, n := s[0], s[1], s[2]
		w := hostTensor(dtype.Int8, g.int8s(n*k), n, k)
		sv := make([]float32, n)
		for i := range sv {
			sv[i] = float32(i%5+1) * 2.1e-3
		}
		ws := floats(dtype.Float32, sv, n)
		for i, dt := range dtype.Floats() {
			x := hostTensor(dt, rotatableSplitX(dt, uint64(80+i))[:m*k*dt.Size()], m, k)
			bias := floats(dtype.Floats()[i], ramp(n), n)
			e.match(t, tl, packedLinearCall(x, w, ws, nil, dt, 0, "", packedTwice))
			e.match(t, tl, packedLinearCall(x, w, ws, bias, dtype.BFloat16, 0, op.ActGeluTanh, packedTwice))
		}
	}
	x := floats(dtype.BFloat16, ramp(32), 2, 16)
	w := must(tensor.FromInt8(make([]int8, 3*16), 3, 16))
	ws := floats(dtype.Float32, []float32{0.5, 0.25, 1}, 3, 1)
	for _, b := range []badCall{
		{packedLinearCall(x, w, ws, nil, dtype.BFloat16, 0, "", packedOther), "weight", op.ErrPacked, -1},
		{packedLinearCall(x, w, ws, nil, dtype.BFloat16, 0, "", packedReleased), "weight", op.ErrReleased, -1},
	} {
		e.fails(t, tl, b)
	}
}
