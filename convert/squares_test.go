package convert

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
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
		var buf []byte
		var sums errorSums
		err = sums.add(context.Background(), x, qt, st, c.group, &buf)
		var ir *infiniteRow
		if !errors.As(err, &ir) || ir.row != 1 {
			t.Errorf("group %d: got %v, want row 1 dequantizing to infinity", c.group, err)
		}
		// Finite everywhere: the sums are.
		st, _ = tensor.FromBytes(kitchen.Float32, floatBytes([]float32{1. / 127, 1, 1. / 127}), n, 1)
		if err := sums.add(context.Background(), x, qt, st, c.group, &buf); err != nil || !finite(sums.diff) || sums.diff == 0 {
			t.Errorf("group %d, finite scales: %v, diff %v", c.group, err, sums.diff)
		}
	}
}

// TestWeightErrorSums: the exported sums are errorSums' (the converter's)
// whatever float type the scale is written in: a float32 scale goes to
// errorSums as it is (the baseline), and the point is that a float16 or
// bfloat16 one widens exactly to the float32 the sums read; with and without
// ConvRot; a weight whose int8 form overflows has an infinite diff, not an
// error; and tensors of the wrong kinds are refused.
func TestWeightErrorSums(t *testing.T) {
	ctx := context.Background()
	const n, k = 5, 64
	xb, q, scales, _ := errorFixture(n, k)
	x, err := tensor.FromBytes(kitchen.BFloat16, xb, n, k)
	if err != nil {
		t.Fatal(err)
	}
	qt, err := tensor.FromBytes(kitchen.Int8, q, n, k)
	if err != nil {
		t.Fatal(err)
	}
	for i := range scales {
		scales[i] = float32(i+1) / 128 // exact in bfloat16
	}
	for _, group := range []int{0, 16} {
		st, err := tensor.FromFloat32(kitchen.Float32, scales, n, 1)
		if err != nil {
			t.Fatal(err)
		}
		var buf []byte
		var want errorSums
		if err := want.add(ctx, x, qt, st, group, &buf); err != nil {
			t.Fatal(err)
		}
		for _, dt := range []dtype.DType{kitchen.Float32, kitchen.BFloat16, kitchen.Float16} {
			s, err := tensor.FromFloat32(dt, scales, n)
			if err != nil {
				t.Fatal(err)
			}
			d, nn, err := WeightErrorSums(ctx, x, qt, s, group)
			if err != nil || d != want.diff || nn != want.norm || d == 0 {
				t.Errorf("group %d, %v scale: %v, %v, %v; want %v, %v", group, dt, d, nn, err, want.diff, want.norm)
			}
		}
	}
	// The caller's options are its own: WeightErrorSums's own (Into, the
	// group) go on a copy, not into their spare capacity.
	opts := make([]kitchen.Option, 1, 4)
	opts[0] = kitchen.UsingBackend("eager")
	spare := opts[:4]
	perRow, _ := tensor.FromFloat32(kitchen.Float32, scales, n)
	if _, _, err := WeightErrorSums(ctx, x, qt, perRow, 16, opts...); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(spare[1], kitchen.Option{}) || !reflect.DeepEqual(spare[2], kitchen.Option{}) {
		t.Error("WeightErrorSums wrote its options into the caller's slice")
	}
	empty, _ := tensor.FromFloat32(kitchen.BFloat16, nil, 3, 0)
	emptyQ, _ := tensor.FromBytes(kitchen.Int8, nil, 3, 0)
	unit, _ := tensor.FromFloat32(kitchen.Float32, []float32{1})
	if d, nn, err := WeightErrorSums(ctx, empty, emptyQ, unit, 0); err != nil || d != 0 || nn != 0 {
		t.Errorf("a [3, 0] weight: %v, %v, %v; want 0, 0, nil", d, nn, err)
	}
	huge, _ := tensor.FromFloat32(kitchen.Float32, []float32{math.MaxFloat32 / 100})
	if d, _, err := WeightErrorSums(ctx, x, qt, huge, 0); err != nil || !math.IsInf(d, 1) {
		t.Errorf("an overflowing scale: %v, %v; want +Inf", d, err)
	}
	one, _ := tensor.FromFloat32(kitchen.Float32, []float32{1})
	wrong, _ := tensor.FromFloat32(kitchen.Float32, make([]float32, n*k), n, k)
	for _, c := range [][3]*tensor.Tensor{{qt, qt, one}, {x, x, one}, {x, qt, wrong}, {x, qt, qt}} {
		if _, _, err := WeightErrorSums(ctx, c[0], c[1], c[2], 0); err == nil {
			t.Errorf("%v, %v, %v: no error", c[0], c[1], c[2])
		}
	}
}

// TestWeightErrorSumsSteps runs WeightErrorSums over a table of more than
// one step of errorRows elements, with a short last step, one scale a
// row, unrotated and rotated, against sums over the table dequantized
// whole (by hand, or by one dequantize_int8_convrot_weight call): each
// step must meet its own rows' scales.
func TestWeightErrorSumsSteps(t *testing.T) {
	ctx := context.Background()
	const k = 2048
	n := errorRows/k + 88
	xb, q, scales, _ := errorFixture(n, k)
	x, _ := tensor.FromBytes(kitchen.BFloat16, xb, n, k)
	qt, _ := tensor.FromBytes(kitchen.Int8, q, n, k)
	st, _ := tensor.FromFloat32(kitchen.Float32, scales, n)
	xv, err := x.Float32s()
	if err != nil {
		t.Fatal(err)
	}
	for _, group := range []int{0, 16} {
		var dv []float32
		if group == 0 {
			dv = make([]float32, n*k)
			for i := range dv {
				dv[i] = float32(int8(q[i])) * scales[i/k]
			}
		} else {
			col, _ := st.Reshape(n, 1)
			d, err := kitchen.DequantizeInt8ConvRotWeight(ctx, qt, col, kitchen.WithConvRotGroup(group))
			if err != nil {
				t.Fatal(err)
			}
			if dv, err = d.Float32s(); err != nil {
				t.Fatal(err)
			}
		}
		var wantD, wantN float64
		for i, v := range dv {
			e := float64(v) - float64(xv[i])
			wantD, wantN = wantD+e*e, wantN+float64(xv[i])*float64(xv[i])
		}
		d, nn, err := WeightErrorSums(ctx, x, qt, st, group)
		if err != nil || math.Abs(d-wantD) > 1e-9*wantD || math.Abs(nn-wantN) > 1e-9*wantN {
			t.Errorf("group %d: %v, %v, %v; want %v, %v", group, d, nn, err, wantD, wantN)
		}
	}
}
