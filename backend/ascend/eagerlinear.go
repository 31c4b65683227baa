package ascend

import (
	"fmt"
	"math"

	"github.com/gokitchen/kitchen/backend"
	"github.com/gokitchen/kitchen/backend/eager"
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/op"
	"github.com/gokitchen/kitchen/tensor"
)

// The eager.LinearPrimitives of the NPU, so that eager runs mm_int8 and
// int8_linear on it, and with them what the fused int8_linear declines
// (input activations, ConvRot, K beyond 65,535) and mm_int8's N beyond
// 65,535. Nothing is copied between host and device.

var _ eager.LinearPrimitives = (*Device)(nil)

// Activate applies int8_linear's input activation to the rows of x,
// rounding each result once to out (and swiglu's gate to out before the
// product): quant.GeluTanh and quant.Silu evaluated in float64 on the
// device (geluTanh, silu), each operation the one Go makes, then rounded to
// float32 and to out.
func (d *Device) Activate(x *tensor.Tensor, act string, out dtype.DType) (*tensor.Tensor, error) {
	return do(d, func(s *session) (*tensor.Tensor, error) { return s.activate(x, act, out) })
}

func (s *session) activate(x *tensor.Tensor, act string, outDT dtype.DType) (*tensor.Tensor, error) {
	if x.Rank() == 0 {
		return nil, fmt.Errorf("ascend: activation of %v: %w", x, tensor.ErrShape)
	}
	shape, k := x.Shape(), x.Dim(-1)
	rows := 0
	if k > 0 {
		rows = x.Numel() / k
	}
	switch act {
	case op.ActGeluTanh:
		out, o, err := s.result(outDT, shape)
		if err != nil || rows*k == 0 {
			return out, err
		}
		xa, err := s.of(x, rows, k)
		if err != nil {
			return nil, err
		}
		return out, s.geluTanh(xa, o.as(rows, k))
	case op.ActSwiGLU:
		if k%2 != 0 {
			return nil, fmt.Errorf("ascend: swiglu of %v: %w: the last dimension is not even", x, tensor.ErrShape)
		}
		h := k / 2
		shape[len(shape)-1] = h
		out, o, err := s.result(outDT, shape)
		if err != nil || rows*h == 0 {
			return out, err
		}
		xa, err := s.of(x, rows, k)
		if err != nil {
			return nil, err
		}
		// x = [gate | up] along the last dimension: two strided views.
		half := []int64{int64(rows), int64(h)}
		strides := []int64{int64(k), 1}
		gate, up := xa.view(0, half, strides), xa.view(int64(h), half, strides)
		g, err := s.temp(aclType(outDT), rows*h)
		if err != nil {
			return nil, err
		}
		g = g.as(rows, h)
		if err := s.silu(gate, g); err != nil {
			return nil, err
		}
		gw, err := s.widen(g)
		if err != nil {
			return nil, err
		}
		uw, err := s.widen(up)
		if err != nil {
			return nil, err
		}
		return out, s.narrow(o.as(rows, h), func(dst arr) error { return s.mul(gw, uw, dst) })
	}
	return nil, fmt.Errorf("ascend: activation %q: %w: want %q or %q", act, backend.ErrOption, op.ActGeluTanh, op.ActSwiGLU)
}

// geluTanh writes quant.GeluTanh of x into out (x's shape): in float64
// (aclnnCast to double, exact), z = √(2/π)·(x + ((0.044715·x)·x)·x), then
// x / (1 + e^(-2z)), each step the IEEE double operation Go makes (aclnnMuls
// and aclnnAdds with double scalars, aclnnMul, aclnnAdd, aclnnExp,
// aclnnDiv), then rounded to float32 and to out. The one operation whose
// last bit is not IEEE's is the exponential, on the NPU as in Go (whose
// math.Exp differs between its assembly and portable versions): the result
// is rounded from float64 to float32, which absorbs such a difference
// unless the value lies within it of a float32 rounding boundary.
func (s *session) geluTanh(x, out arr) error {
	var xd, p, q arr
	if err := s.doubles(x, &xd, &p, &q); err != nil {
		return err
	}
	return first(
		func() error { return s.cast(x, xd) },
		func() error { return s.mulsF64(xd, 0.044715, p) },
		func() error { return s.mul(p, xd, q) },
		func() error { return s.mul(q, xd, p) },
		func() error { return s.add(xd, p, q) },
		func() error { return s.mulsF64(q, math.Sqrt(2/math.Pi), p) },
		func() error { return s.mulsF64(p, -2, q) },
		func() error { return s.exp(q, p) },
		func() error { return s.addsF64(p, 1, q) },
		func() error { return s.div(xd, q, p) },
		func() error { return s.narrow(out, func(dst arr) error { return s.cast(p, dst) }) },
	)
}

// silu writes quant.Silu of x into out (x's shape): x / (1 + e^(-x)) in
// float64, as geluTanh computes, rounded to float32 and to out.
func (s *session) silu(x, out arr) error {
	var xd, p, q arr
	if err := s.doubles(x, &xd, &p, &q); err != nil {
		return err
	}
	return first(
		func() error { return s.cast(x, xd) },
		func() error { return s.mulsF64(xd, -1, p) },
		func() error { return s.exp(p, q) },
		func() error { return s.addsF64(q, 1, p) },
		func() error { return s.div(xd, p, q) },
		func() error { return s.narrow(out, func(dst arr) error { return s.cast(q, dst) }) },
	)
}

// doubles allocates double arrays of x's shape.
func (s *session) doubles(x arr, ps ...*arr) error {
	if err := s.temporaries(aclDouble, int(count(x)), ps...); err != nil {
		return err
	}
	for _, p := range ps {
		p.shape = x.shape
	}
	return nil
}

// matmulChunk is the K of each aclnnQuantMatmulV4 call when K is beyond
// the 65,535 one call takes: 2^15, so op.MaxK takes four, and each partial
// sum (at most 2^15 · 2^14 = 2^29 in magnitude) is exact in int32.
const matmulChunk = 1 << 15

// MatMulInt8 returns the exact int32 product of int8 a [M, K] and b, which
// is [K, N], or [N, K] when transB is set: aclnnQuantMatmulV4 with an int32
// out, as mm_int8's fused kernel (mmInt8) computes it. Exact in int32: the
// operator's cube unit accumulates int8 products in int32 (float32 would not
// be exact beyond 2^24, which K = 1,025 rows of -128 · -128 passes). Beyond
// the operator's limits, on the device: a b whose N exceeds 65,535 is given
// to it transposed (aclnnInplaceCopy of a transposed view, so that its last
// dimension is K), and a K beyond 65,535 is cut into chunks of matmulChunk,
// each copied contiguous (aclnnInplaceCopy), multiplied, and the int32
// products added (aclnnInplaceAdd; at op.MaxK the one sum that reaches 2^31
// wraps, as the contract says int32 arithmetic does).
func (d *Device) MatMulInt8(a, b *tensor.Tensor, transB bool) (*tensor.Tensor, error) {
	return do(d, func(s *session) (*tensor.Tensor, error) { return s.matmulInt8(a, b, transB) })
}

func (s *session) matmulInt8(a, b *tensor.Tensor, transB bool) (*tensor.Tensor, error) {
	if a.Rank() != 2 || b.Rank() != 2 || a.DType() != dtype.Int8 || b.DType() != dtype.Int8 {
		return nil, fmt.Errorf("ascend: int8 product of %v and %v: %w: want two int8 matrices", a, b, tensor.ErrShape)
	}
	m, k := a.Dim(0), a.Dim(1)
	kb, n := b.Dim(0), b.Dim(1)
	if transB {
		n, kb = kb, n
	}
	if kb != k {
		return nil, fmt.Errorf("ascend: int8 product of %v and %v (transposed %v): %w: inner dimensions differ", a, b, transB, tensor.ErrShape)
	}
	out, o, err := s.result(dtype.Int32, []int{m, n})
	if err != nil || m*n == 0 {
		return out, err
	}
	o = o.as(m, n)
	if k == 0 {
		return out, s.fill(o, 0)
	}
	x1, err := s.of(a)
	if err != nil {
		return nil, err
	}
	x2, err := s.of(b)
	if err != nil {
		return nil, err
	}
	one, err := s.temp(aclFloat, 1)
	if err != nil {
		return nil, err
	}
	if err := s.fill(one, 1); err != nil {
		return nil, err
	}
	if !transB && n > maxQuantMatmulK {
		t, err := s.temp(aclInt8, n*k)
		if err != nil {
			return nil, err
		}
		t = t.as(n, k)
		if err := s.copyTo(t, x2.view(0, []int64{int64(n), int64(k)}, []int64{1, int64(n)})); err != nil {
			return nil, err
		}
		x2, transB = t, true
	}
	if k <= maxQuantMatmulK {
		return out, s.quantMatmul(x1, x2, transB, one, nil, o)
	}
	c := matmulChunk
	var c1, c2, part arr
	if err := first(
		func() error { return s.temporaries(aclInt8, m*c, &c1) },
		func() error { return s.temporaries(aclInt8, n*c, &c2) },
		func() error { return s.temporaries(aclInt32, m*n, &part) },
	); err != nil {
		return nil, err
	}
	i64 := func(v ...int) []int64 {
		w := make([]int64, len(v))
		for i, x := range v {
			w[i] = int64(x)
		}
		return w
	}
	for k0 := 0; k0 < k; k0 += c {
		kc := min(c, k-k0)
		a1, src1 := c1.as(m, kc), x1.view(int64(k0), i64(m, kc), i64(k, 1))
		b1, src2 := c2.as(kc, n), x2.view(int64(k0*n), i64(kc, n), i64(n, 1))
		if transB {
			b1, src2 = c2.as(n, kc), x2.view(int64(k0), i64(n, kc), i64(k, 1))
		}
		dst := o
		if k0 > 0 {
			dst = part.as(m, n)
		}
		if err := first(
			func() error { return s.copyTo(a1, src1) },
			func() error { return s.copyTo(b1, src2) },
			func() error { return s.quantMatmul(a1, b1, transB, one, nil, dst) },
			func() error {
				if k0 == 0 {
					return nil
				}
				return s.addT(o, dst)
			},
		); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// LinearEpilogue scales the int32 acc [M, N] back with the float32 row
// scales xs (M) and the weight scales ws (one or N, any float dtype), rounds
// to out and adds the bias, if any, as the contract says: the fused
// int8_linear's own element-wise epilogue (epilogue), exact. Only with
// wraps (K = op.MaxK), where a sum can wrap, does it pay for reading -2^31
// as 2^31: an [M, N] mask and a masked fill.
func (d *Device) LinearEpilogue(acc, xs, ws, bias *tensor.Tensor, out dtype.DType, wraps bool) (*tensor.Tensor, error) {
	return do(d, func(s *session) (*tensor.Tensor, error) {
		return s.linearEpilogue(acc, xs, ws, bias, out, wraps)
	})
}

func (s *session) linearEpilogue(acc, xs, ws, bias *tensor.Tensor, outDT dtype.DType, wraps bool) (*tensor.Tensor, error) {
	if acc.Rank() != 2 || acc.DType() != dtype.Int32 {
		return nil, fmt.Errorf("ascend: linear epilogue of %v: %w: want int32 [M, N]", acc, tensor.ErrShape)
	}
	m, n := acc.Dim(0), acc.Dim(1)
	if xs.Numel() != m || (ws.Numel() != 1 && ws.Numel() != n) || (bias != nil && bias.Numel() != n) {
		return nil, fmt.Errorf("ascend: linear epilogue of %v with scales %v, %v and bias %v: %w", acc, xs, ws, bias, tensor.ErrShape)
	}
	out, o, err := s.result(outDT, []int{m, n})
	if err != nil || m*n == 0 {
		return out, err
	}
	acca, err := s.of(acc)
	if err != nil {
		return nil, err
	}
	xsa, err := s.wideOf(xs, m)
	if err != nil {
		return nil, err
	}
	wsa, err := s.wideOf(ws, ws.Numel())
	if err != nil {
		return nil, err
	}
	var b *arr
	if bias != nil {
		ba, err := s.of(bias, n)
		if err != nil {
			return nil, err
		}
		b = &ba
	}
	return out, s.epilogue(acca, xsa, wsa, b, o.as(m, n), wraps)
}
