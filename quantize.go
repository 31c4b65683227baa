package kitchen

import (
	"context"

	"github.com/gokitchen/kitchen/op"
)

// QuantizeInt8Rowwise quantizes x of shape [..., K] with one scale per row:
// scale = max(abs-max / 127, 1e-30) as float32 of shape [..., 1], and q, the
// int8 tensor of x's shape. A 1-D x is one row. Accepts
// WithStochasticRounding (quantize_int8_rowwise).
func QuantizeInt8Rowwise(ctx context.Context, x *Tensor, opts ...Option) (q, scale *Tensor, err error) {
	s, err := settle(ctx, op.QuantizeRowwise.Name(), opts, optSeed)
	if err != nil {
		return nil, nil, err
	}
	res, err := run(ctx, s, op.QuantizeRowwise, &op.RowwiseArgs{X: x, Seed: s.seed})
	return res.Q, res.Scale, err
}

// QuantizeInt8Tensorwise quantizes x with one scale for the whole tensor,
// recalculated from its abs-max unless WithScale or WithScaleTensor supplies
// it. The scale is returned as a float32 scalar. Accepts
// WithStochasticRounding (quantize_int8_tensorwise).
func QuantizeInt8Tensorwise(ctx context.Context, x *Tensor, opts ...Option) (q, scale *Tensor, err error) {
	s, err := settle(ctx, op.QuantizeTensorwise.Name(), opts, optSeed, optScale, optScaleTensor)
	if err != nil {
		return nil, nil, err
	}
	res, err := run(ctx, s, op.QuantizeTensorwise, &op.TensorwiseArgs{X: x, Scale: s.scaleTensor, ScaleValue: s.scale, Seed: s.seed})
	return res.Q, res.Scale, err
}
