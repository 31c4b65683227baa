package ascend

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/gokitchen/kitchen/backend"
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/quant"
	"github.com/gokitchen/kitchen/tensor"
)

// New returns the ascend backend: fused kernels for tensors on any Ascend
// Device. Register (and importing this package, for backend.Default) adds
// it to a registry once CANN has loaded.
func New() backend.Backend {
	npu := []string{DeviceType}
	floats := []dtype.DType{dtype.Float32, dtype.Float16, dtype.BFloat16}
	quantize := backend.Constraints{
		Devices: npu,
		DTypes: map[string][]dtype.DType{
			backend.ParamX:     {dtype.Float16, dtype.BFloat16},
			backend.ParamScale: floats,
		},
		Calls: []backend.CallRule{backend.StochasticRoundingOff()},
	}
	deq := backend.Constraints{
		Devices: npu,
		DTypes: map[string][]dtype.DType{
			backend.ParamQ: {dtype.Int8}, backend.ParamScale: floats, backend.ParamOutDType: floats,
		},
	}
	return backend.Backend{Name: Name, Kind: backend.Accelerator, Ops: map[backend.Op]backend.Capability{
		backend.QuantizeRowwise:    {Constraints: quantize, Run: quantizeRowwise},
		backend.QuantizeTensorwise: {Constraints: quantize, Run: quantizeTensorwise},
		backend.Dequantize:         {Constraints: deq, Run: dequantize},
		backend.DequantizeDType:    {Constraints: deq, Run: dequantize},
	}}
}

func deviceOf(t *tensor.Tensor) (*Device, error) {
	d, ok := t.Device().(*Device)
	if !ok {
		return nil, fmt.Errorf("ascend: %v is not on an Ascend device", t)
	}
	return d, nil
}

type pair struct{ q, scale *tensor.Tensor }

// quantizeRowwise quantizes with aclnnDynamicQuantV2 (symmetric, int8 out),
// which reads x once and quantizes each row against its own abs-max, in
// float32. Before it, one pass over x on the device (aclnnAminmaxDim) gives
// each row's abs-max a, from which come the contract's scales, exactly
// (max(a / 127, 1e-30) in float32; the fused op's own scale output is
// computed differently by its different tilings and is not used), and two
// facts read back in one 16-byte copy: the first row holding NaN or an
// infinity, and the smallest a / 127 of the rows that are not all zero.
// When that is below 1e-30 (the contract clamps the scale, and the fused
// op, which does not, would return q for another scale) or rounds to a
// subnormal of x's type (the contract then divides by a divisor the fused
// op never sees), the rows are quantized instead with aclnnQuantize by the
// contract's divisors rT(scale), which keeps q within one step of the
// contract everywhere.
func quantizeRowwise(_ context.Context, c *backend.Call) (backend.Result, error) {
	d, err := deviceOf(c.X)
	if err != nil {
		return backend.Result{}, err
	}
	r, err := do(d, func(s *session) (pair, error) {
		x := c.X
		T, k := x.DType(), x.Dim(-1)
		rows := x.Numel() / k
		xa, err := s.of(x, rows, k)
		if err != nil {
			return pair{}, err
		}
		rowMax, err := s.temp(aclFloat, rows)
		if err != nil {
			return pair{}, err
		}
		scale, sa, err := s.result(dtype.Float32, append(x.Shape()[:x.Rank()-1], 1))
		if err != nil {
			return pair{}, err
		}
		quot, err := s.temp(aclFloat, rows)
		if err != nil {
			return pair{}, err
		}
		facts, err := s.temp(aclInt64, 2) // [first bad row, smallest a/127 as float32 bits]
		if err != nil {
			return pair{}, err
		}
		zero, err := s.temp(aclBool, rows)
		if err != nil {
			return pair{}, err
		}
		one, err := s.f32(1)
		if err != nil {
			return pair{}, err
		}
		if err := first(
			func() error { return s.absMax(xa, rowMax) },
			func() error { return s.divs(rowMax, quant.QMax, quot) },
			func() error { return s.clampMin(quot, quant.MinScale, sa) },
			func() error { return s.firstFailing(rowMax, tensor.NotFinite, facts.as(1)) },
			func() error { return s.eqScalar(rowMax, 0, zero) },
			func() error { return s.maskedFill(quot, zero, one) },
			func() error { return s.amin(quot, 0, arr{facts.addr + 8, aclFloat, []int64{1}}) },
		); err != nil {
			return pair{}, err
		}
		var b [16]byte
		if err := s.read(b[:], facts.addr); err != nil {
			return pair{}, err
		}
		if row := int64(binary.LittleEndian.Uint64(b[:8])); row < int64(rows) {
			return pair{}, backend.NonFinite(c.Op, int(row))
		}
		least := math.Float32frombits(binary.LittleEndian.Uint32(b[8:12]))
		q, qa, err := s.result(dtype.Int8, x.Shape())
		if err != nil {
			return pair{}, err
		}
		if least >= quant.MinScale && T.Round(least) >= T.TinyNormal() {
			kernelScale, err := s.temp(aclFloat, rows)
			if err != nil {
				return pair{}, err
			}
			return pair{q, scale}, s.dynamicQuant(xa, qa.as(rows, k), kernelScale)
		}
		t, err := s.divisors(sa, T)
		if err != nil {
			return pair{}, err
		}
		return pair{q, scale}, s.quantize(xa, t, qa.as(rows, k), 0)
	})
	return backend.Result{Q: r.q, Scale: r.scale}, err
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

// quantizeTensorwise: an abs-max of each row on the device for the NaN
// check (Find's 8-byte index is the one read back), the scale as the
// contract recalculates it (the abs-max of the rows' abs-maxes) or as
// supplied, the contract's divisor t = rT(s) (zero replaced by the type's
// smallest normal), and aclnnQuantize, which divides by t in float32 and
// rounds half to even.
func quantizeTensorwise(_ context.Context, c *backend.Call) (backend.Result, error) {
	d, err := deviceOf(c.X)
	if err != nil {
		return backend.Result{}, err
	}
	r, err := do(d, func(s *session) (pair, error) {
		x := c.X
		n, k := x.Numel(), 1
		if x.Rank() > 0 {
			k = x.Dim(-1)
		}
		xa, err := s.of(x, n/k, k)
		if err != nil {
			return pair{}, err
		}
		rowMax, err := s.temp(aclFloat, n/k)
		if err != nil {
			return pair{}, err
		}
		if err := s.absMax(xa, rowMax); err != nil {
			return pair{}, err
		}
		if row, err := s.findIn(rowMax, tensor.NotFinite); err != nil || row >= 0 {
			if err == nil {
				err = backend.NonFinite(c.Op, row)
			}
			return pair{}, err
		}
		scale, sa, err := s.result(dtype.Float32, []int{})
		if err != nil {
			return pair{}, err
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
			var m arr
			if m, err = s.temp(aclFloat, 1); err == nil {
				err = first(
					func() error { return s.absMax(rowMax.as(1, n/k), m) },
					func() error { return s.scaleFromMax(m, sa) },
				)
			}
		}
		if err != nil {
			return pair{}, err
		}
		t, err := s.divisors(sa, x.DType())
		if err != nil {
			return pair{}, err
		}
		q, qa, err := s.result(dtype.Int8, x.Shape())
		if err != nil {
			return pair{}, err
		}
		return pair{q, scale}, s.quantize(xa.as(n), t, qa, 0)
	})
	return backend.Result{Q: r.q, Scale: r.scale}, err
}

// dequantize computes rOut(f32(q) * f32(scale)) on the device: aclnnCast of
// q and of a non-float32 scale, aclnnMul with the scale broadcast, aclnnCast
// to the output type. It is the device's Binary primitive, so the result
// is the eager backend's, bit for bit.
func dequantize(_ context.Context, c *backend.Call) (backend.Result, error) {
	d, err := deviceOf(c.Q)
	if err != nil {
		return backend.Result{}, err
	}
	out, err := do(d, func(s *session) (*tensor.Tensor, error) {
		return s.binaryOp(tensor.Mul, c.Q, c.Scale, c.OutDType)
	})
	return backend.Result{Out: out}, err
}
