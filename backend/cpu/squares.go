package cpu

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/gokitchen/kitchen/dtype"
)

// SquaredError returns Σ(d - x)² and Σx² in float64 over the values of dt
// in x and the float32 values in d (as many as d holds): the converter's
// weight error, x a layer's original rows and d their dequantization.
// The additions follow one fixed order, so every kernel set and machine
// gives the same bits: value i adds to lane i mod 4 of each sum (values
// past the last multiple of 4 to lane 0), each term rounded to float64
// before it is added, and the lanes are added as (0 + 1) + (2 + 3). With
// AVX2 (AVX-512 machines too) the groups of 4 run in assembly. dt must be
// float32, float16 or bfloat16 and x must hold at least as many values as
// d; it panics otherwise. Not an operation: a helper of the converter's
// report, here for its kernels.
func SquaredError(dt dtype.DType, x, d []byte) (diff, norm float64) {
	var acc [8]float64 // the lanes of Σ(d - x)², then of Σx²
	n := len(d) / 4
	whole := n &^ 3
	size := dt.Size()
	if !dt.IsFloat() || len(x) < size*n {
		panic(fmt.Sprintf("cpu: SquaredError of %v: %d bytes of x for %d values of d", dt, len(x), n))
	}
	x = x[:size*n] // as many values as d: the kernels read no further
	done := squaresKernel(dt, x, d[:4*whole], &acc)
	squaresGeneric(dt, x[size*done:size*whole], d[4*done:4*whole], &acc)
	for i := whole; i < n; i++ {
		xi := float64(dtype.Load(x, dt, i))
		r := float64(math.Float32frombits(binary.LittleEndian.Uint32(d[4*i:]))) - xi
		acc[0], acc[4] = acc[0]+float64(r*r), acc[4]+float64(xi*xi)
	}
	return (acc[0] + acc[1]) + (acc[2] + acc[3]), (acc[4] + acc[5]) + (acc[6] + acc[7])
}

// squaresGeneric adds the groups of 4 values of x (dt) and d (float32) to
// the lanes of acc as SquaredError says; len(d) is a multiple of 16. The
// sums are plain locals, not updated through the array, so they stay in
// registers (three times faster than a helper taking pointers to them),
// and each dtype has its own loop, the widening inlined.
func squaresGeneric(dt dtype.DType, x, d []byte, acc *[8]float64) {
	e0, e1, e2, e3, s0, s1, s2, s3 := acc[0], acc[1], acc[2], acc[3], acc[4], acc[5], acc[6], acc[7]
	f32 := func(b []byte) float64 { return float64(math.Float32frombits(binary.LittleEndian.Uint32(b))) }
	bf16 := func(b []byte) float64 {
		return float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(b)) << 16))
	}
	f16 := func(b []byte) float64 { return float64(widenF16(binary.LittleEndian.Uint16(b))) }
	switch dt {
	case dtype.BFloat16:
		for len(x) >= 8 && len(d) >= 16 {
			x0, x1, x2, x3 := bf16(x[0:2]), bf16(x[2:4]), bf16(x[4:6]), bf16(x[6:8])
			r0, r1, r2, r3 := f32(d[0:4])-x0, f32(d[4:8])-x1, f32(d[8:12])-x2, f32(d[12:16])-x3
			e0, e1, e2, e3 = e0+float64(r0*r0), e1+float64(r1*r1), e2+float64(r2*r2), e3+float64(r3*r3)
			s0, s1, s2, s3 = s0+float64(x0*x0), s1+float64(x1*x1), s2+float64(x2*x2), s3+float64(x3*x3)
			x, d = x[8:], d[16:]
		}
	case dtype.Float16:
		for len(x) >= 8 && len(d) >= 16 {
			x0, x1, x2, x3 := f16(x[0:2]), f16(x[2:4]), f16(x[4:6]), f16(x[6:8])
			r0, r1, r2, r3 := f32(d[0:4])-x0, f32(d[4:8])-x1, f32(d[8:12])-x2, f32(d[12:16])-x3
			e0, e1, e2, e3 = e0+float64(r0*r0), e1+float64(r1*r1), e2+float64(r2*r2), e3+float64(r3*r3)
			s0, s1, s2, s3 = s0+float64(x0*x0), s1+float64(x1*x1), s2+float64(x2*x2), s3+float64(x3*x3)
			x, d = x[8:], d[16:]
		}
	default:
		for len(x) >= 16 && len(d) >= 16 {
			x0, x1, x2, x3 := f32(x[0:4]), f32(x[4:8]), f32(x[8:12]), f32(x[12:16])
			r0, r1, r2, r3 := f32(d[0:4])-x0, f32(d[4:8])-x1, f32(d[8:12])-x2, f32(d[12:16])-x3
			e0, e1, e2, e3 = e0+float64(r0*r0), e1+float64(r1*r1), e2+float64(r2*r2), e3+float64(r3*r3)
			s0, s1, s2, s3 = s0+float64(x0*x0), s1+float64(x1*x1), s2+float64(x2*x2), s3+float64(x3*x3)
			x, d = x[16:], d[16:]
		}
	}
	*acc = [8]float64{e0, e1, e2, e3, s0, s1, s2, s3}
}

// QuantizedSquaredError is SquaredError with d the dequantization of the
// int8 values in q, computed as it goes instead of read from a float32
// buffer: d = float32(q)·scale rounded to float32, as
// dequantize_int8_simple computes it, so the sums are SquaredError's of
// that d, bit for bit. The values are elements first to first+len(q) of a
// row-major matrix of rows of k, scales[r] the scale of its row r (one
// scale for all: k = first+len(q), scales of length 1). x holds the same
// elements (at least len(q) values of dt). It panics where dt is not
// float32, float16 or bfloat16, or where x or scales are too short.
// Where rows start on a multiple of 4 values from the first (k and first
// multiples of 4), the kernel set's assembly takes each row's groups of 4.
func QuantizedSquaredError(dt dtype.DType, x, q []byte, scales []float32, k, first int) (diff, norm float64) {
	n, size := len(q), dt.Size()
	if !dt.IsFloat() || len(x) < size*n || n > 0 && (k <= 0 || first < 0 || (first+n-1)/k >= len(scales)) {
		panic(fmt.Sprintf("cpu: QuantizedSquaredError of %v: %d bytes of x, %d scales for %d values from %d in rows of %d",
			dt, len(x), len(scales), n, first, k))
	}
	var acc [8]float64 // the lanes of Σ(d - x)², then of Σx²
	whole := n &^ 3
	for i := 0; i < n; {
		r := (first + i) / k
		end, s := min(n, (r+1)*k-first), scales[r]
		if i%4 == 0 {
			if e4 := i + (min(end, whole)-i)&^3; e4 > i {
				done := i + squaresQKernel(dt, x[size*i:size*e4], q[i:e4], s, &acc)
				squaresQGeneric(dt, x[size*done:size*e4], q[done:e4], s, &acc)
				i = e4
			}
		}
		// What is left of the row one value at a time: a row that starts
		// off the lanes' groups of 4, or the last values.
		for ; i < end; i++ {
			j := i % 4
			if i >= whole {
				j = 0
			}
			xi := float64(dtype.Load(x, dt, i))
			r := float64(float32(float32(int8(q[i]))*s)) - xi
			acc[j], acc[4+j] = acc[j]+float64(r*r), acc[4+j]+float64(xi*xi)
		}
	}
	return (acc[0] + acc[1]) + (acc[2] + acc[3]), (acc[4] + acc[5]) + (acc[6] + acc[7])
}

// squaresQGeneric adds the groups of 4 values of x (dt) and of the
// dequantized q (float32(q)·s, rounded to float32) to the lanes of acc as
// SquaredError says; len(q) is a multiple of 4. One loop per dtype, the
// widening inlined, as in squaresGeneric.
func squaresQGeneric(dt dtype.DType, x, q []byte, s float32, acc *[8]float64) {
	e0, e1, e2, e3, s0, s1, s2, s3 := acc[0], acc[1], acc[2], acc[3], acc[4], acc[5], acc[6], acc[7]
	// float32(...) rounds the product before it is widened: no fusing.
	dq := func(b byte) float64 { return float64(float32(float32(int8(b)) * s)) }
	f32 := func(b []byte) float64 { return float64(math.Float32frombits(binary.LittleEndian.Uint32(b))) }
	bf16 := func(b []byte) float64 {
		return float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(b)) << 16))
	}
	f16 := func(b []byte) float64 { return float64(widenF16(binary.LittleEndian.Uint16(b))) }
	switch dt {
	case dtype.BFloat16:
		for len(x) >= 8 && len(q) >= 4 {
			x0, x1, x2, x3 := bf16(x[0:2]), bf16(x[2:4]), bf16(x[4:6]), bf16(x[6:8])
			r0, r1, r2, r3 := dq(q[0])-x0, dq(q[1])-x1, dq(q[2])-x2, dq(q[3])-x3
			e0, e1, e2, e3 = e0+float64(r0*r0), e1+float64(r1*r1), e2+float64(r2*r2), e3+float64(r3*r3)
			s0, s1, s2, s3 = s0+float64(x0*x0), s1+float64(x1*x1), s2+float64(x2*x2), s3+float64(x3*x3)
			x, q = x[8:], q[4:]
		}
	case dtype.Float16:
		for len(x) >= 8 && len(q) >= 4 {
			x0, x1, x2, x3 := f16(x[0:2]), f16(x[2:4]), f16(x[4:6]), f16(x[6:8])
			r0, r1, r2, r3 := dq(q[0])-x0, dq(q[1])-x1, dq(q[2])-x2, dq(q[3])-x3
			e0, e1, e2, e3 = e0+float64(r0*r0), e1+float64(r1*r1), e2+float64(r2*r2), e3+float64(r3*r3)
			s0, s1, s2, s3 = s0+float64(x0*x0), s1+float64(x1*x1), s2+float64(x2*x2), s3+float64(x3*x3)
			x, q = x[8:], q[4:]
		}
	default:
		for len(x) >= 16 && len(q) >= 4 {
			x0, x1, x2, x3 := f32(x[0:4]), f32(x[4:8]), f32(x[8:12]), f32(x[12:16])
			r0, r1, r2, r3 := dq(q[0])-x0, dq(q[1])-x1, dq(q[2])-x2, dq(q[3])-x3
			e0, e1, e2, e3 = e0+float64(r0*r0), e1+float64(r1*r1), e2+float64(r2*r2), e3+float64(r3*r3)
			s0, s1, s2, s3 = s0+float64(x0*x0), s1+float64(x1*x1), s2+float64(x2*x2), s3+float64(x3*x3)
			x, q = x[16:], q[4:]
		}
	}
	*acc = [8]float64{e0, e1, e2, e3, s0, s1, s2, s3}
}
