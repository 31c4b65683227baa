package convert

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"

	"github.com/gokitchen/kitchen"
	"github.com/gokitchen/kitchen/backend"
	"github.com/gokitchen/kitchen/comfyquant"
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/safetensors"
	"github.com/gokitchen/kitchen/tensor"
)

// ErrOverflow is wrapped by the error for a dequantized value too large for
// the output type (see Options.AllowInf).
var ErrOverflow = errors.New("dequantized values overflow the output type")

// Dequantize converts every int8_tensorwise layer of the checkpoint at in
// (a file, an index or a directory holding one, as for Quantize) back to
// opts.OutDType (bfloat16 by default), dropping the scales and
// comfy_quant markers, and copies everything else. It reads every variant
// ComfyUI reads: configs in comfy_quant markers or in
// __metadata__["_quantization_metadata"] (which it then drops, since no
// layer it lists stays quantized), ConvRot keys flat or under "params", the
// legacy "per_row" key, one scale ([], [1]) or one per row ([N, 1], or [N]
// as int8_linear reads it). A ConvRot layer is rotated back as
// dequantize_int8_convrot_weight does (an int8 embedding table's rows are
// rotated as a Linear's are).
//
// What it does not read is an error naming the layer (*LayerError), and
// nothing is written: an unknown format or config key, a config that the
// marker and the metadata state differently, a layer without a scale
// (ComfyUI reads 1.0 for an Embedding but refuses a Linear; kitchen cannot
// tell them apart), a scale of another shape, an int8 weight with a scale
// but no config, a legacy scaled_fp8 checkpoint, an empty weight. A
// scale that is not a finite number > 0 is a *LayerError wrapping
// backend.ErrScale that names the scale tensor; a value too large for the
// output type is an error (ErrOverflow) unless opts.AllowInf.
func Dequantize(ctx context.Context, in, out string, opts Options) (*Summary, error) {
	if opts.OutDType == dtype.Invalid {
		opts.OutDType = dtype.BFloat16
	}
	if !opts.OutDType.IsFloat() {
		return nil, fmt.Errorf("dequantize: output dtype %v is not float32, float16 or bfloat16", opts.OutDType)
	}
	return convertAny(ctx, "dequantize", in, out, opts, dequantizeUnits)
}

func dequantizeUnits(f *safetensors.File, opts Options, shardOf func(string) (string, bool)) ([]unit, map[string]string, error) {
	qi, err := readQuant(f, shardOf)
	if err != nil {
		return nil, nil, err
	}
	if err := qi.firstProblem(); err != nil {
		return nil, nil, err
	}
	layers := map[int]*qlayer{} // by weight
	folded := map[int]bool{}    // scales and markers
	for _, l := range qi.layers {
		layers[l.weight] = l
		folded[l.scale] = true
		if l.marker >= 0 {
			folded[l.marker] = true
		}
	}
	var units []unit
	for i := range f.Tensors {
		switch l := layers[i]; {
		case l != nil:
			reason := describe(l.conf) + ", from " + l.source()
			units = append(units, unit{in: int32(i), scale: int32(l.scale), group: int32(l.conf.RotationGroup()), action: dequantizeAction, out: opts.OutDType, reason: reason})
		case folded[i]:
			// Folded into the dequantized weight.
		default:
			units = append(units, copyUnit(i, "not quantized"))
		}
	}
	// Every layer _quantization_metadata lists is restored (or the file is
	// refused above), so none of it stays true.
	meta := maps.Clone(f.Metadata)
	delete(meta, comfyquant.MetadataKey)
	return units, meta, nil
}

// produceDequantized dequantizes a layer whole and sends it to the writer,
// which then drops the pages of its inputs.
func produceDequantized(ctx context.Context, p *producer, u *unit) error {
	c := p.c
	w, s, group, out := c.f.Tensors[u.in], c.f.Tensors[u.scale], int(u.group), u.out
	size := w.Numel() * int64(out.Size())
	// The whole output is acquired before it is made, so that a large
	// layer waits for the writer to finish what is in flight.
	if err := p.fl.acquire(ctx, size); err != nil {
		return err
	}
	if err := p.await(ctx, -1); err != nil {
		return err
	}
	q, err := p.input(u, u.in)
	if err != nil {
		return err
	}
	scale, err := p.input(u, u.scale)
	if err != nil {
		return err
	}
	if scale.Rank() == 1 && scale.Numel() > 1 {
		// [N]: one scale per row, as int8_linear reads it.
		if scale, err = scale.Reshape(scale.Numel(), 1); err != nil {
			return err
		}
	}
	// The output goes into a buffer of the conversion's own, which the
	// writer gives back (see buffers).
	into, buf, err := p.bufs.output(out, w.Shape...)
	if err != nil {
		return err
	}
	var ran string
	var res *tensor.Tensor
	opts := c.kitchenOptions(&ran)
	if into != nil {
		opts = append(opts, kitchen.Into(into))
	}
	if group > 0 {
		res, err = kitchen.DequantizeInt8ConvRotWeightTo(ctx, q, scale, out, append(opts, kitchen.WithConvRotGroup(group))...)
	} else {
		res, err = kitchen.DequantizeInt8To(ctx, q, scale, out, opts...)
	}
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
			remedy := "dequantize to float32, or allow infinities (--allow-inf)"
			if out == dtype.Float32 {
				remedy = "no output type is wider; allow infinities (--allow-inf) to write them"
			}
			return fmt.Errorf("%s: tensor %q: %w: %d values are too large for %v (the first in row %d, column %d); %s",
				c.f.Path, w.Name, ErrOverflow, n, out, i/k, i%k, remedy)
		}
	}
	free := func() {
		res.Release()
		if buf != nil {
			p.bufs.put(buf)
		}
	}
	return p.send(ctx, piece{name: w.Name, data: b, cost: size, last: true, u: u, free: free})
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
