// Command _asm generates kernels_amd64.s, the AVX2 + F16C and AVX-512
// kernels of the cpu backend, with avo. It lives in its own module so avo is never a
// dependency of kitchen. Regenerate from this folder with
//
//	go run . -out ../kernels_amd64.s -stubs ../kernels_amd64_stubs.go -pkg cpu
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
//     default round-to-nearest-even mode, and narrowed with saturating packs;
//   - dequantize: out = rOut(float32(q) * s), one multiply, rounded as above.
//
// No kernel uses FMA: the contract has no multiply-add, and fusing would
// skip a rounding step. Callers pass whole blocks (the unit is in each
// kernel's doc) and finish the tail in Go.
package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

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

// broadcastParam fills a new YMM register with a float32 parameter.
func broadcastParam(name string) VecVirtual {
	x := Load(Param(name), XMM())
	y := YMM()
	VBROADCASTSS(x, y)
	return y
}

// vec is one vector width's registers and the instructions whose names
// differ between AVX2 and AVX-512.
type vec struct {
	bytes     int // register width
	reg       func() VecVirtual
	and, xor  func(a, b, dst Op)
	broadcast func(c uint32) VecVirtual
}

var (
	avx2   = vec{32, YMM, VPAND, VPXOR, broadcast32}
	avx512 = vec{64, ZMM, func(a, b, dst Op) { VPANDD(a, b, dst) }, func(a, b, dst Op) { VPXORD(a, b, dst) }, broadcast32z}
)

// absMax returns the unsigned maximum of the sign-cleared width-bit
// elements of src, two registers at a time, then folds the lanes.
func absMax(name string, width int, v vec) {
	step := 2 * v.bytes
	TEXT(name, NOSPLIT, "func(src []byte) uint32")
	Doc(name+" returns the unsigned maximum of the sign-cleared "+map[int]string{16: "16", 32: "32"}[width]+"-bit elements of src.",
		fmt.Sprintf("len(src) must be a multiple of %d.", step))
	ptr := Load(Param("src").Base(), GP64())
	n := Load(Param("src").Len(), GP64())
	mask := v.broadcast(map[int]uint32{16: 0x7fff7fff, 32: 0x7fffffff}[width])
	acc := []VecVirtual{v.reg(), v.reg()}
	for _, a := range acc {
		v.xor(a, a, a)
	}
	vmax := VPMAXUW // AVX512BW for the 512-bit form
	if width == 32 {
		vmax = VPMAXUD
	}
	Label(name + "_loop")
	CMPQ(n, Imm(0))
	JE(LabelRef(name + "_done"))
	for i, a := range acc {
		t := v.reg()
		v.and(Mem{Base: ptr, Disp: v.bytes * i}, mask, t)
		vmax(t, a, a)
	}
	ADDQ(U32(step), ptr)
	SUBQ(U32(step), n)
	JMP(LabelRef(name + "_loop"))

	Label(name + "_done")
	vmax(acc[1], acc[0], acc[0])
	if v.bytes == 64 {
		hi := YMM()
		VEXTRACTI64X4(Imm(1), acc[0], hi)
		vmax(hi, acc[0].AsY(), acc[0].AsY())
	}
	hi := XMM()
	VEXTRACTI128(Imm(1), acc[0].AsY(), hi)
	lo := acc[0].AsX()
	vmax(hi, lo, lo)
	shifts := []uint64{8, 4, 2}
	if width == 32 {
		shifts = shifts[:2]
	}
	for _, s := range shifts {
		t := XMM()
		VPSRLDQ(Imm(s), lo, t)
		vmax(t, lo, lo)
	}
	r := GP32()
	if width == 16 {
		VPEXTRW(Imm(0), lo, r)
	} else {
		VMOVD(lo, r)
	}
	VZEROUPPER()
	Store(r, ReturnIndex(0))
	RET()
}

// roundBF16 rounds float32 lanes of v to bfloat16 in place (nearest, ties to
// even) and leaves them as float32; v must not hold NaN.
func roundBF16(v, one, bias, himask VecVirtual) {
	t := YMM()
	VPSRLD(Imm(16), v, t)
	VPAND(one, t, t)
	VPADDD(bias, v, v)
	VPADDD(t, v, v)
	VPAND(himask, v, v)
}

func quantize(name string, dt string) {
	TEXT(name, NOSPLIT, "func(src []byte, dst []byte, t float32)")
	Doc(name+" sets dst[i] = int8(roundHalfEven(clamp(rT(x[i] / t)))) for "+dt+" x in src.",
		"len(dst) must be a multiple of 32 and src must hold len(dst) elements.")
	src := Load(Param("src").Base(), GP64())
	dst := Load(Param("dst").Base(), GP64())
	n := Load(Param("dst").Len(), GP64())
	t := broadcastParam("t")
	hi := broadcast32(0x42fe0000) // 127.0
	lo := broadcast32(0xc3000000) // -128.0
	var one, bias, himask VecVirtual
	if dt == "bfloat16" {
		one, bias, himask = broadcast32(1), broadcast32(0x7fff), broadcast32(0xffff0000)
	}
	perm := YMM()
	VMOVDQU(packOrder, perm)
	size := map[string]int{"bfloat16": 2, "float16": 2, "float32": 4}[dt]

	Label(name + "_loop")
	CMPQ(n, Imm(0))
	JE(LabelRef(name + "_done"))
	v := []VecVirtual{YMM(), YMM(), YMM(), YMM()}
	for g, y := range v {
		m := Mem{Base: src, Disp: 8 * size * g}
		switch dt {
		case "bfloat16":
			VPMOVZXWD(m, y)
			VPSLLD(Imm(16), y, y)
		case "float16":
			VCVTPH2PS(m, y)
		default:
			VMOVUPS(m, y)
		}
		VDIVPS(t, y, y)
		switch dt {
		case "bfloat16":
			roundBF16(y, one, bias, himask)
		case "float16":
			VCVTPS2PH(Imm(0), y, y.AsX())
			VCVTPH2PS(y.AsX(), y)
		}
		VMINPS(hi, y, y)
		VMAXPS(lo, y, y)
		VCVTPS2DQ(y, y)
	}
	// Packs work within 128-bit lanes; VPERMD puts the dwords back in order.
	VPACKSSDW(v[1], v[0], v[0])
	VPACKSSDW(v[3], v[2], v[2])
	VPACKSSWB(v[2], v[0], v[0])
	VPERMD(v[0], perm, v[0])
	VMOVDQU(v[0], Mem{Base: dst})
	ADDQ(Imm(uint64(32*size)), src)
	ADDQ(Imm(32), dst)
	SUBQ(Imm(32), n)
	JMP(LabelRef(name + "_loop"))

	Label(name + "_done")
	VZEROUPPER()
	RET()
}

func dequantize(name string, dt string) {
	TEXT(name, NOSPLIT, "func(q []byte, s float32, dst []byte)")
	Doc(name+" sets dst[i] = "+dt+"(float32(int8(q[i])) * s).",
		"len(q) must be a multiple of 16 and dst must hold len(q) elements.")
	q := Load(Param("q").Base(), GP64())
	n := Load(Param("q").Len(), GP64())
	dst := Load(Param("dst").Base(), GP64())
	s := broadcastParam("s")
	var one, bias, quiet VecVirtual
	if dt == "bfloat16" {
		one, bias, quiet = broadcast32(1), broadcast32(0x7fff), broadcast32(0x40)
	}
	size := map[string]int{"bfloat16": 2, "float16": 2, "float32": 4}[dt]

	Label(name + "_loop")
	CMPQ(n, Imm(0))
	JE(LabelRef(name + "_done"))
	v := []VecVirtual{YMM(), YMM()}
	for g, y := range v {
		VPMOVSXBD(Mem{Base: q, Disp: 8 * g}, y)
		VCVTDQ2PS(y, y)
		VMULPS(s, y, y)
		switch dt {
		case "bfloat16":
			// Round to nearest even on the bits; a NaN (from a NaN scale)
			// keeps its top bits and is quieted, as the Go conversion does.
			top, t, nan := YMM(), YMM(), YMM()
			VPSRLD(Imm(16), y, top)
			VPAND(one, top, t)
			VCMPPS(Imm(3), y, y, nan) // unordered: NaN lanes
			VPADDD(bias, y, y)
			VPADDD(t, y, y)
			VPSRLD(Imm(16), y, y)
			VPOR(quiet, top, top)
			VBLENDVPS(nan, top, y, y)
		case "float16":
			VCVTPS2PH(Imm(0), y, Mem{Base: dst, Disp: 16 * g})
		default:
			VMOVUPS(y, Mem{Base: dst, Disp: 32 * g})
		}
	}
	if dt == "bfloat16" {
		VPACKUSDW(v[1], v[0], v[0])
		VPERMQ(Imm(0xd8), v[0], v[0])
		VMOVDQU(v[0], Mem{Base: dst})
	}
	ADDQ(Imm(16), q)
	ADDQ(Imm(uint64(16*size)), dst)
	SUBQ(Imm(16), n)
	JMP(LabelRef(name + "_loop"))

	Label(name + "_done")
	VZEROUPPER()
	RET()
}

// broadcast32z fills a new ZMM register with the 32-bit constant c.
func broadcast32z(c uint32) VecVirtual {
	r := GP32()
	MOVL(U32(c), r)
	z := ZMM()
	VPBROADCASTD(r, z)
	return z
}

// The AVX-512 kernels do the same arithmetic on 16 lanes, with AVX512F's
// saturating VPMOVSDB and truncating VPMOVDW narrowing straight to memory
// (no pack-and-permute) and mask registers for the NaN blend; the 16-bit
// maximum needs AVX512BW.

func quantize512(name string, dt string) {
	TEXT(name, NOSPLIT, "func(src []byte, dst []byte, t float32)")
	Doc(name+" is the AVX-512 form of the "+dt+" quantize kernel.",
		"len(dst) must be a multiple of 64 and src must hold len(dst) elements.")
	src := Load(Param("src").Base(), GP64())
	dst := Load(Param("dst").Base(), GP64())
	n := Load(Param("dst").Len(), GP64())
	tx := Load(Param("t"), XMM())
	t := ZMM()
	VBROADCASTSS(tx, t)
	hi := broadcast32z(0x42fe0000) // 127.0
	lo := broadcast32z(0xc3000000) // -128.0
	var one, bias, himask VecVirtual
	if dt == "bfloat16" {
		one, bias, himask = broadcast32z(1), broadcast32z(0x7fff), broadcast32z(0xffff0000)
	}
	size := map[string]int{"bfloat16": 2, "float16": 2, "float32": 4}[dt]

	Label(name + "_loop")
	CMPQ(n, Imm(0))
	JE(LabelRef(name + "_done"))
	for g := range 4 {
		z := ZMM()
		m := Mem{Base: src, Disp: 16 * size * g}
		switch dt {
		case "bfloat16":
			VPMOVZXWD(m, z)
			VPSLLD(Imm(16), z, z)
		case "float16":
			VCVTPH2PS(m, z)
		default:
			VMOVUPS(m, z)
		}
		VDIVPS(t, z, z)
		switch dt {
		case "bfloat16":
			tmp := ZMM()
			VPSRLD(Imm(16), z, tmp)
			VPANDD(one, tmp, tmp)
			VPADDD(bias, z, z)
			VPADDD(tmp, z, z)
			VPANDD(himask, z, z)
		case "float16":
			VCVTPS2PH(Imm(0), z, z.AsY())
			VCVTPH2PS(z.AsY(), z)
		}
		VMINPS(hi, z, z)
		VMAXPS(lo, z, z)
		VCVTPS2DQ(z, z)
		VPMOVSDB(z, Mem{Base: dst, Disp: 16 * g})
	}
	ADDQ(U32(64*size), src)
	ADDQ(Imm(64), dst)
	SUBQ(Imm(64), n)
	JMP(LabelRef(name + "_loop"))

	Label(name + "_done")
	VZEROUPPER()
	RET()
}

func dequantize512(name string, dt string) {
	TEXT(name, NOSPLIT, "func(q []byte, s float32, dst []byte)")
	Doc(name+" is the AVX-512 form of the "+dt+" dequantize kernel.",
		"len(q) must be a multiple of 32 and dst must hold len(q) elements.")
	q := Load(Param("q").Base(), GP64())
	n := Load(Param("q").Len(), GP64())
	dst := Load(Param("dst").Base(), GP64())
	sx := Load(Param("s"), XMM())
	s := ZMM()
	VBROADCASTSS(sx, s)
	var one, bias, quiet VecVirtual
	if dt == "bfloat16" {
		one, bias, quiet = broadcast32z(1), broadcast32z(0x7fff), broadcast32z(0x40)
	}
	size := map[string]int{"bfloat16": 2, "float16": 2, "float32": 4}[dt]

	Label(name + "_loop")
	CMPQ(n, Imm(0))
	JE(LabelRef(name + "_done"))
	for g := range 2 {
		z := ZMM()
		VPMOVSXBD(Mem{Base: q, Disp: 16 * g}, z)
		VCVTDQ2PS(z, z)
		VMULPS(s, z, z)
		out := Mem{Base: dst, Disp: 16 * size * g}
		switch dt {
		case "bfloat16":
			top, t := ZMM(), ZMM()
			nan := K()
			VPSRLD(Imm(16), z, top)
			VPANDD(one, top, t)
			VCMPPS(Imm(3), z, z, nan) // unordered: NaN lanes
			VPADDD(bias, z, z)
			VPADDD(t, z, z)
			VPSRLD(Imm(16), z, z)
			VPORD(quiet, top, top)
			VMOVDQA32(top, nan, z) // NaN lanes keep their quieted top bits
			VPMOVDW(z, out)
		case "float16":
			VCVTPS2PH(Imm(0), z, out)
		default:
			VMOVUPS(z, out)
		}
	}
	ADDQ(Imm(32), q)
	ADDQ(U32(32*size), dst)
	SUBQ(Imm(32), n)
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

	absMax("absMaxBits16AVX2", 16, avx2)
	absMax("absMaxBits32AVX2", 32, avx2)
	quantize("quantizeBF16AVX2", "bfloat16")
	quantize("quantizeF16AVX2", "float16")
	quantize("quantizeF32AVX2", "float32")
	dequantize("dequantizeBF16AVX2", "bfloat16")
	dequantize("dequantizeF16AVX2", "float16")
	dequantize("dequantizeF32AVX2", "float32")

	absMax("absMaxBits16AVX512", 16, avx512)
	absMax("absMaxBits32AVX512", 32, avx512)
	quantize512("quantizeBF16AVX512", "bfloat16")
	quantize512("quantizeF16AVX512", "float16")
	quantize512("quantizeF32AVX512", "float32")
	dequantize512("dequantizeBF16AVX512", "bfloat16")
	dequantize512("dequantizeF16AVX512", "float16")
	dequantize512("dequantizeF32AVX512", "float32")
	Generate()
}
