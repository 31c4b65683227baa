package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// squares emits the kernel of the converter's weight error for values of
// dt (cpu.SquaredError): for each 4 values of x (dt) and of d (float32),
// both widened to float64 exactly, the 4 lanes of e add (d - x)² and those
// of s add x², lane i taking value i mod 4, each product rounded to
// float64 before the addition (VMULPD, then VADDPD: no FMA), which is the
// order the Go loop follows, so both give the same bits. The lanes are
// chains of additions, one VADDPD latency per 4 values: a different split
// into more chains would be faster and give other bits. AVX2 with F16C.
//
// With quantized, d is the dequantization of int8 values instead
// (cpu.QuantizedSquaredError): each 4 bytes of q sign-extended to int32
// (VPMOVSXBD), converted to float32 exactly and multiplied by the
// broadcast scale (VMULPS: the product rounded to float32, as dequantize
// rounds it), then summed the same way.
func squares(name, dt string, quantized bool) {
	size := map[string]int{"bfloat16": 2, "float16": 2, "float32": 4}[dt]
	var xp, dp, n, sv reg.Register // sv: the scale, quantized only
	if quantized {
		TEXT(name, NOSPLIT, "func(x []byte, q []byte, s float32, acc *[8]float64)")
		Pragma("noescape")
		Doc(name+" adds to acc[0:4] the squares of d - x and to acc[4:8] those of x, value i to lane i mod 4,",
			"for the "+dt+" values of x and d = float32(q)·s rounded to float32, q int8, in float64;",
			"len(q) must be a multiple of 4.")
		xp = Load(Param("x").Base(), GP64())
		dp = Load(Param("q").Base(), GP64())
		n = Load(Param("q").Len(), GP64())
		sv = Load(Param("s"), XMM())
		VBROADCASTSS(sv, sv)
	} else {
		TEXT(name, NOSPLIT, "func(x []byte, d []byte, acc *[8]float64)")
		Pragma("noescape")
		Doc(name+" adds to acc[0:4] the squares of d - x and to acc[4:8] those of x, value i to lane i mod 4,",
			"for the "+dt+" values of x and the float32 values of d, in float64; len(d) must be a multiple of 16.")
		xp = Load(Param("x").Base(), GP64())
		dp = Load(Param("d").Base(), GP64())
		n = Load(Param("d").Len(), GP64())
	}
	ap := Load(Param("acc"), GP64())
	e, s := YMM(), YMM()
	VMOVUPD(Mem{Base: ap}, e)
	VMOVUPD(Mem{Base: ap, Disp: 32}, s)
	if quantized {
		SHRQ(Imm(2), n) // groups of 4 bytes of q
	} else {
		SHRQ(Imm(4), n) // groups of 16 bytes of d
	}
	JZ(LabelRef(name + "_done"))
	Label(name + "_loop")
	xv, dv := YMM(), YMM()
	switch dt {
	case "float32":
		VCVTPS2PD(Mem{Base: xp}, xv)
	case "bfloat16":
		t := XMM()
		VPMOVZXWD(Mem{Base: xp}, t)
		VPSLLD(Imm(16), t, t)
		VCVTPS2PD(t, xv)
	case "float16":
		t := XMM()
		VCVTPH2PS(Mem{Base: xp}, t)
		VCVTPS2PD(t, xv)
	}
	if quantized {
		qv := XMM()
		VPMOVSXBD(Mem{Base: dp}, qv)
		VCVTDQ2PS(qv, qv)
		VMULPS(sv, qv, qv)
		VCVTPS2PD(qv, dv)
	} else {
		VCVTPS2PD(Mem{Base: dp}, dv)
	}
	VSUBPD(xv, dv, dv) // d - x
	VMULPD(dv, dv, dv)
	VADDPD(dv, e, e)
	VMULPD(xv, xv, xv)
	VADDPD(xv, s, s)
	ADDQ(Imm(uint64(4*size)), xp)
	if quantized {
		ADDQ(Imm(4), dp)
	} else {
		ADDQ(Imm(16), dp)
	}
	DECQ(n)
	JNZ(LabelRef(name + "_loop"))
	Label(name + "_done")
	VMOVUPD(e, Mem{Base: ap})
	VMOVUPD(s, Mem{Base: ap, Disp: 32})
	VZEROUPPER()
	RET()
}
