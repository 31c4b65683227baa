package kitchen

import (
	"context"

	"github.com/gokitchen/kitchen/op"
)

// DequantizeInt8 returns float32 q * scale, where scale has one element, one
// per row ([..., 1]) or q's shape (dequantize_int8_simple).
func DequantizeInt8(ctx context.Context, q, scale *Tensor, opts ...Option) (*Tensor, error) {
	s, err := settle(ctx, op.Dequantize.Name(), opts)
	if err != nil {
		return nil, err
	}
	res, err := run(ctx, s, op.Dequantize, &op.DequantizeArgs{Q: q, Scale: scale})
	return res.Out, err
}

// DequantizeInt8To returns q * scale rounded to out (float32, float16 or
// bfloat16) (dequantize_int8_simple_dtype).
func DequantizeInt8To(ctx context.Context, q, scale *Tensor, out DType, opts ...Option) (*Tensor, error) {
	s, err := settle(ctx, op.DequantizeDType.Name(), opts)
	if err != nil {
		return nil, err
	}
	res, err := run(ctx, s, op.DequantizeDType, &op.DequantizeDTypeArgs{DequantizeArgs: op.DequantizeArgs{Q: q, Scale: scale}, OutDType: out})
	return res.Out, err
}
