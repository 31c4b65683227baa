package op

import (
	"context"
	"errors"
	"fmt"

	"github.com/gokitchen/kitchen/backend"
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/quant"
	"github.com/gokitchen/kitchen/tensor"
)

// The ConvRot operations: the group-wise Hadamard rotation (quant.Rotate
// fixes its summation order) fused with row-wise quantization or with
// dequantization, and int8 embeddings.
var (
	// QuantizeConvRotWeight is quantize_int8_convrot_weight: a weight
	// [N, K] rotated, then quantized row-wise.
	QuantizeConvRotWeight = backend.Declare[*ConvRotWeightArgs, Quantized]("quantize_int8_convrot_weight", prepareConvRotWeight)
	// QuantizeAndRotateRowwise is quantize_and_rotate_rowwise: activations
	// [..., K] rotated, then quantized row-wise.
	QuantizeAndRotateRowwise = backend.Declare[*RotateRowwiseArgs, Quantized]("quantize_and_rotate_rowwise", prepareRotateRowwise)
	// DequantizeConvRotWeight is dequantize_int8_convrot_weight: float32
	// rotate(q * scale).
	DequantizeConvRotWeight = backend.Declare[*ConvRotDequantizeArgs, Dequantized]("dequantize_int8_convrot_weight", prepareConvRotDequantize)
	// DequantizeConvRotWeightDType is dequantize_int8_convrot_weight_dtype:
	// rotate(q * scale) rounded once to an output dtype.
	DequantizeConvRotWeightDType = backend.Declare[*ConvRotDequantizeDTypeArgs, Dequantized]("dequantize_int8_convrot_weight_dtype", prepareConvRotDequantizeDType)
	// DequantizeEmbedding is dequantize_int8_embedding: rows of an int8
	// table gathered by index, dequantized, rotated when the table is
	// ConvRot.
	DequantizeEmbedding = backend.Declare[*EmbeddingArgs, Dequantized]("dequantize_int8_embedding", prepareEmbedding)
)

// DefaultGroup is the ConvRot group size used unless a call says otherwise.
const DefaultGroup = 256

// checkGroup checks a group size against the last dimension k of param.
func checkGroup(name, param string, g, k int) error {
	if !quant.ValidGroup(g) {
		return argError(name, "group_size", backend.ErrOption, "%d: want a power of 4, at least 4", g)
	}
	if k%g != 0 {
		return argError(name, param, tensor.ErrShape, "last dimension %d is not a multiple of the group size %d", k, g)
	}
	return nil
}

// explainRotation adds, to an error for a row found not finite, that the
// row may be finite and the rotation have taken it out of range: the
// contract checks for NaN and infinity after rotating, so the error must
// not seem to blame finite data wrongly. Other errors pass unchanged.
func explainRotation(err error) error {
	var ae *backend.ArgError
	if !errors.As(err, &ae) || !errors.Is(ae.Err, backend.ErrNonFinite) {
		return err
	}
	return fmt.Errorf("%w (or, after the ConvRot rotation, finite values that it takes beyond the range of the input's dtype)", err)
}

// ConvRotWeightArgs are the arguments of quantize_int8_convrot_weight.
type ConvRotWeightArgs struct {
	// Weight is float32, float16 or bfloat16 of shape [N, K], K a multiple
	// of Group.
	Weight *tensor.Tensor
	// Group is the rotation's group size, a power of 4 (DefaultGroup is
	// 256).
	Group int
	// Seed > 0 selects stochastic rounding with that seed.
	Seed int64
	backend.Into[Quantized]
}

// Device implements backend.Args.
func (a *ConvRotWeightArgs) Device() tensor.Device { return deviceOf(a.Weight) }

// Tensor implements backend.Args.
func (a *ConvRotWeightArgs) Tensor(param string) *tensor.Tensor {
	if param == "weight" {
		return a.Weight
	}
	return nil
}

// DType implements backend.Args.
func (a *ConvRotWeightArgs) DType(param string) (dtype.DType, bool) { return dtypeOf(a.Tensor(param)) }

// Stochastic implements backend.Stochastic.
func (a *ConvRotWeightArgs) Stochastic() bool { return a.Seed > 0 }

// Validate implements backend.Args.
func (a *ConvRotWeightArgs) Validate() error {
	name := QuantizeConvRotWeight.Name()
	if err := checkTensor(name, "weight", a.Weight, true, nil, ""); err != nil {
		return err
	}
	if a.Weight.Rank() != 2 {
		return argError(name, "weight", tensor.ErrShape, "shape %v, want [N, K]", a.Weight.Shape())
	}
	if err := checkGroup(name, "weight", a.Group, a.Weight.Dim(-1)); err != nil {
		return err
	}
	return checkOuts(name, a.Weight.Device(), a.outs(), a.Weight)
}

// Explain implements backend.Explainer: see explainRotation.
func (a *ConvRotWeightArgs) Explain(err error) error { return explainRotation(err) }

func (a *ConvRotWeightArgs) outs() outList { return a.Out.outs(a.Weight, lastDim(a.Weight, 1)) }

// Result returns the tensors the call writes: Out's, and fresh ones on the
// weight's device for the rest.
func (a *ConvRotWeightArgs) Result() (Quantized, error) {
	return a.Out.alloc(a.Weight.Device(), a.outs())
}

// RotateRowwiseArgs are the arguments of quantize_and_rotate_rowwise.
type RotateRowwiseArgs struct {
	// X is float32, float16 or bfloat16 of shape [..., K], K a multiple of
	// Group; a 1-D x is one row.
	X *tensor.Tensor
	// Group is the rotation's group size, a power of 4.
	Group int
	// Seed > 0 selects stochastic rounding with that seed.
	Seed int64
	backend.Into[Quantized]
}

// Device implements backend.Args.
func (a *RotateRowwiseArgs) Device() tensor.Device { return deviceOf(a.X) }

// Tensor implements backend.Args.
func (a *RotateRowwiseArgs) Tensor(param string) *tensor.Tensor {
	if param == "x" {
		return a.X
	}
	return nil
}

// DType implements backend.Args.
func (a *RotateRowwiseArgs) DType(param string) (dtype.DType, bool) { return dtypeOf(a.Tensor(param)) }

// Stochastic implements backend.Stochastic.
func (a *RotateRowwiseArgs) Stochastic() bool { return a.Seed > 0 }

// Validate implements backend.Args.
func (a *RotateRowwiseArgs) Validate() error {
	name := QuantizeAndRotateRowwise.Name()
	if err := checkTensor(name, "x", a.X, true, nil, ""); err != nil {
		return err
	}
	if a.X.Rank() == 0 {
		return argError(name, "x", tensor.ErrShape, "got a scalar, want shape [..., K]")
	}
	if err := checkGroup(name, "x", a.Group, a.X.Dim(-1)); err != nil {
		return err
	}
	return checkOuts(name, a.X.Device(), a.outs(), a.X)
}

// Explain implements backend.Explainer: see explainRotation.
func (a *RotateRowwiseArgs) Explain(err error) error { return explainRotation(err) }

func (a *RotateRowwiseArgs) outs() outList { return a.Out.outs(a.X, lastDim(a.X, 1)) }

// Result returns the tensors the call writes: Out's, and fresh ones on x's
// device for the rest.
func (a *RotateRowwiseArgs) Result() (Quantized, error) { return a.Out.alloc(a.X.Device(), a.outs()) }

// ConvRotDequantizeArgs are the arguments of dequantize_int8_convrot_weight:
// dequantize_int8_simple's (q must be [N, K], K a multiple of Group), and
// the rotation's group size, a power of 4.
type ConvRotDequantizeArgs struct {
	DequantizeArgs
	Group int
}

// Validate implements backend.Args.
func (a *ConvRotDequantizeArgs) Validate() error {
	return a.validateInto(DequantizeConvRotWeight.Name(), a.validate, dtype.Float32)
}

func (a *ConvRotDequantizeArgs) validate(name string) error {
	if err := a.DequantizeArgs.validate(name); err != nil {
		return err
	}
	if a.Q.Rank() != 2 {
		return argError(name, "q", tensor.ErrShape, "shape %v, want [N, K]", a.Q.Shape())
	}
	return checkGroup(name, "q", a.Group, a.Q.Dim(-1))
}

// ConvRotDequantizeDTypeArgs are the arguments of
// dequantize_int8_convrot_weight_dtype.
type ConvRotDequantizeDTypeArgs struct {
	ConvRotDequantizeArgs
	// OutDType is float32, float16 or bfloat16.
	OutDType dtype.DType
}

// DType implements backend.Args.
func (a *ConvRotDequantizeDTypeArgs) DType(param string) (dtype.DType, bool) {
	if param == "out_dtype" {
		return a.OutDType, true
	}
	return a.DequantizeArgs.DType(param)
}

// Validate implements backend.Args.
func (a *ConvRotDequantizeDTypeArgs) Validate() error {
	name := DequantizeConvRotWeightDType.Name()
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
func (a *ConvRotDequantizeDTypeArgs) Result() (Dequantized, error) { return a.result(a.OutDType) }

// checkOutDType checks an output dtype parameter.
func checkOutDType(name string, dt dtype.DType) error {
	if !dt.IsFloat() {
		return argError(name, "out_dtype", backend.ErrDType, "got %v, want float32, float16 or bfloat16", dt)
	}
	return nil
}

// EmbeddingArgs are the arguments of dequantize_int8_embedding.
type EmbeddingArgs struct {
	// Q is the int8 table [V, D].
	Q *tensor.Tensor
	// Scale is float32, float16 or bfloat16 with one element or one per
	// row ([V, 1]).
	Scale *tensor.Tensor
	// Indices are int32 or int64 rows of q, of any shape; each must be in
	// [0, V) (the kernels check, and name the first that is not).
	Indices *tensor.Tensor
	// Group is the table's ConvRot group size, or 0 for a table that is
	// not rotated.
	Group int
	// OutDType is float32, float16 or bfloat16.
	OutDType dtype.DType
	backend.Into[Dequantized]
}

// Device implements backend.Args.
func (a *EmbeddingArgs) Device() tensor.Device { return deviceOf(a.Q) }

// Tensor implements backend.Args.
func (a *EmbeddingArgs) Tensor(param string) *tensor.Tensor {
	switch param {
	case "q":
		return a.Q
	case "scale":
		return a.Scale
	case "indices":
		return a.Indices
	}
	return nil
}

// DType implements backend.Args.
func (a *EmbeddingArgs) DType(param string) (dtype.DType, bool) {
	if param == "out_dtype" {
		return a.OutDType, true
	}
	return dtypeOf(a.Tensor(param))
}

// Validate implements backend.Args.
func (a *EmbeddingArgs) Validate() error {
	name := DequantizeEmbedding.Name()
	if err := checkTensor(name, "q", a.Q, false, nil, ""); err != nil {
		return err
	}
	if a.Q.DType() != dtype.Int8 || a.Q.Rank() != 2 {
		return argError(name, "q", backend.ErrDType, "got %v, want an int8 table [V, D]", a.Q)
	}
	if err := checkTensor(name, "scale", a.Scale, true, a.Q.Device(), "q"); err != nil {
		return err
	}
	if n := a.Scale.Numel(); n != 1 && !(a.Scale.Rank() == 2 && a.Scale.Dim(0) == a.Q.Dim(0) && a.Scale.Dim(1) == 1) {
		return argError(name, "scale", tensor.ErrShape, "shape %v, want one element or [%d, 1]", a.Scale.Shape(), a.Q.Dim(0))
	}
	if err := checkTensor(name, "indices", a.Indices, false, a.Q.Device(), "q"); err != nil {
		return err
	}
	if dt := a.Indices.DType(); dt != dtype.Int32 && dt != dtype.Int64 {
		return argError(name, "indices", backend.ErrDType, "got %v, want int32 or int64", dt)
	}
	if a.Group != 0 {
		if err := checkGroup(name, "q", a.Group, a.Q.Dim(-1)); err != nil {
			return err
		}
	}
	if err := checkOutDType(name, a.OutDType); err != nil {
		return err
	}
	return checkOuts(name, a.Q.Device(), a.outs(), a.Q, a.Scale, a.Indices)
}

func (a *EmbeddingArgs) outs() outList {
	return oneOut(a.Out.Out, a.OutDType, shapeOf{like: a.Indices, last: -1, extra: a.Q.Dim(1)})
}

// Result returns the tensor the call writes: Out's, or a fresh one on q's
// device.
func (a *EmbeddingArgs) Result() (Dequantized, error) {
	t, err := allocOne(a.Q.Device(), a.outs())
	return Dequantized{Out: t}, err
}

// ErrIndex is wrapped by the error for an embedding index out of range.
var ErrIndex = errors.New("op: index out of range")

// BadIndex returns the error for an embedding index out of range, which
// the kernels find: the first bad index's flat position and value.
func BadIndex(at int, index int64, rows int) error {
	return &backend.ArgError{Op: DequantizeEmbedding.Name(), Param: "indices", Row: -1, Err: ErrIndex,
		Detail: fmt.Sprintf("indices[%d] = %d is not a row of a %d-row table", at, index, rows)}
}

// rotatableInput is a ConvRot workload's float input: rank (when > 0) and
// last dimension a multiple of the default group.
func rotatableInput(spec *backend.Spec, rank int) (*tensor.Tensor, backend.Cost, error) {
	if n := len(spec.Shape); n == 0 || (rank > 0 && n != rank) || spec.Shape[n-1]%DefaultGroup != 0 {
		return nil, backend.Cost{}, fmt.Errorf("%w: shape %v is not rank %d with a last dimension that is a multiple of %d", backend.ErrNoWorkload, spec.Shape, rank, DefaultGroup)
	}
	return qdqInput(spec)
}

func prepareConvRotWeight(_ context.Context, _ *backend.Registry, spec *backend.Spec) (*ConvRotWeightArgs, backend.Cost, error) {
	x, cost, err := rotatableInput(spec, 2)
	if err != nil {
		return nil, cost, err
	}
	cost.Bytes = rowwiseBytes(x)
	return &ConvRotWeightArgs{Weight: x, Group: DefaultGroup}, cost, nil
}

func prepareRotateRowwise(_ context.Context, _ *backend.Registry, spec *backend.Spec) (*RotateRowwiseArgs, backend.Cost, error) {
	x, cost, err := rotatableInput(spec, 0)
	if err != nil {
		return nil, cost, err
	}
	cost.Bytes = rowwiseBytes(x)
	return &RotateRowwiseArgs{X: x, Group: DefaultGroup}, cost, nil
}

func prepareConvRotDequantize(_ context.Context, _ *backend.Registry, spec *backend.Spec) (*ConvRotDequantizeArgs, backend.Cost, error) {
	x, cost, err := rotatableInput(spec, 2)
	if err != nil {
		return nil, cost, err
	}
	a, in, err := dequantizeInputs(x)
	cost.Bytes = in + 4*int64(x.Numel())
	return &ConvRotDequantizeArgs{DequantizeArgs: DequantizeArgs{Q: a.Q, Scale: a.Scale}, Group: DefaultGroup}, cost, err
}

func prepareConvRotDequantizeDType(_ context.Context, _ *backend.Registry, spec *backend.Spec) (*ConvRotDequantizeDTypeArgs, backend.Cost, error) {
	x, cost, err := rotatableInput(spec, 2)
	if err != nil {
		return nil, cost, err
	}
	a, in, err := dequantizeInputs(x)
	cost.Bytes = in + int64(x.Nbytes())
	return &ConvRotDequantizeDTypeArgs{ConvRotDequantizeArgs{DequantizeArgs: DequantizeArgs{Q: a.Q, Scale: a.Scale}, Group: DefaultGroup}, x.DType()}, cost, err
}

// prepareEmbedding looks up every row of a table of x's shape once, in a
// shuffled order.
func prepareEmbedding(_ context.Context, _ *backend.Registry, spec *backend.Spec) (*EmbeddingArgs, backend.Cost, error) {
	if len(spec.Shape) != 2 {
		return nil, backend.Cost{}, fmt.Errorf("%w: shape %v is not 2-D", backend.ErrNoWorkload, spec.Shape)
	}
	x, cost, err := qdqInput(spec)
	if err != nil {
		return nil, cost, err
	}
	a, in, err := dequantizeInputs(x)
	if err != nil {
		return nil, cost, err
	}
	v := x.Dim(0)
	idx := make([]byte, 4*v)
	for i := range v {
		r := uint32((i * 7919) % v)
		idx[4*i], idx[4*i+1], idx[4*i+2], idx[4*i+3] = byte(r), byte(r>>8), byte(r>>16), byte(r>>24)
	}
	indices, err := tensor.FromBytes(dtype.Int32, idx, v)
	if err == nil {
		indices, err = indices.To(x.Device())
	}
	if err != nil {
		return nil, cost, err
	}
	g := 0
	if x.Dim(-1)%DefaultGroup == 0 {
		g = DefaultGroup
	}
	cost.Bytes = in + int64(len(idx)) + int64(x.Nbytes())
	return &EmbeddingArgs{Q: a.Q, Scale: a.Scale, Indices: indices, Group: g, OutDType: x.DType()}, cost, nil
}
