//go:build amd64 && !purego

package cpu

import (
	"golang.org/x/sys/cpu"

	"github.com/gokitchen/kitchen/dtype"
)

// The kernel sets, from slowest to fastest.
const (
	implGeneric = iota
	implAVX2    // AVX2 and F16C
	implAVX512  // AVX512F and AVX512BW
)

// impl is the kernel set in use: the best this CPU runs, chosen once.
// Tests lower it to check every set against the Go kernels. FMA is
// deliberately unused (see _asm/main.go), so it is not required.
var impl = bestImpl()

func bestImpl() int {
	x := cpu.X86
	switch {
	case x.HasAVX2 && x.HasF16C && x.HasAVX512F && x.HasAVX512BW:
		return implAVX512
	case x.HasAVX2 && x.HasF16C:
		return implAVX2
	}
	return implGeneric
}

// impls lists the kernel sets this CPU can run.
func impls() []int {
	var out []int
	for i := implGeneric; i <= bestImpl(); i++ {
		out = append(out, i)
	}
	return out
}

func absMaxBits(dt dtype.DType, src []byte) uint32 {
	var n int
	var m uint32
	switch {
	case impl == implAVX512:
		n = len(src) &^ 127
		if dt.Size() == 2 {
			m = absMaxBits16AVX512(src[:n])
		} else {
			m = absMaxBits32AVX512(src[:n])
		}
	case impl == implAVX2:
		n = len(src) &^ 63
		if dt.Size() == 2 {
			m = absMaxBits16AVX2(src[:n])
		} else {
			m = absMaxBits32AVX2(src[:n])
		}
	}
	return max(m, absMaxBitsGeneric(dt, src[n:]))
}

func quantize(dt dtype.DType, src, dst []byte, t float32, seed int64, base uint64) {
	if impl == implGeneric || seed > 0 {
		// Stochastic rounding stays in Go: its hash is not vectorised yet.
		quantizeGeneric(dt, src, dst, t, seed, base)
		return
	}
	size := dt.Size()
	var n int
	if impl == implAVX512 {
		n = len(dst) &^ 63
		switch dt {
		case dtype.BFloat16:
			quantizeBF16AVX512(src[:n*size], dst[:n], t)
		case dtype.Float16:
			quantizeF16AVX512(src[:n*size], dst[:n], t)
		default:
			quantizeF32AVX512(src[:n*size], dst[:n], t)
		}
	} else {
		n = len(dst) &^ 31
		switch dt {
		case dtype.BFloat16:
			quantizeBF16AVX2(src[:n*size], dst[:n], t)
		case dtype.Float16:
			quantizeF16AVX2(src[:n*size], dst[:n], t)
		default:
			quantizeF32AVX2(src[:n*size], dst[:n], t)
		}
	}
	quantizeGeneric(dt, src[n*size:], dst[n:], t, seed, base+uint64(n))
}

func dequantize(out dtype.DType, q []byte, s float32, dst []byte) {
	size := out.Size()
	var n int
	switch impl {
	case implAVX512:
		n = len(q) &^ 31
		switch out {
		case dtype.BFloat16:
			dequantizeBF16AVX512(q[:n], s, dst[:n*size])
		case dtype.Float16:
			dequantizeF16AVX512(q[:n], s, dst[:n*size])
		default:
			dequantizeF32AVX512(q[:n], s, dst[:n*size])
		}
	case implAVX2:
		n = len(q) &^ 15
		switch out {
		case dtype.BFloat16:
			dequantizeBF16AVX2(q[:n], s, dst[:n*size])
		case dtype.Float16:
			dequantizeF16AVX2(q[:n], s, dst[:n*size])
		default:
			dequantizeF32AVX2(q[:n], s, dst[:n*size])
		}
	}
	dequantizeGeneric(out, q[n:], s, dst[n*size:])
}

// widenRow sets dst to the len(dst) elements of dt (a float dtype) at the
// start of src, as float32, as widenBlock does, except that F16C returns a
// signaling float16 NaN quieted. The ConvRot rows do arithmetic on the
// values next, which quiets a NaN anyway and keeps its payload, so their
// results are the same.
func widenRow(dt dtype.DType, src []byte, dst []float32) {
	size := dt.Size()
	var n int
	switch impl {
	case implAVX512:
		n = len(dst) &^ 31
		switch dt {
		case dtype.BFloat16:
			widenBF16AVX512(src[:n*size], dst[:n])
		case dtype.Float16:
			widenF16AVX512(src[:n*size], dst[:n])
		default:
			widenF32AVX512(src[:n*size], dst[:n])
		}
	case implAVX2:
		n = len(dst) &^ 15
		switch dt {
		case dtype.BFloat16:
			widenBF16AVX2(src[:n*size], dst[:n])
		case dtype.Float16:
			widenF16AVX2(src[:n*size], dst[:n])
		default:
			widenF32AVX2(src[:n*size], dst[:n])
		}
	}
	widenBlock(dt, src, n, dst[n:])
}

// storeRow writes v rounded to dt (a float dtype) as the first len(v)
// elements of dst, as storeBlock does.
func storeRow(dt dtype.DType, dst []byte, v []float32) {
	size := dt.Size()
	var n int
	switch impl {
	case implAVX512:
		n = len(v) &^ 31
		switch dt {
		case dtype.BFloat16:
			narrowBF16AVX512(v[:n], dst[:n*size])
		case dtype.Float16:
			narrowF16AVX512(v[:n], dst[:n*size])
		default:
			narrowF32AVX512(v[:n], dst[:n*size])
		}
	case implAVX2:
		n = len(v) &^ 15
		switch dt {
		case dtype.BFloat16:
			narrowBF16AVX2(v[:n], dst[:n*size])
		case dtype.Float16:
			narrowF16AVX2(v[:n], dst[:n*size])
		default:
			narrowF32AVX2(v[:n], dst[:n*size])
		}
	}
	storeBlock(dt, dst, n, v[n:])
}

// scaleInt8 sets dst[i] = float32(int8(q[i])) * s for the len(dst)
// elements of q.
func scaleInt8(q []byte, s float32, dst []float32) {
	var n int
	switch impl {
	case implAVX512:
		n = len(dst) &^ 31
		scaleInt8AVX512(q[:n], s, dst[:n])
	case implAVX2:
		n = len(dst) &^ 15
		scaleInt8AVX2(q[:n], s, dst[:n])
	}
	scaleInt8Generic(q[n:], s, dst[n:])
}

// mulInt8 sets dst[i] = float32(int8(q[i])) * s[i] for the len(dst)
// elements of q and s.
func mulInt8(q []byte, s, dst []float32) {
	var n int
	switch impl {
	case implAVX512:
		n = len(dst) &^ 31
		mulInt8AVX512(q[:n], s[:n], dst[:n])
	case implAVX2:
		n = len(dst) &^ 15
		mulInt8AVX2(q[:n], s[:n], dst[:n])
	}
	mulInt8Generic(q[n:], s[n:], dst[n:])
}
