package op

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/gokitchen/kitchen/backend"
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/tensor"
)

// The dequantize operations of the INT8 contract.
var (
	// Dequantize is dequantize_int8_simple: float32 q * scale.
	Dequantize = backend.Declare[*DequantizeArgs, Dequantized]("dequantize_int8_simple", prepareDequantize)
	// DequantizeDType is dequantize_int8_simple_dtype: q * scale rounded to
	// an output dtype.
	DequantizeDType = backend.Declare[*DequantizeDTypeArgs, Dequantized]("dequantize_int8_simple_dtype", prepareDequantizeDType)
)

// DequantizeArgs are the arguments of dequantize_int8_simple.
type DequantizeArgs struct {
	// Q is int8 of any shape.
	Q *tensor.Tensor
	// Scale is float32, float16 or bfloat16 on q's device, with one element,
	// one per row ([..., 1] with q's leading dimensions), or q's shape.
	Scale *tensor.Tensor
	backend.Into[Dequantized]
}

// DequantizeDTypeArgs are the arguments of dequantize_int8_simple_dtype.
type DequantizeDTypeArgs struct {
	DequantizeArgs
	// OutDType is float32, float16 or bfloat16.
	OutDType dtype.DType
}

// Dequantized is the result of the dequantize operations.
type Dequantized struct {
	Out *tensor.Tensor
}

// Outputs implements backend.Result.
func (r Dequantized) Outputs() []*tensor.Tensor { return []*tensor.Tensor{r.Out} }

// Device implements backend.Args.
func (a *DequantizeArgs) Device() tensor.Device { return deviceOf(a.Q) }

// Tensor implements backend.Args.
func (a *DequantizeArgs) Tensor(param string) *tensor.Tensor {
	switch param {
	case "q":
		return a.Q
	case "scale":
		return a.Scale
	}
	return nil
}

// DType implements backend.Args; out_dtype is float32.
func (a *DequantizeArgs) DType(param string) (dtype.DType, bool) {
	if param == "out_dtype" {
		return dtype.Float32, true
	}
	return dtypeOf(a.Tensor(param))
}

// Validate implements backend.Args.
func (a *DequantizeArgs) Validate() error {
	return a.validateInto(Dequantize.Name(), a.validate, dtype.Float32)
}

// validateInto runs validate, then checks the caller's output, of q's
// shape and dtype dt.
func (a *DequantizeArgs) validateInto(name string, validate func(string) error, dt dtype.DType) error {
	if err := validate(name); err != nil {
		return err
	}
	return checkOuts(name, a.Q.Device(), a.outs(dt), a.Q, a.Scale)
}

func (a *DequantizeArgs) outs(dt dtype.DType) outList { return oneOut(a.Out.Out, dt, same(a.Q)) }

// Result returns the tensor the call writes, float32 of q's shape: Out's,
// or a fresh one on q's device.
func (a *DequantizeArgs) Result() (Dequantized, error) { return a.result(dtype.Float32) }

func (a *DequantizeArgs) result(dt dtype.DType) (Dequantized, error) {
	t, err := allocOne(a.Q.Device(), a.outs(dt))
	return Dequantized{Out: t}, err
}

func (a *DequantizeArgs) validate(name string) error {
	if err := checkTensor(name, "q", a.Q, false, nil, ""); err != nil {
		return err
	}
	if a.Q.DType() != dtype.Int8 {
		return argError(name, "q", backend.ErrDType, "got %v, want int8", a.Q.DType())
	}
	if err := checkTensor(name, "scale", a.Scale, true, a.Q.Device(), "q"); err != nil {
		return err
	}
	if !ScaleBroadcasts(a.Scale, a.Q) {
		return argError(name, "scale", tensor.ErrShape, "shape %v does not fit q %v: want one element, [..., 1] with q's leading dimensions, or q's shape", a.Scale.Shape(), a.Q.Shape())
	}
	return nil
}

// DType implements backend.Args.
func (a *DequantizeDTypeArgs) DType(param string) (dtype.DType, bool) {
	if param == "out_dtype" {
		return a.OutDType, true
	}
	return a.DequantizeArgs.DType(param)
}

// Validate implements backend.Args.
func (a *DequantizeDTypeArgs) Validate() error {
	name := DequantizeDType.Name()
	if err := a.validate(name); err != nil {
		return err
	}
	if err := checkOutDType(name, a.OutDType); err != nil {
		return err
	}
	return a.validateInto(name, func(string) error { return nil }, a.OutDType)
}

// Result returns the tensor the call writes, of q's shape and OutDType:
// Out's, or a fresh one on q's device.
func (a *DequantizeDTypeArgs) Result() (Dequantized, error) { return a.result(a.OutDType) }

// ScaleBroadcasts reports whether a dequantize scale applies to q: one
// element, one per row ([..., 1] with q's leading dimensions), or q's exact
// shape.
func ScaleBroadcasts(scale, q *tensor.Tensor) bool {
	if scale.Numel() == 1 {
		return true
	}
	n := q.Rank()
	if scale.Rank() != n || n == 0 {
		return false
	}
	for i := range n - 1 {
		if scale.Dim(i) != q.Dim(i) {
			return false
		}
	}
	last := scale.Dim(-1)
	return last == 1 || last == q.Dim(-1)
}

// dequantizeInputs makes a dequantize workload's inputs on x's device: q
// of x's shape and one float32 scale per row. The values are arbitrary;
// the kernels' speed does not depend on them.
func dequantizeInputs(x *tensor.Tensor) (DequantizeArgs, int64, error) {
	n, k := x.Numel(), x.Dim(-1)
	qb, sb := make([]byte, n), make([]byte, 4*(n/k))
	for i := range qb {
		qb[i] = byte(i*31%255 - 127)
	}
	for r := range n / k {
		binary.LittleEndian.PutUint32(sb[4*r:], math.Float32bits(float32(r%7+1)/127))
	}
	shape := x.Shape()
	q, err := tensor.FromBytes(dtype.Int8, qb, shape...)
	if err != nil {
		return DequantizeArgs{}, 0, err
	}
	shape[len(shape)-1] = 1
	scale, err := tensor.FromBytes(dtype.Float32, sb, shape...)
	if err != nil {
		return DequantizeArgs{}, 0, err
	}
	if q, err = q.To(x.Device()); err != nil {
		return DequantizeArgs{}, 0, err
	}
	if scale, err = scale.To(x.Device()); err != nil {
		q.Release()
		return DequantizeArgs{}, 0, err
	}
	return DequantizeArgs{Q: q, Scale: scale}, int64(n + len(sb)), nil
}

func prepareDequantize(_ context.Context, _ *backend.Registry, spec *backend.Spec) (*DequantizeArgs, backend.Cost, error) {
	x, cost, err := qdqInput(spec)
	if err != nil {
		return nil, cost, err
	}
	a, in, err := dequantizeInputs(x)
	cost.Bytes = in + 4*int64(x.Numel())
	return &a, cost, err
}

func prepareDequantizeDType(_ context.Context, _ *backend.Registry, spec *backend.Spec) (*DequantizeDTypeArgs, backend.Cost, error) {
	x, cost, err := qdqInput(spec)
	if err != nil {
		return nil, cost, err
	}
	a, in, err := dequantizeInputs(x)
	cost.Bytes = in + int64(x.Nbytes())
	return &DequantizeDTypeArgs{a, x.DType()}, cost, err
}

// BadScale returns the error for a dequantize scale whose element i (flat
// index) is not a finite number > 0, which the kernels find as they read
// the scales.
func BadScale(op string, i int) error {
	return &backend.ArgError{Op: op, Param: "scale", Row: -1, Err: backend.ErrScale,
		Detail: fmt.Sprintf("element %d: want a finite number > 0", i)}
}
