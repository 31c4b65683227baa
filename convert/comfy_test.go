package convert_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gokitchen/kitchen/backend"
	"github.com/gokitchen/kitchen/convert"
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/safetensors"
)

// The variants of int8_tensorwise that ComfyUI reads, each dequantized by
// kitchen and compared with q * scale (rotated back by the matrix, in
// float64, for ConvRot) computed here.

// variant is one quantized layer "blk" of rows x k, with its marker (if
// any), its scale, and __metadata__.
type variant struct {
	name    string
	prefix  string // of the tensors' names
	rows, k int
	scale   rawTensor
	marker  string // "" for none
	meta    map[string]string
	group   int // the ConvRot group kitchen must undo
}

func scaleOf(dt string, shape []int, v ...float32) rawTensor {
	var b []byte
	for _, x := range v {
		switch dt {
		case "F32":
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
		case "F16":
			b = binary.LittleEndian.AppendUint16(b, dtype.Float16FromFloat32(x))
		case "BF16":
			b = binary.LittleEndian.AppendUint16(b, dtype.BFloat16FromFloat32(x))
		}
	}
	return rawTensor{dtype: dt, shape: shape, data: b}
}

// rowScales are n distinct per-row scales.
func rowScales(n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = 0.01 * float32(i+1)
	}
	return s
}

// without returns ts without its i-th tensor.
func without(ts []rawTensor, i int) []rawTensor { return slices.Delete(slices.Clone(ts), i, i+1) }

func (v variant) write(t *testing.T, path string) {
	t.Helper()
	layer := int8Layer(v.prefix+"blk", v.rows, v.k, v.scale, v.marker)
	if v.marker == "" {
		layer = without(layer, 2)
	}
	extra := rawTensor{"other.bias", "BF16", []int{3}, []byte{1, 2, 3, 4, 5, 6}}
	writeRaw(t, path, v.meta, append(layer, extra)...)
}

// want is the layer dequantized to float32, computed here.
func (v variant) want() []float32 {
	q := int8Layer("x", v.rows, v.k, rawTensor{}, "")[0].data
	s := v.scale
	out := make([]float32, 0, v.rows*v.k)
	for r := range v.rows {
		sr := r
		if len(s.data) == map[string]int{"F32": 4, "F16": 2, "BF16": 2}[s.dtype] {
			sr = 0 // one scale
		}
		scale := dtype.Load(s.data, map[string]dtype.DType{"F32": dtype.Float32, "F16": dtype.Float16, "BF16": dtype.BFloat16}[s.dtype], sr)
		row := make([]float32, v.k)
		for i := range row {
			row[i] = float32(int8(q[r*v.k+i])) * scale
		}
		if v.group > 0 {
			row = rotateMatrix(row, v.group)
		}
		out = append(out, row...)
	}
	return out
}

func TestDequantizeVariants(t *testing.T) {
	const plain, rot16 = `{"format": "int8_tensorwise"}`, `{"format": "int8_tensorwise", "convrot": true, "convrot_groupsize": 16}`
	meta := func(layers string) map[string]string {
		return map[string]string{"_quantization_metadata": `{"format_version": "1.0", "layers": {` + layers + `}}`, "kept": "yes"}
	}
	for _, v := range []variant{
		{name: "one scale, []", rows: 3, k: 8, scale: scaleOf("F32", []int{}, 0.5), marker: plain},
		{name: "one scale, [1]", rows: 3, k: 8, scale: scaleOf("F32", []int{1}, 0.25), marker: plain},
		{name: "[N, 1], legacy per_row", rows: 3, k: 8, scale: scaleOf("F32", []int{3, 1}, rowScales(3)...), marker: `{"format":"int8_tensorwise","per_row":true}`},
		{name: "[N], as int8_linear reads it", rows: 3, k: 8, scale: scaleOf("F32", []int{3}, rowScales(3)...), marker: plain},
		{name: "bfloat16 [N, 1]", rows: 3, k: 8, scale: scaleOf("BF16", []int{3, 1}, rowScales(3)...), marker: plain},
		{name: "float16 []", rows: 3, k: 8, scale: scaleOf("F16", []int{}, 0.125), marker: plain},
		{name: "ConvRot, flat", rows: 3, k: 32, scale: scaleOf("F32", []int{3, 1}, rowScales(3)...), marker: rot16, group: 16},
		{name: "ConvRot, under params", rows: 3, k: 32, scale: scaleOf("F32", []int{3, 1}, rowScales(3)...),
			marker: `{"format": "int8_tensorwise", "params": {"convrot": true, "convrot_groupsize": 16}}`, group: 16},
		{name: "ConvRot, default group", rows: 2, k: 512, scale: scaleOf("F32", []int{2, 1}, rowScales(2)...),
			marker: `{"format": "int8_tensorwise", "convrot": true}`, group: 256},
		{name: "ConvRot, flat wins over params", rows: 2, k: 32, scale: scaleOf("F32", []int{2, 1}, rowScales(2)...),
			marker: `{"format": "int8_tensorwise", "convrot": false, "params": {"convrot": true}}`},
		{name: "ConvRot, one scale", rows: 2, k: 16, scale: scaleOf("F32", []int{}, 0.5), marker: rot16, group: 16},
		{name: "ConvRot embedding table", prefix: "y_embedder.embedding_table.", rows: 5, k: 64, scale: scaleOf("F32", []int{5, 1}, rowScales(5)...),
			marker: `{"format": "int8_tensorwise", "convrot": true, "convrot_groupsize": 64}`, group: 64},
		{name: "metadata only", rows: 3, k: 8, scale: scaleOf("F32", []int{3, 1}, rowScales(3)...),
			meta: meta(`"blk": {"format": "int8_tensorwise", "convrot": true, "convrot_groupsize": 4}`), group: 4},
		{name: "metadata and marker agree", rows: 3, k: 32, scale: scaleOf("F32", []int{3, 1}, rowScales(3)...), marker: rot16,
			meta: meta(`"blk": {"format": "int8_tensorwise", "convrot": true, "convrot_groupsize": 16, "per_row": true}`), group: 16},
		{name: "metadata without the diffusion model's prefix", prefix: "model.diffusion_model.", rows: 3, k: 16, scale: scaleOf("F32", []int{}, 0.5),
			meta: meta(`"blk": {"format": "int8_tensorwise", "convrot": true, "convrot_groupsize": 16}`), group: 16},
	} {
		t.Run(v.name, func(t *testing.T) {
			dir := t.TempDir()
			in, out := filepath.Join(dir, "in.safetensors"), filepath.Join(dir, "out.safetensors")
			v.write(t, in)
			sum, err := convert.Dequantize(context.Background(), in, out, convert.Options{OutDType: dtype.Float32, Backend: "eager"})
			if err != nil {
				t.Fatal(err)
			}
			if sum.Dequantized != 1 || sum.Copied != 1 {
				t.Errorf("summary %+v", sum)
			}
			fo := open(t, out)
			if len(fo.Tensors) != 2 || fo.Metadata[`_quantization_metadata`] != "" || (v.meta != nil) != (fo.Metadata["kept"] == "yes") {
				t.Errorf("output tensors %v, metadata %v", fo.Tensors, fo.Metadata)
			}
			ti, b := data(t, fo, v.prefix+"blk.weight")
			if ti.DType != "F32" || !slices.Equal(ti.Shape, []int{v.rows, v.k}) {
				t.Fatalf("%s %v", ti.DType, ti.Shape)
			}
			want := v.want()
			for r := range v.rows {
				var top float64
				for _, w := range want[r*v.k : (r+1)*v.k] {
					top = max(top, math.Abs(float64(w)))
				}
				// The contract's bound for a ConvRot output in float32: 16
				// ulps at the row's largest magnitude; exact otherwise.
				tol := 0.0
				if v.group > 0 {
					tol = 16 * top * 0x1p-23
				}
				for i := r * v.k; i < (r+1)*v.k; i++ {
					if got := float64(dtype.Load(b, dtype.Float32, i)); math.Abs(got-float64(want[i])) > tol {
						t.Fatalf("element %d: %v, want %v (within %v)", i, got, want[i], tol)
					}
				}
			}
			r, err := convert.Inspect(context.Background(), in)
			if err != nil || len(r.Layers) != 1 || r.Layers[0].Problem != "" || r.Layers[0].ConvRot != v.group {
				t.Errorf("inspect: %v %+v", err, r)
			}
		})
	}
}

// TestDequantizeRefuses: what kitchen would not read is an error naming
// the layer, and nothing is written.
func TestDequantizeRefuses(t *testing.T) {
	f32 := scaleOf("F32", []int{}, 0.5)
	rows := scaleOf("F32", []int{2, 1}, 0.5, 0.25)
	for _, c := range []struct {
		name    string
		tensors []rawTensor
		meta    map[string]string
		want    string
	}{
		{"no scale", without(int8Layer("blk", 2, 4, f32, `{"format": "int8_tensorwise"}`), 1), nil,
			`no "blk.weight_scale": ComfyUI refuses that for a Linear layer and reads a scale of 1.0 for an Embedding`},
		{"a scale of another shape", int8Layer("blk", 2, 4, scaleOf("F32", []int{2, 2}, 1, 1, 1, 1), `{"format": "int8_tensorwise"}`), nil,
			`"blk.weight_scale" has shape [2 2]; ComfyUI reads one scale ([] or [1]) or one per row ([2, 1])`},
		{"a 1-D scale of K", int8Layer("blk", 2, 4, scaleOf("F32", []int{4}, 1, 1, 1, 1), `{"format": "int8_tensorwise"}`), nil, "has shape [4]"},
		{"a group that does not divide K", int8Layer("blk", 2, 16, rows, `{"format": "int8_tensorwise", "convrot": true, "convrot_groupsize": 64}`), nil,
			"ConvRot group 64 does not divide K = 16"},
		{"the default group on a small K", int8Layer("blk", 2, 64, rows, `{"format": "int8_tensorwise", "convrot": true}`), nil,
			"ConvRot group 256 does not divide K = 64"},
		{"an unknown key", int8Layer("blk", 2, 4, f32, `{"format": "int8_tensorwise", "num_experts": 8}`), nil, `key "num_experts" is not understood`},
		{"an unknown format", int8Layer("blk", 2, 4, f32, `{"format": "mxfp8"}`), nil, `format "mxfp8"`},
		{"a float marker", append(without(int8Layer("blk", 2, 4, f32, "x"), 2), rawTensor{"blk.comfy_quant", "F32", []int{1}, f32s(1)}), nil, `"blk.comfy_quant" has dtype F32, want U8`},
		{"a bfloat16 weight", append(without(int8Layer("blk", 2, 4, f32, `{"format": "int8_tensorwise"}`), 0), rawTensor{"blk.weight", "BF16", []int{2, 4}, make([]byte, 16)}), nil,
			`"blk.weight" has dtype BF16, want I8`},
		{"a 4-D weight", append(without(int8Layer("blk", 2, 4, f32, `{"format": "int8_tensorwise"}`), 0), rawTensor{"blk.weight", "I8", []int{2, 4, 1, 1}, make([]byte, 8)}), nil,
			"ComfyUI loads int8 only into Linear and Embedding layers"},
		{"no weight", without(int8Layer("blk", 2, 4, f32, `{"format": "int8_tensorwise"}`), 0), nil, `no "blk.weight"`},
		{"no weight, a newline in the name", without(int8Layer("bl\nk", 2, 4, f32, `{"format": "int8_tensorwise"}`), 0), nil, `no "bl\nk.weight"`},
		{"an empty weight", int8Layer("blk", 0, 4, scaleOf("F32", []int{0, 1}), `{"format": "int8_tensorwise"}`), nil, `"blk.weight" is empty (shape [0 4])`},
		{"metadata naming the layer twice, differently", without(int8Layer("model.diffusion_model.blk", 2, 16, rows, "x"), 2),
			map[string]string{"_quantization_metadata": `{"layers": {"blk": {"format": "int8_tensorwise", "convrot": true, "convrot_groupsize": 16}, "model.diffusion_model.blk": {"format": "int8_tensorwise"}}}`},
			`_quantization_metadata names it twice, as "blk" (int8_tensorwise with ConvRot 16) and "model.diffusion_model.blk" (int8_tensorwise without ConvRot)`},
		{"marker and metadata disagree", int8Layer("blk", 2, 16, rows, `{"format": "int8_tensorwise"}`),
			map[string]string{"_quantization_metadata": `{"layers": {"blk": {"format": "int8_tensorwise", "convrot": true, "convrot_groupsize": 16}}}`},
			"its comfy_quant marker says int8_tensorwise without ConvRot but _quantization_metadata says int8_tensorwise with ConvRot 16"},
		{"metadata naming a missing layer", int8Layer("blk", 2, 4, f32, `{"format": "int8_tensorwise"}`),
			map[string]string{"_quantization_metadata": `{"layers": {"blk": {"format": "int8_tensorwise"}, "gone": {"format": "int8_tensorwise"}}}`},
			`_quantization_metadata names this layer, but the checkpoint holds no "gone.weight"`},
		{"metadata of strings", int8Layer("blk", 2, 4, f32, `{"format": "int8_tensorwise"}`),
			map[string]string{"_quantization_metadata": `{"layers": {"blk": "int8_tensorwise"}}`}, `layer "blk" is not an object`},
		{"metadata without layers", int8Layer("blk", 2, 4, f32, `{"format": "int8_tensorwise"}`),
			map[string]string{"_quantization_metadata": `{"format_version": "1.0"}`}, `no "layers" object`},
		{"fp8 metadata", int8Layer("blk", 2, 4, f32, `{"format": "int8_tensorwise"}`),
			map[string]string{"_quantization_metadata": `{"layers": {"blk": {"format": "float8_e4m3fn"}}}`}, `format "float8_e4m3fn"`},
		{"an int8 weight with a scale, no marker", without(int8Layer("blk", 2, 4, f32, "x"), 2), nil, "int8 weight with a .weight_scale but no comfy_quant marker"},
		{"scaled_fp8", []rawTensor{{"model.diffusion_model.scaled_fp8", "F8_E4M3", []int{}, []byte{0}}, {"w.weight", "F8_E4M3", []int{2}, []byte{1, 2}}}, nil,
			`"model.diffusion_model.scaled_fp8" is ComfyUI's legacy scaled_fp8 marker`},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			in := filepath.Join(dir, "in.safetensors")
			writeRaw(t, in, c.meta, c.tensors...)
			_, err := convert.Dequantize(context.Background(), in, filepath.Join(dir, "out.safetensors"), convert.Options{})
			var le *convert.LayerError
			if !errors.As(err, &le) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), in) {
				t.Errorf("got %v, want a LayerError saying %q", err, c.want)
			}
			assertOnly(t, dir, "in.safetensors")
			// inspect reports it, rather than failing.
			r, err := convert.Inspect(context.Background(), in)
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, l := range r.Layers {
				found = found || strings.Contains(l.Problem, c.want)
			}
			for _, p := range r.Problems {
				found = found || strings.Contains(p, c.want)
			}
			if !found {
				t.Errorf("inspect does not report %q: %+v", c.want, r)
			}
		})
	}
}

// TestDequantizeBadConvRotScale: a ConvRot layer's bad scale is named as a
// plain layer's is.
func TestDequantizeBadConvRotScale(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.safetensors")
	writeRaw(t, in, nil, int8Layer("blk", 2, 16, scaleOf("F32", []int{2, 1}, 1, float32(math.Inf(1))), `{"format": "int8_tensorwise", "convrot": true, "convrot_groupsize": 16}`)...)
	_, err := convert.Dequantize(context.Background(), in, filepath.Join(dir, "out.safetensors"), convert.Options{})
	if !errors.Is(err, backend.ErrScale) || !strings.Contains(err.Error(), `"blk.weight_scale"`) {
		t.Fatalf("got %v, want ErrScale naming blk.weight_scale", err)
	}
	assertOnly(t, dir, "in.safetensors")
}

// TestInspectLayers: per layer, the format, the scales, the group, where
// the config is written, and notes on what ComfyUI reads otherwise.
func TestInspectLayers(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.safetensors")
	var tensors []rawTensor
	tensors = append(tensors, int8Layer("a", 2, 16, scaleOf("F32", []int{}, 1), `{"format": "int8_tensorwise"}`)...)
	tensors = append(tensors, int8Layer("b", 2, 16, scaleOf("F32", []int{2, 1}, 1, 2), `{"format": "int8_tensorwise", "convrot": true, "convrot_groupsize": 16}`)...)
	tensors = append(tensors, int8Layer("c", 2, 16, scaleOf("F32", []int{2}, 1, 2), `{"format": "int8_tensorwise"}`)...)
	tensors = append(tensors, int8Layer("d.embed_tokens", 2, 16, scaleOf("F32", []int{2, 1}, 1, 2), `{"format": "int8_tensorwise", "params": {"convrot": true, "convrot_groupsize": 16}}`)...)
	tensors = append(tensors, int8Layer("e", 2, 16, scaleOf("F32", []int{}, 1), `{"format": "nvfp4"}`)...)
	writeRaw(t, in, map[string]string{"_quantization_metadata": `{"layers": {"f": {"format": "int8_tensorwise"}}}`},
		append(tensors, without(int8Layer("f", 2, 16, scaleOf("F32", []int{}, 1), "x"), 2)...)...)
	r, err := convert.Inspect(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]convert.LayerReport{}
	for _, l := range r.Layers {
		got[l.Name] = l
	}
	for name, want := range map[string]struct{ describe, source, problem, note string }{
		"a":              {"int8_tensorwise tensor", "comfy_quant", "", ""},
		"b":              {"int8_tensorwise channel ConvRot 16", "comfy_quant", "", ""},
		"c":              {"int8_tensorwise channel", "comfy_quant", "", "a 1-D [N] scale"},
		"d.embed_tokens": {"int8_tensorwise channel ConvRot 16", "comfy_quant", "", `ComfyUI's int8 Embedding reads only flat keys`},
		"e":              {"nvfp4", "comfy_quant", `format "nvfp4": kitchen reads only "int8_tensorwise"`, ""},
		"f":              {"int8_tensorwise tensor", "_quantization_metadata", "", ""},
	} {
		l := got[name]
		if l.Describe() != want.describe || l.Source != want.source || !strings.Contains(l.Problem, want.problem) || (want.problem == "") != (l.Problem == "") ||
			!strings.Contains(l.Note, want.note) || (want.note == "") != (l.Note == "") || !slices.Equal(l.Shape, []int{2, 16}) {
			t.Errorf("%s: %+v (%s), want %+v", name, l, l.Describe(), want)
		}
	}
	if len(r.Layers) != 6 || r.Formats["int8_tensorwise"] != 5 || r.Formats["nvfp4"] != 1 {
		t.Errorf("%d layers, formats %v", len(r.Layers), r.Formats)
	}
	for _, tr := range r.Tensors {
		if tr.Name == "b.weight_scale" && tr.Format != "int8_tensorwise channel ConvRot 16" {
			t.Errorf("%s: format %q", tr.Name, tr.Format)
		}
	}
}

// TestQuantizeRefusesQuantized: every sign of a quantized input is refused,
// saying which.
func TestQuantizeRefusesQuantized(t *testing.T) {
	w := rawTensor{"blocks.0.a.weight", "F32", []int{64, 64}, f32s(make([]float32, 64*64)...)}
	for _, c := range []struct {
		name    string
		meta    map[string]string
		tensors []rawTensor
		sign    convert.Sign
		what    string
	}{
		{"marker", nil, append(int8Layer("blocks.1.b", 2, 4, scaleOf("F32", []int{}, 1), `{"format": "int8_tensorwise"}`), w), convert.SignMarker, "blocks.1.b.comfy_quant"},
		{"metadata", map[string]string{"_quantization_metadata": `{"layers": {}}`}, []rawTensor{w}, convert.SignMetadata, "_quantization_metadata"},
		{"scaled_fp8", nil, []rawTensor{w, {"scaled_fp8", "F8_E4M3", []int{0}, nil}}, convert.SignScaledFP8, "scaled_fp8"},
		{"int8 with a scale", nil, append(without(int8Layer("blocks.1.b", 2, 4, scaleOf("F32", []int{}, 1), "x"), 2), w), convert.SignScaledWeight, "blocks.1.b.weight"},
		{"fp8 with scale_weight", nil, []rawTensor{w, {"c.weight", "F8_E4M3", []int{2}, []byte{1, 2}}, {"c.scale_weight", "F32", []int{}, f32s(1)}}, convert.SignScaledWeight, "c.weight"},
		{"fp4 with a scale", nil, []rawTensor{w, {"d.weight", "F4", []int{4}, []byte{1, 2}}, {"d.weight_scale", "F32", []int{}, f32s(1)}}, convert.SignScaledWeight, "d.weight"},
	} {
		dir := t.TempDir()
		in := filepath.Join(dir, "in.safetensors")
		writeRaw(t, in, c.meta, c.tensors...)
		_, err := convert.Quantize(context.Background(), in, filepath.Join(dir, "out.safetensors"), convert.Options{})
		var aq *convert.AlreadyQuantizedError
		if !errors.As(err, &aq) || !errors.Is(err, convert.ErrAlreadyQuantized) || aq.Sign != c.sign || aq.Name != c.what || !strings.Contains(err.Error(), string(c.sign)) {
			t.Errorf("%s: got %v, want %q naming %q", c.name, err, c.sign, c.what)
		}
		assertOnly(t, dir, "in.safetensors")
	}
}

// TestOddLayout: layers whose int8 weights have odd sizes, among tensors of
// every element size: every tensor stays aligned, the markers come last
// with ComfyUI's exact bytes, and a layer whose K no power of 4 divides is
// quantized per channel with a plain marker even under ConvRot.
func TestOddLayout(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.safetensors")
	bf := func(n int) []byte {
		b := make([]byte, 2*n)
		for i := range n {
			binary.LittleEndian.PutUint16(b[2*i:], dtype.BFloat16FromFloat32(float32(i%13)-6))
		}
		return b
	}
	writeRaw(t, in, map[string]string{"note": "kept"},
		rawTensor{"blocks.0.a.weight", "BF16", []int{65, 67}, bf(65 * 67)},
		rawTensor{"blocks.0.b.weight", "F32", []int{67, 132}, f32s(make([]float32, 67*132)...)},
		rawTensor{"blocks.0.c.weight", "F16", []int{3, 5}, make([]byte, 30)},
		rawTensor{"blocks.0.d.weight", "BF16", []int{7, 64}, bf(7 * 64)},
		rawTensor{"flag", "BOOL", []int{3}, []byte{1, 0, 1}},
		rawTensor{"ids", "I64", []int{3}, make([]byte, 24)},
		rawTensor{"u", "U8", []int{5}, []byte("hello")},
		rawTensor{"packed.f4", "F4", []int{4, 2}, []byte{0x12, 0x34, 0x56, 0x78}}, // safetensors 0.6's packed types
		rawTensor{"packed.f6", "F6_E3M2", []int{4}, []byte{9, 8, 7}},
		rawTensor{"blocks.0.a.bias", "BF16", []int{65}, bf(65)},
	)
	for _, m := range []mode{{}, {perTensor: true}, {convrot: 256}, {convrot: 4}} {
		out := filepath.Join(t.TempDir(), "out.safetensors")
		opts := m.options()
		opts.MinElements, opts.MinFeatures = 1, 1
		sum, err := convert.Quantize(context.Background(), in, out, opts)
		if err != nil {
			t.Fatal(err)
		}
		if n := checkQuantized(t, in, out, m); n != 4 || sum.Quantized != 4 || len(sum.Layers) != 4 {
			t.Errorf("%+v: %d quantized, summary %+v", m, n, sum)
		}
		if _, err := safetensors.Open(out); err != nil {
			t.Error(err)
		}
	}
}

// TestComfyKitchenFixture dequantizes testdata/convrot-ck.safetensors, a
// checkpoint that tools/convrotfixture/make_fixture.py quantized the way
// comfy-kitchen's eager backend does (PyTorch; the rotation by matrix in
// the weight's dtype) and wrote the way ComfyUI does, and compares it with
// comfy-kitchen's own dequantization of it, which the script wrote beside
// it: ConvRot layers within the contract's bound (docs/CONTRACT.md: 16
// float32 ulps at the row's largest magnitude), the others exactly.
func TestComfyKitchenFixture(t *testing.T) {
	const in, ref = "../testdata/convrot-ck.safetensors", "../testdata/convrot-ck-dequant.safetensors"
	groups := map[string]int{"blocks.0.attn.qkv": 256, "blocks.0.mlp.fc1": 64, "blocks.0.mlp.fc2": 16, "y_embedder.embedding_table": 64}
	for _, be := range []string{"eager", "cpu"} {
		out := filepath.Join(t.TempDir(), "out.safetensors")
		sum, err := convert.Dequantize(context.Background(), in, out, convert.Options{OutDType: dtype.Float32, Backend: be})
		if err != nil {
			t.Fatal(err)
		}
		if sum.Dequantized != 6 || sum.Copied != 1 {
			t.Errorf("summary %+v", sum)
		}
		for _, it := range sum.Plan {
			if g := groups[strings.TrimSuffix(it.Name, ".weight")]; it.Action == convert.ActionDequantize && it.ConvRot != g {
				t.Errorf("%s: ConvRot %d, want %d", it.Name, it.ConvRot, g)
			}
		}
		fo, fr := open(t, out), open(t, ref)
		if len(fo.Tensors) != len(fr.Tensors) {
			t.Fatalf("%d tensors, want %d", len(fo.Tensors), len(fr.Tensors))
		}
		checked, rotatedDiffer, worst := 0, 0, 0.0
		for _, tr := range fr.Tensors {
			to, got := data(t, fo, tr.Name)
			_, want := data(t, fr, tr.Name)
			if to.DType != tr.DType || !slices.Equal(to.Shape, tr.Shape) {
				t.Fatalf("%s: %s %v, want %s %v", tr.Name, to.DType, to.Shape, tr.DType, tr.Shape)
			}
			g := groups[strings.TrimSuffix(tr.Name, ".weight")]
			if tr.DType != "F32" || g == 0 {
				if !bytes.Equal(got, want) {
					t.Errorf("%s (%s): %d bytes differ from comfy-kitchen's", tr.Name, tr.DType, countDiff(got, want))
				}
				continue
			}
			k := tr.Shape[1]
			for r := range tr.Shape[0] {
				var top float64
				for i := r * k; i < (r+1)*k; i++ {
					top = max(top, math.Abs(float64(dtype.Load(want, dtype.Float32, i))))
				}
				for i := r * k; i < (r+1)*k; i++ {
					x, y := float64(dtype.Load(got, dtype.Float32, i)), float64(dtype.Load(want, dtype.Float32, i))
					if math.Abs(x-y) > 16*top*0x1p-23 {
						t.Fatalf("%s on %s: [%d, %d] = %v, comfy-kitchen %v (row max %v)", tr.Name, be, r, i-r*k, x, y, top)
					}
					if x != y {
						rotatedDiffer++
						worst = max(worst, math.Abs(x-y)/(top*0x1p-23))
					}
					checked++
				}
			}
		}
		t.Logf("%s: %d ConvRot values within the bound, %d of them not bit-identical to comfy-kitchen's (summation order), at most %.2f ulps of the row's largest", be, checked, rotatedDiffer, worst)
		if checked != 32*256+64*192+32*128+40*64 {
			t.Errorf("checked %d ConvRot values", checked)
		}
	}
}

// TestShardedMetadataPrefixed: shards that share one _quantization_metadata
// naming layers without ComfyUI's diffusion-model prefix, one shard holding
// a plain layer and the other a prefixed one: each shard leaves the other's
// layer to it, and both dequantize.
func TestShardedMetadataPrefixed(t *testing.T) {
	dir := t.TempDir()
	meta := map[string]string{"_quantization_metadata": `{"layers": {"k": {"format": "int8_tensorwise"}, "j": {"format": "int8_tensorwise"}}}`}
	rows := scaleOf("F32", []int{2, 1}, 0.5, 0.25)
	c := without(int8Layer("k", 2, 4, rows, "x"), 2)
	d := without(int8Layer("model.diffusion_model.j", 2, 4, rows, "x"), 2)
	writeRaw(t, filepath.Join(dir, "c.safetensors"), meta, c...)
	writeRaw(t, filepath.Join(dir, "d.safetensors"), meta, d...)
	wm := map[string]string{}
	for _, r := range c {
		wm[r.name] = "c.safetensors"
	}
	for _, r := range d {
		wm[r.name] = "d.safetensors"
	}
	in := filepath.Join(dir, "n.safetensors.index.json")
	writeIndex(t, in, wm)
	sum, err := convert.Dequantize(context.Background(), in, filepath.Join(t.TempDir(), "o.safetensors.index.json"), convert.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Dequantized != 2 {
		t.Errorf("dequantized %d layers, want 2: %+v", sum.Dequantized, sum)
	}
}
