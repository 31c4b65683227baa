// Package eager is kitchen's reference backend: the INT8 contract written
// step by step over the primitives of tensor.Device, so it runs on every
// device, for every float dtype and both rounding modes. It registers itself
// with backend.Default at the lowest priority; faster backends are tested
// against it.
package eager

import (
	"context"

	"github.com/gokitchen/kitchen/backend"
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/quant"
	"github.com/gokitchen/kitchen/tensor"
)

// Name is the backend's registered name.
const Name = "eager"

func init() { backend.Register(New()) }

// New returns the eager backend, for registering with a Registry other than
// the default.
func New() backend.Backend {
	any := backend.Capability{Run: run}
	return backend.Backend{Name: Name, Kind: backend.Reference, Ops: map[backend.Op]backend.Capability{
		backend.QuantizeRowwise:    any,
		backend.QuantizeTensorwise: any,
		backend.Dequantize:         any,
		backend.DequantizeDType:    any,
	}}
}

func run(ctx context.Context, c *backend.Call) (backend.Result, error) {
	if c.Op == backend.Dequantize || c.Op == backend.DequantizeDType {
		out, err := Dequantize(c.Q, c.Scale, c.OutDType)
		return backend.Result{Out: out}, err
	}
	q, scale, err := Quantize(c)
	return backend.Result{Q: q, Scale: scale}, err
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

// Quantize runs QuantizeRowwise or QuantizeTensorwise as the contract
// states them, on x's device.
func Quantize(c *backend.Call) (q, scale *tensor.Tensor, err error) {
	x := c.X
	dev := x.Device()
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
		return nil, nil, err
	}
	row, err := dev.Find(rowMax, tensor.NotFinite)
	if err != nil {
		return nil, nil, err
	}
	if row >= 0 {
		return nil, nil, backend.NonFinite(c.Op, row)
	}

	// 2. s = max(a / 127, 1e-30), or the supplied scale in float32.
	var s *tensor.Tensor
	switch {
	case c.Op == backend.QuantizeRowwise:
		s, err = scaleFromMax(dev, &tmp, rowMax)
	case c.ScaleValue != nil:
		s, err = dev.Fill(dtype.Float32, nil, *c.ScaleValue)
	case c.Scale != nil:
		s, err = dev.Cast(c.Scale, dtype.Float32)
	default:
		var m *tensor.Tensor
		if m, err = tmp.keep(dev.AbsMaxRows(rowMax, rowMax.Numel())); err == nil {
			s, err = scaleFromMax(dev, &tmp, m)
		}
	}
	if err != nil {
		return nil, nil, err
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
		return nil, nil, err
	}
	if t, err = tmp.keep(dev.ReplaceZero(t, T.TinyNormal())); err != nil {
		return nil, nil, err
	}
	// 4. y = rT(x / t), t broadcast over each row (or the whole tensor).
	y, err := tmp.keep(dev.Binary(tensor.Div, x, t, T))
	if err != nil {
		return nil, nil, err
	}
	// 5. Round to int8: half-even, or floor after adding rT(noise).
	mode := tensor.HalfEven
	if c.Stochastic() {
		u, err := tmp.keep(dev.Noise(c.Seed, x.Shape(), T))
		if err != nil {
			return nil, nil, err
		}
		if y, err = tmp.keep(dev.Binary(tensor.Add, y, u, T)); err != nil {
			return nil, nil, err
		}
		mode = tensor.Floor
	}
	if q, err = dev.RoundToInt8(y, mode); err != nil {
		return nil, nil, err
	}
	shape := []int{} // tensor-wise: a scalar
	if c.Op == backend.QuantizeRowwise {
		shape = append(x.Shape()[:x.Rank()-1], 1)
	}
	if scale, err = s.Reshape(shape...); err != nil {
		q.Release()
		return nil, nil, err
	}
	return q, scale, nil
}

// scaleFromMax computes max(m / 127, 1e-30) in float32.
func scaleFromMax(dev tensor.Device, tmp *temps, m *tensor.Tensor) (*tensor.Tensor, error) {
	d, err := tmp.keep(dev.BinaryScalar(tensor.Div, m, quant.QMax, dtype.Float32))
	if err != nil {
		return nil, err
	}
	return dev.BinaryScalar(tensor.Max, d, quant.MinScale, dtype.Float32)
}

// Dequantize computes rOut(f32(q) * f32(scale)) with scale broadcast as the
// contract allows.
func Dequantize(q, scale *tensor.Tensor, out dtype.DType) (*tensor.Tensor, error) {
	return q.Device().Binary(tensor.Mul, q, scale, out)
}
