package convert_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/gokitchen/kitchen/convert"
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/eval"
	"github.com/gokitchen/kitchen/safetensors"
)

// FuzzFiles runs inspect, quantize, dequantize and eval on arbitrary files,
// the seeds being small checkpoints before and after conversion. Whatever
// the bytes: nothing panics, the input is never changed, a refusal leaves
// no file behind, what quantize writes inspects without a problem,
// dequantizes and evaluates against its input, and what either writes
// reads back whole.
func FuzzFiles(f *testing.F) {
	seedDir := f.TempDir()
	plain := filepath.Join(seedDir, "plain.safetensors")
	bf := func(v ...float32) []byte {
		var b []byte
		for _, x := range v {
			b = binary.LittleEndian.AppendUint16(b, dtype.BFloat16FromFloat32(x))
		}
		return b
	}
	ramp := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(i%37-18) / 7
		}
		return v
	}
	writeRaw(f, plain, map[string]string{"format": "pt"},
		rawTensor{"blocks.0.attn.weight", "BF16", []int{4, 16}, bf(ramp(64)...)},
		rawTensor{"blocks.0.attn.bias", "BF16", []int{4}, bf(1, 2, 3, 4)},
		rawTensor{"blocks.0.mlp.weight", "F32", []int{3, 8}, f32s(ramp(24)...)},
		rawTensor{"embed_tokens.weight", "F16", []int{2, 4}, make([]byte, 16)},
		rawTensor{"norm.weight", "F32", []int{2}, f32s(1, -1)},
	)
	seeds := [][]byte{mustRead(f, plain)}
	quantized := filepath.Join(seedDir, "q0.safetensors") // the first of the quantized seeds
	for i, opts := range fuzzOptions {
		out := filepath.Join(seedDir, fmt.Sprintf("q%d.safetensors", i))
		if _, err := convert.Quantize(context.Background(), plain, out, opts); err != nil {
			f.Fatal(err)
		}
		seeds = append(seeds, mustRead(f, out))
	}
	for _, s := range seeds {
		for mode := range len(fuzzOptions) {
			f.Add(s, uint8(mode))
		}
	}

	f.Fuzz(func(t *testing.T, file []byte, mode uint8) {
		ctx := context.Background()
		dir := t.TempDir()
		in := filepath.Join(dir, "in.safetensors")
		if err := os.WriteFile(in, file, 0o644); err != nil {
			t.Fatal(err)
		}
		want := []string{"in.safetensors"}
		if _, err := convert.Inspect(ctx, in); err != nil {
			t.Logf("inspect: %v", err)
		}

		q := filepath.Join(dir, "q.safetensors")
		if _, err := convert.Quantize(ctx, in, q, fuzzOptions[int(mode)%len(fuzzOptions)]); err != nil {
			t.Logf("quantize: %v", err)
		} else {
			want = append(want, "q.safetensors", "qd.safetensors")
			checkWritten(t, in, q, filepath.Join(dir, "qd.safetensors"))
		}
		// The file as a quantized checkpoint of the plain seed, and as the
		// original of the seed's quantized form.
		if _, err := eval.Run(ctx, plain, in, eval.Options{Tokens: 2}); err != nil {
			t.Logf("eval: %v", err)
		}
		if _, err := eval.Run(ctx, in, quantized, eval.Options{Tokens: 2}); err != nil {
			t.Logf("eval of the seed: %v", err)
		}

		d := filepath.Join(dir, "d.safetensors")
		dopts := convert.Options{
			OutDType: []dtype.DType{dtype.BFloat16, dtype.Float16, dtype.Float32}[int(mode)%3],
			AllowInf: mode&4 != 0,
		}
		if _, err := convert.Dequantize(ctx, in, d, dopts); err != nil {
			t.Logf("dequantize: %v", err)
		} else {
			want = append(want, "d.safetensors")
			readWhole(t, d)
		}

		if got, err := os.ReadFile(in); err != nil || !bytes.Equal(got, file) {
			t.Fatalf("the input changed (%v)", err)
		}
		assertOnly(t, dir, want...)
	})
}

// FuzzIndex runs the same conversions on a sharded checkpoint whose index
// and second shard are fuzzed (the first shard stays as written): the
// properties of FuzzFiles hold for the whole checkpoint, and a refused
// conversion leaves its output directory empty.
func FuzzIndex(f *testing.F) {
	shards := [2][]rawTensor{{
		{"blocks.0.attn.weight", "F32", []int{4, 8}, f32s(make([]float32, 32)...)},
		{"blocks.0.attn.bias", "F32", []int{4}, f32s(1, 2, 3, 4)},
	}, {
		{"blocks.0.mlp.weight", "F32", []int{2, 8}, f32s(1, -2, 3, -4, 5, -6, 7, -8, 0.5, 0.25, 0, 0, 0, 0, 0, 9)},
		{"norm.weight", "F32", []int{2}, f32s(1, -1)},
	}}
	names := [2]string{"m-00001-of-00002.safetensors", "m-00002-of-00002.safetensors"}
	seedDir := f.TempDir()
	weightMap := map[string]string{}
	for s, ts := range shards {
		writeRaw(f, filepath.Join(seedDir, names[s]), nil, ts...)
		for _, t := range ts {
			weightMap[t.name] = names[s]
		}
	}
	first, second := mustRead(f, filepath.Join(seedDir, names[0])), mustRead(f, filepath.Join(seedDir, names[1]))
	for _, idx := range []map[string]any{
		{"weight_map": weightMap},
		{"metadata": map[string]any{"total_size": 232}, "weight_map": weightMap},
		{"weight_map": map[string]string{"blocks.0.attn.weight": names[0], "norm.weight": names[1]}},
		{"weight_map": map[string]string{"blocks.0.attn.weight": names[1], "ghost.weight": "../" + names[0]}},
	} {
		b, err := json.Marshal(idx)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, second)
	}

	f.Fuzz(func(t *testing.T, index, shard []byte) {
		ctx := context.Background()
		dir := t.TempDir()
		in := filepath.Join(dir, "m.safetensors.index.json")
		inputs := map[string][]byte{names[0]: first, names[1]: shard, filepath.Base(in): index}
		for name, b := range inputs {
			if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		opts := fuzzOptions[0]
		if _, err := convert.Inspect(ctx, in); err != nil {
			t.Logf("inspect: %v", err)
		}
		qDir, dDir, qdDir := t.TempDir(), t.TempDir(), t.TempDir()
		q := filepath.Join(qDir, "q.safetensors.index.json")
		if _, err := convert.Quantize(ctx, in, q, opts); err != nil {
			t.Logf("quantize: %v", err)
			assertOnly(t, qDir)
		} else {
			checkWritten(t, in, q, filepath.Join(qdDir, "qd.safetensors.index.json"))
		}
		if _, err := convert.Dequantize(ctx, in, filepath.Join(dDir, "d.safetensors.index.json"), convert.Options{}); err != nil {
			t.Logf("dequantize: %v", err)
			assertOnly(t, dDir)
		}
		for name, b := range inputs {
			if got, err := os.ReadFile(filepath.Join(dir, name)); err != nil || !bytes.Equal(got, b) {
				t.Fatalf("input %s changed (%v)", name, err)
			}
		}
		want := []string{}
		for name := range inputs {
			want = append(want, name)
		}
		assertOnly(t, dir, want...)
	})
}

// checkWritten checks what quantize wrote from in to q: it inspects
// without a problem, every file reads back whole, it dequantizes to
// float32 (into qd; a float32 weight's values may be past bfloat16's
// largest, which dequantize refuses by default) and it evaluates against in.
func checkWritten(t *testing.T, in, q, qd string) {
	t.Helper()
	ctx := context.Background()
	r, err := convert.Inspect(ctx, q)
	if err != nil {
		t.Fatalf("inspecting what quantize wrote: %v", err)
	}
	if len(r.Problems) > 0 {
		t.Fatalf("what quantize wrote has problems: %q", r.Problems)
	}
	for _, l := range r.Layers {
		if l.Problem != "" {
			t.Fatalf("quantize wrote layer %s with a problem: %s", l.Name, l.Problem)
		}
	}
	for _, file := range r.Files {
		readWhole(t, file)
	}
	if _, err := convert.Dequantize(ctx, q, qd, convert.Options{OutDType: dtype.Float32}); err != nil {
		t.Fatalf("dequantizing what quantize wrote: %v", err)
	}
	rd, err := convert.Inspect(ctx, qd)
	if err != nil {
		t.Fatalf("inspecting what dequantize wrote: %v", err)
	}
	for _, file := range rd.Files {
		readWhole(t, file)
	}
	if r.Formats["int8_tensorwise"] > 0 {
		if _, err := eval.Run(ctx, in, q, eval.Options{Tokens: 2}); err != nil {
			t.Fatalf("evaluating what quantize wrote: %v", err)
		}
	}
}

// fuzzOptions are the conversions FuzzFiles tries, chosen by its mode.
var fuzzOptions = []convert.Options{
	{Selection: convert.Selection{MinElements: 1, MinFeatures: 1}},
	{Selection: convert.Selection{MinElements: 1, MinFeatures: 1, Embeddings: true}, PerTensor: true},
	{Selection: convert.Selection{MinElements: 1, MinFeatures: 1}, ConvRot: 16},
}

// readWhole opens a safetensors file and reads every tensor's data.
func readWhole(t *testing.T, path string) {
	t.Helper()
	f, err := safetensors.Open(path)
	if err != nil {
		t.Fatalf("reading back %s: %v", filepath.Base(path), err)
	}
	defer f.Close()
	for _, ti := range f.Tensors {
		if _, err := f.Data(ti); err != nil {
			t.Fatalf("reading back %s: %v", filepath.Base(path), err)
		}
	}
}

func mustRead(tb testing.TB, path string) []byte {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}
