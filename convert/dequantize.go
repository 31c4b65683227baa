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

func dequantizeUnits(f *safetensors.File, opts Options, _ map[string]bool) ([]unit, error) {
	bad := func(tensor, format string, a ...any) error {
		return &safetensors.FormatError{Path: f.Path, Tensor: tensor, Problem: fmt.Sprintf(format, a...)}
	}
	layers := map[string]bool{} // base names of quantized layers
	for _, t := range f.Tensors {
		if !strings.HasSuffix(t.Name, quantSuffix) {
			continue
		}
		base := strings.TrimSuffix(t.Name, quantSuffix)
		if t.DType != "U8" {
			return nil, bad(t.Name, "dtype %s, want U8 (comfy_quant JSON)", t.DType)
		}
		b, err := f.Data(t)
		if err != nil {
			return nil, err
		}
		cfg, err := parseQuantBlob(b)
		f.Release(t)
		if err != nil {
			return nil, bad(t.Name, "does not hold comfy_quant JSON: %v", err)
		}
		if cfg.Format != Format {
			return nil, fmt.Errorf("%s: layer %q: format %q is not supported (only %s)", f.Path, base, cfg.Format, Format)
		}
		w, wok := f.Tensor(base + weightSuffix)
		s, sok := f.Tensor(base + scaleSuffix)
		switch {
		case !wok || !sok:
			return nil, bad(t.Name, "%s needs both %s and %s", Format, base+weightSuffix, base+scaleSuffix)
		case w.DType != "I8":
			return nil, bad(w.Name, "dtype %s, want I8 in an %s layer", w.DType, Format)
		case s.DType != "F32" && s.DType != "F16" && s.DType != "BF16":
			return nil, bad(s.Name, "dtype %s, want a float type", s.DType)
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
