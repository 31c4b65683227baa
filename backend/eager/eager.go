// Package eager is kitchen's reference backend: each operation of the
// contract written step by step over a few device primitives (Primitives),
// so it runs on every device that implements them (the host always does),
// for every float dtype and both rounding modes. It registers itself with
// backend.Default at the lowest priority; faster backends are tested
// against it.
package eager

import (
	"context"

	"github.com/gokitchen/kitchen/backend"
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/op"
	"github.com/gokitchen/kitchen/quant"
	"github.com/gokitchen/kitchen/tensor"
)

// Name is the backend's registered name.
const Name = "eager"

func init() { backend.Register(New()) }

// New returns the eager backend, for registering with a Registry other than
// the default.
func New() backend.Backend {
	any := backend.Constraints{Hardware: []backend.HardwareRule{{
		Desc: "implements eager.Primitives",
		OK:   func(dev tensor.Device) bool { _, ok := primitivesOf(dev); return ok },
	}}}
	return backend.Backend{Name: Name, Kind: backend.Reference, Caps: []backend.Capability{
		op.QuantizeRowwise.Implement(any, quantizeRowwise),
		op.QuantizeTensorwise.Implement(any, quantizeTensorwise),
		op.Dequantize.Implement(any, dequantize),
		op.DequantizeDType.Implement(any, dequantizeDType),
		op.QuantizeConvRotWeight.Implement(rotating, quantizeConvRotWeight),
		op.QuantizeAndRotateRowwise.Implement(rotating, quantizeAndRotateRowwise),
		op.DequantizeConvRotWeight.Implement(rotating, dequantizeConvRotWeight),
		op.DequantizeConvRotWeightDType.Implement(rotating, dequantizeConvRotWeightDType),
		op.DequantizeEmbedding.Implement(rotating, dequantizeEmbedding),
		op.MMInt8.Implement(mmInt8Constraints, mmInt8),
		op.Int8Linear.Implement(linear, int8Linear),
	}}
}

// temps releases intermediate tensors when the operation ends.
type temps []*tensor.Tensor

func (ts *temps) keep(t *tensor.Tensor, err error) (*tensor.Tensor, error) {
	if err == nil {
		*ts = append(*ts, t)
	}
	return t, err
}

// release frees every kept tensor. It has a pointer receiver so that a
// deferred call sees the tensors kept after the defer statement.
func (ts *temps) release() {
	for _, t := range *ts {
		t.Release()
	}
}

func quantizeRowwise(_ context.Context, a *op.RowwiseArgs) (op.Quantized, error) {
	return quantize(op.QuantizeRowwise.Name(), "x", true, a.X, nil, nil, a.Seed)
}

func quantizeTensorwise(_ context.Context, a *op.TensorwiseArgs) (op.Quantized, error) {
	return quantize(op.QuantizeTensorwise.Name(), "x", false, a.X, a.Scale, a.ScaleValue, a.Seed)
}

// quantize runs the quantize operation called name as the contract states
// it, on x's device: row-wise, or tensor-wise with a supplied scale tensor
// or value, or one recalculated from x. param names x in errors.
func quantize(name, param string, rowwise bool, x, scaleT *tensor.Tensor, scaleV *float32, seed int64) (res op.Quantized, err error) {
	dev, _ := primitivesOf(x.Device()) // the constraints checked it
	T := x.DType()
	k := 1 // a scalar is one row of one
	if x.Rank() > 0 {
		k = x.Dim(-1)
	}
	var tmp temps
	defer tmp.release()

	// 1. Per-row abs-max, also used to find NaN and infinity in x (every
	// call checks, whichever scale it uses).
	rowMax, err := tmp.keep(dev.AbsMaxRows(x, k))
	if err != nil {
		return res, err
	}
	row, err := dev.Find(rowMax, NotFinite)
	if err != nil {
		return res, err
	}
	if row >= 0 {
		return res, backend.NonFiniteIn(name, param, row)
	}

	// 2. s = max(a / 127, 1e-30), or the supplied scale in float32.
	var s *tensor.Tensor
	switch {
	case rowwise:
		s, err = scaleFromMax(dev, &tmp, rowMax)
	case scaleV != nil:
		s, err = dev.Fill(dtype.Float32, nil, *scaleV)
	case scaleT != nil:
		s, err = dev.Cast(scaleT, dtype.Float32)
	default:
		var m *tensor.Tensor
		if m, err = tmp.keep(dev.AbsMaxRows(rowMax, rowMax.Numel())); err == nil {
			s, err = scaleFromMax(dev, &tmp, m)
		}
	}
	if err != nil {
		return res, err
	}
	// From here on s is the result's scale; release it only on failure.
	defer func() {
		if err != nil {
			s.Release()
		}
	}()

	// 3. t = rT(s), with zero replaced by T's smallest normal.
	t, err := tmp.keep(dev.Cast(s, T))
	if err != nil {
		return res, err
	}
	if t, err = tmp.keep(dev.ReplaceZero(t, T.TinyNormal())); err != nil {
		return res, err
	}
	// 4. y = rT(x / t), t broadcast over each row (or the whole tensor).
	y, err := tmp.keep(dev.Binary(Div, x, t, T))
	if err != nil {
		return res, err
	}
	// 5. Round to int8: half-even, or floor after adding rT(noise).
	mode := HalfEven
	if seed > 0 {
		u, err := tmp.keep(dev.Noise(seed, x.Shape(), T))
		if err != nil {
			return res, err
		}
		if y, err = tmp.keep(dev.Binary(Add, y, u, T)); err != nil {
			return res, err
		}
		mode = Floor
	}
	q, err := dev.RoundToInt8(y, mode)
	if err != nil {
		return res, err
	}
	shape := []int{} // tensor-wise: a scalar
	if rowwise {
		shape = append(x.Shape()[:x.Rank()-1], 1)
	}
	scale, err := s.Reshape(shape...)
	if err != nil {
		q.Release()
		return res, err
	}
	return op.Quantized{Q: q, Scale: scale}, nil
}

// scaleFromMax computes max(m / 127, 1e-30) in float32.
func scaleFromMax(dev Primitives, tmp *temps, m *tensor.Tensor) (*tensor.Tensor, error) {
	d, err := tmp.keep(dev.BinaryScalar(Div, m, quant.QMax, dtype.Float32))
	if err != nil {
		return nil, err
	}
	return dev.BinaryScalar(Max, d, quant.MinScale, dtype.Float32)
}

func dequantize(_ context.Context, a *op.DequantizeArgs) (op.Dequantized, error) {
	return dequantizeTo(op.Dequantize.Name(), a, dtype.Float32)
}

func dequantizeDType(_ context.Context, a *op.DequantizeDTypeArgs) (op.Dequantized, error) {
	return dequantizeTo(op.DequantizeDType.Name(), &a.DequantizeArgs, a.OutDType)
}

// dequantizeTo computes rOut(f32(q) * f32(scale)) with scale broadcast as
// the contract allows, after finding the first scale that is not a finite
// number > 0, which is an error.
func dequantizeTo(name string, a *op.DequantizeArgs, out dtype.DType) (op.Dequantized, error) {
	dev, _ := primitivesOf(a.Q.Device())
	i, err := dev.Find(a.Scale, NotFinitePositive)
	if err != nil {
		return op.Dequantized{}, err
	}
	if i >= 0 {
		return op.Dequantized{}, op.BadScale(name, i)
	}
	t, err := dev.Binary(Mul, a.Q, a.Scale, out)
	return op.Dequantized{Out: t}, err
}
