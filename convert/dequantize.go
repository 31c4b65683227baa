package convert

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/gokitchen/kitchen"
	"github.com/gokitchen/kitchen/backend"
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/safetensors"
)

// ErrOverflow is wrapped by the error for a dequantized value too large for
// the output type (see Options.AllowInf).
var ErrOverflow = errors.New("dequantized values overflow the output type")

// LayerError reports a quantized layer that cannot be dequantized: its
// tensors or its comfy_quant marker are not what int8_tensorwise holds.
type LayerError struct {
	Path    string // the file holding the layer's comfy_quant marker
	Layer   string // the layer's name, without suffix
	Problem string
}

func (e *LayerError) Error() string {
	return fmt.Sprintf("%s: layer %q: %s", e.Path, e.Layer, e.Problem)
}

// Dequantize converts every int8_tensorwise layer of the checkpoint at in
// back to opts.OutDType (bfloat16 by default), dropping the scales and
// comfy_quant markers, and copies everything else. A scale that is not a
// finite number > 0 is an error naming the scale tensor, as is (unless
// opts.AllowInf) a value too large for the output type (ErrOverflow).
func Dequantize(ctx context.Context, in, out string, opts Options) (*Summary, error) {
	if opts.OutDType == dtype.Invalid {
		opts.OutDType = dtype.BFloat16
	}
	if !opts.OutDType.IsFloat() {
		return nil, fmt.Errorf("dequantize: output dtype %v is not float32, float16 or bfloat16", opts.OutDType)
	}
	return convertAny(ctx, "dequantize", in, out, opts, dequantizeUnits)
}

func dequantizeUnits(f *safetensors.File, opts Options, shardOf func(string) (string, bool)) ([]unit, error) {
	layers := map[string]bool{} // base names of quantized layers
	for _, t := range f.Tensors {
		base, ok := strings.CutSuffix(t.Name, quantSuffix)
		if !ok {
			continue
		}
		bad := func(format string, a ...any) error {
			return &LayerError{Path: f.Path, Layer: base, Problem: fmt.Sprintf(format, a...)}
		}
		if t.DType != "U8" {
			return nil, bad("%s has dtype %s, want U8 (comfy_quant JSON)", t.Name, t.DType)
		}
		b, err := f.Data(t)
		if err != nil {
			return nil, err
		}
		cfg, err := parseQuantBlob(b)
		f.Release(t)
		if err != nil {
			return nil, bad("%s does not hold comfy_quant JSON: %v", t.Name, err)
		}
		if cfg.Format != Format {
			return nil, bad("format %q is not supported (only %s)", cfg.Format, Format)
		}
		for _, part := range []string{base + weightSuffix, base + scaleSuffix} {
			if _, ok := f.Tensor(part); ok {
				continue
			}
			if shard, ok := shardOf(part); ok {
				return nil, bad("split across shards: %s is in %s; kitchen dequantizes a layer only when its tensors share a shard", part, shard)
			}
			return nil, bad("%s needs both %s and %s", Format, base+weightSuffix, base+scaleSuffix)
		}
		w, _ := f.Tensor(base + weightSuffix)
		s, _ := f.Tensor(base + scaleSuffix)
		switch {
		case w.DType != "I8":
			return nil, bad("%s has dtype %s, want I8", w.Name, w.DType)
		case s.DType != "F32" && s.DType != "F16" && s.DType != "BF16":
			return nil, bad("%s has dtype %s, want a float type", s.Name, s.DType)
		}
		layers[base] = true
	}
	var units []unit
	for i, t := range f.Tensors {
		base, isWeight := strings.CutSuffix(t.Name, weightSuffix)
		switch {
		case isWeight && layers[base]:
			units = append(units, unit{in: int32(i), scale: int32(f.Index(base + scaleSuffix)), action: dequantizeAction, out: opts.OutDType})
		case layers[strings.TrimSuffix(t.Name, scaleSuffix)] && strings.HasSuffix(t.Name, scaleSuffix),
			layers[strings.TrimSuffix(t.Name, quantSuffix)] && strings.HasSuffix(t.Name, quantSuffix):
			// Folded into the dequantized weight.
		default:
			units = append(units, copyUnit(i, "not quantized"))
		}
	}
	return units, nil
}

func writeDequantized(ctx context.Context, c *conv, wr *safetensors.Writer, w, s safetensors.TensorInfo, out dtype.DType) error {
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
	if errors.Is(err, backend.ErrScale) {
		return fmt.Errorf("%s: scale tensor %q of %q: %w", c.f.Path, s.Name, w.Name, err)
	}
	if err != nil {
		return fmt.Errorf("%s: tensor %q: %w", c.f.Path, w.Name, err)
	}
	c.backends[ran] = true
	b, err := res.Bytes()
	if err != nil {
		return err
	}
	if !c.opts.AllowInf {
		if n, i := countInf(out, b); n > 0 {
			k := 1
			if len(w.Shape) > 0 {
				k = w.Shape[len(w.Shape)-1] // > 0: the tensor holds values
			}
			return fmt.Errorf("%s: tensor %q: %w: %d values are too large for %v (the first in row %d, column %d); dequantize to a wider type, or allow infinities (--allow-inf)",
				c.f.Path, w.Name, ErrOverflow, n, out, i/k, i%k)
		}
	}
	return wr.WriteTensor(w.Name, b)
}

// countInf counts the infinities among the values of dt in b, and returns
// the index of the first. (A product of an int8 and a finite scale that
// is infinite overflowed the output type.)
func countInf(dt dtype.DType, b []byte) (n, first int) {
	first = -1
	note := func(i int) {
		if n++; first < 0 {
			first = i
		}
	}
	switch dt {
	case dtype.Float32:
		for i := 0; i < len(b); i += 4 {
			if binary.LittleEndian.Uint32(b[i:])&0x7fffffff == 0x7f800000 {
				note(i / 4)
			}
		}
	case dtype.Float16:
		for i := 0; i < len(b); i += 2 {
			if binary.LittleEndian.Uint16(b[i:])&0x7fff == 0x7c00 {
				note(i / 2)
			}
		}
	case dtype.BFloat16:
		for i := 0; i < len(b); i += 2 {
			if binary.LittleEndian.Uint16(b[i:])&0x7fff == 0x7f80 {
				note(i / 2)
			}
		}
	}
	return n, first
}
