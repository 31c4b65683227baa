// Package op declares kitchen's operations, one file per family: each
// operation's comfy-kitchen name, its typed arguments, its result, and the
// contract's rules for its parameters (docs/CONTRACT.md). Backends import it
// to implement the operations (Op.Implement); the kitchen package wraps each
// in a public function.
//
// Arguments are one struct per operation, not one bag of optional fields
// shared by all: a kernel sees exactly its operation's parameters, the
// compiler checks that a backend's kernel fits the operation it claims, and
// a new operation adds a type here without touching the others. The
// registry reaches the parameters by name (backend.Args) for constraint
// checks and refusals.
package op

import (
	"fmt"
	"math"

	"github.com/gokitchen/kitchen/backend"
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/tensor"
)

// argError makes the error for a bad parameter of an operation.
func argError(op, param string, err error, format string, a ...any) error {
	return &backend.ArgError{Op: op, Param: param, Row: -1, Err: err, Detail: fmt.Sprintf(format, a...)}
}

// errReleased is a released tensor given to an operation: as good as
// missing (backend.ErrNil), and tensor.ErrReleased for errors.Is.
var errReleased = fmt.Errorf("%w: %w", backend.ErrNil, tensor.ErrReleased)

// checkTensor checks that a tensor parameter is present, usable, not empty,
// on the call's device dev (nil: any) and, when float is set, of a float
// dtype.
func checkTensor(op, param string, t *tensor.Tensor, float bool, dev tensor.Device, main string) error {
	switch {
	case t == nil:
		return argError(op, param, backend.ErrNil, "missing")
	case t.Device() == nil || !t.DType().Valid():
		return argError(op, param, backend.ErrNil, "uninitialised tensor")
	case t.Released():
		return argError(op, param, errReleased, "")
	case t.Numel() == 0:
		return argError(op, param, backend.ErrEmpty, "shape %v has no elements", t.Shape())
	case float && !t.DType().IsFloat():
		return argError(op, param, backend.ErrDType, "got %v, want float32, float16 or bfloat16", t.DType())
	case dev != nil && t.Device() != dev:
		return argError(op, param, backend.ErrDevice, "on %v, but %s is on %v", t.Device(), main, dev)
	}
	return nil
}

// hostValue reads element 0 of a tensor, copying it to the host if needed.
func hostValue(t *tensor.Tensor) (float32, error) {
	h, err := t.To(tensor.CPU())
	if err != nil {
		return 0, err
	}
	v, err := h.Float32s()
	if err != nil {
		return 0, err
	}
	return v[0], nil
}

// positive reports whether a scale is finite and > 0.
func positive(v float32) bool { return v > 0 && v <= math.MaxFloat32 }

// deviceOf is the device of t, or nil for a nil or zero tensor.
func deviceOf(t *tensor.Tensor) tensor.Device {
	if t == nil {
		return nil
	}
	return t.Device()
}

// dtypeOf is the dtype of an optional tensor parameter.
func dtypeOf(t *tensor.Tensor) (dtype.DType, bool) {
	if t == nil {
		return 0, false
	}
	return t.DType(), true
}
