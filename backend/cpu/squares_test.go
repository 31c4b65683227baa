package cpu

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gokitchen/kitchen/dtype"
)

// TestSquaredError checks SquaredError on every kernel set against the
// plain loop of its documented order: value i adds to lane i mod 8 (the
// values past the last multiple of 8 to lane 0), every term rounded to
// float64 before it is added, the lanes added pairwise. The values span
// many binades, float16 subnormals and signed zeros included, so any other
// order would show in the last bits, and every fifth d is far from its x.
// (A fused multiply-add would rarely show here: the kernels are written
// with separate multiplies and adds, and Go's float64(r*r) forbids fusing.)
func TestSquaredError(t *testing.T) {
	forEachKernelSet(t, true, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(3, 4))
		for _, dt := range dtype.Floats() {
			for _, n := range []int{0, 1, 3, 4, 5, 7, 8, 9, 15, 16, 17, 63, 64, 1000, 4099} {
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
				var e, s [8]float64
				for i := range n {
					x := float64(dtype.Load(xb, dt, i))
					r := float64(math.Float32frombits(binary.LittleEndian.Uint32(db[4*i:]))) - x
					j := i % 8
					if i >= n&^7 {
						j = 0
					}
					e[j] += float64(r * r)
					s[j] += float64(x * x)
				}
				wantDiff := ((e[0] + e[1]) + (e[2] + e[3])) + ((e[4] + e[5]) + (e[6] + e[7]))
				wantNorm := ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]))
				// A longer x than d is allowed: only d's count is read.
				diff, norm := SquaredError(dt, append(xb, 0xff, 0x7f, 0xff, 0x7f), db)
				if diff != wantDiff || norm != wantNorm {
					t.Errorf("%v, %d values: %v, %v; want %v, %v", dt, n, diff, norm, wantDiff, wantNorm)
				}
			}
		}
	})
}

// TestQuantizedSquaredError checks QuantizedSquaredError on every kernel
// set against SquaredError of the dequantization computed apart (each
// product rounded to float32, as dequantize_int8_simple rounds it): the
// same bits, for row lengths that are and are not multiples of 8, runs
// of values starting inside a row, one scale for all, every int8 value
// (-128 included) and scales over many binades (float16
// subnormals among x).
func TestQuantizedSquaredError(t *testing.T) {
	forEachKernelSet(t, true, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(5, 6))
		for _, dt := range dtype.Floats() {
			for _, c := range []struct{ k, first, n int }{
				{1, 0, 7}, {4, 0, 64}, {8, 4, 61}, {8, 0, 64}, {12, 0, 1000}, {16, 8, 4099}, {16, 0, 160}, {24, 16, 480}, {3, 0, 30}, {5, 2, 101}, {4, 1, 40},
				{3072, 0, 3 * 3072}, {3072, 1024, 16384}, {4099, 0, 8198},
			} {
				rows := (c.first+c.n+c.k-1)/c.k + 1
				scales := make([]float32, rows)
				for r := range scales {
					scales[r] = float32(math.Ldexp(1+rng.Float64(), rng.IntN(24)-32)) // float16 subnormals among x, no infinities
				}
				xb, q := make([]byte, c.n*dt.Size()), make([]byte, c.n)
				db := make([]byte, 4*c.n)
				for i := range c.n {
					q[i] = byte(rng.IntN(256))
					if i%61 == 3 {
						q[i] = 0x80 // -128
					}
					s := scales[(c.first+i)/c.k]
					d := float32(int8(q[i])) * s
					binary.LittleEndian.PutUint32(db[4*i:], math.Float32bits(d))
					dtype.Store(xb, dt, i, d*(1+float32(rng.NormFloat64())/128))
				}
				wantDiff, wantNorm := SquaredError(dt, xb, db)
				diff, norm := QuantizedSquaredError(dt, xb, q, scales, c.k, c.first)
				if diff != wantDiff || norm != wantNorm {
					t.Errorf("%v %+v: %v, %v; want %v, %v", dt, c, diff, norm, wantDiff, wantNorm)
				}
				// One scale for all.
				one := []float32{scales[0]}
				for i := range c.n {
					binary.LittleEndian.PutUint32(db[4*i:], math.Float32bits(float32(int8(q[i]))*one[0]))
				}
				wantDiff, wantNorm = SquaredError(dt, xb, db)
				if diff, norm := QuantizedSquaredError(dt, xb, q, one, c.n, 0); diff != wantDiff || norm != wantNorm {
					t.Errorf("%v %+v, one scale: %v, %v; want %v, %v", dt, c, diff, norm, wantDiff, wantNorm)
				}
			}
		}
	})
}
