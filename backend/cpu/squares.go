package cpu

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/gokitchen/kitchen/dtype"
)

// squareLanes is how many float64 lanes each of SquaredError's sums has
// (the kernels' generator has the same constant): 8 independent chains of
// additions, one AVX-512 register or two AVX2 ones. With 4 (before
// session 14), one AVX2 register, the chains' latency bounded the
// kernels: the weight error took about half of a conversion's CPU time.
const squareLanes = 8

// squareSums holds the lanes of Σ(d - x)², then those of Σx².
type squareSums = [2 * squareLanes]float64

// SquaredError returns Σ(d - x)² and Σx² in float64 over the values of dt
// in x and the float32 values in d (as many as d holds): the converter's
// weight error, x a layer's original rows and d their dequantization.
// The additions follow one fixed order, so every kernel set and machine
// gives the same bits: value i adds to lane i mod 8 of each sum (values
// past the last multiple of 8 to lane 0), each term rounded to float64
// before it is added, and the lanes are added pairwise, ((0 + 1) + (2 +
// 3)) + ((4 + 5) + (6 + 7)). The groups of 8 run in assembly where the
// kernel set has it. dt must be float32, float16 or bfloat16 and x must
// hold at least as many values as d; it panics otherwise. Not an
// operation: a helper of the converter's report, here for its kernels.
func SquaredError(dt dtype.DType, x, d []byte) (diff, norm float64) {
	var acc squareSums
	n := len(d) / 4
	whole := n &^ (squareLanes - 1)
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
		acc[0], acc[squareLanes] = acc[0]+float64(r*r), acc[squareLanes]+float64(xi*xi)
	}
	return sumLanes(&acc)
}

// sumLanes adds the lanes of each sum pairwise.
func sumLanes(acc *squareSums) (diff, norm float64) {
	tree := func(a []float64) float64 { return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7])) }
	return tree(acc[:squareLanes]), tree(acc[squareLanes:])
}

// squaresGeneric adds the groups of 8 values of x (dt) and d (float32) to
// the lanes of acc as SquaredError says; len(d) is a multiple of 32. It
// takes a block of values at a time in two passes, lanes 0-3 then lanes
// 4-7 (squaresHalf), so that each pass's 8 sums and their terms stay in
// amd64's 16 registers (all 16 sums at once spilled: 1.35 times as slow)
// and every lane still adds its values in order.
func squaresGeneric(dt dtype.DType, x, d []byte, acc *squareSums) {
	size := dt.Size()
	for n := len(d) / 4; n > 0; {
		m := min(n, squareBlock)
		for h := range 2 {
			e, sq := lanes(acc, h)
			squaresHalf(dt, x[4*h*size:size*m], d[16*h:4*m], e, sq)
		}
		x, d, n = x[size*m:], d[4*m:], n-m
	}
}

// squareBlock is how many values the Go loops take in their two passes
// at a time: a multiple of squareLanes, in the first-level cache.
const squareBlock = 1024

// lanes returns lanes 4h to 4h+3 of acc's Σ(d - x)² and of its Σx².
func lanes(acc *squareSums, h int) (e, sq *[4]float64) {
	return (*[4]float64)(acc[4*h:]), (*[4]float64)(acc[squareLanes+4*h:])
}

// squaresHalf adds values 0-3 of each group of 8 in x (dt) and d (float32)
// to the 4 lanes of Σ(d - x)² in e and of Σx² in sq. The
// sums are plain locals, not updated through the array, so they stay in
// registers, and each dtype has its own loop, the widening inlined.
func squaresHalf(dt dtype.DType, x, d []byte, e, sq *[4]float64) {
	e0, e1, e2, e3, s0, s1, s2, s3 := e[0], e[1], e[2], e[3], sq[0], sq[1], sq[2], sq[3]
	f32 := func(b []byte) float64 { return float64(math.Float32frombits(binary.LittleEndian.Uint32(b))) }
	bf16 := func(b []byte) float64 {
		return float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(b)) << 16))
	}
	f16 := func(b []byte) float64 { return float64(widenF16(binary.LittleEndian.Uint16(b))) }
	switch dt {
	case dtype.BFloat16:
		for len(x) >= 8 && len(d) >= 16 {
			x0, x1, x2, x3 := bf16(x[0:]), bf16(x[2:]), bf16(x[4:]), bf16(x[6:])
			r0, r1, r2, r3 := f32(d[0:])-x0, f32(d[4:])-x1, f32(d[8:])-x2, f32(d[12:])-x3
			e0, e1, e2, e3 = e0+float64(r0*r0), e1+float64(r1*r1), e2+float64(r2*r2), e3+float64(r3*r3)
			s0, s1, s2, s3 = s0+float64(x0*x0), s1+float64(x1*x1), s2+float64(x2*x2), s3+float64(x3*x3)
			if len(x) < 16 || len(d) < 32 {
				break
			}
			x, d = x[16:], d[32:]
		}
	case dtype.Float16:
		for len(x) >= 8 && len(d) >= 16 {
			x0, x1, x2, x3 := f16(x[0:]), f16(x[2:]), f16(x[4:]), f16(x[6:])
			r0, r1, r2, r3 := f32(d[0:])-x0, f32(d[4:])-x1, f32(d[8:])-x2, f32(d[12:])-x3
			e0, e1, e2, e3 = e0+float64(r0*r0), e1+float64(r1*r1), e2+float64(r2*r2), e3+float64(r3*r3)
			s0, s1, s2, s3 = s0+float64(x0*x0), s1+float64(x1*x1), s2+float64(x2*x2), s3+float64(x3*x3)
			if len(x) < 16 || len(d) < 32 {
				break
			}
			x, d = x[16:], d[32:]
		}
	default:
		for len(x) >= 16 && len(d) >= 16 {
			x0, x1, x2, x3 := f32(x[0:]), f32(x[4:]), f32(x[8:]), f32(x[12:])
			r0, r1, r2, r3 := f32(d[0:])-x0, f32(d[4:])-x1, f32(d[8:])-x2, f32(d[12:])-x3
			e0, e1, e2, e3 = e0+float64(r0*r0), e1+float64(r1*r1), e2+float64(r2*r2), e3+float64(r3*r3)
			s0, s1, s2, s3 = s0+float64(x0*x0), s1+float64(x1*x1), s2+float64(x2*x2), s3+float64(x3*x3)
			if len(x) < 32 || len(d) < 32 {
				break
			}
			x, d = x[32:], d[32:]
		}
	}
	*e, *sq = [4]float64{e0, e1, e2, e3}, [4]float64{s0, s1, s2, s3}
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
// Where rows start on a multiple of 8 values from the first (k and first
// multiples of 8), the kernel set's assembly takes each row's groups of 8.
func QuantizedSquaredError(dt dtype.DType, x, q []byte, scales []float32, k, first int) (diff, norm float64) {
	n, size := len(q), dt.Size()
	if !dt.IsFloat() || len(x) < size*n || n > 0 && (k <= 0 || first < 0 || (first+n-1)/k >= len(scales)) {
		panic(fmt.Sprintf("cpu: QuantizedSquaredError of %v: %d bytes of x, %d scales for %d values from %d in rows of %d",
			dt, len(x), len(scales), n, first, k))
	}
	var acc squareSums
	whole := n &^ (squareLanes - 1)
	for i := 0; i < n; {
		r := (first + i) / k
		end, s := min(n, (r+1)*k-first), scales[r]
		if i%squareLanes == 0 {
			if e8 := i + (min(end, whole)-i)&^(squareLanes-1); e8 > i {
				done := i + squaresQKernel(dt, x[size*i:size*e8], q[i:e8], s, &acc)
				squaresQGeneric(dt, x[size*done:size*e8], q[done:e8], s, &acc)
				i = e8
			}
		}
		// What is left of the row one value at a time: a row that starts
		// off the lanes' groups, or the last values.
		for ; i < end; i++ {
			j := i % squareLanes
			if i >= whole {
				j = 0
			}
			xi := float64(dtype.Load(x, dt, i))
			r := float64(float32(float32(int8(q[i]))*s)) - xi
			acc[j], acc[squareLanes+j] = acc[j]+float64(r*r), acc[squareLanes+j]+float64(xi*xi)
		}
	}
	return sumLanes(&acc)
}

// squaresQGeneric adds the groups of 8 values of x (dt) and of the
// dequantized q (float32(q)·s, rounded to float32) to the lanes of acc as
// SquaredError says; len(q) is a multiple of 8. Two passes a block, as in
// squaresGeneric.
func squaresQGeneric(dt dtype.DType, x, q []byte, s float32, acc *squareSums) {
	size := dt.Size()
	for len(q) > 0 {
		m := min(len(q), squareBlock)
		for h := range 2 {
			e, sq := lanes(acc, h)
			squaresQHalf(dt, x[4*h*size:size*m], q[4*h:m], s, e, sq)
		}
		x, q = x[size*m:], q[m:]
	}
}

// squaresQHalf is squaresHalf with d the dequantized q.
func squaresQHalf(dt dtype.DType, x, q []byte, s float32, e, sq *[4]float64) {
	e0, e1, e2, e3, s0, s1, s2, s3 := e[0], e[1], e[2], e[3], sq[0], sq[1], sq[2], sq[3]
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
			x0, x1, x2, x3 := bf16(x[0:]), bf16(x[2:]), bf16(x[4:]), bf16(x[6:])
			r0, r1, r2, r3 := dq(q[0])-x0, dq(q[1])-x1, dq(q[2])-x2, dq(q[3])-x3
			e0, e1, e2, e3 = e0+float64(r0*r0), e1+float64(r1*r1), e2+float64(r2*r2), e3+float64(r3*r3)
			s0, s1, s2, s3 = s0+float64(x0*x0), s1+float64(x1*x1), s2+float64(x2*x2), s3+float64(x3*x3)
			if len(x) < 16 || len(q) < 8 {
				break
			}
			x, q = x[16:], q[8:]
		}
	case dtype.Float16:
		for len(x) >= 8 && len(q) >= 4 {
			x0, x1, x2, x3 := f16(x[0:]), f16(x[2:]), f16(x[4:]), f16(x[6:])
			r0, r1, r2, r3 := dq(q[0])-x0, dq(q[1])-x1, dq(q[2])-x2, dq(q[3])-x3
			e0, e1, e2, e3 = e0+float64(r0*r0), e1+float64(r1*r1), e2+float64(r2*r2), e3+float64(r3*r3)
			s0, s1, s2, s3 = s0+float64(x0*x0), s1+float64(x1*x1), s2+float64(x2*x2), s3+float64(x3*x3)
			if len(x) < 16 || len(q) < 8 {
				break
			}
			x, q = x[16:], q[8:]
		}
	default:
		for len(x) >= 16 && len(q) >= 4 {
			x0, x1, x2, x3 := f32(x[0:]), f32(x[4:]), f32(x[8:]), f32(x[12:])
			r0, r1, r2, r3 := dq(q[0])-x0, dq(q[1])-x1, dq(q[2])-x2, dq(q[3])-x3
			e0, e1, e2, e3 = e0+float64(r0*r0), e1+float64(r1*r1), e2+float64(r2*r2), e3+float64(r3*r3)
			s0, s1, s2, s3 = s0+float64(x0*x0), s1+float64(x1*x1), s2+float64(x2*x2), s3+float64(x3*x3)
			if len(x) < 32 || len(q) < 8 {
				break
			}
			x, q = x[32:], q[8:]
		}
	}
	*e, *sq = [4]float64{e0, e1, e2, e3}, [4]float64{s0, s1, s2, s3}
}
