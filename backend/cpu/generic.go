package cpu

import (
	"encoding/binary"
	"math"

	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/quant"
)

// The portable kernels. They work on blocks of float32 so the per-dtype
// switches run once per block, not per element, and they are the reference
// the assembly is tested against. Element access goes through
// encoding/binary because inputs (memory-mapped checkpoints, say) need not
// be aligned.

const block = 256

// infBits is the abs-bits value at and above which an element is NaN or an
// infinity.
func infBits(dt dtype.DType) uint32 {
	switch dt {
	case dtype.Float16:
		return 0x7c00
	case dtype.BFloat16:
		return 0x7f80
	}
	return 0x7f800000
}

// maxLanes returns the lane-wise maximum of m and v, words of lanes whose
// top bits (top) are clear, each lane shift+1 bits wide: in each lane,
// top + v - m keeps its top bit exactly where v >= m, and borrows from no
// other lane.
func maxLanes(m, v, top uint64, shift uint) uint64 {
	h := ((v | top) - m) & top
	mask := h | (h - h>>shift) // all of each lane where v >= m
	return m ^ ((m ^ v) & mask)
}

// widenBits turns an abs-bits value of dt into the float32 it encodes.
func widenBits(dt dtype.DType, bits uint32) float32 {
	switch dt {
	case dtype.Float16:
		return dtype.Float16ToFloat32(uint16(bits))
	case dtype.BFloat16:
		return dtype.BFloat16ToFloat32(uint16(bits))
	}
	return math.Float32frombits(bits)
}

// absMaxBitsGeneric returns the largest |x| of src as dt's bits with the
// sign cleared. Clearing the sign makes the float order the unsigned integer
// order, and puts NaN and infinity at or above infBits.
func absMaxBitsGeneric(dt dtype.DType, src []byte) uint32 {
	// Words of 32 bytes as four running lane-wise maxima (maxLanes), then
	// eight bytes at a time, the sign bits cleared in one AND, then the
	// rest one element at a time. (The two widths' loops are written out:
	// one helper taking the lane width ran 1.23 times as long.)
	var m uint32
	i := 0
	if dt.Size() == 2 {
		const bits, top = 0x7fff7fff7fff7fff, 0x8000800080008000
		var m0, m1, m2, m3 uint64
		for ; i+32 <= len(src); i += 32 {
			w := src[i : i+32 : i+32]
			m0 = maxLanes(m0, binary.LittleEndian.Uint64(w)&bits, top, 15)
			m1 = maxLanes(m1, binary.LittleEndian.Uint64(w[8:])&bits, top, 15)
			m2 = maxLanes(m2, binary.LittleEndian.Uint64(w[16:])&bits, top, 15)
			m3 = maxLanes(m3, binary.LittleEndian.Uint64(w[24:])&bits, top, 15)
		}
		v := maxLanes(maxLanes(m0, m1, top, 15), maxLanes(m2, m3, top, 15), top, 15)
		m = max(uint32(v&0xffff), uint32(v>>16&0xffff), uint32(v>>32&0xffff), uint32(v>>48))
		for ; i+8 <= len(src); i += 8 {
			v := binary.LittleEndian.Uint64(src[i:]) & 0x7fff7fff7fff7fff
			m = max(m, uint32(v&0xffff), uint32(v>>16&0xffff), uint32(v>>32&0xffff), uint32(v>>48))
		}
		for ; i+1 < len(src); i += 2 {
			m = max(m, uint32(binary.LittleEndian.Uint16(src[i:]))&0x7fff)
		}
		return m
	}
	const bits, top = 0x7fffffff7fffffff, 0x8000000080000000
	var m0, m1, m2, m3 uint64
	for ; i+32 <= len(src); i += 32 {
		w := src[i : i+32 : i+32]
		m0 = maxLanes(m0, binary.LittleEndian.Uint64(w)&bits, top, 31)
		m1 = maxLanes(m1, binary.LittleEndian.Uint64(w[8:])&bits, top, 31)
		m2 = maxLanes(m2, binary.LittleEndian.Uint64(w[16:])&bits, top, 31)
		m3 = maxLanes(m3, binary.LittleEndian.Uint64(w[24:])&bits, top, 31)
	}
	v := maxLanes(maxLanes(m0, m1, top, 31), maxLanes(m2, m3, top, 31), top, 31)
	m = max(uint32(v), uint32(v>>32))
	for ; i+8 <= len(src); i += 8 {
		v := binary.LittleEndian.Uint64(src[i:]) & 0x7fffffff7fffffff
		m = max(m, uint32(v), uint32(v>>32))
	}
	for ; i+3 < len(src); i += 4 {
		m = max(m, binary.LittleEndian.Uint32(src[i:])&0x7fffffff)
	}
	return m
}

// widenBlock loads n = len(dst) elements of dt starting at element off.
func widenBlock(dt dtype.DType, src []byte, off int, dst []float32) {
	switch dt {
	case dtype.Float32:
		b := src[4*off : 4*(off+len(dst))]
		for j := range dst {
			dst[j] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*j:]))
		}
	case dtype.Float16:
		b := src[2*off : 2*(off+len(dst))]
		for j := range dst {
			dst[j] = widenF16(binary.LittleEndian.Uint16(b[2*j:]))
		}
	case dtype.BFloat16:
		b := src[2*off : 2*(off+len(dst))]
		for j := range dst {
			dst[j] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(b[2*j:])) << 16)
		}
	case dtype.Int8:
		b := src[off : off+len(dst)]
		for j := range dst {
			dst[j] = float32(int8(b[j]))
		}
	}
}

// roundBlock rounds each value to dt in place.
func roundBlock(dt dtype.DType, v []float32) {
	switch dt {
	case dtype.Float16:
		for j, f := range v {
			v[j] = widenF16(float16Bits(f))
		}
	case dtype.BFloat16:
		for j, f := range v {
			v[j] = dtype.BFloat16ToFloat32(dtype.BFloat16FromFloat32(f))
		}
	}
}

// storeBlock writes v, already rounded to dt, as elements off... of dst.
func storeBlock(dt dtype.DType, dst []byte, off int, v []float32) {
	switch dt {
	case dtype.Float32:
		b := dst[4*off : 4*(off+len(v))]
		for j, f := range v {
			binary.LittleEndian.PutUint32(b[4*j:], math.Float32bits(f))
		}
	case dtype.Float16:
		b := dst[2*off : 2*(off+len(v))]
		for j, f := range v {
			binary.LittleEndian.PutUint16(b[2*j:], float16Bits(f))
		}
	case dtype.BFloat16:
		b := dst[2*off : 2*(off+len(v))]
		for j, f := range v {
			binary.LittleEndian.PutUint16(b[2*j:], dtype.BFloat16FromFloat32(f))
		}
	}
}

// quantizeGeneric computes q = int8(round(rT(x / t))) for the elements of
// src, whose first element has flat index base (for the noise), with
// deterministic rounding when seed <= 0: a long run of a 16-bit dtype
// through a table (quantizeLookup), others element by element.
func quantizeGeneric(dt dtype.DType, src []byte, dst []byte, t float32, seed int64, base uint64) {
	if len(dst) == 0 {
		return // the common empty tail
	}
	switch {
	case seed > 0:
		quantizeStochastic(dt, src, dst, t, seed, base)
	case dt.Size() == 2 && len(dst) >= quantTableMin:
		quantizeLookup(dt, src, dst, t)
	default:
		quantizeDirect(dt, src, dst, t)
	}
}

// quantizeGenericHinted is quantizeGeneric taking hints.bounded: where it
// holds for float16 or bfloat16 and no table serves, the lean loop
// (quantizeBounded). Same process, row-wise [8352, 3840], purego:
// bfloat16 0.77-0.83 of the time, float16 0.82-0.86; float32, which has
// no rounding to T to save, 1.02-1.05, so it keeps quantizeDirect.
func quantizeGenericHinted(dt dtype.DType, src []byte, dst []byte, t float32, seed int64, base uint64, h hints) {
	if h.bounded && seed <= 0 && dt.Size() == 2 && len(dst) < quantTableMin {
		quantizeBounded(dt, src, dst, t)
		return
	}
	quantizeGeneric(dt, src, dst, t, seed, base)
}

// quantizeDirect is quantizeGeneric without noise, element by element in
// one fused loop per dtype (a block buffer's second and third passes over
// memory cost more than the arithmetic).
func quantizeDirect(dt dtype.DType, src []byte, dst []byte, t float32) {
	// Four elements a step, loaded and stored as whole words: slicing src
	// and dst per element costs as much as the arithmetic.
	switch dt {
	case dtype.BFloat16:
		src = src[:2*len(dst)]
		for ; len(dst) >= 4; src, dst = src[8:], dst[4:] {
			v := binary.LittleEndian.Uint64(src)
			binary.LittleEndian.PutUint32(dst, pack4(
				roundClamped(roundBF16(math.Float32frombits(uint32(v)<<16)/t)),
				roundClamped(roundBF16(math.Float32frombits(uint32(v>>16)<<16)/t)),
				roundClamped(roundBF16(math.Float32frombits(uint32(v>>32)<<16)/t)),
				roundClamped(roundBF16(math.Float32frombits(uint32(v>>48)<<16)/t))))
		}
		for j := range dst {
			y := math.Float32frombits(uint32(binary.LittleEndian.Uint16(src[2*j:]))<<16) / t
			dst[j] = byte(roundClamped(roundBF16(y)))
		}
	case dtype.Float16:
		src = src[:2*len(dst)]
		for ; len(dst) >= 4; src, dst = src[8:], dst[4:] {
			v := binary.LittleEndian.Uint64(src)
			binary.LittleEndian.PutUint32(dst, pack4(
				roundClamped(roundF16Normal(widenF16(uint16(v))/t)),
				roundClamped(roundF16Normal(widenF16(uint16(v>>16))/t)),
				roundClamped(roundF16Normal(widenF16(uint16(v>>32))/t)),
				roundClamped(roundF16Normal(widenF16(uint16(v>>48))/t))))
		}
		for j := range dst {
			y := widenF16(binary.LittleEndian.Uint16(src[2*j:])) / t
			dst[j] = byte(roundClamped(roundF16Normal(y)))
		}
	default:
		src = src[:4*len(dst)]
		for ; len(dst) >= 4; src, dst = src[16:], dst[4:] {
			a, b := binary.LittleEndian.Uint64(src), binary.LittleEndian.Uint64(src[8:16])
			binary.LittleEndian.PutUint32(dst, pack4(
				roundClamped(math.Float32frombits(uint32(a))/t),
				roundClamped(math.Float32frombits(uint32(a>>32))/t),
				roundClamped(math.Float32frombits(uint32(b))/t),
				roundClamped(math.Float32frombits(uint32(b>>32))/t)))
		}
		for j := range dst {
			y := math.Float32frombits(binary.LittleEndian.Uint32(src[4*j:])) / t
			dst[j] = byte(roundClamped(y))
		}
	}
}

// quantizeBounded is quantizeDirect for float16 or bfloat16 where every
// quotient is below 2^15 in magnitude (hints.bounded): rT by Veltkamp's
// split, three float operations (TestVeltkamp proves it equal to rT
// there, or both 0 once rounded to an integer), and the clamp on the
// integer, which commutes with rounding.
func quantizeBounded(dt dtype.DType, src []byte, dst []byte, t float32) {
	switch dt {
	case dtype.BFloat16:
		src = src[:2*len(dst)]
		for ; len(dst) >= 4; src, dst = src[8:], dst[4:] {
			v := binary.LittleEndian.Uint64(src)
			binary.LittleEndian.PutUint32(dst, pack4(
				roundSmall(splitRound(math.Float32frombits(uint32(v)<<16)/t, splitBF16)),
				roundSmall(splitRound(math.Float32frombits(uint32(v>>16)<<16)/t, splitBF16)),
				roundSmall(splitRound(math.Float32frombits(uint32(v>>32)<<16)/t, splitBF16)),
				roundSmall(splitRound(math.Float32frombits(uint32(v>>48)<<16)/t, splitBF16))))
		}
	case dtype.Float16:
		src = src[:2*len(dst)]
		for ; len(dst) >= 4; src, dst = src[8:], dst[4:] {
			v := binary.LittleEndian.Uint64(src)
			binary.LittleEndian.PutUint32(dst, pack4(
				roundSmall(splitRound(widenF16(uint16(v))/t, splitF16)),
				roundSmall(splitRound(widenF16(uint16(v>>16))/t, splitF16)),
				roundSmall(splitRound(widenF16(uint16(v>>32))/t, splitF16)),
				roundSmall(splitRound(widenF16(uint16(v>>48))/t, splitF16))))
		}
	}
	quantizeDirect(dt, src, dst, t) // the last few
}

// splitBF16 and splitF16 are Veltkamp's constants 2^(24-p) + 1 for the p
// significant bits of bfloat16 and float16.
const splitBF16, splitF16 = 1<<16 + 1, 1<<13 + 1

// splitRound is y rounded to the p significant bits of c = 2^(24-p) + 1
// by Veltkamp's split (TestVeltkamp proves it with splitBF16 and
// splitF16); the conversions keep the compiler from fusing the
// multiplication into an addition.
func splitRound(y, c float32) float32 {
	g := float32(y * c)
	d := float32(y - g)
	return float32(g + d)
}

// roundSmall is roundClamped for |y| < 2^22: rounding half to even by
// adding and subtracting 1.5·2^23, then the clamp on the integer.
func roundSmall(y float32) int8 {
	const magic = 0x1.8p23
	return int8(min(max(int32((y+magic)-magic), -128), 127))
}

// pack4 packs four int8 values into a little-endian word.
func pack4(a, b, c, d int8) uint32 {
	return uint32(uint8(a)) | uint32(uint8(b))<<8 | uint32(uint8(c))<<16 | uint32(uint8(d))<<24
}

// widenF16 is dtype.Float16ToFloat32 in few enough steps to inline:
// normal numbers and infinities or NaN rebias the exponent on the bits,
// zeros and subnormal numbers are their significand times 2^-24
// (TestWidenF16 compares the two on every pattern).
func widenF16(h uint16) float32 {
	s, a := uint32(h&0x8000)<<16, uint32(h&0x7fff)
	switch {
	case a < 0x400:
		return math.Float32frombits(s | math.Float32bits(float32(a)*0x1p-24))
	case a >= 0x7c00:
		return math.Float32frombits(s | (a<<13 + (255-31)<<23))
	}
	return math.Float32frombits(s | (a<<13 + (127-15)<<23))
}

// float16Bits is dtype.Float16FromFloat32 with a short path for results
// in float16's normal range and beyond it: round to nearest even on the
// bits, rebias the exponent, and let a carry past the largest finite
// value become infinity, as it does in the encoding. Zeros, subnormal
// results, NaN and values from 65536 up take dtype's path (TestRoundBits
// compares the two on every class of bit pattern).
func float16Bits(f float32) uint16 {
	b := math.Float32bits(f)
	a := b & 0x7fffffff
	if a-0x38800000 >= 0x47800000-0x38800000 { // outside [2^-14, 65536)
		return dtype.Float16FromFloat32(f)
	}
	a += 0xfff + (a>>13)&1
	return uint16(b>>16)&0x8000 | uint16((a-0x38000000)>>13)
}

// roundF16Normal rounds y to float16's 11 significant bits (nearest, ties
// to even) on its bits, as roundBF16 does to 8, for y that is not NaN. It
// is rT(y) for float16 where y is in float16's normal range and rT(y)
// finite; elsewhere it is not, but quantizes to the same integer: below
// 2^-14 in magnitude both round to 0, and where rT(y) is infinite both
// are beyond the int8 range and clamp alike (TestRoundBits).
func roundF16Normal(y float32) float32 {
	b := math.Float32bits(y)
	b += 0xfff + (b>>13)&1
	return math.Float32frombits(b &^ 0x1fff)
}

// roundBF16 is y rounded to bfloat16 (nearest, ties to even) as float32,
// for y that is not NaN: dtype.BFloat16FromFloat32 without its NaN case.
func roundBF16(y float32) float32 {
	b := math.Float32bits(y)
	b += 0x7fff + (b>>16)&1
	return math.Float32frombits(b &^ 0xffff)
}

// quantizeStochastic is quantizeGeneric with stochastic rounding: floor of
// rT(y + rT(u)), u the noise of each element's flat index.
func quantizeStochastic(dt dtype.DType, src []byte, dst []byte, t float32, seed int64, base uint64) {
	var buf, noise [block]float32
	for off := 0; off < len(dst); off += block {
		v := buf[:min(block, len(dst)-off)]
		quotientBlock(dt, src, off, t, v)
		u := noise[:len(v)]
		for j := range u {
			u[j] = quant.Noise(seed, base+uint64(off+j))
		}
		roundBlock(dt, u)
		for j := range v {
			v[j] += u[j]
		}
		roundBlock(dt, v)
		out := dst[off : off+len(v)]
		for j, y := range v {
			out[j] = byte(quant.Floor(y))
		}
	}
}

// quotientBlock sets v to the contract's step 4, y = rT(x / t), for the
// len(v) elements of src starting at element off.
func quotientBlock(dt dtype.DType, src []byte, off int, t float32, v []float32) {
	widenBlock(dt, src, off, v)
	for j := range v {
		v[j] /= t
	}
	roundBlock(dt, v)
}

// roundClamped is quant.RoundHalfEven for y that is not NaN: clamping
// first keeps y small enough that adding 1.5*2^23 rounds it to an integer
// (ties to even) in float32 arithmetic. Clamping to integer bounds
// commutes with rounding, so the result is the same. (Comparisons, not
// min and max, which also order NaN and signed zeros.)
func roundClamped(y float32) int8 {
	if y > 127 {
		y = 127
	} else if y < -128 {
		y = -128
	}
	const magic = 0x1.8p23
	return int8(int32((y + magic) - magic))
}

// dequantizeGeneric computes dst = rOut(f32(q) * s) for one run of q with a
// single scale.
func dequantizeGeneric(out dtype.DType, q []byte, s float32, dst []byte) {
	if len(q) >= dequantTableMin {
		dequantizeLookup(out, q, s, dst)
		return
	}
	dequantizeDirect(out, q, s, dst)
}

// dequantizeDirect is dequantizeGeneric one element at a time, one fused
// loop per output dtype.
func dequantizeDirect(out dtype.DType, q []byte, s float32, dst []byte) {
	switch out {
	case dtype.BFloat16:
		dst = dst[:2*len(q)]
		for j, b := range q {
			binary.LittleEndian.PutUint16(dst[2*j:], dtype.BFloat16FromFloat32(float32(int8(b))*s))
		}
	case dtype.Float16:
		dst = dst[:2*len(q)]
		for j, b := range q {
			binary.LittleEndian.PutUint16(dst[2*j:], float16Bits(float32(int8(b))*s))
		}
	default:
		dst = dst[:4*len(q)]
		for j, b := range q {
			binary.LittleEndian.PutUint32(dst[4*j:], math.Float32bits(float32(int8(b))*s))
		}
	}
}

// dequantizeFullGeneric computes dst = rOut(f32(q) * f32(scale)) with a scale
// of q's shape. It returns the index of the first scale that is not a
// finite number > 0, checked as each block of scales is read, stopping
// there, or -1.
func dequantizeFullGeneric(out dtype.DType, q []byte, sdt dtype.DType, scale []byte, dst []byte) int {
	var buf, sb [block]float32
	for off := 0; off < len(q); off += block {
		v := buf[:min(block, len(q)-off)]
		s := sb[:len(v)]
		widenBlock(dtype.Int8, q, off, v)
		widenBlock(sdt, scale, off, s)
		for j := range v {
			if !(s[j] > 0 && s[j] <= math.MaxFloat32) {
				return off + j
			}
			v[j] *= s[j]
		}
		storeBlock(out, dst, off, v)
	}
	return -1
}
