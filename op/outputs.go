package op

import (
	"slices"

	"github.com/gokitchen/kitchen/backend"
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/tensor"
)

// Caller-owned outputs. Every Args has an Out field of its operation's
// result type: the tensors the call writes into instead of allocating, so
// that inference loops and converters reuse buffers. A nil field (the zero
// value) asks for a fresh tensor. Validate checks each given output's
// device, dtype and shape, and that it shares no memory with an input or
// another output (inputs are never modified). Kernels get the tensors to
// write from the Args' Result method; backend.Op.Run copies a result into
// a given output when a kernel wrote elsewhere, so every backend honours
// Out. If the call fails, the contents of given outputs are unspecified.

// outSpec is what one output of a call must be.
type outSpec struct {
	param string // for errors: "out", "out_q", "out_scale"
	t     *tensor.Tensor
	dt    dtype.DType
	shape []int
}

// checkOuts checks the given outputs of a call on dev whose inputs are ins.
func checkOuts(name string, dev tensor.Device, ins []*tensor.Tensor, outs ...outSpec) error {
	for i, o := range outs {
		t := o.t
		if t == nil {
			continue
		}
		switch {
		case t.Device() == nil || !t.DType().Valid():
			return argError(name, o.param, backend.ErrNil, "uninitialised tensor")
		case t.Device() != dev:
			return argError(name, o.param, backend.ErrDevice, "on %v, but the call runs on %v", t.Device(), dev)
		case t.DType() != o.dt:
			return argError(name, o.param, backend.ErrDType, "got %v, want %v", t.DType(), o.dt)
		case !slices.Equal(t.Shape(), o.shape):
			return argError(name, o.param, tensor.ErrShape, "shape %v, want %v", t.Shape(), o.shape)
		}
		for _, in := range ins {
			if tensor.Overlaps(t, in) {
				return argError(name, o.param, backend.ErrAlias, "shares memory with an input, which is never modified")
			}
		}
		for _, p := range outs[:i] {
			if tensor.Overlaps(t, p.t) {
				return argError(name, o.param, backend.ErrAlias, "shares memory with %s", p.param)
			}
		}
	}
	return nil
}

// allocOuts returns the tensors a call writes: the given ones, and fresh
// ones on dev for the rest.
func allocOuts(dev tensor.Device, outs ...outSpec) ([]*tensor.Tensor, error) {
	ts := make([]*tensor.Tensor, len(outs))
	for i, o := range outs {
		if o.t != nil {
			ts[i] = o.t
			continue
		}
		t, err := dev.Alloc(o.dt, o.shape)
		if err != nil {
			for _, f := range ts[:i] {
				if !given(f, outs) {
					f.Release()
				}
			}
			return nil, err
		}
		ts[i] = t
	}
	return ts, nil
}

func given(t *tensor.Tensor, outs []outSpec) bool {
	for _, o := range outs {
		if o.t == t {
			return true
		}
	}
	return false
}

// quantizedOuts are the outputs of a quantize operation: q of x's shape
// and float32 scales of scaleShape.
func (r Quantized) outs(x *tensor.Tensor, scaleShape []int) []outSpec {
	return []outSpec{
		{param: "out_q", t: r.Q, dt: dtype.Int8, shape: x.Shape()},
		{param: "out_scale", t: r.Scale, dt: dtype.Float32, shape: scaleShape},
	}
}

// alloc returns the Quantized result to write for outs.
func (r Quantized) alloc(dev tensor.Device, outs []outSpec) (Quantized, error) {
	ts, err := allocOuts(dev, outs...)
	if err != nil {
		return Quantized{}, err
	}
	return Quantized{Q: ts[0], Scale: ts[1]}, nil
}

// WithOutputs implements backend.Result: the result with its tensors
// replaced by ts (q, then scale).
func (r Quantized) WithOutputs(ts []*tensor.Tensor) Quantized {
	return Quantized{Q: ts[0], Scale: ts[1]}
}

// WithOutputs returns the result with its tensor replaced by ts[0].
func (r Dequantized) WithOutputs(ts []*tensor.Tensor) Dequantized { return Dequantized{Out: ts[0]} }

// WithOutputs returns the result with its tensor replaced by ts[0].
func (r MMInt8Result) WithOutputs(ts []*tensor.Tensor) MMInt8Result { return MMInt8Result{Out: ts[0]} }

// rowScaleShape is the shape of row-wise scales of x: [..., 1].
func rowScaleShape(x *tensor.Tensor) []int {
	s := x.Shape()
	s[len(s)-1] = 1
	return s
}

// oneOut is the single output of a dequantize-like operation.
func oneOut(t *tensor.Tensor, dt dtype.DType, shape []int) []outSpec {
	return []outSpec{{param: "out", t: t, dt: dt, shape: shape}}
}

// allocOne returns the one tensor a call writes.
func allocOne(dev tensor.Device, outs []outSpec) (*tensor.Tensor, error) {
	ts, err := allocOuts(dev, outs...)
	if err != nil {
		return nil, err
	}
	return ts[0], nil
}
