package ascend

import (
	"context"
	"fmt"
	"math"

	"github.com/gokitchen/kitchen/backend"
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/op"
)

// maxQuantMatmulK is the largest last dimension of x1 and x2 that
// aclnnQuantMatmulV4 takes: K for int8_linear, K and N for mm_int8.
const maxQuantMatmulK = 65535

// lastDim is the constraint that dimension 1 of the matrix param, called
// what, is at most maxQuantMatmulK.
func lastDim(param, what string) backend.ShapeRule {
	return backend.ShapeRule{Param: param, Desc: fmt.Sprintf("%s (dim 1) <= %d, aclnnQuantMatmulV4's largest last dimension", what, maxQuantMatmulK),
		OK: func(s []int) bool { return len(s) == 2 && s[1] <= maxQuantMatmulK }}
}

// int8Linear is int8_linear on the NPU, exact to the contract except in
// one case, where it is within one unit in the last place of the output
// dtype:
//
//  1. x's rows are quantized as the contract does (quantizeRows): q and
//     the row scales xs are eager's, bit for bit. aclnnDynamicQuantV2 is
//     not used: its q differs from the contract's by one step wherever
//     the contract's roundings of the divisor and the quotient to x's type
//     matter (see numerics_test.go), and each such step moves every output
//     of the row by up to 128 * xs * ws, a bound no function of the output
//     alone can state.
//  2. aclnnQuantMatmulV4 multiplies q by the weight [N, K], transposed by
//     the operator, in exact int32 (K <= 65,535, so no sum overflows).
//  3. The epilogue, c = f32(xs * ws), y = rOut(f32(f32(acc) * c)), then
//     rOut(f32(y) + f32(rOut(bias))):
//     - one weight scale, float16 or bfloat16 out: the operator's own
//     epilogue, given c as the per-token scale and 1 as the weight scale,
//     computes f32(f32(acc) * 1 * c) and rounds it to nearest even: exact;
//     the bias is then added by addBias, to the rounded product, as the
//     contract adds it.
//     - N weight scales, float16 or bfloat16 out, no bias: the operator's
//     epilogue multiplies by ws[n] and by xs[m] one after the other, each
//     product rounded in float32, where the contract rounds xs * ws first.
//     The two float32 values differ by a few units of float32's last place,
//     so their roundings to out are equal or adjacent: within one ulp of
//     out (the one inexact case).
//     - otherwise (float32 out, or N weight scales and a bias, where one
//     ulp before the bias would be an unbounded relative error of a sum
//     that cancels): the operator returns the int32 sums and epilogue
//     computes the contract's epilogue with element-wise operators: exact.
//
// "Exact" rests on two readings of the operator that its documentation
// does not settle and the simulator assumes (internal/ascendsim/README.md):
// f32(acc) rounds to nearest even above 2^24 (below, it is exact), in the
// operator's epilogue and in aclnnCast, and an int32 out holds the sums,
// the required scale unused. The hardware run of
// the tests checks both (TestFusedLinearLargeSums, TestMMInt8).
//
// Nothing is copied to the device; firstBadRow reads 1 byte back (more
// only when x holds NaN or an infinity). Activations and ConvRot are
// declined by the constraints (New), as is K > 65,535: eager runs those on
// the NPU, with the device's eager.LinearPrimitives (eagerlinear.go) and
// eager.RotatePrimitives (convrot.go).
func int8Linear(_ context.Context, a *op.LinearArgs) (op.Dequantized, error) {
	d, err := deviceOf(a.X)
	if err != nil {
		return op.Dequantized{}, err
	}
	res, err := a.Result()
	if err != nil {
		return res, err
	}
	_, err = do(d, func(s *session) (struct{}, error) {
		n, k := a.Weight.Dim(0), a.Weight.Dim(1)
		m := a.X.Numel() / k
		xa, err := s.of(a.X, m, k)
		if err != nil {
			return struct{}{}, err
		}
		q, xs, err := s.quantizeRows(op.Int8Linear.Name(), xa, a.X.DType())
		if err != nil {
			return struct{}{}, err
		}
		w, err := s.of(a.Weight)
		if err != nil {
			return struct{}{}, err
		}
		ws, err := s.wideOf(a.WeightScale, a.WeightScale.Numel())
		if err != nil {
			return struct{}{}, err
		}
		var bias *arr
		if a.Bias != nil {
			b, err := s.of(a.Bias, n)
			if err != nil {
				return struct{}{}, err
			}
			bias = &b
		}
		o, err := s.of(res.Out, m, n)
		if err != nil {
			return struct{}{}, err
		}
		return struct{}{}, s.linear(q, w, xs, ws, bias, o)
	})
	return res, err // on failure, the registry releases the output it did not get from the caller
}

// mmInt8 is mm_int8 on the NPU: aclnnQuantMatmulV4 with an int32 out,
// which is the exact sum (K and N <= 65,535, as the constraints require:
// no sum overflows). Nothing is copied either way.
func mmInt8(_ context.Context, a *op.MMInt8Args) (op.MMInt8Result, error) {
	d, err := deviceOf(a.A)
	if err != nil {
		return op.MMInt8Result{}, err
	}
	res, err := a.Result()
	if err != nil {
		return res, err
	}
	_, err = do(d, func(s *session) (struct{}, error) {
		m, n := a.A.Dim(0), a.B.Dim(1)
		x1, err := s.of(a.A)
		if err != nil {
			return struct{}{}, err
		}
		x2, err := s.of(a.B)
		if err != nil {
			return struct{}{}, err
		}
		o, err := s.of(res.Out, m, n)
		if err != nil {
			return struct{}{}, err
		}
		one, err := s.temp(aclFloat, 1)
		if err != nil {
			return struct{}{}, err
		}
		return struct{}{}, first(
			func() error { return s.fill(one, 1) },
			func() error { return s.quantMatmul(x1, x2, false, one, nil, o) },
		)
	})
	return res, err // on failure, the registry releases the output it did not get from the caller
}

// quantizeRows quantizes the rows of the 2-D x, of type T, as eager does,
// with the same operators, so that q (int8, x's shape) and the row scales
// (float32, one per row) are eager's bit for bit: firstBadRow (NaN or an
// infinity is an error naming the first such row, reported for the
// operation called name), the row abs-max a (absMax), s = max(a / 127,
// 1e-30) (scaleFromMax), the divisors t = rT(s) (divisors), y = rT(f32(x) /
// t) (aclnnDiv in float32, aclnnCast to T), and q = sat(rne(y)): aclnnClamp
// of y to [-128, 127], then aclnnQuantize with a divisor of 1, which rounds
// half to even but does not saturate (see quantizeSaturating). The clamp is
// needed for both 16-bit types: rounding the quotient to bfloat16 makes y
// exactly 127.5 for about one row abs-max in six (bfloat16's values between
// 64 and 128 are halves), which rounds to 128, and a subnormal float16
// divisor makes y up to about 190. It changes no value in [-128, 127], and
// the values it changes round to exactly what the contract saturates them
// to.
func (s *session) quantizeRows(name string, x arr, T dtype.DType) (q, scale arr, err error) {
	rows, k := int(x.shape[0]), int(x.shape[1])
	row, err := s.firstBadRow(x)
	if err != nil {
		return arr{}, arr{}, err
	}
	if row >= 0 {
		return arr{}, arr{}, backend.NonFiniteIn(name, "x", row)
	}
	var rowMax, yf arr
	if err := first(
		func() error { return s.temporaries(aclFloat, rows, &rowMax, &scale) },
		func() error { return s.temporaries(aclFloat, rows*k, &yf) },
		func() error { return s.temporaries(aclInt8, rows*k, &q) },
		func() error { return s.absMax(x, rowMax) },
		func() error { return s.scaleFromMax(rowMax, scale) },
	); err != nil {
		return arr{}, arr{}, err
	}
	t, err := s.divisors(scale, T)
	if err != nil {
		return arr{}, arr{}, err
	}
	xw, err := s.widen(x)
	if err != nil {
		return arr{}, arr{}, err
	}
	tw, err := s.widen(t)
	if err != nil {
		return arr{}, arr{}, err
	}
	y, yc, one := yf.as(rows, k), arr{}, arr{}
	if T != dtype.Float32 {
		if y, err = s.temp(aclType(T), rows*k); err != nil {
			return arr{}, arr{}, err
		}
		y = y.as(rows, k)
	}
	if err := s.temporaries(aclType(T), rows*k, &yc); err != nil {
		return arr{}, arr{}, err
	}
	if one, err = s.temp(aclType(T), 1); err != nil {
		return arr{}, arr{}, err
	}
	q, yc = q.as(rows, k), yc.as(rows, k)
	return q, scale, first(
		func() error { return s.div(xw, tw.as(rows, 1), yf.as(rows, k)) },
		func() error {
			if T == dtype.Float32 {
				return nil
			}
			return s.cast(yf.as(rows, k), y)
		},
		func() error { return s.clamp(y, -128, 127, yc) },
		func() error { return s.fill(one, 1) },
		func() error { return s.quantize(yc, one, q, 0) },
	)
}

// linear computes the layer's output out [M, N] from q [M, K], the weight
// w [N, K], the float32 row scales xs (M) and weight scales ws (one or N)
// and the optional bias, by the three routes int8Linear describes.
func (s *session) linear(q, w, xs, ws arr, bias *arr, out arr) error {
	m, n := int(out.shape[0]), int(out.shape[1])
	one, err := s.temp(aclFloat, 1)
	if err != nil {
		return err
	}
	if err := s.fill(one, 1); err != nil {
		return err
	}
	switch {
	case out.dt != aclFloat && count(ws) == 1:
		c, err := s.temp(aclFloat, m)
		if err != nil {
			return err
		}
		y := out
		if bias != nil {
			if y, err = s.temp(out.dt, m*n); err != nil {
				return err
			}
			y = y.as(m, n)
		}
		return first(
			func() error { return s.mul(xs.as(m), ws.as(1), c) },
			func() error { return s.quantMatmul(q, w, true, one, &c, y) },
			func() error {
				if bias == nil {
					return nil
				}
				return s.addBias(y, *bias, out)
			},
		)
	case out.dt != aclFloat && bias == nil:
		return s.quantMatmul(q, w, true, ws.as(n), &xs, out)
	}
	acc, err := s.temp(aclInt32, m*n)
	if err != nil {
		return err
	}
	acc = acc.as(m, n)
	if err := s.quantMatmul(q, w, true, one, nil, acc); err != nil {
		return err
	}
	return s.epilogue(acc, xs, ws, bias, out, false) // K <= 65,535: no sum wraps
}

// epilogue is the contract's epilogue of the int32 sums acc [M, N] with
// element-wise operators, as eager computes it: c = f32(xs * ws)
// (aclnnMul, the M row scales along rows and the weight scales along
// columns), y = rOut(f32(f32(acc) * c)) (aclnnCast, aclnnMul, aclnnCast),
// then the bias (addBias).
//
// With wraps (K may be op.MaxK), a sum of -2^31 is read as 2^31
// (quant.AccFloat): aclnnEqScalar finds it (the smallest true sum,
// -128·127·K, is far from it, whatever precision the comparison takes)
// and aclnnInplaceMaskedFillScalar writes 2^31 over its float32.
func (s *session) epilogue(acc, xs, ws arr, bias *arr, out arr, wraps bool) error {
	m, n, cn := int(out.shape[0]), int(out.shape[1]), int(count(ws))
	var accf, c arr
	if err := first(
		func() error { return s.temporaries(aclFloat, m*n, &accf) },
		func() error { return s.temporaries(aclFloat, m*cn, &c) },
	); err != nil {
		return err
	}
	accf, c = accf.as(m, n), c.as(m, cn)
	y := out
	if bias != nil {
		t, err := s.temp(out.dt, m*n)
		if err != nil {
			return err
		}
		y = t.as(m, n)
	}
	return first(
		func() error { return s.cast(acc, accf) },
		func() error {
			if !wraps {
				return nil
			}
			return s.unwrap(acc, accf)
		},
		func() error { return s.mul(xs.as(m, 1), ws.as(1, cn), c) },
		func() error { return s.narrow(y, func(dst arr) error { return s.mul(accf, c, dst) }) },
		func() error {
			if bias == nil {
				return nil
			}
			return s.addBias(y, *bias, out)
		},
	)
}

// unwrap writes 2^31 over the elements of accf whose int32 sum in acc is
// -2^31 (see epilogue).
func (s *session) unwrap(acc, accf arr) error {
	mask, err := s.temp(aclBool, int(count(acc)))
	if err != nil {
		return err
	}
	c, err := s.f32(1 << 31)
	if err != nil {
		return err
	}
	mask = mask.as(int(acc.shape[0]), int(acc.shape[1])) // acc is [M, N]
	return first(
		func() error { return s.eqScalar(acc, math.MinInt32, mask) },
		func() error { return s.maskedFill(accf, mask, c) },
	)
}

// addBias computes out = rOut(f32(y) + f32(rOut(bias[n]))), the contract's
// bias added to the rounded product: y and out [M, N] of out's type, bias
// (N) of any float type, rounded to out's type first (aclnnCast) if it is
// not already, the sum in float32 (aclnnAdd) and rounded once (aclnnCast).
func (s *session) addBias(y, bias, out arr) error {
	n := int(out.shape[1])
	rb := bias.as(n)
	if bias.dt != out.dt {
		t, err := s.temp(out.dt, n)
		if err != nil {
			return err
		}
		if err := s.cast(rb, t); err != nil {
			return err
		}
		rb = t
	}
	yw, err := s.widen(y)
	if err != nil {
		return err
	}
	bw, err := s.widen(rb)
	if err != nil {
		return err
	}
	return s.narrow(out, func(dst arr) error { return s.add(yw, bw.as(1, n), dst) })
}
