package convert

import (
	"context"
	"fmt"
	"strings"

	"github.com/gokitchen/kitchen/safetensors"
)

// Report describes a checkpoint for `kitchen inspect`.
type Report struct {
	Files     []string          `json:"files"`
	Metadata  map[string]string `json:"metadata,omitempty"`
	Tensors   []TensorReport    `json:"tensors"`
	DataBytes int64             `json:"data_bytes"`
	DTypes    map[string]int    `json:"dtypes"`
	// Formats counts quantized layers by comfy_quant format.
	Formats map[string]int `json:"formats"`
}

// TensorReport is one tensor of a Report.
type TensorReport struct {
	Name  string `json:"name"`
	DType string `json:"dtype"`
	Shape []int  `json:"shape"`
	Bytes int64  `json:"bytes"`
	// Format is the comfy_quant format of the layer the tensor belongs to.
	Format string `json:"format,omitempty"`
	Shard  string `json:"shard"`
}

// Inspect reads and checks a checkpoint: a file, or a sharded index with
// its shards, which the index must describe exactly (every tensor of every
// shard listed, in that shard, and nothing else). It returns ctx.Err() if
// ctx ends first.
func Inspect(ctx context.Context, path string) (*Report, error) {
	var files []*safetensors.File
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	if isIndex(path) {
		idx, shards, err := readIndex(path)
		if err != nil {
			return nil, err
		}
		if files, err = openShards(ctx, path, idx, shards); err != nil {
			return nil, err
		}
	} else {
		f, err := safetensors.OpenContext(ctx, path)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	r := &Report{DTypes: map[string]int{}, Formats: map[string]int{}}
	for _, f := range files {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		r.Files = append(r.Files, f.Path)
		if r.Metadata == nil {
			r.Metadata = f.Metadata
		}
		formats := map[string]string{} // layer -> format
		for _, t := range f.Tensors {
			base, ok := strings.CutSuffix(t.Name, quantSuffix)
			if !ok {
				continue
			}
			b, err := f.Data(t)
			if err != nil {
				return nil, err
			}
			cfg, err := parseQuantBlob(b)
			f.Release(t)
			if err != nil {
				return nil, fmt.Errorf("%s: tensor %q does not hold comfy_quant JSON: %w", f.Path, t.Name, err)
			}
			formats[base] = cfg.Format
			if cfg.PerRow {
				formats[base] += " (per row)"
			}
			r.Formats[cfg.Format]++
		}
		for _, t := range f.Tensors {
			tr := TensorReport{Name: t.Name, DType: t.DType, Shape: t.Shape, Bytes: t.Size(), Shard: f.Path}
			for _, suffix := range []string{weightSuffix, scaleSuffix, quantSuffix} {
				if base, ok := strings.CutSuffix(t.Name, suffix); ok && formats[base] != "" {
					tr.Format = formats[base]
				}
			}
			r.Tensors = append(r.Tensors, tr)
			r.DTypes[t.DType]++
			r.DataBytes += t.Size()
		}
	}
	return r, nil
}
