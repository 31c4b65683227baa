package cpu

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/internal/parcopy"
)

// BenchmarkQDQ times the Q/DQ bodies on [8352, 3840] (the seed table's
// shape; row-wise also with stochastic rounding) writing into
// preallocated outputs, each kernel set this CPU runs,
// and in the same loop a parallel copy of as many bytes as the operation
// reads and writes (half read, half written). It reports the medians of
// both (op-ms, copy-ms) and the median of their ratio per iteration,
// x-copy: the operation's time in units of its memory floor, which noise
// on a shared machine moves far less than either time. Run it alone:
//
//	go test ./backend/cpu -run '^$' -bench QDQ -benchtime 15x
func BenchmarkQDQ(b *testing.B) {
	const rows, k = 8352, 3840
	n := rows * k
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	q := make([]byte, n)
	for i := range q {
		q[i] = byte(rng.Uint32())
	}
	scales := make([]byte, 4*rows)
	for r := range rows {
		binary.LittleEndian.PutUint32(scales[4*r:], math.Float32bits(float32(r%7+1)/127))
	}
	deqF32 := make([]byte, 4*n)
	// The copy buffers are as large as the largest floor, tensor-wise
	// float32: 4n read twice, n written.
	copySrc, copyDst := make([]byte, 9*n/2), make([]byte, 9*n/2)
	for i := range copySrc {
		copySrc[i] = byte(i)
	}
	defer func(saved int) { impl = saved }(impl)
	for _, dt := range dtype.Floats() {
		size := dt.Size()
		x := make([]byte, n*size)
		for i := range n {
			dtype.Store(x, dt, i, float32(rng.NormFloat64()))
		}
		deqT := make([]byte, n*size)
		rw := &rowwiseBody{dt: dt, src: x, dst: q, scales: make([]byte, 4*rows), k: k}
		rwSR := &rowwiseBody{dt: dt, src: x, dst: q, scales: make([]byte, 4*rows), k: k, seed: 42}
		flat := &flatBody{dt: dt, src: x, dst: q}
		dq := &dequantBody{dt: dtype.Float32, src: q, dst: deqF32, scales: scales, sdt: dtype.Float32, k: k}
		dqT := &dequantBody{dt: dt, src: q, dst: deqT, scales: scales, sdt: dtype.Float32, k: k}
		ops := []struct {
			name  string
			bytes int // read + written
			run   func() error
		}{
			{"rowwise", n*size + n + 4*rows, func() error {
				rw.bad.reset()
				return parallelFor(ctx, rw, rows, max(1, grainBytes/(k*size)))
			}},
			{"rowwise_stochastic", n*size + n + 4*rows, func() error {
				rwSR.bad.reset()
				return parallelFor(ctx, rwSR, rows, max(1, grainBytes/(k*size)))
			}},
			{"tensorwise", 2*n*size + n, func() error {
				flat.quantize = false
				flat.bad.reset()
				flat.max.v.Store(0)
				if err := parallelFor(ctx, flat, n, grainBytes/size); err != nil {
					return err
				}
				flat.quantize, flat.t = true, divisor(dt, scaleFor(widenBits(dt, flat.max.v.Load())))
				return parallelFor(ctx, flat, n, grainBytes/size)
			}},
			{"dequantize", n + 4*rows + 4*n, func() error { return parallelFor(ctx, dq, rows, max(1, grainBytes/k)) }},
			{"dequantize_dtype", n + 4*rows + n*size, func() error { return parallelFor(ctx, dqT, rows, max(1, grainBytes/k)) }},
		}
		for _, set := range impls() {
			for _, o := range ops {
				if o.name == "dequantize" && dt != dtype.Float32 {
					continue // the same kernel as float32's dequantize_dtype
				}
				b.Run(fmt.Sprintf("%s/%s/%s", kernelSetNames[set], dt, o.name), func(b *testing.B) {
					impl = set
					cs, cd := copySrc[:o.bytes/2], copyDst[:o.bytes/2]
					var opT, copyT, ratio []time.Duration
					for b.Loop() {
						start := time.Now()
						if err := o.run(); err != nil {
							b.Fatal(err)
						}
						mid := time.Now()
						parcopy.Copy(cd, cs)
						end := time.Now()
						opT, copyT = append(opT, mid.Sub(start)), append(copyT, end.Sub(mid))
						ratio = append(ratio, time.Duration(1e6*mid.Sub(start).Seconds()/end.Sub(mid).Seconds()))
					}
					b.ReportMetric(float64(medianDur(opT).Microseconds())/1e3, "op-ms")
					b.ReportMetric(float64(medianDur(copyT).Microseconds())/1e3, "copy-ms")
					b.ReportMetric(float64(medianDur(ratio))/1e6, "x-copy")
				})
			}
		}
	}
}

func medianDur(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
