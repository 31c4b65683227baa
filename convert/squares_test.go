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
