package kitchen

import (
	"context"

	"github.com/gokitchen/kitchen/op"
)

// MMInt8 returns the exact int32 product of int8 a [M, K] and b [K, N]
// (mm_int8); K is at most 131,072 (op.MaxK): below it no sum can
// overflow, and at it only a row and a column of all -128 reach 2^31,
// which wraps to -2^31 as int32 arithmetic does.
func MMInt8(ctx context.Context, a, b *Tensor, opts ...Option) (*Tensor, error) {
	s, err := settle(ctx, op.MMInt8.Name(), opts)
	if err != nil {
		return nil, err
	}
	res, err := run(ctx, s, op.MMInt8, &op.MMInt8Args{A: a, B: b})
	return res.Out, err
}

// Int8Linear runs an int8 layer as ComfyUI does for int8_tensorwise
// weights (int8_linear): x [..., K] (float32, float16 or bfloat16) is
// quantized row-wise, multiplied exactly by weight (int8 [N, K]), scaled
// back by its row scales and weightScale (one element or N) in float32, and
// rounded to the output dtype: [..., N], bfloat16 unless WithOutDType says
// otherwise. Accepts WithBias, WithConvRot (for ConvRot weights) and
// WithInputAct.
func Int8Linear(ctx context.Context, x, weight, weightScale *Tensor, opts ...Option) (*Tensor, error) {
	s, err := settle(ctx, op.Int8Linear.Name(), opts, optBias, optOutDType, optConvRot, optInputAct)
	if err != nil {
		return nil, err
	}
	out := s.outDType
	if out == 0 {
		out = BFloat16
	}
	res, err := run(ctx, s, op.Int8Linear, &op.LinearArgs{X: x, Weight: weight, WeightScale: weightScale,
		Bias: s.bias, OutDType: out, Group: s.group, InputAct: s.act})
	return res.Out, err
}
