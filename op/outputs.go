package op

import (
	"fmt"

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

// shapeOf is an output's shape, derived from an input's without
// allocating: like's shape with its last dimension set to last (if >= 0),
// then extra appended (if >= 0); a scalar when like is nil.
type shapeOf struct {
	like        *tensor.Tensor
	last, extra int
}

// same is the shape of like.
func same(like *tensor.Tensor) shapeOf { return shapeOf{like: like, last: -1, extra: -1} }

// lastDim is like's shape with its last dimension n.
func lastDim(like *tensor.Tensor, n int) shapeOf { return shapeOf{like: like, last: n, extra: -1} }

func (s shapeOf) append(dst []int) []int {
	if s.like == nil {
		return dst
	}
	dst = s.like.AppendShape(dst)
	if s.last >= 0 {
		dst[len(dst)-1] = s.last
	}
	if s.extra >= 0 {
		dst = append(dst, s.extra)
	}
	return dst
}

func (s shapeOf) String() string { return fmt.Sprint(s.append(nil)) }

// matches reports whether t has the shape.
func (s shapeOf) matches(t *tensor.Tensor) bool {
	var buf [8]int
	want := s.append(buf[:0])
	if t.Rank() != len(want) {
		return false
	}
	for i, d := range want {
		if t.Dim(i) != d {
			return false
		}
	}
	return true
}

// outSpec is what one output of a call must be.
type outSpec struct {
	param string // for errors: "out", "out_q", "out_scale"
	t     *tensor.Tensor
	dt    dtype.DType
	shape shapeOf
}

// outList is a call's outputs, held by value so that listing them does not
// allocate.
type outList struct {
	n int
	s [2]outSpec
}

func (l *outList) all() []outSpec { return l.s[:l.n] }

// checkOuts checks the given outputs of a call on dev whose inputs are ins.
func checkOuts(name string, dev tensor.Device, l outList, ins ...*tensor.Tensor) error {
	outs := l.all()
	for i, o := range outs {
		t := o.t
		if t == nil {
			continue
		}
		switch {
		case t.Device() == nil || !t.DType().Valid():
			return argError(name, o.param, backend.ErrNil, "uninitialised tensor")
		case t.Released():
			return argError(name, o.param, errReleased, "")
		case t.Device() != dev:
			return argError(name, o.param, backend.ErrDevice, "on %v, but the call runs on %v", t.Device(), dev)
		case t.DType() != o.dt:
			return argError(name, o.param, backend.ErrDType, "got %v, want %v", t.DType(), o.dt)
		case !o.shape.matches(t):
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

// allocOuts returns the tensors a call writes, in ts: the given ones, and
// fresh ones on dev for the rest.
func allocOuts(dev tensor.Device, l outList, ts []*tensor.Tensor) error {
	outs := l.all()
	for i, o := range outs {
		if o.t != nil {
			ts[i] = o.t
			continue
		}
		var buf [8]int
		var t *tensor.Tensor
		var err error
		if dev == tensor.CPU() {
			t, err = tensor.Empty(o.dt, o.shape.append(buf[:0])...) // buf stays on the stack
		} else {
			t, err = dev.Alloc(o.dt, o.shape.append(buf[:0]))
		}
		if err != nil {
			for j, f := range ts[:i] {
				if outs[j].t == nil {
					f.Release()
				}
			}
			return err
		}
		ts[i] = t
	}
	return nil
}

// outs are the outputs of a quantize operation: q of x's shape and float32
// scales of the given shape.
func (r Quantized) outs(x *tensor.Tensor, scale shapeOf) outList {
	return outList{n: 2, s: [2]outSpec{
		{param: "out_q", t: r.Q, dt: dtype.Int8, shape: same(x)},
		{param: "out_scale", t: r.Scale, dt: dtype.Float32, shape: scale},
	}}
}

// alloc returns the Quantized result to write for l.
func (r Quantized) alloc(dev tensor.Device, l outList) (Quantized, error) {
	var ts [2]*tensor.Tensor
	if err := allocOuts(dev, l, ts[:]); err != nil {
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

// oneOut is the single output of an operation.
func oneOut(t *tensor.Tensor, dt dtype.DType, shape shapeOf) outList {
	return outList{n: 1, s: [2]outSpec{{param: "out", t: t, dt: dt, shape: shape}}}
}

// allocOne returns the one tensor a call writes.
func allocOne(dev tensor.Device, l outList) (*tensor.Tensor, error) {
	var ts [1]*tensor.Tensor
	err := allocOuts(dev, l, ts[:])
	return ts[0], err
}
