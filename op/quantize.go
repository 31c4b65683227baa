package op

import (
	"context"
	"fmt"

	"github.com/gokitchen/kitchen/backend"
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/tensor"
)

// The quantize operations of the INT8 contract.
var (
	// QuantizeRowwise is quantize_int8_rowwise: one scale per row.
	QuantizeRowwise = backend.Declare[*RowwiseArgs, Quantized]("quantize_int8_rowwise", prepareRowwise)
	// QuantizeTensorwise is quantize_int8_tensorwise: one scale for the
	// whole tensor.
	QuantizeTensorwise = backend.Declare[*TensorwiseArgs, Quantized]("quantize_int8_tensorwise", prepareTensorwise)
)

// RowwiseArgs are the arguments of quantize_int8_rowwise.
type RowwiseArgs struct {
	// X is float32, float16 or bfloat16 of shape [..., K]; a 1-D x is one row.
	X *tensor.Tensor
	// Seed > 0 selects stochastic rounding with that seed.
	Seed int64
	backend.Into[Quantized]
}

// TensorwiseArgs are the arguments of quantize_int8_tensorwise.
type TensorwiseArgs struct {
	// X is float32, float16 or bfloat16 of any shape.
	X *tensor.Tensor
	// Scale, when not nil, is a supplied one-element scale tensor of a float
	// dtype on x's device.
	Scale *tensor.Tensor
	// ScaleValue, when not nil, is a supplied scale. With neither it and
	// Scale, the scale is recalculated from x.
	ScaleValue *float32
	// Seed > 0 selects stochastic rounding with that seed.
	Seed int64
	backend.Into[Quantized]
}

// Quantized is the result of the quantize operations: q, int8 of x's shape,
// and the float32 scale ([..., 1] row-wise, a scalar tensor-wise).
type Quantized struct {
	Q, Scale *tensor.Tensor
}

// Outputs implements backend.Result.
func (r Quantized) Outputs() []*tensor.Tensor { return []*tensor.Tensor{r.Q, r.Scale} }

// Device implements backend.Args.
func (a *RowwiseArgs) Device() tensor.Device { return deviceOf(a.X) }

// Tensor implements backend.Args.
func (a *RowwiseArgs) Tensor(param string) *tensor.Tensor {
	if param == "x" {
		return a.X
	}
	return nil
}

// DType implements backend.Args.
func (a *RowwiseArgs) DType(param string) (dtype.DType, bool) { return dtypeOf(a.Tensor(param)) }

// Stochastic implements backend.Stochastic.
func (a *RowwiseArgs) Stochastic() bool { return a.Seed > 0 }

// Validate implements backend.Args.
func (a *RowwiseArgs) Validate() error {
	name := QuantizeRowwise.Name()
	if err := checkTensor(name, "x", a.X, true, nil, ""); err != nil {
		return err
	}
	if a.X.Rank() == 0 {
		return argError(name, "x", tensor.ErrShape, "got a scalar, want shape [..., K]")
	}
	return checkOuts(name, a.X.Device(), a.outs(), a.X)
}

func (a *RowwiseArgs) outs() outList { return a.Out.outs(a.X, lastDim(a.X, 1)) }

// Result returns the tensors the call writes: Out's, and fresh ones on x's
// device for the rest.
func (a *RowwiseArgs) Result() (Quantized, error) { return a.Out.alloc(a.X.Device(), a.outs()) }

// Device implements backend.Args.
func (a *TensorwiseArgs) Device() tensor.Device { return deviceOf(a.X) }

// Tensor implements backend.Args.
func (a *TensorwiseArgs) Tensor(param string) *tensor.Tensor {
	switch param {
	case "x":
		return a.X
	case "scale":
		return a.Scale
	}
	return nil
}

// DType implements backend.Args.
func (a *TensorwiseArgs) DType(param string) (dtype.DType, bool) { return dtypeOf(a.Tensor(param)) }

// Stochastic implements backend.Stochastic.
func (a *TensorwiseArgs) Stochastic() bool { return a.Seed > 0 }

// Validate implements backend.Args. A supplied scale tensor is read (one
// element, copied to the host) to check that it is finite and positive.
func (a *TensorwiseArgs) Validate() error {
	name := QuantizeTensorwise.Name()
	if err := checkTensor(name, "x", a.X, true, nil, ""); err != nil {
		return err
	}
	if a.Scale != nil && a.ScaleValue != nil {
		return argError(name, "scale", backend.ErrOption, "give a scale number or a scale tensor, not both")
	}
	if v := a.ScaleValue; v != nil && !positive(*v) {
		return argError(name, "scale", backend.ErrScale, "%v: want a finite number > 0", *v)
	}
	if a.Scale != nil {
		if err := checkTensor(name, "scale", a.Scale, true, a.X.Device(), "x"); err != nil {
			return err
		}
		if n := a.Scale.Numel(); n != 1 {
			return argError(name, "scale", tensor.ErrShape, "shape %v has %d elements, want one", a.Scale.Shape(), n)
		}
		v, err := hostValue(a.Scale)
		if err != nil {
			return err
		}
		if !positive(v) {
			return argError(name, "scale", backend.ErrScale, "%v: want a finite number > 0", v)
		}
	}
	return checkOuts(name, a.X.Device(), a.outs(), a.X, a.Scale)
}

func (a *TensorwiseArgs) outs() outList { return a.Out.outs(a.X, shapeOf{}) }

// Result returns the tensors the call writes: Out's, and fresh ones on x's
// device for the rest.
func (a *TensorwiseArgs) Result() (Quantized, error) { return a.Out.alloc(a.X.Device(), a.outs()) }

// qdqInput is a Q/DQ workload's float input, as the spec says, and the
// cost of copying it.
func qdqInput(spec *backend.Spec) (*tensor.Tensor, backend.Cost, error) {
	if len(spec.Shape) == 0 || !spec.DType.IsFloat() {
		return nil, backend.Cost{}, fmt.Errorf("%w: a float input of some shape is needed", backend.ErrNoWorkload)
	}
	x, err := spec.Input()
	if err != nil {
		return nil, backend.Cost{}, err
	}
	return x, backend.Cost{CopyBytes: int64(x.Nbytes())}, nil
}

func prepareRowwise(_ context.Context, _ *backend.Registry, spec *backend.Spec) (*RowwiseArgs, backend.Cost, error) {
	x, cost, err := qdqInput(spec)
	if err != nil {
		return nil, cost, err
	}
	cost.Bytes = rowwiseBytes(x)
	return &RowwiseArgs{X: x}, cost, nil
}

func prepareTensorwise(_ context.Context, _ *backend.Registry, spec *backend.Spec) (*TensorwiseArgs, backend.Cost, error) {
	x, cost, err := qdqInput(spec)
	if err != nil {
		return nil, cost, err
	}
	n := int64(x.Numel())
	cost.Bytes = 2*n*int64(x.DType().Size()) + n
	return &TensorwiseArgs{X: x}, cost, nil
}

// rowwiseBytes is what a row-wise quantization of x must move at the least.
func rowwiseBytes(x *tensor.Tensor) int64 {
	n, rows := int64(x.Numel()), int64(x.Numel()/x.Dim(-1))
	return n*int64(x.DType().Size()) + n + 4*rows
}
