package convert

import (
	"fmt"
	"path/filepath"
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

// Inspect reads and checks a checkpoint (a file or a sharded index).
func Inspect(path string) (*Report, error) {
	files := []string{path}
	if isIndex(path) {
		_, shards, err := readIndex(path)
		if err != nil {
			return nil, err
		}
		files = files[:0]
		for _, s := range shards {
			files = append(files, filepath.Join(filepath.Dir(path), s))
		}
	}
	r := &Report{Files: files, DTypes: map[string]int{}, Formats: map[string]int{}}
	for _, file := range files {
		f, err := safetensors.Open(file)
		if err != nil {
			return nil, err
		}
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
				f.Close()
				return nil, err
			}
			cfg, err := parseQuantBlob(b)
			if err != nil {
				f.Close()
				return nil, fmt.Errorf("%s: %s does not hold comfy_quant JSON: %w", file, t.Name, err)
			}
			formats[base] = cfg.Format
			if cfg.PerRow {
				formats[base] += " (per row)"
			}
			r.Formats[cfg.Format]++
		}
		for _, t := range f.Tensors {
			tr := TensorReport{Name: t.Name, DType: t.DType, Shape: t.Shape, Bytes: t.Size(), Shard: file}
			for _, suffix := range []string{weightSuffix, scaleSuffix, quantSuffix} {
				if base, ok := strings.CutSuffix(t.Name, suffix); ok && formats[base] != "" {
					tr.Format = formats[base]
				}
			}
			r.Tensors = append(r.Tensors, tr)
			r.DTypes[t.DType]++
			r.DataBytes += t.Size()
		}
		if err := f.Close(); err != nil {
			return nil, err
		}
	}
	return r, nil
}
