package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// squareLanes is how many float64 lanes each of the weight error's sums
// has (cpu.squareLanes): value i adds to lane i mod squareLanes.
const squareLanes = 8

// squares emits the kernel of the converter's weight error for values of
// dt (cpu.SquaredError): for each squareLanes values of x (dt) and of d
// (float32), both widened to float64 exactly, lane i of e adds (d - x)²
// and lane i of s adds x², each product rounded to float64 before the
// addition (VMULPD, then VADDPD: no FMA), which is the order the Go loop
// follows, so both give the same bits. The 8 lanes are one register with
// AVX-512 and two with AVX2: two chains of additions, where the 4 lanes
// of before were one, and an AVX-512 step takes 8 values for the
// instructions an AVX2 one spends on 4. AVX2 with F16C, or AVX-512.
//
// With quantized, d is the dequantization of int8 values instead
// (cpu.QuantizedSquaredError): each group of bytes of q sign-extended to
// int32 (VPMOVSXBD), converted to float32 exactly and multiplied by the
// broadcast scale (VMULPS: the product rounded to float32, as dequantize
// rounds it), then summed the same way.
func squares(name, dt string, quantized bool, w width) {
	size := map[string]int{"bfloat16": 2, "float16": 2, "float32": 4}[dt]
	per := w.bytes / 8 // float64 lanes a register
	regs := squareLanes / per
	// half is a register of per float32 lanes (the half-width form), which
	// VCVTPS2PD widens into a full register of float64.
	half := func() reg.VecVirtual {
		if w.bytes == 64 {
			return YMM()
		}
		return XMM()
	}
	full := func() reg.VecVirtual {
		if w.bytes == 64 {
			return ZMM()
		}
		return YMM()
	}
	var xp, dp, n, sv reg.Register // sv: the scale, quantized only
	lanes := fmt.Sprintf("acc[0:%d] the squares of d - x and to acc[%d:%d] those of x, value i to lane i mod %d,", squareLanes, squareLanes, 2*squareLanes, squareLanes)
	if quantized {
		TEXT(name, NOSPLIT, fmt.Sprintf("func(x []byte, q []byte, s float32, acc *[%d]float64)", 2*squareLanes))
		Pragma("noescape")
		Doc(name+" adds to "+lanes,
			"for the "+dt+" values of x and d = float32(q)·s rounded to float32, q int8, in float64;",
			fmt.Sprintf("len(q) must be a multiple of %d.", squareLanes))
		xp = Load(Param("x").Base(), GP64())
		dp = Load(Param("q").Base(), GP64())
		n = Load(Param("q").Len(), GP64())
		t := Load(Param("s"), XMM())
		sv = half()
		VBROADCASTSS(t, sv)
	} else {
		TEXT(name, NOSPLIT, fmt.Sprintf("func(x []byte, d []byte, acc *[%d]float64)", 2*squareLanes))
		Pragma("noescape")
		Doc(name+" adds to "+lanes,
			fmt.Sprintf("for the %s values of x and the float32 values of d, in float64; len(d) must be a multiple of %d.", dt, 4*squareLanes))
		xp = Load(Param("x").Base(), GP64())
		dp = Load(Param("d").Base(), GP64())
		n = Load(Param("d").Len(), GP64())
	}
	ap := Load(Param("acc"), GP64())
	e, s := make([]reg.VecVirtual, regs), make([]reg.VecVirtual, regs)
	for g := range regs {
		e[g], s[g] = full(), full()
		VMOVUPD(Mem{Base: ap, Disp: 8 * per * g}, e[g])
		VMOVUPD(Mem{Base: ap, Disp: 8 * (squareLanes + per*g)}, s[g])
	}
	if quantized {
		SHRQ(Imm(3), n) // groups of 8 bytes of q
	} else {
		SHRQ(Imm(5), n) // groups of 32 bytes of d
	}
	JZ(LabelRef(name + "_done"))
	Label(name + "_loop")
	for g := range regs {
		xv, dv := full(), full()
		xm := Mem{Base: xp, Disp: size * per * g}
		switch dt {
		case "float32":
			VCVTPS2PD(xm, xv)
		case "bfloat16":
			t := half()
			VPMOVZXWD(xm, t)
			VPSLLD(Imm(16), t, t)
			VCVTPS2PD(t, xv)
		case "float16":
			t := half()
			VCVTPH2PS(xm, t)
			VCVTPS2PD(t, xv)
		}
		if quantized {
			qv := half()
			VPMOVSXBD(Mem{Base: dp, Disp: per * g}, qv)
			VCVTDQ2PS(qv, qv)
			VMULPS(sv, qv, qv)
			VCVTPS2PD(qv, dv)
		} else {
			VCVTPS2PD(Mem{Base: dp, Disp: 4 * per * g}, dv)
		}
		VSUBPD(xv, dv, dv) // d - x
		VMULPD(dv, dv, dv)
		VADDPD(dv, e[g], e[g])
		VMULPD(xv, xv, xv)
		VADDPD(xv, s[g], s[g])
	}
	ADDQ(Imm(uint64(squareLanes*size)), xp)
	if quantized {
		ADDQ(Imm(squareLanes), dp)
	} else {
		ADDQ(Imm(4*squareLanes), dp)
	}
	DECQ(n)
	JNZ(LabelRef(name + "_loop"))
	Label(name + "_done")
	for g := range regs {
		VMOVUPD(e[g], Mem{Base: ap, Disp: 8 * per * g})
		VMOVUPD(s[g], Mem{Base: ap, Disp: 8 * (squareLanes + per*g)})
	}
	VZEROUPPER()
	RET()
}
