package kitchen_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/gokitchen/kitchen"
	"github.com/gokitchen/kitchen/backend"
	"github.com/gokitchen/kitchen/op"
	"github.com/gokitchen/kitchen/tensor"
)

func ExamplePrepareInt8Linear() {
	ctx := context.Background()
	// A layer of 2 output channels over K = 4, per-channel scales.
	w, _ := kitchen.FromFloat32(kitchen.Int8, []float32{1, 2, 3, 4, -128, 0, 127, -1}, 2, 4)
	ws, _ := kitchen.FromFloat32(kitchen.Float32, []float32{0.5, 0.25}, 2)
	layer, err := kitchen.PrepareInt8Linear(ctx, w, ws, kitchen.WithOutDType(kitchen.Float32))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer layer.Release()
	for _, row := range [][]float32{{127, 0, 0, 0}, {0, 0, 0, 127}} {
		x, _ := kitchen.FromFloat32(kitchen.BFloat16, row, 1, 4)
		y, _ := layer.Forward(ctx, x)
		v, _ := y.Float32s()
		fmt.Println(v)
	}
	layer.Release()
	x, _ := kitchen.FromFloat32(kitchen.BFloat16, []float32{1, 2, 3, 4}, 1, 4)
	_, err = layer.Forward(ctx, x)
	fmt.Println(errors.Is(err, op.ErrReleased))
	// Each row quantizes exactly (its scale is 127/127 = 1), so y[n] is
	// 127 · w[n][k] · ws[n]: 127·1·0.5, 127·-128·0.25; 127·4·0.5, 127·-1·0.25.

	// Output:
	// [63.5 -4064]
	// [254 -31.75]
	// true
}

// TestInt8LayerMatchesInt8Linear checks that a prepared layer gives
// Int8Linear's bytes on every path of each backend (M of 1 to 130, K odd,
// N not a multiple of a panel; 16 rows of K = 256 take the dot path where
// the kernel set has one), call after call, from several goroutines at
// once, and that each call ran where asked.
func TestInt8LayerMatchesInt8Linear(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(5, 6))
	for _, s := range [][3]int{{1, 255, 37}, {7, 64, 16}, {16, 300, 100}, {16, 256, 100}, {130, 129, 33}} {
		m, k, n := s[0], s[1], s[2]
		wv, xv, sv, bv := make([]float32, n*k), make([]float32, m*2*k), make([]float32, n), make([]float32, n)
		for i := range wv {
			wv[i] = float32(rng.IntN(256) - 128)
		}
		for i := range xv {
			xv[i] = float32(rng.NormFloat64())
		}
		for i := range sv {
			sv[i], bv[i] = float32(1+rng.IntN(9))/1024, float32(rng.NormFloat64())
		}
		w, _ := kitchen.FromFloat32(kitchen.Int8, wv, n, k)
		ws, _ := kitchen.FromFloat32(kitchen.BFloat16, sv, n, 1)
		bias, _ := kitchen.FromFloat32(kitchen.Float32, bv, n)
		for _, tc := range []struct {
			name string
			opts []kitchen.Option
			kx   int
		}{
			{"plain", nil, k},
			{"bias,f16", []kitchen.Option{kitchen.WithBias(bias), kitchen.WithOutDType(kitchen.Float16)}, k},
			{"swiglu", []kitchen.Option{kitchen.WithInputAct("swiglu")}, 2 * k},
		} {
			x, _ := kitchen.FromFloat32(kitchen.BFloat16, xv[:m*tc.kx], m, tc.kx)
			for _, b := range []string{"cpu", "eager"} {
				name := fmt.Sprintf("%dx%dx%d/%s/%s", m, k, n, tc.name, b)
				want, err := kitchen.Int8Linear(ctx, x, w, ws, append(tc.opts, kitchen.UsingBackend(b))...)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				wb, _ := want.Bytes()
				layer, err := kitchen.PrepareInt8Linear(ctx, w, ws, append(tc.opts, kitchen.UsingBackend(b))...)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				var wg sync.WaitGroup
				for g := range 3 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for range 2 {
							var ran string
							got, err := layer.Forward(ctx, x, kitchen.ReportBackend(&ran))
							if err != nil {
								t.Errorf("%s, goroutine %d: %v", name, g, err)
								return
							}
							if gb, _ := got.Bytes(); !bytes.Equal(gb, wb) || ran != b {
								t.Errorf("%s, goroutine %d: ran on %s; bytes equal to Int8Linear's: %v", name, g, ran, bytes.Equal(gb, wb))
							}
						}
					}()
				}
				wg.Wait()
				layer.Release()
			}
		}
	}
}

// TestInt8LayerErrors checks that preparing a bad layer fails as
// Int8Linear would, with typed errors, and that a released layer or
// options Forward does not take are errors.
func TestInt8LayerErrors(t *testing.T) {
	ctx := context.Background()
	w, _ := kitchen.FromFloat32(kitchen.Int8, make([]float32, 3*16), 3, 16)
	ws, _ := kitchen.FromFloat32(kitchen.Float32, []float32{1, 0, 1}, 3)
	var ae *backend.ArgError
	if _, err := kitchen.PrepareInt8Linear(ctx, w, ws); !errors.As(err, &ae) || ae.Param != "weight_scale" || !errors.Is(err, backend.ErrScale) {
		t.Errorf("zero weight scale: %v, want an ArgError on weight_scale wrapping ErrScale", err)
	}
	if _, err := kitchen.PrepareInt8Linear(ctx, nil, ws); !errors.As(err, &ae) || ae.Param != "weight" || !errors.Is(err, backend.ErrNil) {
		t.Errorf("nil weight: %v, want an ArgError on weight wrapping ErrNil", err)
	}
	ws, _ = kitchen.FromFloat32(kitchen.Float32, []float32{1})
	// Named on the weight: the caller of Prepare gave no x.
	if _, err := kitchen.PrepareInt8Linear(ctx, w, ws, kitchen.WithConvRot(64)); !errors.As(err, &ae) || ae.Param != "weight" || !errors.Is(err, tensor.ErrShape) {
		t.Errorf("ConvRot group beyond K: %v, want a shape error on weight", err)
	}
	layer, err := kitchen.PrepareInt8Linear(ctx, w, ws)
	if err != nil {
		t.Fatal(err)
	}
	x, _ := kitchen.FromFloat32(kitchen.Float32, make([]float32, 16), 1, 16)
	if _, err := layer.Forward(ctx, x, kitchen.WithBias(ws)); !errors.Is(err, backend.ErrOption) || !strings.Contains(err.Error(), "not an option of Int8Layer.Forward") {
		t.Errorf("Forward with WithBias: %v, want ErrOption saying it is not an option of Forward", err)
	}
	x15, _ := kitchen.FromFloat32(kitchen.Float32, make([]float32, 15), 1, 15)
	if _, err := layer.Forward(ctx, x15); !errors.As(err, &ae) || ae.Param != "x" {
		t.Errorf("x of the wrong K: %v, want an ArgError on x", err)
	}
	out, _ := kitchen.FromFloat32(kitchen.BFloat16, make([]float32, 3), 1, 3)
	if _, err := kitchen.PrepareInt8Linear(ctx, w, ws, kitchen.Into(out)); !errors.Is(err, backend.ErrOption) {
		t.Errorf("PrepareInt8Linear with Into: %v, want ErrOption", err)
	}
	x1, _ := kitchen.FromFloat32(kitchen.Float32, []float32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, 1, 16)
	w1, _ := kitchen.FromFloat32(kitchen.Int8, func() []float32 {
		v := make([]float32, 3*16)
		for i := range v {
			v[i] = float32(i%7) - 3
		}
		return v
	}(), 3, 16)
	layer1, err := kitchen.PrepareInt8Linear(ctx, w1, ws)
	if err != nil {
		t.Fatal(err)
	}
	got, err := layer1.Forward(ctx, x1, kitchen.Into(out))
	if err != nil {
		t.Fatalf("Forward with Into: %v", err)
	}
	want, _ := kitchen.Int8Linear(ctx, x1, w1, ws)
	if gb, wb := must(got.Bytes()), must(want.Bytes()); got != out || !bytes.Equal(gb, wb) {
		t.Errorf("Forward with Into: returned the given tensor: %v, bytes %x, want %x", got == out, gb, wb)
	}
	layer1.Release()
	layer.Release()
	if _, err := layer.Forward(ctx, x); !errors.As(err, &ae) || ae.Param != "weight" || !errors.Is(err, op.ErrReleased) {
		t.Errorf("after Release: %v, want an ArgError on weight wrapping op.ErrReleased", err)
	}
}

// TestNilLayer: a nil layer (what a failed PrepareInt8Linear returns) is
// an error on Forward and nothing on Release, not a panic.
func TestNilLayer(t *testing.T) {
	var l *kitchen.Int8Layer
	x, _ := kitchen.FromFloat32(kitchen.BFloat16, []float32{1, 2}, 1, 2)
	_, err := l.Forward(context.Background(), x)
	var ae *backend.ArgError
	if !errors.As(err, &ae) || !errors.Is(err, backend.ErrNil) || ae.Op != "int8_linear" {
		t.Errorf("Forward of a nil layer: %v, want an ArgError wrapping backend.ErrNil", err)
	}
	l.Release()
}
