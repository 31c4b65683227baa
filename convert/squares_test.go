package convert

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gokitchen/kitchen/dtype"
)

// BenchmarkSumSquares times the weight error's sums over a 3072x3072
// bfloat16 layer and its float32 dequantization.
func BenchmarkSumSquares(b *testing.B) {
	n := 3072 * 3072
	xb, db := make([]byte, 2*n), make([]byte, 4*n)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range n {
		v := float32(rng.NormFloat64())
		binary.LittleEndian.PutUint16(xb[2*i:], uint16(math.Float32bits(v)>>16))
		binary.LittleEndian.PutUint32(db[4*i:], math.Float32bits(v*1.01))
	}
	b.SetBytes(int64(len(xb) + len(db)))
	for b.Loop() {
		sumSquares(dtype.BFloat16, xb, db)
	}
}

// TestBlockSquares checks the sums against the plain loop they unroll:
// element i adds to sum i mod 4 (the tail to sum 0), every term rounded
// to float64 before it is added, the four sums added pairwise.
func TestBlockSquares(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, dt := range []dtype.DType{dtype.BFloat16, dtype.Float16, dtype.Float32} {
		for _, n := range []int{0, 1, 3, 4, 5, 63, 1000} {
			xb, db := make([]byte, n*dt.Size()), make([]byte, 4*n)
			for i := range n {
				v := float32(rng.NormFloat64() * 100)
				dtype.Store(xb, dt, i, v)
				binary.LittleEndian.PutUint32(db[4*i:], math.Float32bits(v*(1+float32(rng.NormFloat64())/64)))
			}
			var e, s [4]float64
			unrolled := dt != dtype.Float16
			for i := range n {
				x := float64(dtype.Load(xb, dt, i))
				r := float64(math.Float32frombits(binary.LittleEndian.Uint32(db[4*i:]))) - x
				j := i % 4
				if !unrolled || i >= n&^3 {
					j = 0
				}
				e[j] += float64(r * r)
				s[j] += float64(x * x)
			}
			want := [2]float64{(e[0] + e[1]) + (e[2] + e[3]), (s[0] + s[1]) + (s[2] + s[3])}
			if got := blockSquares(dt, xb, db); got != want {
				t.Errorf("%v, %d values: %v, want %v", dt, n, got, want)
			}
		}
	}
}
