package eager

import (
	"fmt"

	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/tensor"
)

// Primitives are the kernels the eager backend is written in. A device
// opts in to running eager by implementing them on its tensor.Device value
// (eager finds them by type assertion); the host's are built in. Each
// returns a new tensor on the device of its inputs and never modifies them;
// eager releases intermediate results with Tensor.Release.
//
// Element-wise primitives widen their inputs exactly to float32, compute in
// IEEE float32 with round-to-nearest-even, and round the result once to the
// output dtype.
type Primitives interface {
	// AbsMaxRows returns float32 [Numel/rowLen]: the largest |x| of each run
	// of rowLen consecutive elements. A row holding NaN gives NaN (a device
	// whose maximum skips NaN may give +Inf for a row holding both NaN and
	// an infinity; either way the value is not finite).
	AbsMaxRows(x *tensor.Tensor, rowLen int) (*tensor.Tensor, error)
	// Find returns the flat index of the first element of a float tensor
	// that meets cond, or -1 if none does.
	Find(x *tensor.Tensor, cond Condition) (int, error)
	// Binary computes op(a, b) rounded to out, with the shape of a. b has a's
	// number of elements, or one element, or one element per row of a (a's
	// last dimension is broadcast).
	Binary(op BinaryOp, a, b *tensor.Tensor, out dtype.DType) (*tensor.Tensor, error)
	// BinaryScalar computes op(a, c) rounded to out.
	BinaryScalar(op BinaryOp, a *tensor.Tensor, c float32, out dtype.DType) (*tensor.Tensor, error)
	// Cast rounds each element of x to out.
	Cast(x *tensor.Tensor, out dtype.DType) (*tensor.Tensor, error)
	// ReplaceZero returns x with every zero (of either sign) replaced by v.
	ReplaceZero(x *tensor.Tensor, v float32) (*tensor.Tensor, error)
	// Noise returns the stochastic-rounding noise of every element of a
	// tensor of the given shape (quant.Noise of its flat index), rounded to out.
	Noise(seed int64, shape []int, out dtype.DType) (*tensor.Tensor, error)
	// RoundToInt8 rounds each element of a float tensor to an integer by
	// mode and saturates it to int8.
	RoundToInt8(y *tensor.Tensor, mode RoundMode) (*tensor.Tensor, error)
	// Fill returns a tensor of the given shape with every element v rounded to dt.
	Fill(dt dtype.DType, shape []int, v float32) (*tensor.Tensor, error)
}

// primitivesOf returns the primitives of dev: the built-in host ones, or
// the device's own.
func primitivesOf(dev tensor.Device) (Primitives, bool) {
	if dev == tensor.CPU() {
		return host{}, true
	}
	p, ok := dev.(Primitives)
	return p, ok
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
