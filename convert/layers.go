package convert

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gokitchen/kitchen/backend"
	"github.com/gokitchen/kitchen/comfyquant"
	"github.com/gokitchen/kitchen/op"
	"github.com/gokitchen/kitchen/safetensors"
	"github.com/gokitchen/kitchen/tensor"
)

// LayerError reports a quantized layer that kitchen does not read (its
// tensors or its config are not what int8_tensorwise holds, or ComfyUI
// would read them otherwise than as written), or, with Layer empty, a file
// whose quantization kitchen does not read.
type LayerError struct {
	Path    string // the file holding the layer (or its marker)
	Layer   string // the layer's name, without suffix
	Problem string
	Err     error // what the problem is an instance of, if any (backend.ErrScale)
}

// Unwrap returns Err.
func (e *LayerError) Unwrap() error { return e.Err }

func (e *LayerError) Error() string {
	if e.Layer == "" {
		return fmt.Sprintf("%s: %s", e.Path, e.Problem)
	}
	return fmt.Sprintf("%s: layer %q: %s", e.Path, e.Layer, e.Problem)
}

// diffusionPrefix is the prefix ComfyUI strips from a diffusion model's
// tensor names before it applies _quantization_metadata a second time, so
// that the names there may leave it out.
const diffusionPrefix = "model.diffusion_model."

// qlayer is one quantized layer of a file, as ComfyUI would load it: its
// config from its comfy_quant marker or from _quantization_metadata (which
// wins in ComfyUI), its int8 weight and its scale.
type qlayer struct {
	name   string            // P
	format string            // the config's "format", as written
	conf   comfyquant.Config // when problem is nil
	// fromMarker and fromMetadata say where the config is written.
	fromMarker, fromMetadata bool
	marker, weight, scale    int // indices into the file's tensors (-1: none)
	perRow                   bool
	problem                  *LayerError // why kitchen does not read the layer
	note                     string      // how ComfyUI may read it otherwise
}

// refuse records why kitchen does not read the layer, in the file at path,
// unless a problem is already recorded: the first one found is reported.
func (l *qlayer) refuse(path, format string, a ...any) {
	if l.problem == nil {
		l.problem = &LayerError{Path: path, Layer: l.name, Problem: fmt.Sprintf(format, a...)}
	}
}

// source says where the layer's config is written.
func (l *qlayer) source() string {
	switch {
	case l.fromMarker && l.fromMetadata:
		return "comfy_quant + " + comfyquant.MetadataKey
	case l.fromMetadata:
		return comfyquant.MetadataKey
	}
	return "comfy_quant"
}

// quantInfo is what a file says about its quantization.
type quantInfo struct {
	layers []*qlayer
	// problems are those of the file rather than of one layer.
	problems []*LayerError
	// metadata is whether __metadata__ holds _quantization_metadata.
	metadata bool
}

// firstProblem returns the first problem of the file or of a layer, or nil.
func (qi *quantInfo) firstProblem() error {
	if len(qi.problems) > 0 {
		return qi.problems[0]
	}
	for _, l := range qi.layers {
		if l.problem != nil {
			return l.problem
		}
	}
	return nil
}

// readQuant reads the quantized layers of f as ComfyUI's loader does, and
// checks each as kitchen dequantize would read it. shardOf says which
// shard of the checkpoint holds a tensor. Only reading the file's data can
// fail; everything else is a problem, reported in the result.
func readQuant(f *safetensors.File, shardOf func(string) (string, bool)) (*quantInfo, error) {
	qi := &quantInfo{}
	byName := map[string]*qlayer{}
	get := func(name string) *qlayer {
		l := byName[name]
		if l == nil {
			l = &qlayer{name: name, marker: -1, weight: -1, scale: -1}
			byName[name] = l
			qi.layers = append(qi.layers, l)
		}
		return l
	}
	fileProblem := func(layer, format string, a ...any) {
		qi.problems = append(qi.problems, &LayerError{Path: f.Path, Layer: layer, Problem: fmt.Sprintf(format, a...)})
	}
	nested := map[string]bool{}
	for i, t := range f.Tensors {
		name, ok := strings.CutSuffix(t.Name, quantSuffix)
		if !ok {
			continue
		}
		l := get(name)
		l.marker, l.fromMarker = i, true
		if t.DType != "U8" && t.DType != "I8" {
			l.refuse(f.Path, "%q has dtype %s, want U8 (the bytes of a JSON object)", t.Name, t.DType)
			continue
		}
		b, err := f.Data(t)
		if err != nil {
			return nil, err
		}
		l.format = comfyquant.RawFormat(b)
		nested[name] = comfyquant.NestedConvRot(b)
		l.conf, err = comfyquant.Parse(b)
		f.Release(t)
		if err != nil {
			l.refuse(f.Path, "%s", strings.Replace(err.Error(), comfyquant.ErrMarker.Error(), fmt.Sprintf("bad %q", t.Name), 1))
		}
	}
	if raw, ok := f.Metadata[comfyquant.MetadataKey]; ok {
		qi.metadata = true
		confs, err := comfyquant.ParseMetadata(raw)
		if err != nil {
			fileProblem("", "__metadata__: %s", strings.Replace(err.Error(), comfyquant.ErrMarker.Error()+": ", "", 1))
		}
		names := make([]string, 0, len(confs))
		for n := range confs {
			names = append(names, n)
		}
		slices.Sort(names)
		keyOf := map[string]string{} // the entry each layer took its config from
		for _, n := range names {
			base := n
			if _, ok := f.Tensor(base + weightSuffix); !ok {
				_, other := shardOf(n + weightSuffix)
				_, otherPrefixed := shardOf(diffusionPrefix + n + weightSuffix)
				if _, ok := f.Tensor(diffusionPrefix + n + weightSuffix); ok {
					base = diffusionPrefix + n
				} else if other || otherPrefixed {
					continue // that shard's own markers or metadata decide
				} else {
					fileProblem(n, "%s names this layer, but the checkpoint holds no %q", comfyquant.MetadataKey, n+weightSuffix)
					continue
				}
			}
			l := get(base)
			mc := confs[n]
			if first, ok := keyOf[base]; ok {
				// Both "P" and "model.diffusion_model.P" name the layer.
				if fc := confs[first]; fc.RotationGroup() != mc.RotationGroup() || fc.Format != mc.Format {
					l.refuse(f.Path, "%s names it twice, as %q (%s) and %q (%s)",
						comfyquant.MetadataKey, first, describe(fc), n, describe(mc))
				}
				continue
			}
			keyOf[base] = n
			l.fromMetadata = true
			switch {
			case l.marker >= 0 && l.problem == nil && l.conf.RotationGroup() != mc.RotationGroup():
				l.refuse(f.Path, "its comfy_quant marker says %s but %s says %s (ComfyUI would follow the metadata)",
					describe(l.conf), comfyquant.MetadataKey, describe(mc))
			case l.marker < 0 || l.problem == nil:
				l.conf, l.format = mc, mc.Format
			}
		}
	}
	for _, l := range qi.layers {
		if err := checkLayer(f, l, shardOf); err != nil {
			return nil, err
		}
		if l.problem == nil && nested[l.name] && !l.fromMetadata && IsEmbeddingTable(l.name+weightSuffix) {
			l.note = `ConvRot under "params": ComfyUI's int8 Embedding reads only flat keys and would not undo the rotation`
		}
	}
	for _, t := range f.Tensors {
		switch {
		case t.Name == "scaled_fp8" || strings.HasSuffix(t.Name, ".scaled_fp8"):
			fileProblem("", "%q is ComfyUI's legacy scaled_fp8 marker: an fp8 checkpoint, which kitchen does not read", t.Name)
		case strings.HasSuffix(t.Name, weightSuffix) && t.DType == "I8" && byName[layerName(t.Name)] == nil:
			if _, ok := f.Tensor(layerName(t.Name) + scaleSuffix); ok {
				fileProblem(layerName(t.Name), "int8 weight with a %s but no comfy_quant marker: ComfyUI would load its int8 values as plain numbers", scaleSuffix)
			}
		}
	}
	return qi, nil
}

// checkLayer checks a layer's tensors as ComfyUI loads them, and its
// scales' values as kitchen dequantize reads them, unless its config
// already has a problem. Only reading the scales can fail.
func checkLayer(f *safetensors.File, l *qlayer, shardOf func(string) (string, bool)) error {
	if l.problem != nil {
		return nil
	}
	find := func(name string) int {
		if i := f.Index(name); i >= 0 {
			return i
		}
		if shard, ok := shardOf(name); ok {
			l.refuse(f.Path, "split across shards: %q is in %s; kitchen reads a layer only when its tensors share a shard", name, shard)
		}
		return -1
	}
	if l.weight = find(l.name + weightSuffix); l.weight < 0 {
		l.refuse(f.Path, "no %q", l.name+weightSuffix)
		return nil
	}
	w := f.Tensors[l.weight]
	switch {
	case w.DType != "I8":
		l.refuse(f.Path, "%q has dtype %s, want I8", w.Name, w.DType)
		return nil
	case len(w.Shape) != 2:
		l.refuse(f.Path, "%q has shape %v: ComfyUI loads int8 only into Linear and Embedding layers, whose weights are [N, K]", w.Name, w.Shape)
		return nil
	case w.Numel() == 0:
		l.refuse(f.Path, "%q is empty (shape %v): there is nothing to dequantize", w.Name, w.Shape)
		return nil
	}
	if l.scale = find(l.name + scaleSuffix); l.scale < 0 {
		l.refuse(f.Path, "no %q: ComfyUI refuses that for a Linear layer and reads a scale of 1.0 for an Embedding; kitchen cannot tell which this is, so it does not guess", l.name+scaleSuffix)
		return nil
	}
	s := f.Tensors[l.scale]
	n, k := w.Shape[0], w.Shape[1]
	dt, _ := safetensors.KitchenDType(s.DType) // dtype.Invalid, not a float, for a name kitchen does not read
	switch {
	case !dt.IsFloat():
		l.refuse(f.Path, "%q has dtype %s, want a float type", s.Name, s.DType)
	case s.Numel() == 1:
	case slices.Equal(s.Shape, []int{n, 1}):
		l.perRow = true
	case slices.Equal(s.Shape, []int{n}):
		l.perRow = true
		l.note = "a 1-D [N] scale: ComfyUI's int8 matmul reads it per row, as kitchen does, but its dequantizing path (LoRA, full_precision_matrix_mult, GPUs without int8) and its Embedding broadcast it along the row; write [N, 1]"
	default:
		l.refuse(f.Path, "%q has shape %v; ComfyUI reads one scale ([] or [1]) or one per row ([%d, 1])", s.Name, s.Shape, n)
	}
	if g := l.conf.RotationGroup(); l.problem == nil && g > 0 && k%g != 0 {
		l.refuse(f.Path, "ConvRot group %d does not divide K = %d (ComfyUI fails on it)", g, k)
	}
	if l.problem != nil {
		return nil
	}
	// The values, one or N of them: a scale that is not a finite number
	// > 0 is one dequantize refuses (and ComfyUI would multiply by).
	b, err := f.Data(s)
	if err != nil {
		return err
	}
	defer f.Release(s)
	st, err := tensor.FromBytes(dt, b, int(s.Numel()))
	if err != nil {
		return fmt.Errorf("%s: scale tensor %q: %w", f.Path, s.Name, err)
	}
	i, v, err := op.FirstNotPositive(st)
	if err != nil {
		return fmt.Errorf("%s: scale tensor %q: %w", f.Path, s.Name, err)
	}
	if i >= 0 {
		l.refuse(f.Path, "scale tensor %q element %d is %v: a scale must be a finite number > 0", s.Name, i, v)
		l.problem.Err = backend.ErrScale
	}
	return nil
}

// describe is a config in words.
func describe(c comfyquant.Config) string {
	if c.ConvRot {
		return fmt.Sprintf("%s with ConvRot %d", c.Format, c.Group)
	}
	return c.Format + " without ConvRot"
}
