// Command tinydit writes testdata/tiny-dit.safetensors: a deterministic,
// randomly initialised checkpoint shaped like a small diffusion transformer
// (DiT) in bfloat16, the input of the README's first `kitchen quantize`
// command and of the converter's tests. It holds
// attention and MLP linears, adaLN modulation, norms, biases, a patch
// embedder, a class-embedding table and a float32 position embedding, so
// the converter's default selection has every kind of tensor to decide on.
//
// Regenerate with `go generate ./...` (or `go run ./tools/tinydit -o PATH`);
// the output is the same bytes every time. With -hidden and -blocks it
// writes larger checkpoints of the same shape for conversion benchmarks
// (BENCHMARKS.md).
package main

import (
	"bufio"
	"encoding/binary"
	"flag"
	"fmt"
	"log"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"

	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/safetensors"
)

const (
	patch   = 64 // in_channels * patch * patch
	classes = 1001
	tokens  = 64
)

// The model's width and depth: the shipped file's by default, larger for
// benchmarks (-hidden 3072 -blocks 9 writes a 3.1 GB checkpoint shaped like
// a large DiT's).
var hidden, blocks = 192, 2

type tensorSpec struct {
	name  string
	dtype string
	shape []int
	init  func(i int, rng *rand.Rand) float32
}

func normal(std float64) func(int, *rand.Rand) float32 {
	return func(_ int, rng *rand.Rand) float32 { return float32(rng.NormFloat64() * std) }
}

func constant(v float32) func(int, *rand.Rand) float32 {
	return func(int, *rand.Rand) float32 { return v }
}

func specs() []tensorSpec {
	linear := func(name string, out, in int) []tensorSpec {
		return []tensorSpec{
			{name + ".weight", "BF16", []int{out, in}, normal(1 / math.Sqrt(float64(in)))},
			{name + ".bias", "BF16", []int{out}, normal(0.01)},
		}
	}
	var s []tensorSpec
	s = append(s, linear("x_embedder.proj", hidden, patch)...)
	s = append(s, linear("t_embedder.mlp.0", hidden, 256)...)
	s = append(s, linear("t_embedder.mlp.2", hidden, hidden)...)
	s = append(s, tensorSpec{"y_embedder.embedding_table.weight", "BF16", []int{classes, hidden}, normal(0.02)})
	s = append(s, tensorSpec{"pos_embed", "F32", []int{1, tokens, hidden}, func(i int, _ *rand.Rand) float32 {
		return float32(math.Sin(float64(i) / 97))
	}})
	for b := range blocks {
		p := fmt.Sprintf("blocks.%d.", b)
		s = append(s, tensorSpec{p + "norm1.weight", "BF16", []int{hidden}, constant(1)})
		s = append(s, linear(p+"attn.qkv", 3*hidden, hidden)...)
		s = append(s, linear(p+"attn.proj", hidden, hidden)...)
		s = append(s, tensorSpec{p + "norm2.weight", "BF16", []int{hidden}, constant(1)})
		s = append(s, linear(p+"mlp.fc1", 4*hidden, hidden)...)
		s = append(s, linear(p+"mlp.fc2", hidden, 4*hidden)...)
		s = append(s, linear(p+"adaLN_modulation.1", 6*hidden, hidden)...)
	}
	s = append(s, tensorSpec{"final_layer.norm_final.weight", "BF16", []int{hidden}, constant(1)})
	s = append(s, linear("final_layer.adaLN_modulation.1", 2*hidden, hidden)...)
	s = append(s, linear("final_layer.linear", patch, hidden)...)
	return s
}

func main() {
	out := flag.String("o", "testdata/tiny-dit.safetensors", "output file")
	flag.IntVar(&hidden, "hidden", hidden, "model width")
	flag.IntVar(&blocks, "blocks", blocks, "transformer blocks")
	flag.Parse()
	if err := write(*out); err != nil {
		log.Fatal(err)
	}
}

func write(path string) error {
	s := specs()
	infos := make([]safetensors.TensorInfo, len(s))
	for i, t := range s {
		infos[i] = safetensors.TensorInfo{Name: t.name, DType: t.dtype, Shape: t.shape}
	}
	// Write beside the target and rename, so a failed run never leaves the
	// committed file truncated.
	f, err := os.CreateTemp(filepath.Dir(path), ".tinydit-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	bw := bufio.NewWriter(f)
	meta := map[string]string{"format": "pt", "model": "tiny-dit", "generator": "github.com/gokitchen/kitchen/tools/tinydit"}
	w, err := safetensors.NewWriter(bw, meta, infos)
	if err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(2026, 11))
	for _, t := range s {
		n := 1
		for _, d := range t.shape {
			n *= d
		}
		var b []byte
		for i := range n {
			v := t.init(i, rng)
			if t.dtype == "F32" {
				b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
			} else {
				b = binary.LittleEndian.AppendUint16(b, dtype.BFloat16FromFloat32(v))
			}
		}
		if err := w.WriteTensor(t.name, b); err != nil {
			return err
		}
	}
	if err := w.Finish(); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	if err := f.Chmod(0o644); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}
