package convert

import (
	"context"
	"fmt"
	"strings"

	"github.com/gokitchen/kitchen"
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/safetensors"
)

// Dequantize converts every int8_tensorwise layer of the checkpoint at in
// back to opts.OutDType (bfloat16 by default), dropping the scales and
// comfy_quant markers, and copies everything else.
func Dequantize(ctx context.Context, in, out string, opts Options) (*Summary, error) {
	if opts.OutDType == dtype.Invalid {
		opts.OutDType = dtype.BFloat16
	}
	if !opts.OutDType.IsFloat() {
		return nil, fmt.Errorf("dequantize: output dtype %v is not float32, float16 or bfloat16", opts.OutDType)
	}
	return convertAny(ctx, in, out, opts, dequantizeUnits)
}

func dequantizeUnits(f *safetensors.File, opts Options) ([]unit, error) {
	layers := map[string]bool{} // base names of quantized layers
	for _, t := range f.Tensors {
		if !strings.HasSuffix(t.Name, quantSuffix) {
			continue
		}
		base := strings.TrimSuffix(t.Name, quantSuffix)
		b, err := f.Data(t)
		if err != nil {
			return nil, err
		}
		cfg, err := parseQuantBlob(b)
		f.Release(t)
		if err != nil || t.DType != "U8" {
			return nil, fmt.Errorf("%s: layer %q: %s is not a U8 tensor holding JSON", f.Path, base, t.Name)
		}
		if cfg.Format != Format {
			return nil, fmt.Errorf("%s: layer %q: format %q is not supported (only %s)", f.Path, base, cfg.Format, Format)
		}
		w, wok := f.Tensor(base + weightSuffix)
		s, sok := f.Tensor(base + scaleSuffix)
		switch {
		case !wok || !sok:
			return nil, fmt.Errorf("%s: layer %q: %s needs both %s and %s", f.Path, base, Format, base+weightSuffix, base+scaleSuffix)
		case w.DType != "I8":
			return nil, fmt.Errorf("%s: layer %q: weight is %s, want I8", f.Path, base, w.DType)
		case s.DType != "F32" && s.DType != "F16" && s.DType != "BF16":
			return nil, fmt.Errorf("%s: layer %q: weight_scale is %s, want a float type", f.Path, base, s.DType)
		}
		layers[base] = true
	}
	var units []unit
	for _, t := range f.Tensors {
		base, isWeight := strings.CutSuffix(t.Name, weightSuffix)
		switch {
		case isWeight && layers[base]:
			s, _ := f.Tensor(base + scaleSuffix)
			units = append(units, dequantizeUnit(t, s, opts.OutDType))
		case layers[strings.TrimSuffix(t.Name, scaleSuffix)] && strings.HasSuffix(t.Name, scaleSuffix),
			layers[strings.TrimSuffix(t.Name, quantSuffix)] && strings.HasSuffix(t.Name, quantSuffix):
			// Folded into the dequantized weight.
		default:
			units = append(units, copyUnit(t, "not quantized"))
		}
	}
	return units, nil
}

func dequantizeUnit(w, s safetensors.TensorInfo, out dtype.DType) unit {
	return unit{
		item: Item{Name: w.Name, DType: w.DType, Shape: w.Shape, Bytes: w.Size() + s.Size(), Action: ActionDequantize},
		in:   []safetensors.TensorInfo{w, s},
		out:  []safetensors.TensorInfo{{Name: w.Name, DType: safetensors.Name(out), Shape: w.Shape}},
		write: func(ctx context.Context, c *conv, wr *safetensors.Writer) error {
			q, err := c.input(w)
			if err != nil {
				return err
			}
			scale, err := c.input(s)
			if err != nil {
				return err
			}
			var ran string
			res, err := kitchen.DequantizeInt8To(ctx, q, scale, out, c.kitchenOptions(&ran)...)
			if err != nil {
				return fmt.Errorf("%s: tensor %q: %w", c.f.Path, w.Name, err)
			}
			c.backends[ran] = true
			b, err := res.Bytes()
			if err != nil {
				return err
			}
			return wr.WriteTensor(w.Name, b)
		},
	}
}
