package convert_test

import (
	"context"
	"errors"
	"math"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/gokitchen/kitchen/backend"
	"github.com/gokitchen/kitchen/convert"
)

// bigLayer is a layer large enough that the converter quantizes it in
// three chunks of rows (the last one short), with a bias copied beside it.
func bigLayer(t *testing.T, path string, nanRow int) {
	t.Helper()
	const n, k = 9000, 1024
	w := make([]float32, n*k)
	for i := range w {
		w[i] = float32(math.Sin(float64(i)*0.7)) * float32(1+i%97)
	}
	if nanRow >= 0 {
		w[nanRow*k+5] = float32(math.NaN())
	}
	writeFile(t, path, map[string][]float32{"blocks.0.a.weight": w, "blocks.0.a.bias": make([]float32, n)},
		map[string][]int{"blocks.0.a.weight": {n, k}, "blocks.0.a.bias": {n}})
}

// TestChunkedLayer: a layer quantized in chunks of rows holds exactly what
// one eager call on the whole layer computes, row-wise, ConvRot and
// per-tensor.
func TestChunkedLayer(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.safetensors")
	bigLayer(t, in, -1)
	for _, m := range []mode{{}, {convrot: 256}, {perTensor: true}} {
		out := filepath.Join(dir, "out.safetensors")
		opts := m.options()
		opts.Force = true
		sum, err := convert.Quantize(context.Background(), in, out, opts)
		if err != nil {
			t.Fatal(err)
		}
		if got := checkQuantized(t, in, out, m); got != 1 || len(sum.Layers) != 1 || sum.Layers[0].RelRMSError <= 0 {
			t.Fatalf("%+v: %d layers quantized, summary %+v", m, got, sum.Layers)
		}
	}
}

// TestChunkedNaNRow: a NaN in a later chunk is reported at its row in the
// whole tensor, nothing is left behind and the pipeline's goroutines end.
func TestChunkedNaNRow(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.safetensors")
	bigLayer(t, in, 8500)
	before := runtime.NumGoroutine()
	_, err := convert.Quantize(context.Background(), in, filepath.Join(dir, "out.safetensors"), convert.Options{})
	var ae *backend.ArgError
	if !errors.As(err, &ae) || ae.Row != 8500 {
		t.Fatalf("got %v, want NaN in row 8500", err)
	}
	assertOnly(t, dir, "in.safetensors")
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if g := runtime.NumGoroutine(); g > before {
		t.Errorf("%d goroutines after the failed conversion, %d before", g, before)
	}
}
