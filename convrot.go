package kitchen

import (
	"context"

	"github.com/gokitchen/kitchen/op"
)

// groupOr is the call's ConvRot group size, or def.
func (s *settings) groupOr(def int) int {
	if s.group != 0 {
		return s.group
	}
	return def
}

// QuantizeInt8ConvRotWeight rotates a weight [N, K] group-wise by the
// normalized regular Hadamard matrix (ConvRot), rounds it to its dtype and
// quantizes it row-wise: q int8 [N, K] and scale float32 [N, 1]. The group
// is 256 unless WithConvRotGroup says otherwise; K must be a multiple of
// it. Accepts WithStochasticRounding (quantize_int8_convrot_weight).
func QuantizeInt8ConvRotWeight(ctx context.Context, w *Tensor, opts ...Option) (q, scale *Tensor, err error) {
	s, err := settle(ctx, op.QuantizeConvRotWeight.Name(), opts, optSeed, optGroup)
	if err != nil {
		return nil, nil, err
	}
	res, err := run(ctx, s, op.QuantizeConvRotWeight, &op.ConvRotWeightArgs{Weight: w, Group: s.groupOr(op.DefaultGroup), Seed: s.seed})
	return res.Q, res.Scale, err
}

// QuantizeInt8AndRotateRowwise rotates activations x [..., K] as
// QuantizeInt8ConvRotWeight does a weight and quantizes them row-wise:
// what a ConvRot layer does to its input (quantize_and_rotate_rowwise).
func QuantizeInt8AndRotateRowwise(ctx context.Context, x *Tensor, opts ...Option) (q, scale *Tensor, err error) {
	s, err := settle(ctx, op.QuantizeAndRotateRowwise.Name(), opts, optSeed, optGroup)
	if err != nil {
		return nil, nil, err
	}
	res, err := run(ctx, s, op.QuantizeAndRotateRowwise, &op.RotateRowwiseArgs{X: x, Group: s.groupOr(op.DefaultGroup), Seed: s.seed})
	return res.Q, res.Scale, err
}

// DequantizeInt8ConvRotWeight returns a ConvRot weight in float32:
// rotate(q * scale), the rotation undoing the one it was quantized with
// (dequantize_int8_convrot_weight). The group is 256 unless
// WithConvRotGroup says otherwise.
func DequantizeInt8ConvRotWeight(ctx context.Context, q, scale *Tensor, opts ...Option) (*Tensor, error) {
	s, err := settle(ctx, op.DequantizeConvRotWeight.Name(), opts, optGroup)
	if err != nil {
		return nil, err
	}
	res, err := run(ctx, s, op.DequantizeConvRotWeight, &op.ConvRotDequantizeArgs{DequantizeArgs: op.DequantizeArgs{Q: q, Scale: scale}, Group: s.groupOr(op.DefaultGroup)})
	return res.Out, err
}

// DequantizeInt8ConvRotWeightTo is DequantizeInt8ConvRotWeight rounded
// once to out (dequantize_int8_convrot_weight_dtype).
func DequantizeInt8ConvRotWeightTo(ctx context.Context, q, scale *Tensor, out DType, opts ...Option) (*Tensor, error) {
	s, err := settle(ctx, op.DequantizeConvRotWeightDType.Name(), opts, optGroup)
	if err != nil {
		return nil, err
	}
	res, err := run(ctx, s, op.DequantizeConvRotWeightDType, &op.ConvRotDequantizeDTypeArgs{
		ConvRotDequantizeArgs: op.ConvRotDequantizeArgs{DequantizeArgs: op.DequantizeArgs{Q: q, Scale: scale}, Group: s.groupOr(op.DefaultGroup)}, OutDType: out})
	return res.Out, err
}

// DequantizeInt8Embedding looks up rows of an int8 embedding table q [V, D]
// (scale: one element or [V, 1]) at indices (int32 or int64, any shape) and
// returns them dequantized, rounded to out, of shape [indices..., D]. A
// ConvRot table needs WithConvRotGroup; an index out of range is an error
// (dequantize_int8_embedding).
func DequantizeInt8Embedding(ctx context.Context, q, scale, indices *Tensor, out DType, opts ...Option) (*Tensor, error) {
	s, err := settle(ctx, op.DequantizeEmbedding.Name(), opts, optGroup)
	if err != nil {
		return nil, err
	}
	res, err := run(ctx, s, op.DequantizeEmbedding, &op.EmbeddingArgs{Q: q, Scale: scale, Indices: indices, Group: s.group, OutDType: out})
	return res.Out, err
}
