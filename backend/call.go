// Package backend is kitchen's backend registry: the operations, the
// description of one call, the constraints a backend declares for each
// operation, and the dispatch that picks, before calling, the first backend
// in priority order whose constraints hold.
//
// Backends import this package and register themselves (usually from init,
// with Register on the Default registry); users normally reach it through
// the top-level kitchen package.
package backend

import (
	"context"
	"fmt"
	"math"

	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/tensor"
)

// Op names an operation. The names are those of comfy-kitchen.
type Op string

// The operations of the INT8 contract.
const (
	QuantizeRowwise    Op = "quantize_int8_rowwise"
	QuantizeTensorwise Op = "quantize_int8_tensorwise"
	Dequantize         Op = "dequantize_int8_simple"
	DequantizeDType    Op = "dequantize_int8_simple_dtype"
)

// Ops returns every operation, in the contract's order.
func Ops() []Op { return []Op{QuantizeRowwise, QuantizeTensorwise, Dequantize, DequantizeDType} }

// Parameter names used in constraints and errors.
const (
	ParamX                  = "x"
	ParamQ                  = "q"
	ParamScale              = "scale"
	ParamOutDType           = "out_dtype"
	ParamStochasticRounding = "stochastic_rounding"
)

// Call is one invocation of an operation, as constraints and kernels see it.
type Call struct {
	Op Op
	// X is the input of the quantize operations.
	X *tensor.Tensor
	// Q is the int8 input of the dequantize operations.
	Q *tensor.Tensor
	// Scale is the scale of the dequantize operations, or a supplied
	// single-element scale tensor for QuantizeTensorwise.
	Scale *tensor.Tensor
	// ScaleValue is a supplied scale number for QuantizeTensorwise. With
	// neither ScaleValue nor Scale the scale is recalculated from X.
	ScaleValue *float32
	// Seed > 0 selects stochastic rounding with that seed.
	Seed int64
	// OutDType is the output type of the dequantize operations.
	OutDType dtype.DType
}

// Input is the call's main tensor: X for quantize, Q for dequantize.
func (c *Call) Input() *tensor.Tensor {
	if c.X != nil {
		return c.X
	}
	return c.Q
}

// Device is the device of the call's main tensor.
func (c *Call) Device() tensor.Device {
	if in := c.Input(); in != nil {
		return in.Device()
	}
	return nil
}

// Tensor returns the tensor parameter of that name, or nil.
func (c *Call) Tensor(param string) *tensor.Tensor {
	switch param {
	case ParamX:
		return c.X
	case ParamQ:
		return c.Q
	case ParamScale:
		return c.Scale
	}
	return nil
}

// Stochastic reports whether the call asks for stochastic rounding.
func (c *Call) Stochastic() bool { return c.Seed > 0 }

// Result holds what a kernel returns: Q and Scale for the quantize
// operations, Out for the dequantize ones.
type Result struct {
	Q, Scale, Out *tensor.Tensor
}

// Kernel runs one operation. The registry has validated the call against
// the contract and the backend's constraints before it is called.
type Kernel func(ctx context.Context, c *Call) (Result, error)

// Validate checks a call against the contract: presence, dtypes, shapes,
// devices and supplied scales. It does not read the input data; kernels
// report NaN and infinity in x themselves.
func Validate(c *Call) error {
	bad := func(param string, err error, format string, a ...any) error {
		return &ArgError{Op: c.Op, Param: param, Row: -1, Err: err, Detail: fmt.Sprintf(format, a...)}
	}
	switch c.Op {
	case QuantizeRowwise, QuantizeTensorwise:
		if err := checkTensor(c, ParamX, c.X, true); err != nil {
			return err
		}
		if c.Q != nil {
			return bad(ParamQ, ErrOption, "quantize takes x, not q")
		}
		if c.Op == QuantizeRowwise {
			if c.X.Rank() == 0 {
				return bad(ParamX, ErrShape, "got a scalar, want shape [..., K]")
			}
			if c.Scale != nil || c.ScaleValue != nil {
				return bad(ParamScale, ErrOption, "row-wise quantization computes its own scales")
			}
			return nil
		}
		if c.Scale != nil && c.ScaleValue != nil {
			return bad(ParamScale, ErrOption, "give a scale number or a scale tensor, not both")
		}
		if v := c.ScaleValue; v != nil && !(*v > 0 && !math.IsInf(float64(*v), 1)) {
			return bad(ParamScale, ErrScale, "%v: want a finite number > 0", *v)
		}
		if c.Scale != nil {
			if err := checkTensor(c, ParamScale, c.Scale, true); err != nil {
				return err
			}
			if n := c.Scale.Numel(); n != 1 {
				return bad(ParamScale, ErrShape, "shape %v has %d elements, want one", c.Scale.Shape(), n)
			}
			i, err := c.Scale.Device().Find(c.Scale, tensor.NotFinitePositive)
			if err != nil {
				return err
			}
			if i >= 0 {
				return bad(ParamScale, ErrScale, "want a finite number > 0")
			}
		}
		return nil
	case Dequantize, DequantizeDType:
		if err := checkTensor(c, ParamQ, c.Q, false); err != nil {
			return err
		}
		if c.X != nil {
			return bad(ParamX, ErrOption, "dequantize takes q, not x")
		}
		if c.Q.DType() != dtype.Int8 {
			return bad(ParamQ, ErrDType, "got %v, want int8", c.Q.DType())
		}
		if c.ScaleValue != nil {
			return bad(ParamScale, ErrOption, "dequantize takes a scale tensor")
		}
		if c.Scale == nil {
			return bad(ParamScale, ErrNil, "missing")
		}
		if err := checkTensor(c, ParamScale, c.Scale, true); err != nil {
			return err
		}
		if !ScaleBroadcasts(c.Scale, c.Q) {
			return bad(ParamScale, ErrShape, "shape %v does not fit q %v: want one element, [..., 1] with q's leading dimensions, or q's shape", c.Scale.Shape(), c.Q.Shape())
		}
		if c.Op == Dequantize && c.OutDType != dtype.Float32 {
			return bad(ParamOutDType, ErrDType, "got %v, %s returns float32", c.OutDType, Dequantize)
		}
		if !c.OutDType.IsFloat() {
			return bad(ParamOutDType, ErrDType, "got %v, want float32, float16 or bfloat16", c.OutDType)
		}
		if c.Seed != 0 {
			return bad(ParamStochasticRounding, ErrOption, "dequantize does not round stochastically")
		}
		return nil
	}
	return &ArgError{Op: c.Op, Param: "op", Row: -1, Err: ErrOption, Detail: "unknown operation"}
}

func checkTensor(c *Call, param string, t *tensor.Tensor, float bool) error {
	bad := func(err error, format string, a ...any) error {
		return &ArgError{Op: c.Op, Param: param, Row: -1, Err: err, Detail: fmt.Sprintf(format, a...)}
	}
	switch {
	case t == nil:
		return bad(ErrNil, "missing")
	case t.Device() == nil || !t.DType().Valid():
		return bad(ErrNil, "uninitialised tensor")
	case t.Numel() == 0:
		return bad(ErrEmpty, "shape %v has no elements", t.Shape())
	case float && !t.DType().IsFloat():
		return bad(ErrDType, "got %v, want float32, float16 or bfloat16", t.DType())
	case t.Device() != c.Device():
		return bad(ErrDevice, "on %v, but %s is on %v", t.Device(), c.inputName(), c.Device())
	}
	return nil
}

func (c *Call) inputName() string {
	if c.X != nil {
		return ParamX
	}
	return ParamQ
}

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
