//go:build amd64 && !purego

package cpu

import (
	"golang.org/x/sys/cpu"

	"github.com/gokitchen/kitchen/dtype"
)

//go:generate sh -c "cd _asm && go run . -out ../kernels_amd64.s -stubs ../kernels_amd64_stubs.go -pkg cpu"

// hasAsm reports whether this CPU runs the assembly kernels: AVX2 for the
// integer and float lanes, F16C for float16. FMA is deliberately unused (see
// _asm/main.go), so it is not required.
var hasAsm = cpu.X86.HasAVX2 && cpu.X86.HasF16C

func absMaxBits(dt dtype.DType, src []byte) uint32 {
	if !hasAsm {
		return absMaxBitsGeneric(dt, src)
	}
	n := len(src) &^ 63
	var m uint32
	if dt.Size() == 2 {
		m = absMaxBits16AVX2(src[:n])
	} else {
		m = absMaxBits32AVX2(src[:n])
	}
	return max(m, absMaxBitsGeneric(dt, src[n:]))
}

func quantize(dt dtype.DType, src, dst []byte, t float32, seed int64, base uint64) {
	if !hasAsm || seed > 0 {
		// Stochastic rounding stays in Go: its hash is not vectorised yet.
		quantizeGeneric(dt, src, dst, t, seed, base)
		return
	}
	n := len(dst) &^ 31
	size := dt.Size()
	switch dt {
	case dtype.BFloat16:
		quantizeBF16AVX2(src[:n*size], dst[:n], t)
	case dtype.Float16:
		quantizeF16AVX2(src[:n*size], dst[:n], t)
	default:
		quantizeF32AVX2(src[:n*size], dst[:n], t)
	}
	quantizeGeneric(dt, src[n*size:], dst[n:], t, seed, base+uint64(n))
}

func dequantize(out dtype.DType, q []byte, s float32, dst []byte) {
	if !hasAsm {
		dequantizeGeneric(out, q, s, dst)
		return
	}
	n := len(q) &^ 15
	size := out.Size()
	switch out {
	case dtype.BFloat16:
		dequantizeBF16AVX2(q[:n], s, dst[:n*size])
	case dtype.Float16:
		dequantizeF16AVX2(q[:n], s, dst[:n*size])
	default:
		dequantizeF32AVX2(q[:n], s, dst[:n*size])
	}
	dequantizeGeneric(out, q[n:], s, dst[n*size:])
}
