//go:build amd64 && !purego

package cpu

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/quant"
)

// TestQuantizeTies puts quotients exactly halfway between two values of T
// (the ties where rounding to T decides the integer: next to n + 0.5 for
// every n the result can take, both signs) through every assembly
// kernel set, in every lane and the tail. The bfloat16 and float16 kernels
// multiply by the divisor's reciprocal r (kernelDivisor), so the ties are
// of the product x·r, with r any float32: the rounding must give
// roundHalfEven(rT(x·r)). The exhaustive sweep reaches such ties only by
// chance, since a product of T values and reciprocals is rarely one.
func TestQuantizeTies(t *testing.T) { forEachImpl(t, testQuantizeTies) }

func testQuantizeTies(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	for _, dt := range []dtype.DType{dtype.Float16, dtype.BFloat16} {
		bits := map[dtype.DType]int{dtype.Float16: 11, dtype.BFloat16: 8}[dt]
		ties := 0
		for n := range 128 {
			h := float64(n) + 0.5
			_, e := math.Frexp(h) // h = f * 2^e, f in [0.5, 1)
			u := math.Ldexp(1, e-bits)
			for _, y := range []float64{h - u/2, h + u/2, -(h - u/2), -(h + u/2)} {
				for range 4 {
					x := dt.Round(float32(math.Ldexp(1+rng.Float64(), rng.IntN(8))))
					rd := float32(y) / x
					for _, r := range []float32{rd, math.Nextafter32(rd, 0), math.Nextafter32(rd, 1e9)} {
						if x*r != float32(y) {
							continue
						}
						ties++
						src := make([]byte, 0, 67*dt.Size())
						for range 67 {
							src = binary.LittleEndian.AppendUint16(src, map[dtype.DType]func(float32) uint16{
								dtype.Float16: dtype.Float16FromFloat32, dtype.BFloat16: dtype.BFloat16FromFloat32}[dt](x))
						}
						want := quant.RoundHalfEven(dt.Round(x * r))
						got := make([]byte, 64)
						for _, k := range []func(src, dst []byte, r float32, ahead int, nt bool){
							quantizeKernels[impl][kernelIndex(dt)], quantizeBoundedKernels[impl][kernelIndex(dt)],
						} {
							k(src[:64*dt.Size()], got, r, 0, false)
							for i := range got {
								if int8(got[i]) != want {
									t.Fatalf("%v: %v · %v = %v (a tie of T) quantizes to %d in lane %d, want %d", dt, x, r, y, int8(got[i]), i, want)
								}
							}
						}
						break
					}
				}
			}
		}
		if ties < 500 {
			t.Fatalf("%v: only %d ties constructed", dt, ties)
		}
	}
}
