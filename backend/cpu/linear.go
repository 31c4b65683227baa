package cpu

import (
	"context"
	"encoding/binary"
	"math"

	"github.com/gokitchen/kitchen/backend"
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/op"
	"github.com/gokitchen/kitchen/quant"
	"github.com/gokitchen/kitchen/tensor"
)

// The int8 linear operations: the activations are prepared row by row
// (activation, rotation, row-wise quantization) into an int8 matrix, then
// each output element is an exact int32 dot product of an activation row
// and a weight row, scaled back and stored by the epilogue in the same
// pass.

// dotInt8 is the exact int32 dot product of two int8 vectors of the same
// length (at most op.MaxK, so the sum cannot overflow).
func dotInt8(a, b []byte) int32 {
	b = b[:len(a)]
	var acc int32
	for i, x := range a {
		acc += int32(int8(x)) * int32(int8(b[i]))
	}
	return acc
}

func mmInt8(ctx context.Context, a *op.MMInt8Args) (op.MMInt8Result, error) {
	ab, err := a.A.Bytes()
	if err != nil {
		return op.MMInt8Result{}, err
	}
	bb, err := a.B.Bytes()
	if err != nil {
		return op.MMInt8Result{}, err
	}
	m, k, n := a.A.Dim(0), a.A.Dim(1), a.B.Dim(1)
	// Dot products want b's columns contiguous: transpose it once.
	bt := make([]byte, k*n)
	for p := range k {
		for j := range n {
			bt[j*k+p] = bb[p*n+j]
		}
	}
	out, err := tensor.Zeros(dtype.Int32, m, n)
	if err != nil {
		return op.MMInt8Result{}, err
	}
	w := &gemmBody{a: ab, w: bt, k: k, n: n}
	w.dst, _ = out.Bytes()
	if err := parallelFor(ctx, w, m*n, max(1, grainBytes/max(1, k))); err != nil {
		return op.MMInt8Result{}, err
	}
	return op.MMInt8Result{Out: out}, nil
}

// gemmBody computes output elements [lo, hi) of an int8 product with b
// transposed (w is [N, K]): int32 results when out is invalid, otherwise
// int8_linear's epilogue.
type gemmBody struct {
	a, w, dst []byte
	k, n      int
	// The epilogue: row scales (float32), weight scales (one, or n of wdt),
	// an optional bias, the output dtype.
	xs       []byte
	ws       []byte
	wdt      dtype.DType
	bias     []byte
	bdt      dtype.DType
	out      dtype.DType
	epilogue bool
}

func (g *gemmBody) run(lo, hi int) {
	for i := lo; i < hi; i++ {
		r, c := i/g.n, i%g.n
		acc := dotInt8(g.a[r*g.k:(r+1)*g.k], g.w[c*g.k:(c+1)*g.k])
		if !g.epilogue {
			binary.LittleEndian.PutUint32(g.dst[4*i:], uint32(acc))
			continue
		}
		si := 0
		if len(g.ws) > g.wdt.Size() {
			si = c
		}
		xs := math.Float32frombits(binary.LittleEndian.Uint32(g.xs[4*r:]))
		y := g.out.Round(quant.LinearOut(acc, xs, loadScale(g.wdt, g.ws, si)))
		if g.bias != nil {
			y = g.out.Round(y + g.out.Round(loadScale(g.bdt, g.bias, c)))
		}
		dtype.Store(g.dst, g.out, i, y)
	}
}

func int8Linear(ctx context.Context, a *op.LinearArgs) (op.Dequantized, error) {
	xb, err := a.X.Bytes()
	if err != nil {
		return op.Dequantized{}, err
	}
	wb, err := a.Weight.Bytes()
	if err != nil {
		return op.Dequantized{}, err
	}
	sb, err := a.WeightScale.Bytes()
	if err != nil {
		return op.Dequantized{}, err
	}
	var bb []byte
	if a.Bias != nil {
		if bb, err = a.Bias.Bytes(); err != nil {
			return op.Dequantized{}, err
		}
	}
	k, n := a.Weight.Dim(1), a.Weight.Dim(0)
	m := a.X.Numel() / a.X.Dim(-1)
	// 1. The activations, quantized row by row.
	p := &prepareBody{dt: a.X.DType(), src: xb, kx: a.X.Dim(-1), k: k, g: a.Group, act: a.InputAct,
		q: make([]byte, m*k), scales: make([]byte, 4*m)}
	p.bad.reset()
	if err := parallelFor(ctx, p, m, max(1, grainBytes/(k*p.dt.Size()))); err != nil {
		return op.Dequantized{}, err
	}
	if r := p.bad.get(); r >= 0 {
		return op.Dequantized{}, backend.NonFinite(op.Int8Linear.Name(), r)
	}
	// 2. The product and the epilogue, straight into the output.
	out, err := tensor.Zeros(a.OutDType, a.OutShape()...)
	if err != nil {
		return op.Dequantized{}, err
	}
	g := &gemmBody{a: p.q, w: wb, k: k, n: n, xs: p.scales, ws: sb, wdt: a.WeightScale.DType(),
		bias: bb, out: a.OutDType, epilogue: true}
	if a.Bias != nil {
		g.bdt = a.Bias.DType()
	}
	g.dst, _ = out.Bytes()
	if err := parallelFor(ctx, g, m*n, max(1, grainBytes/max(1, k))); err != nil {
		return op.Dequantized{}, err
	}
	return op.Dequantized{Out: out}, nil
}

// prepareBody turns rows of x into quantized activation rows: the input
// activation, the rotation, rounding to x's dtype, row-wise quantization.
type prepareBody struct {
	dt        dtype.DType
	src       []byte
	kx, k, g  int // x's row length, the layer's K, the ConvRot group (0: none)
	act       string
	q, scales []byte
	bad       firstIndex
}

func (w *prepareBody) run(lo, hi int) {
	buf := getRowBufs(w.kx, w.dt.Size())
	defer rowBufPool.Put(buf)
	for r := lo; r < hi; r++ {
		row := w.src[r*w.kx*w.dt.Size() : (r+1)*w.kx*w.dt.Size()]
		if w.act == "" && w.g == 0 {
			// Nothing to compute first: quantize x's row as it is.
			if quantizeRow(w.dt, row, w.q[r*w.k:(r+1)*w.k], w.scales[4*r:], 0, 0) {
				w.bad.report(r)
				return
			}
			continue
		}
		v := buf.f
		widenBlock(w.dt, w.src, r*w.kx, v)
		switch w.act {
		case op.ActGeluTanh:
			for j, x := range v {
				v[j] = w.dt.Round(quant.GeluTanh(x))
			}
		case op.ActSwiGLU:
			for j := range w.k {
				v[j] = w.dt.Round(w.dt.Round(quant.Silu(v[j])) * v[w.k+j])
			}
			v = v[:w.k]
		}
		if w.g > 0 {
			rotate(v, w.g)
		}
		b := buf.b[:w.k*w.dt.Size()]
		storeBlock(w.dt, b, 0, v)
		if quantizeRow(w.dt, b, w.q[r*w.k:(r+1)*w.k], w.scales[4*r:], 0, 0) {
			w.bad.report(r)
			return
		}
	}
}
