package eager

import (
	"context"
	"errors"

	"github.com/gokitchen/kitchen/backend"
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/op"
	"github.com/gokitchen/kitchen/tensor"
)

// RotatePrimitives are the primitives of the ConvRot operations and int8
// embeddings, beyond Primitives. A device that implements them as well runs
// eager's ConvRot operations; eager declines those operations on a device
// that does not.
type RotatePrimitives interface {
	// Rotate multiplies each group of g consecutive elements of x (g
	// divides the last dimension) by the normalized Hadamard matrix H_g in
	// float32, in the summation order of quant.Rotate, and rounds each
	// result once to out.
	Rotate(x *tensor.Tensor, g int, out dtype.DType) (*tensor.Tensor, error)
	// GatherRows returns the rows of the table x [V, D] named by indices
	// (int32 or int64, any shape), of shape [indices..., D]. An index out of
	// range fails with an *IndexError.
	GatherRows(x, indices *tensor.Tensor) (*tensor.Tensor, error)
}

// IndexError is GatherRows' error for an index out of range: the first
// bad index's flat position and value.
type IndexError struct {
	At    int
	Index int64
	Rows  int
}

func (e *IndexError) Error() string {
	return op.BadIndex(e.At, e.Index, e.Rows).Error()
}

// rotatePrimitivesOf returns dev's rotation primitives, if it has them.
func rotatePrimitivesOf(dev tensor.Device) (RotatePrimitives, bool) {
	if dev == tensor.CPU() {
		return host{}, true
	}
	p, ok := dev.(RotatePrimitives)
	if ok {
		_, ok = dev.(Primitives)
	}
	return p, ok
}

// rotating is the constraint of eager's ConvRot capabilities.
var rotating = backend.Constraints{Hardware: []backend.HardwareRule{{
	Desc: "implements eager.Primitives and eager.RotatePrimitives",
	OK:   func(dev tensor.Device) bool { _, ok := rotatePrimitivesOf(dev); return ok },
}}}

func quantizeConvRotWeight(_ context.Context, a *op.ConvRotWeightArgs) (op.Quantized, error) {
	return rotateAndQuantize(op.QuantizeConvRotWeight.Name(), "weight", a.Weight, a.Group, a.Seed)
}

func quantizeAndRotateRowwise(_ context.Context, a *op.RotateRowwiseArgs) (op.Quantized, error) {
	return rotateAndQuantize(op.QuantizeAndRotateRowwise.Name(), "x", a.X, a.Group, a.Seed)
}

// rotateAndQuantize is quantize_int8_rowwise(rT(rotate(x, g))).
func rotateAndQuantize(name, param string, x *tensor.Tensor, g int, seed int64) (op.Quantized, error) {
	rp, _ := rotatePrimitivesOf(x.Device())
	r, err := rp.Rotate(x, g, x.DType())
	if err != nil {
		return op.Quantized{}, err
	}
	defer r.Release()
	return quantize(name, param, true, r, nil, nil, seed)
}

func dequantizeConvRotWeight(_ context.Context, a *op.ConvRotDequantizeArgs) (op.Dequantized, error) {
	return dequantizeRotated(op.DequantizeConvRotWeight.Name(), a.Q, a.Scale, a.Group, dtype.Float32)
}

func dequantizeConvRotWeightDType(_ context.Context, a *op.ConvRotDequantizeDTypeArgs) (op.Dequantized, error) {
	return dequantizeRotated(op.DequantizeConvRotWeightDType.Name(), a.Q, a.Scale, a.Group, a.OutDType)
}

// dequantizeRotated is rotate(f32(q) * f32(scale), g) in float32, rounded
// once to out; g = 0 leaves out the rotation. A scale that is not a finite
// number > 0 is an error.
func dequantizeRotated(name string, q, scale *tensor.Tensor, g int, out dtype.DType) (op.Dequantized, error) {
	dev, _ := primitivesOf(q.Device())
	i, err := dev.Find(scale, NotFinitePositive)
	if err != nil {
		return op.Dequantized{}, err
	}
	if i >= 0 {
		return op.Dequantized{}, op.BadScale(name, i)
	}
	if g == 0 {
		t, err := dev.Binary(Mul, q, scale, out)
		return op.Dequantized{Out: t}, err
	}
	rp, _ := rotatePrimitivesOf(q.Device())
	y, err := dev.Binary(Mul, q, scale, dtype.Float32)
	if err != nil {
		return op.Dequantized{}, err
	}
	defer y.Release()
	t, err := rp.Rotate(y, g, out)
	return op.Dequantized{Out: t}, err
}

// dequantizeEmbedding checks the whole table's scales, gathers the rows
// (and their scales, if one per row), then dequantizes and rotates as
// dequantize_int8_convrot_weight.
func dequantizeEmbedding(_ context.Context, a *op.EmbeddingArgs) (op.Dequantized, error) {
	rp, _ := rotatePrimitivesOf(a.Q.Device())
	dev, _ := primitivesOf(a.Q.Device())
	i, err := dev.Find(a.Scale, NotFinitePositive)
	if err != nil {
		return op.Dequantized{}, err
	}
	if i >= 0 {
		return op.Dequantized{}, op.BadScale(op.DequantizeEmbedding.Name(), i)
	}
	var tmp temps
	defer tmp.release()
	rows, err := tmp.keep(rp.GatherRows(a.Q, a.Indices))
	var ie *IndexError
	if errors.As(err, &ie) {
		return op.Dequantized{}, op.BadIndex(ie.At, ie.Index, ie.Rows)
	}
	if err != nil {
		return op.Dequantized{}, err
	}
	scale := a.Scale
	if scale.Numel() != 1 {
		if scale, err = tmp.keep(rp.GatherRows(a.Scale, a.Indices)); err != nil {
			return op.Dequantized{}, err
		}
	}
	return dequantizeRotated(op.DequantizeEmbedding.Name(), rows, scale, a.Group, a.OutDType)
}
