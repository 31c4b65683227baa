// Command _asm generates kernels_amd64.s, the AVX2 + F16C and AVX-512
// kernels of the cpu backend, with avo. It lives in its own module so avo is
// never a dependency of kitchen. Regenerate from this folder with
//
//	go generate
//
// The kernels follow the INT8 contract exactly (see docs/CONTRACT.md):
//
//   - abs-max: the largest |x| found as the unsigned maximum of the element
//     bits with the sign bit cleared, which orders finite values like the
//     floats and puts NaN and infinity above every finite value;
//   - quantize: y = rT(x / t) with a true IEEE division (VDIVPS, never a
//     multiply by 1/t, which rounds differently), the rounding to T done by
//     F16C for float16 and by integer round-to-nearest-even on the bits for
//     bfloat16; then clamped to [-128, 127] (which commutes with rounding to
//     an integer, and keeps the conversion in range), converted with the
//     default round-to-nearest-even mode, and narrowed with saturation;
//   - dequantize: out = rOut(float32(q) * s), one multiply, rounded as above.
//
// Each kernel is written once and emitted for both vector widths: AVX2 with
// 256-bit registers and AVX-512 with 512-bit ones (see width). The AVX-512
// forms do the same arithmetic on twice the lanes.
//
// No kernel uses FMA: the contract has no multiply-add, and fusing would
// skip a rounding step. Callers pass whole blocks (the unit is in each
// kernel's doc) and finish the tail in Go.
package main

//go:generate go run . -out ../kernels_amd64.s -stubs ../kernels_amd64_stubs.go -pkg cpu

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// width is one vector width: its registers and the instructions whose names
// or forms differ between AVX2 and AVX-512. Each kernel generator takes one
// and emits the same algorithm for it.
type width struct {
	name  string // the kernel name suffix
	bytes int    // register size; it holds bytes/4 float32 lanes
	reg   func() VecVirtual

	and, or, xor func(a, b, dst Op)

	// broadcast fills a new register with the 32-bit constant c.
	broadcast func(c uint32) VecVirtual

	// mask returns a new register for a per-lane condition (a vector of
	// all-ones lanes for AVX2, an opmask for AVX-512), and blend copies
	// the lanes of src where mask holds into dst.
	mask  func() Register
	blend func(mask, src, dst Op)

	// narrowStore says the width narrows 32-bit lanes straight to memory:
	// AVX512F's VPMOVSDB (saturating to int8) and VPMOVDW (truncating to
	// 16 bits) do so one register at a time. AVX2 has no such store: it
	// packs pairs of registers, which works within 128-bit lanes, and then
	// permutes the result back into order.
	narrowStore bool
}

var (
	avx2 = width{
		name: "AVX2", bytes: 32, reg: YMM,
		and: VPAND, or: VPOR, xor: VPXOR,
		broadcast: broadcast32,
		mask:      func() Register { return YMM() },
		blend:     func(mask, src, dst Op) { VBLENDVPS(mask, src, dst, dst) },
	}
	avx512 = width{
		name: "AVX512", bytes: 64, reg: ZMM,
		and:         func(a, b, dst Op) { VPANDD(a, b, dst) },
		or:          func(a, b, dst Op) { VPORD(a, b, dst) },
		xor:         func(a, b, dst Op) { VPXORD(a, b, dst) },
		broadcast:   broadcast32z,
		mask:        func() Register { return K() },
		blend:       func(mask, src, dst Op) { VMOVDQA32(src, mask, dst) }, // merge-masked move
		narrowStore: true,
	}
)

// lanes is the number of 32-bit lanes in a register.
func (w width) lanes() int { return w.bytes / 4 }

// half is the lower half of v: where F16C packs the float16 forms of v's
// float32 lanes.
func (w width) half(v VecVirtual) Register {
	if w.bytes == 64 {
		return v.AsY()
	}
	return v.AsX()
}

// broadcastParam fills a new register with a float32 parameter.
func (w width) broadcastParam(name string) VecVirtual {
	x := Load(Param(name), XMM())
	v := w.reg()
	VBROADCASTSS(x, v)
	return v
}

// broadcast32 fills a new YMM register with the 32-bit constant c.
func broadcast32(c uint32) VecVirtual {
	r := GP32()
	MOVL(U32(c), r)
	x := XMM()
	VMOVD(r, x)
	y := YMM()
	VPBROADCASTD(x, y)
	return y
}

// broadcast32z fills a new ZMM register with the 32-bit constant c
// (AVX512F broadcasts from a general register).
func broadcast32z(c uint32) VecVirtual {
	r := GP32()
	MOVL(U32(c), r)
	z := ZMM()
	VPBROADCASTD(r, z)
	return z
}

// elemSize is the size in bytes of the element type dt.
func elemSize(dt string) int {
	return map[string]int{"bfloat16": 2, "float16": 2, "float32": 4}[dt]
}

// absMax returns the unsigned maximum of the sign-cleared bits-bit elements
// of src, two registers at a time, then folds the lanes.
func absMax(name string, bits int, w width) {
	step := 2 * w.bytes
	TEXT(name, NOSPLIT, "func(src []byte) uint32")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s returns the unsigned maximum of the sign-cleared %d-bit elements of src.", name, bits),
		fmt.Sprintf("len(src) must be a multiple of %d.", step))
	ptr := Load(Param("src").Base(), GP64())
	n := Load(Param("src").Len(), GP64())
	mask := w.broadcast(map[int]uint32{16: 0x7fff7fff, 32: 0x7fffffff}[bits])
	acc := []VecVirtual{w.reg(), w.reg()}
	for _, a := range acc {
		w.xor(a, a, a)
	}
	vmax := VPMAXUW // AVX512BW for the 512-bit form
	if bits == 32 {
		vmax = VPMAXUD
	}
	Label(name + "_loop")
	CMPQ(n, Imm(0))
	JE(LabelRef(name + "_done"))
	for i, a := range acc {
		t := w.reg()
		w.and(Mem{Base: ptr, Disp: w.bytes * i}, mask, t)
		vmax(t, a, a)
	}
	ADDQ(U32(step), ptr)
	SUBQ(U32(step), n)
	JMP(LabelRef(name + "_loop"))

	// Fold: the two accumulators, then halves of the register down to
	// 128 bits, then byte shifts within it down to one element.
	Label(name + "_done")
	vmax(acc[1], acc[0], acc[0])
	if w.bytes == 64 {
		hi := YMM()
		VEXTRACTI64X4(Imm(1), acc[0], hi)
		vmax(hi, acc[0].AsY(), acc[0].AsY())
	}
	hi := XMM()
	VEXTRACTI128(Imm(1), acc[0].AsY(), hi)
	lo := acc[0].AsX()
	vmax(hi, lo, lo)
	shifts := []uint64{8, 4, 2}
	if bits == 32 {
		shifts = shifts[:2]
	}
	for _, s := range shifts {
		t := XMM()
		VPSRLDQ(Imm(s), lo, t)
		vmax(t, lo, lo)
	}
	r := GP32()
	if bits == 16 {
		VPEXTRW(Imm(0), lo, r)
	} else {
		VMOVD(lo, r)
	}
	VZEROUPPER()
	Store(r, ReturnIndex(0))
	RET()
}

// roundBF16 rounds the float32 lanes of v to bfloat16 in place (nearest,
// ties to even) and leaves them as float32; v must not hold NaN. It adds
// 0x7fff plus the lowest kept bit to the bits, then clears the low half.
func roundBF16(w width, v, one, bias, himask VecVirtual) {
	t := w.reg()
	VPSRLD(Imm(16), v, t)
	w.and(one, t, t)
	VPADDD(bias, v, v)
	VPADDD(t, v, v)
	w.and(himask, v, v)
}

// quantize emits the kernel that quantizes dt elements, four registers of
// lanes (one register of int8 results on AVX2) per iteration.
func quantize(name string, dt string, w width) {
	size := elemSize(dt)
	lanes := w.lanes()
	block := 4 * lanes
	TEXT(name, NOSPLIT, "func(src []byte, dst []byte, t float32)")
	Pragma("noescape")
	Doc(name+" sets dst[i] = int8(roundHalfEven(clamp(rT(x[i] / t)))) for "+dt+" x in src.",
		fmt.Sprintf("len(dst) must be a multiple of %d and src must hold len(dst) elements.", block))
	src := Load(Param("src").Base(), GP64())
	dst := Load(Param("dst").Base(), GP64())
	n := Load(Param("dst").Len(), GP64())
	t := w.broadcastParam("t")
	hi := w.broadcast(0x42fe0000) // 127.0
	lo := w.broadcast(0xc3000000) // -128.0
	var one, bias, himask VecVirtual
	if dt == "bfloat16" {
		one, bias, himask = w.broadcast(1), w.broadcast(0x7fff), w.broadcast(0xffff0000)
	}
	var perm VecVirtual
	if !w.narrowStore {
		perm = w.reg()
		VMOVDQU(packOrder, perm)
	}

	Label(name + "_loop")
	CMPQ(n, Imm(0))
	JE(LabelRef(name + "_done"))
	v := make([]VecVirtual, 4)
	for g := range v {
		v[g] = w.reg()
		y := v[g]
		// Widen to float32: bfloat16 is the top half of a float32,
		// float16 is converted by F16C.
		m := Mem{Base: src, Disp: lanes * size * g}
		switch dt {
		case "bfloat16":
			VPMOVZXWD(m, y)
			VPSLLD(Imm(16), y, y)
		case "float16":
			VCVTPH2PS(m, y)
		default:
			VMOVUPS(m, y)
		}
		// Divide, then round the quotient to T.
		VDIVPS(t, y, y)
		switch dt {
		case "bfloat16":
			roundBF16(w, y, one, bias, himask)
		case "float16":
			VCVTPS2PH(Imm(0), y, w.half(y))
			VCVTPH2PS(w.half(y), y)
		}
		// Clamp, convert to int32 rounding to nearest even.
		VMINPS(hi, y, y)
		VMAXPS(lo, y, y)
		VCVTPS2DQ(y, y)
		if w.narrowStore {
			VPMOVSDB(y, Mem{Base: dst, Disp: lanes * g})
		}
	}
	if !w.narrowStore {
		// Packs work within 128-bit lanes; VPERMD puts the dwords back in order.
		VPACKSSDW(v[1], v[0], v[0])
		VPACKSSDW(v[3], v[2], v[2])
		VPACKSSWB(v[2], v[0], v[0])
		VPERMD(v[0], perm, v[0])
		VMOVDQU(v[0], Mem{Base: dst})
	}
	ADDQ(U32(block*size), src)
	ADDQ(U32(block), dst)
	SUBQ(U32(block), n)
	JMP(LabelRef(name + "_loop"))

	Label(name + "_done")
	VZEROUPPER()
	RET()
}

// dequantize emits the kernel that dequantizes int8 to dt, two registers
// of lanes per iteration.
func dequantize(name string, dt string, w width) {
	size := elemSize(dt)
	lanes := w.lanes()
	block := 2 * lanes
	TEXT(name, NOSPLIT, "func(q []byte, s float32, dst []byte)")
	Pragma("noescape")
	Doc(name+" sets dst[i] = "+dt+"(float32(int8(q[i])) * s).",
		fmt.Sprintf("len(q) must be a multiple of %d and dst must hold len(q) elements.", block))
	q := Load(Param("q").Base(), GP64())
	n := Load(Param("q").Len(), GP64())
	dst := Load(Param("dst").Base(), GP64())
	s := w.broadcastParam("s")
	var one, bias, quiet VecVirtual
	if dt == "bfloat16" {
		one, bias, quiet = w.broadcast(1), w.broadcast(0x7fff), w.broadcast(0x40)
	}

	Label(name + "_loop")
	CMPQ(n, Imm(0))
	JE(LabelRef(name + "_done"))
	v := make([]VecVirtual, 2)
	for g := range v {
		v[g] = w.reg()
		y := v[g]
		// Sign-extend to int32, convert (exact), multiply once.
		VPMOVSXBD(Mem{Base: q, Disp: lanes * g}, y)
		VCVTDQ2PS(y, y)
		VMULPS(s, y, y)
		out := Mem{Base: dst, Disp: lanes * size * g}
		switch dt {
		case "bfloat16":
			// Round to nearest even on the bits and keep the top half; a
			// NaN (from a NaN scale) keeps its top bits and is quieted, as
			// the Go conversion does.
			top, t := w.reg(), w.reg()
			nan := w.mask()
			VPSRLD(Imm(16), y, top)
			w.and(one, top, t)
			VCMPPS(Imm(3), y, y, nan) // unordered: NaN lanes
			VPADDD(bias, y, y)
			VPADDD(t, y, y)
			VPSRLD(Imm(16), y, y)
			w.or(quiet, top, top)
			w.blend(nan, top, y)
			if w.narrowStore {
				VPMOVDW(y, out)
			}
		case "float16":
			VCVTPS2PH(Imm(0), y, out)
		default:
			VMOVUPS(y, out)
		}
	}
	if dt == "bfloat16" && !w.narrowStore {
		// The lanes hold values below 1<<16, so the unsigned saturating
		// pack keeps them; it works within 128-bit lanes, VPERMQ restores
		// the order.
		VPACKUSDW(v[1], v[0], v[0])
		VPERMQ(Imm(0xd8), v[0], v[0])
		VMOVDQU(v[0], Mem{Base: dst})
	}
	ADDQ(U32(block), q)
	ADDQ(U32(block*size), dst)
	SUBQ(U32(block), n)
	JMP(LabelRef(name + "_loop"))

	Label(name + "_done")
	VZEROUPPER()
	RET()
}

var packOrder Mem

func main() {
	ConstraintExpr("amd64,!purego")

	packOrder = GLOBL("packOrder", RODATA|NOPTR)
	for i, d := range []uint32{0, 4, 1, 5, 2, 6, 3, 7} {
		DATA(4*i, U32(d))
	}

	for _, w := range []width{avx2, avx512} {
		absMax("absMaxBits16"+w.name, 16, w)
		absMax("absMaxBits32"+w.name, 32, w)
		quantize("quantizeBF16"+w.name, "bfloat16", w)
		quantize("quantizeF16"+w.name, "float16", w)
		quantize("quantizeF32"+w.name, "float32", w)
		dequantize("dequantizeBF16"+w.name, "bfloat16", w)
		dequantize("dequantizeF16"+w.name, "float16", w)
		dequantize("dequantizeF32"+w.name, "float32", w)
	}
	Generate()
}
