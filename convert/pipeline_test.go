package convert_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"runtime"
	"slices"
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
// the eager backend computes, quantized in every mode, and what direct
// calls compute, dequantized again, where a dequantized layer (float32:
// 20 MiB) is over the flow's budget. Under -short or the race detector
// (which made this take 44 s instead of 4), one layer and a smaller one,
// both over half the budget as float32 (9 and 8.25 MiB), so that the
// flow has them in flight one at a time and the second is made in the
// first's buffer, checked against direct calls to the default backend.
// Dequantizing to float32 allocates one buffer for all the layers, in
// either run.
func TestReusedBuffers(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.safetensors")
	shapes := map[string][]int{"blocks.0.a.weight": {5000, 1024}, "blocks.1.a.weight": {5000, 1024}, "blocks.2.a.weight": {3000, 1024}}
	full := !testing.Short() && !raceOn
	if !full {
		shapes = map[string][]int{"blocks.0.a.weight": {2304, 1024}, "blocks.1.a.weight": {2112, 1024}}
	}
	tensors := map[string][]float32{}
	for name, s := range shapes {
		w := make([]float32, s[0]*s[1])
		for i := range w {
			w[i] = float32(math.Sin(float64(i)*0.3+float64(len(tensors)))) * float32(1+i%89)
		}
		tensors[name] = w
	}
	writeFile(t, in, tensors, shapes)
	ctx := context.Background()
	for _, m := range []mode{{}, {convrot: 256}, {perTensor: true}} {
		q := filepath.Join(dir, "q.safetensors")
		opts := m.options()
		opts.Force = true
		if _, err := convert.Quantize(ctx, in, q, opts); err != nil {
			t.Fatal(err)
		}
		fq := open(t, q)
		if full {
			if got := checkQuantized(t, in, q, m); got != len(shapes) {
				t.Fatalf("%+v: %d layers quantized, want %d", m, got, len(shapes))
			}
		} else {
			fi := open(t, in)
			for name, s := range shapes {
				_, xb := data(t, fi, name)
				x, err := tensor.FromBytes(dtype.Float32, xb, s...)
				if err != nil {
					t.Fatal(err)
				}
				var wq, ws *tensor.Tensor
				switch {
				case m.convrot > 0:
					wq, ws, err = kitchen.QuantizeInt8ConvRotWeight(ctx, x, kitchen.WithConvRotGroup(m.group(s[1])))
				case m.perTensor:
					wq, ws, err = kitchen.QuantizeInt8Tensorwise(ctx, x)
				default:
					wq, ws, err = kitchen.QuantizeInt8Rowwise(ctx, x)
				}
				if err != nil {
					t.Fatal(err)
				}
				base := strings.TrimSuffix(name, ".weight")
				for _, c := range []struct {
					name string
					want *tensor.Tensor
				}{{name, wq}, {base + ".weight_scale", ws}} {
					wb, _ := c.want.Bytes()
					if _, got := data(t, fq, c.name); !bytes.Equal(got, wb) {
						t.Errorf("%+v: %s: %d bytes differ from a direct call", m, c.name, countDiff(got, wb))
					}
				}
			}
		}
		for _, dt := range []dtype.DType{dtype.Float32, dtype.BFloat16} {
			d := filepath.Join(dir, "d.safetensors")
			before := convert.NewBuffers()
			if _, err := convert.Dequantize(ctx, q, d, convert.Options{OutDType: dt, Force: true}); err != nil {
				t.Fatal(err)
			}
			// Float32 layers over half the budget are in flight one at a
			// time, and the writer gives each one's buffer back before
			// the flow lets the producer make the next.
			if n := convert.NewBuffers() - before; dt == dtype.Float32 && n != 1 {
				t.Errorf("%+v, %v: %d buffers allocated, want 1 for all the layers", m, dt, n)
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
					want, err = kitchen.DequantizeInt8ConvRotWeightTo(ctx, qt, st, dt, kitchen.WithConvRotGroup(m.group(s[1])))
				} else {
					want, err = kitchen.DequantizeInt8To(ctx, qt, st, dt)
				}
				if err != nil {
					t.Fatal(err)
				}
				wb, _ := want.Bytes()
				if _, got := data(t, fd, name); !bytes.Equal(got, wb) {
					t.Errorf("%+v, %v: %s: %d bytes differ from a direct dequantization", m, dt, name, countDiff(got, wb))
				}
			}
		}
	}
}

// TestBufferReuse: dequantizing layers over the flow's budget among
// smaller ones allocates no more buffers than the flow has in flight at
// once (and one for the large layers); the rest reuse buffers that earlier
// layers were written from, and hold exactly what direct calls compute.
//
//   - One large layer, then many small ones of one size: the list that
//     kept its largest buffer handed the large layer's to one small layer
//     at a time, while the others in flight missed.
//   - Small and large layers alternating (4 and 20 MiB as float32): the
//     list that held both kinds within the budget dropped the large
//     layer's buffer as soon as a small layer passed it over, so every
//     layer allocated afresh (2 buffers for each pair). Each layer
//     acquires its bytes from the flow before it takes a buffer, and a
//     small layer and a large one together are over the budget, so each
//     waits until the one before it is written and its buffer back: one
//     buffer of each size serves them all.
func TestBufferReuse(t *testing.T) {
	const (
		k        = 2048
		small    = 512    // rows: 4 MiB as float32, so 4 in flight
		inFlight = 16 / 4 // the flow's budget over a small layer's output, in MiB
	)
	pairs := 8
	if testing.Short() || raceOn {
		pairs = 4
	}
	var alternating []int
	for range pairs {
		alternating = append(alternating, small, 2560) // 20 MiB as float32
	}
	for _, c := range []struct {
		name string
		rows []int // the layers', in the file's order
		max  int64 // buffers allocated
	}{
		{"a large layer, then small ones", append([]int{2112}, slices.Repeat([]int{small}, 12)...), 1 + inFlight}, // 16.5 MiB as float32
		{"small and large layers alternating", alternating, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			in := filepath.Join(dir, "in.safetensors")
			marker := `{"format": "int8_tensorwise"}`
			var names []string
			var tensors []rawTensor
			for i, r := range c.rows {
				name := fmt.Sprintf("blocks.%02d.a", i)
				names = append(names, name)
				tensors = append(tensors, int8Layer(name, r, k, scaleOf("F32", []int{}, float32(i+1)*0.001), marker)...)
			}
			writeRaw(t, in, nil, tensors...)
			out := filepath.Join(dir, "out.safetensors")
			before := convert.NewBuffers()
			if _, err := convert.Dequantize(ctx, in, out, convert.Options{OutDType: dtype.Float32}); err != nil {
				t.Fatal(err)
			}
			if n := convert.NewBuffers() - before; n > c.max {
				t.Errorf("%d buffers allocated for %d layers, want at most %d", n, len(c.rows), c.max)
			} else {
				t.Logf("%d buffers allocated for %d layers", n, len(c.rows))
			}
			fi, fo := open(t, in), open(t, out)
			for i, name := range names {
				_, qb := data(t, fi, name+".weight")
				_, sb := data(t, fi, name+".weight_scale")
				qt, err := tensor.FromBytes(dtype.Int8, qb, c.rows[i], k)
				if err != nil {
					t.Fatal(err)
				}
				st, err := tensor.FromBytes(dtype.Float32, sb)
				if err != nil {
					t.Fatal(err)
				}
				want, err := kitchen.DequantizeInt8To(ctx, qt, st, dtype.Float32)
				if err != nil {
					t.Fatal(err)
				}
				wb, _ := want.Bytes()
				if _, got := data(t, fo, name+".weight"); !bytes.Equal(got, wb) {
					t.Errorf("%s: %d bytes differ from a direct dequantization", name, countDiff(got, wb))
				}
			}
		})
	}
}
