package cpu

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/internal/parcopy"
	"github.com/gokitchen/kitchen/op"
	"github.com/gokitchen/kitchen/tensor"
)

// BenchmarkInt8LinearPrepared measures, in the same rounds, int8_linear
// with the plain weight, int8_linear with a prepared one (op.PackedWeight,
// as kitchen.Int8Layer runs it) and mm_int8, on bfloat16 x, with what
// `kitchen bench` reports beside them: a parallel copy of the weight's
// bytes (the streaming reference: "x floor" is the time over the time to
// move the call's bytes at the copy's speed) and the products' peak
// (PeakGOPS, the best of measurements before and after the rounds).
// Shapes come from KITCHEN_SHAPES ("M,K,N;M,K,N"), else the five.
// Run it alone: go test -run '^$' -bench Int8LinearPrepared -benchtime 1x.
func BenchmarkInt8LinearPrepared(b *testing.B) {
	shapes := [][3]int{{4096, 3072, 3072}, {4096, 3072, 12288}, {512, 4096, 4096}, {16, 4096, 4096}, {1, 4096, 4096}}
	if env := os.Getenv("KITCHEN_SHAPES"); env != "" {
		shapes = nil
		for _, s := range strings.Split(env, ";") {
			var v [3]int
			for i, f := range strings.Split(s, ",") {
				v[i], _ = strconv.Atoi(f)
			}
			shapes = append(shapes, v)
		}
	}
	const warmup, runs = 3, 5
	reg := newRegistry(b)
	ctx := context.Background()
	for _, s := range shapes {
		m, k, n := s[0], s[1], s[2]
		b.Run(fmt.Sprintf("%dx%dx%d", m, k, n), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(3, 4))
			xv := make([]float32, m*k)
			for i := range xv {
				xv[i] = float32(rng.NormFloat64())
			}
			wb, ab := make([]byte, n*k), make([]byte, m*k)
			for i := range wb {
				wb[i] = byte(rng.Uint32())
			}
			for i := range ab {
				ab[i] = byte(rng.Uint32())
			}
			sv := make([]float32, n)
			for i := range sv {
				sv[i] = float32(i%7+1) / 4096
			}
			x := must(tensor.FromFloat32(dtype.BFloat16, xv, m, k))
			w := must(tensor.FromBytes(dtype.Int8, wb, n, k))
			a := must(tensor.FromBytes(dtype.Int8, ab, m, k))
			bt := must(tensor.FromBytes(dtype.Int8, transpose(wb, n, k), k, n))
			ws := must(tensor.FromFloat32(dtype.Float32, sv, n, 1))
			bias := must(tensor.FromFloat32(dtype.BFloat16, sv, n))
			packed := op.NewPackedWeight(w)
			defer packed.Release()
			linear := func(p *op.PackedWeight) func() error {
				return func() error {
					res, _, err := op.Int8Linear.Run(ctx, reg, &op.LinearArgs{X: x, Weight: w, WeightScale: ws, Bias: bias,
						OutDType: dtype.BFloat16, Packed: p}, Name)
					res.Out.Release()
					return err
				}
			}
			mm := func() error {
				res, _, err := op.MMInt8.Run(ctx, reg, &op.MMInt8Args{A: a, B: bt}, Name)
				res.Out.Release()
				return err
			}
			linearBytes := int64(2*m*k + n*k + 4*n + 2*n + 2*m*n)
			type series struct {
				name  string
				run   func() error
				bytes int64
				times []time.Duration
			}
			all := []*series{{"int8_linear", linear(nil), linearBytes, nil}, {"int8_linear prepared", linear(packed), linearBytes, nil},
				{"mm_int8", mm, int64(m*k + k*n + 4*m*n), nil}}
			src, dst := make([]byte, n*k), make([]byte, n*k)
			for i := range src {
				src[i], dst[i] = byte(i), byte(i) // fault every page in now: untouched pages read as the zero page
			}
			var peaks []float64
			for range 3 {
				peaks = append(peaks, PeakGOPS(30*time.Millisecond))
			}
			var copies []time.Duration
			for round := range warmup + runs {
				start := time.Now()
				parcopy.Copy(dst, src)
				if d := time.Since(start); round >= warmup {
					copies = append(copies, d)
				}
				for _, s := range all {
					start := time.Now()
					if err := s.run(); err != nil {
						b.Fatal(err)
					}
					if d := time.Since(start); round >= warmup {
						s.times = append(s.times, d)
					}
				}
			}
			for range 3 {
				peaks = append(peaks, PeakGOPS(30*time.Millisecond))
			}
			peak := slices.Max(peaks)
			gbps := float64(2*n*k) / medianDur(copies).Seconds() / 1e9
			fmt.Printf("%dx%dx%d: copy %.2f GB/s, peak %.1f GOPS\n", m, k, n, gbps, peak)
			for _, s := range all {
				med := medianDur(s.times)
				gops := 2 * float64(m) * float64(n) * float64(k) / med.Seconds() / 1e9
				floor := float64(s.bytes) / (gbps * 1e9)
				fmt.Printf("  %-22s median %9.3f ms  min %9.3f ms  %6.1f GOPS  %.2f of peak  %.2f x floor\n",
					s.name, float64(med)/1e6, float64(slices.Min(s.times))/1e6, gops, gops/peak, med.Seconds()/floor)
			}
		})
	}
}
