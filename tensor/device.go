package tensor

import (
	"fmt"

	"github.com/gokitchen/kitchen/dtype"
)

// Device owns tensor memory and supplies the primitive kernels that the
// device-generic eager backend composes. A device implements them with its
// own kernels (the host in Go, an NPU with its runtime's operators), so eager
// runs on any device without moving data to the host.
//
// Primitives return new tensors on the same device; they never modify their
// inputs. Callers release intermediate results with Tensor.Release.
type Device interface {
	// Type is the device kind that backend constraints match: "cpu", "npu".
	Type() string
	// String names this device, e.g. "cpu" or "npu:0".
	String() string

	// Alloc returns a tensor with unspecified contents.
	Alloc(dt dtype.DType, shape []int) (*Tensor, error)
	// Release frees a tensor's memory.
	Release(t *Tensor)
	// CopyFromHost fills dst with little-endian host bytes of its exact size.
	CopyFromHost(dst *Tensor, src []byte) error
	// CopyToHost copies src into host bytes of its exact size.
	CopyToHost(dst []byte, src *Tensor) error

	Primitives
}

// Primitives are the kernels the eager backend is written in. Element-wise
// ones widen their inputs exactly to float32, compute in IEEE float32 with
// round-to-nearest-even, and round the result once to the output dtype.
type Primitives interface {
	// AbsMaxRows returns float32 [Numel/rowLen]: the largest |x| of each run
	// of rowLen consecutive elements. A row holding NaN gives NaN (a device
	// whose maximum skips NaN may give +Inf for a row holding both NaN and
	// an infinity; either way the value is not finite).
	AbsMaxRows(x *Tensor, rowLen int) (*Tensor, error)
	// Find returns the flat index of the first element of a float tensor
	// that meets cond, or -1 if none does.
	Find(x *Tensor, cond Condition) (int, error)
	// Binary computes op(a, b) rounded to out, with the shape of a. b has a's
	// number of elements, or one element, or one element per row of a (a's
	// last dimension is broadcast).
	Binary(op BinaryOp, a, b *Tensor, out dtype.DType) (*Tensor, error)
	// BinaryScalar computes op(a, c) rounded to out.
	BinaryScalar(op BinaryOp, a *Tensor, c float32, out dtype.DType) (*Tensor, error)
	// Cast rounds each element of x to out.
	Cast(x *Tensor, out dtype.DType) (*Tensor, error)
	// ReplaceZero returns x with every zero (of either sign) replaced by v.
	ReplaceZero(x *Tensor, v float32) (*Tensor, error)
	// Noise returns the stochastic-rounding noise of every element of a
	// tensor of the given shape (quant.Noise of its flat index), rounded to out.
	Noise(seed int64, shape []int, out dtype.DType) (*Tensor, error)
	// RoundToInt8 rounds each element of a float tensor to an integer by
	// mode and saturates it to int8.
	RoundToInt8(y *Tensor, mode RoundMode) (*Tensor, error)
	// Fill returns a tensor of the given shape with every element v rounded to dt.
	Fill(dt dtype.DType, shape []int, v float32) (*Tensor, error)
}

// BinaryOp names an element-wise float32 operation.
type BinaryOp uint8

// The element-wise operations.
const (
	Add BinaryOp = iota
	Mul
	Div
	Max
)

func (op BinaryOp) String() string {
	if names := [...]string{Add: "add", Mul: "mul", Div: "div", Max: "max"}; int(op) < len(names) {
		return names[op]
	}
	return fmt.Sprintf("op(%d)", uint8(op))
}

// Apply computes the operation in float32.
func (op BinaryOp) Apply(a, b float32) float32 {
	switch op {
	case Add:
		return a + b
	case Mul:
		return a * b
	case Div:
		return a / b
	}
	return max(a, b)
}

// RoundMode says how RoundToInt8 makes an integer.
type RoundMode uint8

// The rounding modes.
const (
	HalfEven RoundMode = iota // nearest, ties to even
	Floor                     // toward minus infinity (stochastic rounding)
)

// Condition is a predicate for Find.
type Condition uint8

// The conditions.
const (
	NotFinite         Condition = iota // NaN or ±Inf
	NotFinitePositive                  // NaN, ±Inf, zero or negative
)
