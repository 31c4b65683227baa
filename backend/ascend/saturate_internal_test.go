package ascend

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/quant"
	"github.com/gokitchen/kitchen/tensor"
)

// TestQuantizeSaturatingKeepsInRange compares quantizeSaturating with
// aclnnQuantize alone (session.quantize) on the same x and divisors, rows
// of float16 and bfloat16 with one divisor each (normal and, for float16,
// subnormal divisors), element by element: wherever the float32 quotient
// rounds into the int8 range, which is where aclnnQuantize alone is right,
// the two must be equal, bit for bit, ties and the edges of the range
// included; everywhere, quantizeSaturating must be the contract's
// sat(rne(f32(x) / f32(t))), computed on the host.
func TestQuantizeSaturatingKeepsInRange(t *testing.T) {
	rt, _ := load(t)
	d := rt.Device()
	rng := rand.New(rand.NewPCG(5, 8))
	const rows, k = 64, 96
	for _, T := range []dtype.DType{dtype.Float16, dtype.BFloat16} {
		xv, tv := make([]float32, rows*k), make([]float32, rows)
		for r := range rows {
			// Divisors over T's range; for float16 also subnormal ones
			// (the rows' scales the contract divides by as they are).
			div := T.Round(float32(math.Ldexp(1+rng.Float64(), rng.IntN(20)-12)))
			if T == dtype.Float16 && r%4 == 0 {
				div = T.Round(float32(rng.IntN(1000)+1) * 0x1p-24)
			}
			tv[r] = div
			for j := range k {
				// Quotients near every integer of the range and beyond it:
				// exact ties, values just either side of them, the edges
				// ±127.5 and -128.5, and values far out.
				var y float64
				switch rng.IntN(5) {
				case 0:
					y = float64(rng.IntN(256)-128) + 0.5
				case 1:
					y = float64(rng.IntN(256)-128) + 0.5 + (rng.Float64()-0.5)/64
				case 2:
					y = []float64{127.5, -128.5, 127.49, -128.49, 127.51, -128.51, 127, -128}[rng.IntN(8)]
				case 3:
					y = (rng.Float64() - 0.5) * 600
				default:
					y = rng.NormFloat64() * 60
				}
				xv[r*k+j] = T.Round(float32(y) * div)
			}
		}
		up := func(v []float32, shape ...int) *tensor.Tensor {
			h, err := tensor.FromFloat32(T, v, shape...)
			if err != nil {
				t.Fatal(err)
			}
			u, err := h.To(d)
			if err != nil {
				t.Fatal(err)
			}
			return u
		}
		x, tt := up(xv, rows, k), up(tv, rows)
		plain, sat := make([]byte, rows*k), make([]byte, rows*k)
		_, err := do(d, func(s *session) (struct{}, error) {
			xa, err := s.of(x, rows, k)
			if err != nil {
				return struct{}{}, err
			}
			ta, err := s.of(tt, rows)
			if err != nil {
				return struct{}{}, err
			}
			var q1, q2 arr
			return struct{}{}, first(
				func() error { return s.temporaries(aclInt8, rows*k, &q1, &q2) },
				func() error { return s.quantize(xa, ta, q1.as(rows, k), 0) },
				func() error { return s.quantizeSaturating(xa, ta.as(rows, 1), q2.as(rows, k)) },
				func() error { return s.read(plain, q1.addr) },
				func() error { return s.read(sat, q2.addr) },
			)
		})
		x.Release()
		tt.Release()
		if err != nil {
			t.Fatal(err)
		}
		inRange, bad := 0, 0
		for i, v := range xv {
			y := v / tv[i/k] // float32 division, as the operators divide
			want := quant.RoundHalfEven(y)
			if r := math.RoundToEven(float64(y)); r >= -128 && r <= 127 {
				inRange++
				if plain[i] != sat[i] {
					if bad++; bad <= 5 {
						t.Errorf("%v: x %g / t %g = %g: quantizeSaturating %d, aclnnQuantize %d", T, v, tv[i/k], y, int8(sat[i]), int8(plain[i]))
					}
				}
			}
			if int8(sat[i]) != want {
				if bad++; bad <= 5 {
					t.Errorf("%v: x %g / t %g = %g: quantizeSaturating %d, want %d", T, v, tv[i/k], y, int8(sat[i]), want)
				}
			}
		}
		t.Logf("%v: %d of %d quotients in range", T, inRange, rows*k)
		if inRange < rows*k/2 || inRange == rows*k {
			t.Errorf("%v: %d of %d quotients in range: the cases do not cover both sides", T, inRange, rows*k)
		}
	}
}
