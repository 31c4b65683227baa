package convert

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/gokitchen/kitchen"
	"github.com/gokitchen/kitchen/safetensors"
	"github.com/gokitchen/kitchen/tensor"
)

// ErrAlreadyQuantized is returned for an input that holds .comfy_quant
// tensors already.
var ErrAlreadyQuantized = errors.New("already holds quantized layers")

// Quantize converts the checkpoint at in (a .safetensors file or a
// .safetensors.index.json with its shards) to int8_tensorwise at out. The
// output appears only when complete; on error or cancellation nothing is
// left behind, and the input is never modified. An output whose header
// would be over safetensors.MaxHeaderSize is refused before anything is
// written (*safetensors.HeaderSizeError). On Unix, hidden temporary files
// of the output left by a run that was killed (.NAME.kitchen-tmp-*, which
// a running conversion keeps locked) are removed first, and listed in the
// Summary.
func Quantize(ctx context.Context, in, out string, opts Options) (*Summary, error) {
	return convertAny(ctx, "quantize", in, out, opts, quantizeUnits)
}

// quantizeUnits plans one file; shardOf finds every tensor name of the
// checkpoint (all shards), so a new tensor never takes an existing name.
func quantizeUnits(f *safetensors.File, opts Options, shardOf func(string) (string, bool)) ([]unit, error) {
	if n := countQuantized(&f.Header); n > 0 {
		return nil, fmt.Errorf("%s: %w (%d %s tensors); quantize the original checkpoint instead", f.Path, ErrAlreadyQuantized, n, quantSuffix)
	}
	units := make([]unit, 0, len(f.Tensors))
	for i, t := range f.Tensors {
		ok, reason := opts.decide(t)
		if ok {
			base := strings.TrimSuffix(t.Name, weightSuffix)
			for _, extra := range []string{base + scaleSuffix, base + quantSuffix} {
				if _, taken := shardOf(extra); taken {
					ok, reason = false, "its layer already has "+extra
				}
			}
		}
		if !ok {
			units = append(units, copyUnit(i, reason))
			continue
		}
		units = append(units, unit{in: int32(i), scale: -1, action: quantizeAction, perRow: opts.PerChannel})
	}
	return units, nil
}

// scaleShape is the shape of a quantized layer's scale: [] for one scale,
// [N, 1] for one per row.
func scaleShape(t safetensors.TensorInfo, perRow bool) []int {
	if perRow {
		return []int{t.Shape[0], 1}
	}
	return []int{}
}

// layerBlob is the comfy_quant tensor of weight t's layer, padded to end
// the layer on a 4-byte boundary.
func layerBlob(t safetensors.TensorInfo, perRow bool) []byte {
	scaleBytes := int64(4)
	if perRow {
		scaleBytes = 4 * int64(t.Shape[0])
	}
	return quantBlob(perRow, scaleBytes+t.Numel())
}

func writeQuantized(ctx context.Context, c *conv, w *safetensors.Writer, t safetensors.TensorInfo, perRow bool) error {
	base := strings.TrimSuffix(t.Name, weightSuffix)
	x, err := c.input(t)
	if err != nil {
		return err
	}
	var ran string
	var q, scale *tensor.Tensor
	if perRow {
		q, scale, err = kitchen.QuantizeInt8Rowwise(ctx, x, c.kitchenOptions(&ran)...)
	} else {
		q, scale, err = kitchen.QuantizeInt8Tensorwise(ctx, x, c.kitchenOptions(&ran)...)
	}
	if err != nil {
		return fmt.Errorf("%s: tensor %q: %w", c.f.Path, t.Name, err)
	}
	c.backends[ran] = true
	for _, part := range []struct {
		name string
		t    *tensor.Tensor
	}{{base + scaleSuffix, scale}, {t.Name, q}} {
		b, err := part.t.Bytes()
		if err != nil {
			return err
		}
		if err := w.WriteTensor(part.name, b); err != nil {
			return err
		}
	}
	return w.WriteTensor(base+quantSuffix, layerBlob(t, perRow))
}

// planner plans the units of one input file of a checkpoint; shardOf says
// which file of the checkpoint holds a tensor name, if any does.
type planner func(f *safetensors.File, opts Options, shardOf func(name string) (string, bool)) ([]unit, error)

// convertAny runs a conversion of a single file or of a sharded checkpoint.
func convertAny(ctx context.Context, operation, in, out string, opts Options, plan planner) (*Summary, error) {
	sum := &Summary{Operation: operation, Input: in, Output: out}
	if isIndex(in) {
		if err := convertIndex(ctx, in, out, opts, plan, sum); err != nil {
			return nil, err
		}
		return sum, nil
	}
	if !opts.DryRun {
		if err := checkOutput(out, opts.Force, in); err != nil {
			return nil, err
		}
	}
	f, err := safetensors.OpenContext(ctx, in)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	units, err := plan(f, opts, func(name string) (string, bool) {
		_, ok := f.Tensor(name)
		return in, ok
	})
	if err != nil {
		return nil, err
	}
	if err := run(ctx, opts, sum, []*job{{in: in, out: out, f: f, units: units}}, nil); err != nil {
		return nil, err
	}
	return sum, nil
}
