package cpu

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gokitchen/kitchen/dtype"
)

// TestSquaredError checks SquaredError on every kernel set against the
// plain loop of its documented order: value i adds to lane i mod 4 (the
// values past the last multiple of 4 to lane 0), every term rounded to
// float64 before it is added, the lanes added pairwise. The values span
// many binades, float16 subnormals and signed zeros included, so any other
// order would show in the last bits, and every fifth d is far from its x.
// (A fused multiply-add would rarely show here: the kernels are written
// with separate multiplies and adds, and Go's float64(r*r) forbids fusing.)
func TestSquaredError(t *testing.T) {
	forEachKernelSet(t, true, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(3, 4))
		for _, dt := range dtype.Floats() {
			for _, n := range []int{0, 1, 3, 4, 5, 7, 8, 63, 64, 1000, 4099} {
				xb, db := make([]byte, n*dt.Size()), make([]byte, 4*n)
				for i := range n {
					v := float32(rng.NormFloat64() * math.Pow(2, float64(rng.IntN(40)-20)))
					switch i % 97 {
					case 5:
						v = 0
					case 6:
						v = float32(math.Copysign(0, -1))
					case 7:
						v = 3e-7 // a float16 subnormal
					}
					dtype.Store(xb, dt, i, v)
					dv := v * (1 + float32(rng.NormFloat64())/64)
					if i%5 == 2 {
						dv = float32(rng.NormFloat64() * math.Pow(2, float64(rng.IntN(40)-20)))
					}
					binary.LittleEndian.PutUint32(db[4*i:], math.Float32bits(dv))
				}
				var e, s [4]float64
				for i := range n {
					x := float64(dtype.Load(xb, dt, i))
					r := float64(math.Float32frombits(binary.LittleEndian.Uint32(db[4*i:]))) - x
					j := i % 4
					if i >= n&^3 {
						j = 0
					}
					e[j] += float64(r * r)
					s[j] += float64(x * x)
				}
				wantDiff, wantNorm := (e[0]+e[1])+(e[2]+e[3]), (s[0]+s[1])+(s[2]+s[3])
				// A longer x than d is allowed: only d's count is read.
				diff, norm := SquaredError(dt, append(xb, 0xff, 0x7f, 0xff, 0x7f), db)
				if diff != wantDiff || norm != wantNorm {
					t.Errorf("%v, %d values: %v, %v; want %v, %v", dt, n, diff, norm, wantDiff, wantNorm)
				}
			}
		}
	})
}
