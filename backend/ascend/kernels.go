package ascend

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/gokitchen/kitchen/backend"
	"github.com/gokitchen/kitchen/backend/eager"
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/op"
	"github.com/gokitchen/kitchen/quant"
	"github.com/gokitchen/kitchen/tensor"
)

// New returns the ascend backend: fused kernels for tensors on any Ascend
// Device. Register adds it to a registry once CANN has loaded; this
// package's init registers it with backend.Default lazily, to be loaded on
// first need (see the package documentation).
func New() backend.Backend {
	npu := []string{DeviceType}
	floats := dtype.Floats()
	quantize := backend.Constraints{
		Devices: npu,
		DTypes: []backend.DTypeRule{
			{Param: "x", DTypes: []dtype.DType{dtype.Float16, dtype.BFloat16}},
			{Param: "scale", DTypes: floats},
		},
		Calls: []backend.CallRule{backend.StochasticRoundingOff()},
	}
	deq := backend.Constraints{
		Devices: npu,
		DTypes: []backend.DTypeRule{
			{Param: "q", DTypes: []dtype.DType{dtype.Int8}}, {Param: "scale", DTypes: floats}, {Param: "out_dtype", DTypes: floats},
		},
	}
	// aclnnQuantMatmulV4 refuses a last dimension of x1 or x2 beyond 65,535:
	// K for both operations, and N for mm_int8, whose b is [K, N].
	mm := backend.Constraints{Devices: npu, Shapes: []backend.ShapeRule{lastDim("a", "K"), lastDim("b", "N")}}
	linear := backend.Constraints{
		Devices: npu,
		Shapes:  []backend.ShapeRule{lastDim("weight", "K")},
		Calls: []backend.CallRule{
			{Param: "input_act", Desc: "no input activation (CANN has none that computes the contract's float64 gelu_tanh or silu; eager on the NPU composes them)",
				OK: func(a backend.Args) bool { la, ok := a.(*op.LinearArgs); return !ok || la.InputAct == "" }},
			{Param: "convrot", Desc: "no ConvRot rotation (eager on the NPU rotates)",
				OK: func(a backend.Args) bool { la, ok := a.(*op.LinearArgs); return !ok || la.Group == 0 }},
		},
	}
	return backend.Backend{Name: Name, Kind: backend.Accelerator, Caps: []backend.Capability{
		op.QuantizeRowwise.Implement(quantize, quantizeRowwise),
		op.QuantizeTensorwise.Implement(quantize, quantizeTensorwise),
		op.Dequantize.Implement(deq, dequantizeSimple),
		op.DequantizeDType.Implement(deq, dequantizeDType),
		op.MMInt8.Implement(mm, mmInt8),
		op.Int8Linear.Implement(linear, int8Linear),
	}}
}

func deviceOf(t *tensor.Tensor) (*Device, error) {
	d, ok := t.Device().(*Device)
	if !ok {
		return nil, fmt.Errorf("ascend: %v is not on an Ascend device", t)
	}
	return d, nil
}

// quantizeRowwise quantizes with aclnnDynamicQuantV2 (symmetric, int8 out),
// which quantizes each row against its own abs-max, in float32. Before it,
// on the device: aclnnIsFinite and aclnnAll mark the rows that hold NaN or
// an infinity; aclnnAminmaxDim (a minimum and a maximum of each row) gives
// each row's abs-max a, from which come the contract's scales, exactly
// (max(a / 127, 1e-30) in float32; the fused op's own scale output is
// computed differently by its different tilings and is not used); and
// aclnnAmin gives the smallest a / 127 of the rows that are not all zero,
// or -1 if a row is not finite. Those 4 bytes are all that is read back
// (and firstFalse's index of the first such row, when a row is not finite).
// When the smallest a / 127 is below 1e-30 (the contract clamps the scale,
// and the fused op, which does not, would return q for another scale) or
// rounds to a subnormal of x's type (the contract then divides by a divisor
// the fused op never sees), the rows are quantized instead by the
// contract's divisors rT(scale) (quantizeSaturating: a subnormal float16
// divisor can be a third below the scale, 2^-24 for a scale just under
// 1.5 * 2^-24, so quotients reach about 190 and must be saturated), which
// keeps q within one step of the contract everywhere.
// aclnnDynamicQuantV2's own quotients need no clamp: |f32(x) * (127 / a)|
// is at most 127 within float32 rounding. All-zero rows get q = 0 from
// aclnnInplaceMaskedFillScalar after the fused op, whose result for them
// (0 * 127 / 0) CANN does not define.
func quantizeRowwise(_ context.Context, c *op.RowwiseArgs) (op.Quantized, error) {
	d, err := deviceOf(c.X)
	if err != nil {
		return op.Quantized{}, err
	}
	res, err := c.Result()
	if err != nil {
		return res, err
	}
	_, err = do(d, func(s *session) (struct{}, error) {
		x := c.X
		T, k := x.DType(), x.Dim(-1)
		rows := x.Numel() / k
		xa, err := s.of(x, rows, k)
		if err != nil {
			return struct{}{}, err
		}
		sa, err := s.of(res.Scale, rows)
		if err != nil {
			return struct{}{}, err
		}
		var rowMax, quot, least, ok, bad, zero arr
		if err := first(
			func() error { return s.temporaries(aclFloat, rows, &rowMax, &quot) },
			func() error { return s.temporaries(aclFloat, 1, &least) },
			func() error { return s.temporaries(aclBool, rows, &ok, &bad, &zero) },
		); err != nil {
			return struct{}{}, err
		}
		one, err := s.f32(1)
		if err != nil {
			return struct{}{}, err
		}
		minusOne, err := s.f32(-1)
		if err != nil {
			return struct{}{}, err
		}
		if err := first(
			func() error { return s.rowsFinite(xa, ok) },
			func() error { return s.logicalNot(ok, bad) },
			func() error { return s.absMax(xa, rowMax) },
			func() error { return s.divs(rowMax, quant.QMax, quot) },
			func() error { return s.clampMin(quot, quant.MinScale, sa) },
			func() error { return s.eqScalar(rowMax, 0, zero) },
			func() error { return s.maskedFill(quot, zero, one) },
			func() error { return s.maskedFill(quot, bad, minusOne) },
			func() error { return s.amin(quot, 0, least) },
		); err != nil {
			return struct{}{}, err
		}
		var b [4]byte
		if err := s.read(b[:], least.addr); err != nil {
			return struct{}{}, err
		}
		smallest := math.Float32frombits(binary.LittleEndian.Uint32(b[:]))
		if !(smallest >= 0) {
			row, err := s.firstFalse(ok)
			if err == nil && row < 0 {
				err = fmt.Errorf("ascend: the smallest row scale is %g, but every row of %v is finite", smallest, x)
			}
			if err == nil {
				err = backend.NonFinite(op.QuantizeRowwise.Name(), row)
			}
			return struct{}{}, err
		}
		qa, err := s.of(res.Q, rows*k)
		if err != nil {
			return struct{}{}, err
		}
		if smallest >= quant.MinScale && T.Round(smallest) >= T.TinyNormal() {
			kernelScale, err := s.temp(aclFloat, rows)
			if err != nil {
				return struct{}{}, err
			}
			zeroQ, err := s.i64(0)
			if err != nil {
				return struct{}{}, err
			}
			return struct{}{}, first(
				func() error { return s.dynamicQuant(xa, qa.as(rows, k), kernelScale) },
				func() error { return s.maskedFill(qa.as(rows, k), zero.as(rows, 1), zeroQ) },
			)
		}
		t, err := s.divisors(sa, T)
		if err != nil {
			return struct{}{}, err
		}
		return struct{}{}, s.quantizeSaturating(xa, t.as(rows, 1), qa.as(rows, k))
	})
	return res, err // on failure, the registry releases the outputs it did not get from the caller
}

// quantizeSaturating computes q = sat(rne(f32(x) / f32(t))), the contract's
// saturation included, for x and the divisors t (broadcast to x's shape,
// same type or float32) of any float type, into the int8 array q of x's
// shape: aclnnDiv of x and t widened to float32, aclnnClamp of the quotient
// to [-128, 127], then aclnnQuantize by 1. aclnnQuantize saturates nothing
// for an int8 output (the CANN 8.1.RC1 kernel, impl/dynamic/quantize.py,
// clips the quotient only for uint8, then rounds and casts), so a quotient
// beyond the int8 range would come back wrapped or unspecified. The clamp
// changes nothing else: aclnnDiv computes the very quotient aclnnQuantize
// computes itself (both kernels cast their operands to float32 and divide
// with tbe.vdiv, impl/dynamic/div.py), dividing by 1 is exact, and the
// clamp moves only quotients above 127 or below -128, which the contract
// rounds to at least 127 or at most -128 and so saturates to exactly the
// 127 or -128 the clamp gives. TestQuantizeSaturatingKeepsInRange checks
// that it equals aclnnQuantize by t wherever the quotient rounds into the
// int8 range.
func (s *session) quantizeSaturating(x, t, q arr) error {
	n := int(count(x))
	xw, err := s.widen(x)
	if err != nil {
		return err
	}
	tw, err := s.widen(t)
	if err != nil {
		return err
	}
	var y, yc, one arr
	if err := first(
		func() error { return s.temporaries(aclFloat, n, &y, &yc) },
		func() error { return s.temporaries(aclFloat, 1, &one) },
	); err != nil {
		return err
	}
	y.shape, yc.shape = x.shape, x.shape
	return first(
		func() error { return s.div(xw, tw, y) },
		func() error { return s.clamp(y, -128, 127, yc) },
		func() error { return s.fill(one, 1) },
		func() error { return s.quantize(yc, one, q, 0) },
	)
}

// divisors returns the contract's divisors for the float32 scales s:
// t = rT(s), with zero replaced by T's smallest normal.
func (s *session) divisors(scales arr, T dtype.DType) (arr, error) {
	n := int(count(scales))
	rounded, err := s.temp(aclType(T), n)
	if err != nil {
		return arr{}, err
	}
	t, err := s.temp(aclType(T), n)
	if err != nil {
		return arr{}, err
	}
	return t, first(
		func() error { return s.cast(scales.as(n), rounded) },
		func() error { return s.replaceZeroInto(rounded, t, T.TinyNormal()) },
	)
}

// quantizeTensorwise: the NaN check on the device (firstBadRow), the scale
// as the contract recalculates it (the abs-max of the rows' abs-maxes) or as
// supplied (a scale tensor is cast to float32 on the device; the registry
// has already checked that it is finite and positive, see Device), the
// contract's divisor t = rT(s) (zero replaced by the type's smallest
// normal), and aclnnQuantize, which divides by t in float32 and rounds half
// to even, but does not saturate (see quantizeSaturating). Its quotient
// cannot leave the int8 range for a bfloat16 x with the recalculated
// scale: |x| <= a, s = f32(a / 127) and t = rT(s) >= s / (1 + 2^-8)
// (bfloat16 keeps 8 significant bits, and s is a normal number of it), so
// |f32(x) / t| <= 127.4961 (float32's roundings included), which rounds to
// 127 at most: aclnnQuantize alone needs no clamp there (over the bfloat16
// abs-maxes the largest quotient is 127.33; see
// TestTensorwiseBFloat16NeedsNoClamp). A supplied scale can make the
// quotient anything, and a float16 divisor can be subnormal (scales below
// 2^-14), a third below the scale, for quotients up to about 190:
// quantizeSaturating clamps the quotient in those cases.
func quantizeTensorwise(_ context.Context, c *op.TensorwiseArgs) (op.Quantized, error) {
	d, err := deviceOf(c.X)
	if err != nil {
		return op.Quantized{}, err
	}
	res, err := c.Result()
	if err != nil {
		return res, err
	}
	_, err = do(d, func(s *session) (struct{}, error) {
		x := c.X
		n, k := x.Numel(), 1
		if x.Rank() > 0 {
			k = x.Dim(-1)
		}
		xa, err := s.of(x, n/k, k)
		if err != nil {
			return struct{}{}, err
		}
		if row, err := s.firstBadRow(xa); err != nil || row >= 0 {
			if err == nil {
				err = backend.NonFinite(op.QuantizeTensorwise.Name(), row)
			}
			return struct{}{}, err
		}
		sa, err := s.of(res.Scale, 1)
		if err != nil {
			return struct{}{}, err
		}
		switch {
		case c.ScaleValue != nil:
			err = s.fill(sa, *c.ScaleValue)
		case c.Scale != nil:
			var in arr
			if in, err = s.of(c.Scale, 1); err == nil {
				err = s.cast(in, sa)
			}
		default:
			var rowMax, m arr
			if rowMax, err = s.temp(aclFloat, n/k); err != nil {
				break
			}
			if m, err = s.temp(aclFloat, 1); err == nil {
				err = first(
					func() error { return s.absMax(xa, rowMax) },
					func() error { return s.absMax(rowMax.as(1, n/k), m) },
					func() error { return s.scaleFromMax(m, sa) },
				)
			}
		}
		if err != nil {
			return struct{}{}, err
		}
		t, err := s.divisors(sa, x.DType())
		if err != nil {
			return struct{}{}, err
		}
		qa, err := s.of(res.Q, n)
		if err != nil {
			return struct{}{}, err
		}
		if c.ScaleValue == nil && c.Scale == nil && x.DType() == dtype.BFloat16 {
			return struct{}{}, s.quantize(xa.as(n), t, qa, 0)
		}
		return struct{}{}, s.quantizeSaturating(xa.as(n), t, qa)
	})
	return res, err // on failure, the registry releases the outputs it did not get from the caller
}

// dequantizeTo computes rOut(f32(q) * f32(scale)) on the device: first the
// check that every scale is a finite number > 0 (Find's on the device,
// findIn with eager.NotFinitePositive, of which only the index is read
// back), then aclnnCast of q and of a non-float32 scale, aclnnMul with the
// scale broadcast, aclnnCast to the output type. It is the device's Binary
// primitive, so the result is the eager backend's, bit for bit.
func dequantizeTo(name string, c *op.DequantizeArgs, res op.Dequantized, err error) (op.Dequantized, error) {
	if err != nil {
		return res, err
	}
	d, err := deviceOf(c.Q)
	if err != nil {
		return res, err
	}
	_, err = do(d, func(s *session) (struct{}, error) {
		sa, err := s.of(c.Scale, c.Scale.Numel())
		if err != nil {
			return struct{}{}, err
		}
		i, err := s.findIn(sa, eager.NotFinitePositive)
		if err != nil {
			return struct{}{}, err
		}
		if i >= 0 {
			return struct{}{}, &backend.ArgError{Op: name, Param: "scale", Row: -1, Err: backend.ErrScale,
				Detail: fmt.Sprintf("element %d: want a finite number > 0", i)}
		}
		o, err := s.of(res.Out, res.Out.Numel())
		if err != nil {
			return struct{}{}, err
		}
		return struct{}{}, s.binaryInto(eager.Mul, c.Q, c.Scale, o)
	})
	return res, err // on failure, the registry releases the output it did not get from the caller
}

func dequantizeSimple(_ context.Context, c *op.DequantizeArgs) (op.Dequantized, error) {
	res, err := c.Result()
	return dequantizeTo(op.Dequantize.Name(), c, res, err)
}

func dequantizeDType(_ context.Context, c *op.DequantizeDTypeArgs) (op.Dequantized, error) {
	res, err := c.Result()
	return dequantizeTo(op.DequantizeDType.Name(), &c.DequantizeArgs, res, err)
}
