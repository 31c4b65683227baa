package convert

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gokitchen/kitchen"
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/tensor"
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

// BenchmarkWeightError times the weight error of a 3072x3072 bfloat16
// layer with one scale a row, both ways the converter computes it:
// dequantizing into a float32 buffer and summing that (as for rotated
// layers), and summing as it dequantizes (sumQuantized, the others). The
// two give the same bits (TestSumQuantized).
func BenchmarkWeightError(b *testing.B) {
	const n, k = 3072, 3072
	xb, q, scales, _ := errorFixture(n, k)
	qt, err := tensor.FromBytes(kitchen.Int8, q, n, k)
	if err != nil {
		b.Fatal(err)
	}
	st, err := tensor.FromBytes(kitchen.Float32, floatBytes(scales), n, 1)
	if err != nil {
		b.Fatal(err)
	}
	into, err := tensor.FromBytes(kitchen.Float32, make([]byte, 4*n*k), n, k)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("dequantize+sums", func(b *testing.B) {
		b.SetBytes(int64(len(xb) + len(q)))
		for b.Loop() {
			d, err := kitchen.DequantizeInt8(context.Background(), qt, st, kitchen.Into(into))
			if err != nil {
				b.Fatal(err)
			}
			db, _ := d.Bytes()
			sumSquares(dtype.BFloat16, xb, db)
		}
	})
	b.Run("fused", func(b *testing.B) {
		b.SetBytes(int64(len(xb) + len(q)))
		for b.Loop() {
			sumQuantized(dtype.BFloat16, xb, q, scales, k)
		}
	})
}

// errorFixture returns a layer of n rows of k bfloat16 values, its int8
// values and row scales (random, -128 included), and their float32
// dequantization, q·scale rounded to float32.
func errorFixture(n, k int) (xb, q []byte, scales []float32, db []byte) {
	rng := rand.New(rand.NewPCG(7, 8))
	xb, q, scales, db = make([]byte, 2*n*k), make([]byte, n*k), make([]float32, n), make([]byte, 4*n*k)
	for r := range scales {
		scales[r] = float32(rng.Float64()+0.5) / 127
	}
	for i := range q {
		q[i] = byte(rng.IntN(256))
		d := float32(int8(q[i])) * scales[i/k]
		binary.LittleEndian.PutUint32(db[4*i:], math.Float32bits(d))
		v := d + float32(rng.NormFloat64())/512
		binary.LittleEndian.PutUint16(xb[2*i:], uint16(math.Float32bits(v)>>16))
	}
	return xb, q, scales, db
}

func floatBytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
	return b
}

// TestSumQuantized checks that summing as it dequantizes gives the bits
// of summing the float32 dequantization, over several blocks and rows of
// a length that is not a multiple of 4, and with one scale for all.
func TestSumQuantized(t *testing.T) {
	for _, k := range []int{3072, 1027} {
		n := 40
		xb, q, scales, db := errorFixture(n, k)
		wd, wn := sumSquares(dtype.BFloat16, xb, db)
		if d, nn := sumQuantized(dtype.BFloat16, xb, q, scales, k); d != wd || nn != wn {
			t.Errorf("k = %d: %v, %v; want %v, %v", k, d, nn, wd, wn)
		}
		one := []float32{scales[0]}
		for i := range q {
			binary.LittleEndian.PutUint32(db[4*i:], math.Float32bits(float32(int8(q[i]))*one[0]))
		}
		wd, wn = sumSquares(dtype.BFloat16, xb, db)
		if d, nn := sumQuantized(dtype.BFloat16, xb, q, one, n*k); d != wd || nn != wn {
			t.Errorf("k = %d, one scale: %v, %v; want %v, %v", k, d, nn, wd, wn)
		}
	}
}

// TestErrorSumsInfiniteRow checks that the weight error names the first
// row whose int8 form dequantizes to a value that is not finite: without
// rotation, where 127 times the scale overflows; with ConvRot, where the
// products are finite but rotating them back overflows (the butterfly's
// sum of four values near float32's largest).
func TestErrorSumsInfiniteRow(t *testing.T) {
	const n, k = 3, 8
	x, err := tensor.FromBytes(kitchen.Float32, make([]byte, 4*n*k), n, k)
	if err != nil {
		t.Fatal(err)
	}
	q := make([]byte, n*k)
	for i := range q {
		q[i] = byte(i % 5)
	}
	for _, c := range []struct {
		group int
		scale float32 // of row 1
	}{
		{0, math.MaxFloat32 / 100},
		{4, math.MaxFloat32 / 127 * 0.9},
	} {
		copy(q[k:], []byte{127, 127, 127, 0x81, 0, 0, 0, 0}) // 0x81 is -127
		qt, err := tensor.FromBytes(kitchen.Int8, q, n, k)
		if err != nil {
			t.Fatal(err)
		}
		st, err := tensor.FromBytes(kitchen.Float32, floatBytes([]float32{1. / 127, c.scale, 1. / 127}), n, 1)
		if err != nil {
			t.Fatal(err)
		}
		p := &producer{c: &conv{backends: map[string]bool{}}}
		var sums errorSums
		err = sums.add(context.Background(), p, x, qt, st, c.group)
		var ir *infiniteRow
		if !errors.As(err, &ir) || ir.row != 1 {
			t.Errorf("group %d: got %v, want row 1 dequantizing to infinity", c.group, err)
		}
		// Finite everywhere: the sums are.
		st, _ = tensor.FromBytes(kitchen.Float32, floatBytes([]float32{1. / 127, 1, 1. / 127}), n, 1)
		if err := sums.add(context.Background(), p, x, qt, st, c.group); err != nil || !finite(sums.diff) || sums.diff == 0 {
			t.Errorf("group %d, finite scales: %v, diff %v", c.group, err, sums.diff)
		}
	}
}
