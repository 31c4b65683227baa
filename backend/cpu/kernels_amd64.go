//go:build amd64 && !purego

package cpu

import (
	"unsafe"

	"github.com/klauspost/cpuid/v2"
	"golang.org/x/sys/cpu"

	"github.com/gokitchen/kitchen/dtype"
)

// The choice of kernel set, and the dispatch of the quantize, dequantize,
// widening, narrowing and rotation kernels (see _asm/main.go); the int8
// products' is in linear_amd64.go.

// impl is the kernel set in use: the best this CPU runs, chosen once.
// Tests lower it to check every set against the Go kernels. FMA is
// deliberately unused (see _asm/main.go), so it is not required.
var impl = bestImpl()

// vnni is whether the int8 products use the kernel set's VNNI form:
// AVX512-VNNI with AVX-512 (VPDPWSSD in the one-row kernels: the same bits
// as VPMADDWD and VPADDD in one instruction; VPDPBUSD on quad panels, see
// quadPanels), AVX-VNNI with AVX2 (VPDPBUSD on quad panels), chosen once
// with impl. Tests clear it to check both forms.
var vnni = hasVNNI(impl)

// zen5 is whether this is AMD's family 1Ah (Zen 5), where the AVX-512
// row-wise quantize pass of 16-bit input and the dequantize passes store
// ordinarily (see rowsStreaming and dequantStreaming).
var zen5 = cpuid.CPU.VendorID == cpuid.AMD && cpuid.CPU.Family == 0x1a

// zen3 is whether this is a Zen 3: AMD's family 19h, models 00h-0Fh and
// 20h-5Fh (Zen 4 is the same family's models 10h-1Fh, 60h-7Fh and
// A0h-AFh), where the int8 products' one-row, dot and cols paths take
// other forms and bounds (gemv1Ahead, dotMinFor, colsMax). The processor's own family and
// model decide, not the kernel set in use nor the features a hypervisor
// shows (GODEBUG can lower the one, a hypervisor hide AVX-512 from a Zen 4).
var zen3 = cpuid.CPU.VendorID == cpuid.AMD && cpuid.CPU.Family == 0x19 &&
	(cpuid.CPU.Model <= 0x0f || cpuid.CPU.Model >= 0x20 && cpuid.CPU.Model <= 0x5f)

// hasVNNI reports whether this CPU has kernel set i's VNNI form.
func hasVNNI(i int) bool {
	switch i {
	case implAVX512:
		return cpu.X86.HasAVX512VNNI
	case implAVX2:
		return cpu.X86.HasAVXVNNI
	}
	return false
}

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

// The quantize and dequantize kernels of each kernel set, by dtype.
var (
	quantizeKernels = [...][3]func(src, dst []byte, t float32, ahead int, nt bool){
		implAVX2:   {quantizeBF16AVX2, quantizeF16AVX2, quantizeF32AVX2},
		implAVX512: {quantizeBF16AVX512, quantizeF16AVX512, quantizeF32AVX512},
	}
	// quantizeBoundedKernels are quantizeKernels without the clamp, for
	// quotients known to be below 2^15 in magnitude (hints.bounded).
	quantizeBoundedKernels = [...][3]func(src, dst []byte, t float32, ahead int, nt bool){
		implAVX2:   {quantizeBoundedBF16AVX2, quantizeBoundedF16AVX2, quantizeBoundedF32AVX2},
		implAVX512: {quantizeBoundedBF16AVX512, quantizeBoundedF16AVX512, quantizeBoundedF32AVX512},
	}
	// quantizeNextKernels are AVX2's quantizeBoundedKernels that also
	// return the abs-max bits of the next row (quantizeRowNext). AVX-512
	// has none: it measured no faster than prefetching (see _asm's
	// quantForm).
	quantizeNextKernels = [3]func(src, dst []byte, t float32, next []byte, ahead int, nt bool) uint32{
		quantizeNextBF16AVX2, quantizeNextF16AVX2, quantizeNextF32AVX2,
	}
	quantizeSRKernels = [...][3]func(src, dst []byte, t float32, k0 uint64, ahead int, nt bool){
		implAVX2:   {quantizeSRBF16AVX2, quantizeSRF16AVX2, quantizeSRF32AVX2},
		implAVX512: {quantizeSRBF16AVX512, quantizeSRF16AVX512, quantizeSRF32AVX512},
	}
	dequantizeKernels = [...][3]func(q []byte, s float32, dst []byte, nt bool){
		implAVX2:   {dequantizeBF16AVX2, dequantizeF16AVX2, dequantizeF32AVX2},
		implAVX512: {dequantizeBF16AVX512, dequantizeF16AVX512, dequantizeF32AVX512},
	}
)

// kernelIndex is dt's column in the kernel tables.
func kernelIndex(dt dtype.DType) int {
	switch dt {
	case dtype.BFloat16:
		return 0
	case dtype.Float16:
		return 1
	}
	return 2
}

// vectorBytes is the register size of the kernel set in use, the
// alignment its non-temporal stores need.
func vectorBytes() int {
	if impl == implAVX512 {
		return 64
	}
	return 32
}

// alignHead returns how many elements of size bytes at the start of dst
// come before the first address aligned to align bytes, or -1 if no
// element is aligned so.
func alignHead(dst []byte, size, align int) int {
	if len(dst) == 0 {
		return 0
	}
	mis := int(uintptr(unsafe.Pointer(&dst[0])) % uintptr(align))
	if mis == 0 {
		return 0
	}
	if (align-mis)%size != 0 {
		return -1
	}
	return min((align-mis)/size, len(dst)/size)
}

func quantize(dt dtype.DType, src, dst []byte, t float32, seed int64, base uint64) {
	quantizeHinted(dt, src, dst, t, seed, base, hints{})
}

// kernelDivisor is what the round-half-even quantize kernels take for the
// divisor t: t itself for float32, its reciprocal for bfloat16 and float16,
// which they multiply by (see _asm/main.go: the same integers, for t a
// value of the dtype, as divisor returns and every caller passes).
func kernelDivisor(dt dtype.DType, t float32) float32 {
	if dt == dtype.Float32 {
		return t
	}
	return 1 / t
}

// quantizeHinted is quantize with memory hints. Stochastic rounding runs
// in runs over which the low 32 bits of the noise's k (index plus seed)
// do not wrap, as its kernels require; each run's whole blocks go to
// the kernel, the rest to the Go kernel, and with h.nt each run's head
// before an aligned output too (the non-temporal stores fault on a
// misaligned one).
func quantizeHinted(dt dtype.DType, src, dst []byte, t float32, seed int64, base uint64, h hints) {
	if impl == implGeneric {
		quantizeGenericHinted(dt, src, dst, t, seed, base, h)
		return
	}
	size := dt.Size()
	block := vectorBytes() // four registers of lanes: one of int8
	kernel := quantizeKernels[impl][kernelIndex(dt)]
	if h.bounded {
		kernel = quantizeBoundedKernels[impl][kernelIndex(dt)]
	}
	sr := quantizeSRKernels[impl][kernelIndex(dt)]
	for len(dst) > 0 {
		n := len(dst)
		if seed > 0 {
			n = int(min(uint64(n), 1<<32-uint64(uint32(base+uint64(seed)))))
		}
		// Each run's non-temporal stores need an aligned start: a run
		// after a wrap of the noise index can start anywhere.
		if h.nt {
			head := min(alignHead(dst, 1, vectorBytes()), n)
			quantizeGeneric(dt, src[:head*size], dst[:head], t, seed, base)
			src, dst, base, n = src[head*size:], dst[head:], base+uint64(head), n-head
		}
		if m := n &^ (block - 1); m > 0 {
			if seed > 0 {
				sr(src[:m*size], dst[:m], t, base+uint64(seed), h.ahead, h.nt)
			} else {
				kernel(src[:m*size], dst[:m], kernelDivisor(dt, t), h.ahead, h.nt)
			}
			quantizeGeneric(dt, src[m*size:n*size], dst[m:n], t, seed, base+uint64(m))
		} else {
			quantizeGeneric(dt, src[:n*size], dst[:n], t, seed, base)
		}
		src, dst, base = src[n*size:], dst[n:], base+uint64(n)
	}
}

// quantizeRowNext quantizes src into dst by t, rounding half to even,
// every quotient below 2^15 in magnitude (hints.bounded), and returns
// absMaxBits of next, a row of as many elements as src. The AVX2 kernels
// read next while they quantize src (h.ahead is then the prefetch distance
// past next); the other sets quantize src, the AVX-512 kernels
// prefetching next, and then read it.
func quantizeRowNext(dt dtype.DType, src, dst []byte, t float32, next []byte, h hints) uint32 {
	if impl != implAVX2 {
		// Quantize (the AVX-512 kernels prefetch the next row, which
		// follows src in the row-wise pass; the Go kernels ignore hints),
		// then read it.
		h.bounded, h.ahead = true, len(src)
		quantizeHinted(dt, src, dst, t, 0, 0, h)
		return absMaxBits(dt, next)
	}
	size := dt.Size()
	head := 0
	if h.nt {
		head = alignHead(dst, 1, vectorBytes())
	}
	m := head + (len(dst)-head)&^(vectorBytes()-1)
	var bits uint32
	if m > head {
		bits = quantizeNextKernels[kernelIndex(dt)](src[head*size:m*size], dst[head:m], kernelDivisor(dt, t), next[head*size:m*size], h.ahead, h.nt)
	}
	quantizeGeneric(dt, src[:head*size], dst[:head], t, 0, 0)
	quantizeGeneric(dt, src[m*size:], dst[m:], t, 0, 0)
	return max(bits, absMaxBitsGeneric(dt, next[:head*size]), absMaxBitsGeneric(dt, next[m*size:]))
}

func dequantize(out dtype.DType, q []byte, s float32, dst []byte) {
	dequantizeHinted(out, q, s, dst, false)
}

// dequantizeHinted is dequantize, storing non-temporally if nt (where
// the output can be aligned; parallelFor, or a caller outside it, then
// runs sfence before it hands the output on, see hints). s must be
// finite, as the operations check; only the Go kernel gives NaN products
// the same bits as a scalar conversion.
func dequantizeHinted(out dtype.DType, q []byte, s float32, dst []byte, nt bool) {
	if impl == implGeneric {
		dequantizeGeneric(out, q, s, dst)
		return
	}
	size := out.Size()
	if nt {
		if head := alignHead(dst[:len(q)*size], size, vectorBytes()); head < 0 {
			nt = false
		} else {
			dequantizeGeneric(out, q[:head], s, dst[:head*size])
			q, dst = q[head:], dst[head*size:]
		}
	}
	block := 2 * vectorBytes() / 4 // two registers of lanes
	if impl == implAVX2 && out == dtype.Float32 {
		block *= 2 // four (see _asm's dequantize)
	}
	n := len(q) &^ (block - 1)
	if n > 0 {
		dequantizeKernels[impl][kernelIndex(out)](q[:n], s, dst[:n*size], nt)
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

// squaresKernel adds the values of x and d to acc as SquaredError says
// with the kernel set's assembly and returns how many it took: all of d's
// (len(d) a multiple of 4·squareLanes), or none with the generic set.
func squaresKernel(dt dtype.DType, x, d []byte, acc *squareSums) int {
	if impl == implGeneric || len(d) == 0 {
		return 0
	}
	k := [...]func([]byte, []byte, *squareSums){
		dtype.BFloat16: squaresBF16AVX2, dtype.Float16: squaresF16AVX2, dtype.Float32: squaresF32AVX2,
	}
	if impl == implAVX512 {
		k = [...]func([]byte, []byte, *squareSums){
			dtype.BFloat16: squaresBF16AVX512, dtype.Float16: squaresF16AVX512, dtype.Float32: squaresF32AVX512,
		}
	}
	k[dt](x, d, acc)
	return len(d) / 4
}

// squaresQKernel adds the values of x and of the dequantized q (float32(q)·s)
// to acc as squaresKernel does and returns how many it took: all of q's
// (len(q) a multiple of squareLanes), or none with the generic set.
func squaresQKernel(dt dtype.DType, x, q []byte, s float32, acc *squareSums) int {
	if impl == implGeneric || len(q) == 0 {
		return 0
	}
	k := [...]func([]byte, []byte, float32, *squareSums){
		dtype.BFloat16: squaresQBF16AVX2, dtype.Float16: squaresQF16AVX2, dtype.Float32: squaresQF32AVX2,
	}
	if impl == implAVX512 {
		k = [...]func([]byte, []byte, float32, *squareSums){
			dtype.BFloat16: squaresQBF16AVX512, dtype.Float16: squaresQF16AVX512, dtype.Float32: squaresQF32AVX512,
		}
	}
	k[dt](x, q, s, acc)
	return len(q)
}
