package convert

import (
	"context"
	"errors"
	"fmt"
)

// Report describes a checkpoint for `kitchen inspect`.
type Report struct {
	// Files are the paths read: the file, or a sharded checkpoint's shards.
	Files []string `json:"files"`
	// Metadata is the header's __metadata__ (the first shard's).
	Metadata map[string]string `json:"metadata,omitempty"`
	// Tensors lists every tensor, file by file, in the order of their data.
	Tensors []TensorReport `json:"tensors"`
	// DataBytes is the size of every tensor's data together.
	DataBytes int64 `json:"data_bytes"`
	// DTypes counts the tensors by their safetensors dtype name ("BF16").
	DTypes map[string]int `json:"dtypes"`
	// Formats counts quantized layers by the format their config names.
	Formats map[string]int `json:"formats"`
	// Layers are the quantized layers, each as ComfyUI would load it.
	Layers []LayerReport `json:"layers,omitempty"`
	// Problems are what kitchen dequantize would refuse in the files
	// rather than in one layer (each names its file).
	Problems []string `json:"problems,omitempty"`
}

// TensorReport is one tensor of a Report.
type TensorReport struct {
	Name  string `json:"name"`
	DType string `json:"dtype"`
	Shape []int  `json:"shape"`
	Bytes int64  `json:"bytes"`
	// Format describes the quantized layer the tensor belongs to.
	Format string `json:"format,omitempty"`
	Shard  string `json:"shard"`
}

// LayerReport is one quantized layer of a Report.
type LayerReport struct {
	Name   string `json:"name"`
	Format string `json:"format"`
	// Scales is "tensor" (one scale) or "channel" (one per output row);
	// ConvRot the rotation's group size (0: none).
	Scales  string `json:"scales,omitempty"`
	ConvRot int    `json:"convrot_group,omitempty"`
	Shape   []int  `json:"shape,omitempty"`
	// Source is where the layer's config is written: "comfy_quant",
	// "_quantization_metadata" or both.
	Source string `json:"source"`
	Shard  string `json:"shard"`
	// Problem says why kitchen would not load the layer (dequantize
	// refuses it); empty when it would.
	Problem string `json:"problem,omitempty"`
	// Note says how ComfyUI may read the layer otherwise than kitchen.
	Note string `json:"note,omitempty"`
}

// Describe is the layer in a few words: "int8_tensorwise channel ConvRot
// 256".
func (l *LayerReport) Describe() string {
	s := l.Format
	if s == "" {
		s = "?"
	}
	if l.Scales != "" {
		s += " " + l.Scales
	}
	if l.ConvRot > 0 {
		s += fmt.Sprintf(" ConvRot %d", l.ConvRot)
	}
	return s
}

// Inspect reads and checks a checkpoint, whatever OpenCheckpoint opens:
// a file; a sharded index with its shards, which the index must describe
// exactly (every tensor of every shard listed, in that shard, and nothing
// else); or a directory holding one index or, without one, a checkpoint's
// .safetensors files. Quantized layers are read as ComfyUI's loader reads
// them; what kitchen would not load is reported (LayerReport.Problem,
// Report.Problems), not an error. It returns ctx.Err() if ctx ends first.
func Inspect(ctx context.Context, path string) (*Report, error) {
	if ctx == nil {
		return nil, errors.New("inspect: nil context")
	}
	c, err := OpenCheckpoint(ctx, path)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return InspectCheckpoint(ctx, c)
}

// InspectCheckpoint is Inspect of a checkpoint already open, for a caller
// that goes on to read its tensors (eval): the files are read once, and
// what was inspected is what is read. c must come from OpenCheckpoint,
// which indexes where each tensor is (a layer split across shards is
// found by it).
func InspectCheckpoint(ctx context.Context, c *Checkpoint) (*Report, error) {
	if ctx == nil {
		return nil, errors.New("inspect: nil context")
	}
	if c == nil || c.where == nil {
		return nil, errors.New("inspect: the checkpoint was not opened by OpenCheckpoint")
	}
	r := &Report{DTypes: map[string]int{}, Formats: map[string]int{}}
	for _, f := range c.Files {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		r.Files = append(r.Files, f.Path)
		if r.Metadata == nil {
			r.Metadata = f.Metadata
		}
		qi, err := readQuant(f, c.shardOf)
		if err != nil {
			return nil, err
		}
		for _, p := range qi.problems {
			r.Problems = append(r.Problems, p.Error())
		}
		formats := map[string]string{} // tensor -> its layer in words
		for _, l := range qi.layers {
			lr := LayerReport{Name: l.name, Format: l.format, Source: l.source(), Shard: f.Path, Note: l.note}
			switch {
			case l.problem != nil:
				lr.Problem = l.problem.Problem
			case l.perRow:
				lr.Scales, lr.ConvRot = "channel", l.conf.RotationGroup()
			default:
				lr.Scales, lr.ConvRot = "tensor", l.conf.RotationGroup()
			}
			if w, ok := f.Tensor(l.name + weightSuffix); ok {
				lr.Shape = w.Shape
			}
			r.Layers = append(r.Layers, lr)
			if lr.Format != "" {
				r.Formats[lr.Format]++
			} else {
				r.Formats["(no format)"]++
			}
			for _, suffix := range []string{weightSuffix, scaleSuffix, quantSuffix} {
				formats[l.name+suffix] = lr.Describe()
			}
		}
		for _, t := range f.Tensors {
			tr := TensorReport{Name: t.Name, DType: t.DType, Shape: t.Shape, Bytes: t.Size(), Shard: f.Path, Format: formats[t.Name]}
			r.Tensors = append(r.Tensors, tr)
			r.DTypes[t.DType]++
			r.DataBytes += t.Size()
		}
	}
	return r, nil
}
