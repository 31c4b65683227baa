package convert_test

import (
	"bytes"
	"context"
	"errors"
	"math"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gokitchen/kitchen"
	"github.com/gokitchen/kitchen/backend"
	"github.com/gokitchen/kitchen/convert"
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/tensor"
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

// TestReusedBuffers: layers whose outputs go into buffers that earlier
// layers' pieces were written from (two layers of one shape, then a
// smaller one, which gets a larger buffer's first bytes) hold exactly what
// eager calls compute, quantized in every mode and dequantized again,
// where a dequantized layer (float32: 20 MiB) is over the flow's budget.
func TestReusedBuffers(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.safetensors")
	shapes := map[string][]int{"blocks.0.a.weight": {5000, 1024}, "blocks.1.a.weight": {5000, 1024}, "blocks.2.a.weight": {3000, 1024}}
	tensors := map[string][]float32{}
	for name, s := range shapes {
		w := make([]float32, s[0]*s[1])
		for i := range w {
			w[i] = float32(math.Sin(float64(i)*0.3+float64(len(tensors)))) * float32(1+i%89)
		}
		tensors[name] = w
	}
	writeFile(t, in, tensors, shapes)
	for _, m := range []mode{{}, {convrot: 256}, {perTensor: true}} {
		q := filepath.Join(dir, "q.safetensors")
		opts := m.options()
		opts.Force = true
		if _, err := convert.Quantize(context.Background(), in, q, opts); err != nil {
			t.Fatal(err)
		}
		if got := checkQuantized(t, in, q, m); got != len(shapes) {
			t.Fatalf("%+v: %d layers quantized, want %d", m, got, len(shapes))
		}
		fq := open(t, q)
		for _, dt := range []dtype.DType{dtype.Float32, dtype.BFloat16} {
			d := filepath.Join(dir, "d.safetensors")
			if _, err := convert.Dequantize(context.Background(), q, d, convert.Options{OutDType: dt, Force: true}); err != nil {
				t.Fatal(err)
			}
			fd := open(t, d)
			for name, s := range shapes {
				base := strings.TrimSuffix(name, ".weight")
				_, qb := data(t, fq, name)
				si, sb := data(t, fq, base+".weight_scale")
				qt, err := tensor.FromBytes(dtype.Int8, qb, s...)
				if err != nil {
					t.Fatal(err)
				}
				st, err := tensor.FromBytes(dtype.Float32, sb, si.Shape...)
				if err != nil {
					t.Fatal(err)
				}
				var want *tensor.Tensor
				if m.convrot > 0 {
					want, err = kitchen.DequantizeInt8ConvRotWeightTo(context.Background(), qt, st, dt, kitchen.WithConvRotGroup(m.group(s[1])))
				} else {
					want, err = kitchen.DequantizeInt8To(context.Background(), qt, st, dt)
				}
				if err != nil {
					t.Fatal(err)
				}
				wb, _ := want.Bytes()
				if _, got := data(t, fd, name); !bytes.Equal(got, wb) {
					t.Errorf("%+v, %v: %s: %d bytes differ from the eager dequantization", m, dt, name, countDiff(got, wb))
				}
			}
		}
	}
}
