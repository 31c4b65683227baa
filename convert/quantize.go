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
// left behind, and the input is never modified.
func Quantize(ctx context.Context, in, out string, opts Options) (*Summary, error) {
	return convertAny(ctx, in, out, opts, quantizeUnits)
}

// quantizeUnits plans one file; names holds every tensor name of the
// checkpoint (all shards), so a new tensor never takes an existing name.
func quantizeUnits(f *safetensors.File, opts Options, names map[string]bool) ([]unit, error) {
	if n := countQuantized(&f.Header); n > 0 {
		return nil, fmt.Errorf("%s: %w (%d %s tensors); quantize the original checkpoint instead", f.Path, ErrAlreadyQuantized, n, quantSuffix)
	}
	var units []unit
	for _, t := range f.Tensors {
		ok, reason := opts.decide(t)
		if ok {
			base := strings.TrimSuffix(t.Name, weightSuffix)
			for _, extra := range []string{base + scaleSuffix, base + quantSuffix} {
				if names[extra] {
					ok, reason = false, "its layer already has "+extra
				}
			}
		}
		if !ok {
			units = append(units, copyUnit(t, reason))
			continue
		}
		units = append(units, quantizeUnit(t, opts.PerChannel))
	}
	return units, nil
}

func quantizeUnit(t safetensors.TensorInfo, perRow bool) unit {
	base := strings.TrimSuffix(t.Name, weightSuffix)
	scaleShape := []int{}
	if perRow {
		scaleShape = []int{t.Shape[0], 1}
	}
	scaleBytes := int64(4)
	if perRow {
		scaleBytes = 4 * int64(t.Shape[0])
	}
	blob := quantBlob(perRow, scaleBytes+t.Numel())
	return unit{
		item: Item{Name: t.Name, DType: t.DType, Shape: t.Shape, Bytes: t.Size(), Action: ActionQuantize},
		in:   []safetensors.TensorInfo{t},
		// The float32 scale first keeps it aligned; the blob's padding
		// ends the layer on a 4-byte boundary.
		out: []safetensors.TensorInfo{
			{Name: base + scaleSuffix, DType: "F32", Shape: scaleShape},
			{Name: t.Name, DType: "I8", Shape: t.Shape},
			{Name: base + quantSuffix, DType: "U8", Shape: []int{len(blob)}},
		},
		write: func(ctx context.Context, c *conv, w *safetensors.Writer) error {
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
			return w.WriteTensor(base+quantSuffix, blob)
		},
	}
}

// planner plans the units of one input file of a checkpoint whose tensor
// names (over all its files) are names.
type planner func(f *safetensors.File, opts Options, names map[string]bool) ([]unit, error)

// convertAny runs a conversion of a single file or of a sharded checkpoint.
func convertAny(ctx context.Context, in, out string, opts Options, plan planner) (*Summary, error) {
	sum := &Summary{Input: in, Output: out}
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
	f, err := safetensors.Open(in)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	names := make(map[string]bool, len(f.Tensors))
	for _, t := range f.Tensors {
		names[t.Name] = true
	}
	units, err := plan(f, opts, names)
	if err != nil {
		return nil, err
	}
	if err := run(ctx, opts, sum, []*job{{in: in, out: out, f: f, units: units}}, nil); err != nil {
		return nil, err
	}
	return sum, nil
}
