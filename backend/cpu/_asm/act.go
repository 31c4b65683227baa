package main

import (
	"fmt"
	"math"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// int8_linear's input activations (quant.GeluTanh, quant.Silu): each in
// float64, as Go evaluates them, with the exponential computed here
// (exp64): x widened from the dtype to float32 and to float64, the
// activation, rounded to float32 and to the dtype. Go's math.Exp and this
// one may differ in the last bit of a float64 (so do math.Exp's own
// assembly and portable versions); the result is rounded to float32,
// which absorbs such a difference unless the value lies within it of a
// float32 rounding boundary (the tests find none among the 16-bit
// dtypes' values).

// The rows of a width's activation table (actTable), one register of
// float64 lanes each.
const (
	actLog2E   = iota // 1/ln 2
	actShifter        // 1.5·2^52: adding it rounds to an integer
	actLn2Hi          // ln 2 in two parts, the first with trailing zeros
	actLn2Lo
	actOne
	actTLo       // the exponent's clamp: e^-50 is lost next to 1, and
	actTHi       // x/e^200 rounds to a float32 zero for every finite x
	actGeluCubic // 0.044715
	actGeluScale // √(2/π), as math.Sqrt(2/math.Pi) gives it
	actMinusTwo  // -2
	actMinusOne  // -1
	actPoly      // expPolyDegree+1 rows: 1/n!, highest degree first
	actRows      = actPoly + expPolyDegree + 1
)

// expPolyDegree is the degree of the Taylor polynomial of e^r on |r| <=
// ln2/2: its first term left out is below 2^-60 relative.
const expPolyDegree = 13

// actTable emits w's activation constants.
func actTable(w width) Mem {
	lanes := w.bytes / 8
	m := GLOBL("actConst"+w.name, RODATA|NOPTR)
	var rows tableCheck
	defer rows.complete("actConst", actRows)
	row := func(r int, v float64) {
		rows.emit(r)
		for j := range lanes {
			DATA(w.bytes*r+8*j, U64(math.Float64bits(v)))
		}
	}
	row(actLog2E, 1/math.Ln2)
	row(actShifter, 0x1.8p52)
	row(actLn2Hi, math.Float64frombits(0x3fe62e42fee00000))
	row(actLn2Lo, math.Float64frombits(0x3dea39ef35793c76))
	row(actOne, 1)
	row(actTLo, -50)
	row(actTHi, 200)
	row(actGeluCubic, 0.044715)
	row(actGeluScale, math.Sqrt(2/math.Pi))
	row(actMinusTwo, -2)
	row(actMinusOne, -1)
	for n := expPolyDegree; n >= 0; n-- {
		f := 1.0
		for i := 2; i <= n; i++ {
			f *= float64(i)
		}
		row(actPoly+expPolyDegree-n, 1/f)
	}
	return m
}

// f64Row is row r of the activation table as a memory operand.
func f64Row(w width, tab Mem, r int) Mem { return tab.Offset(w.bytes * r) }

// exp64 emits e^t for the float64 lanes of t, clamped to [-50, 200]
// (clobbered), returning the register that holds it: t = k·ln2 + r with k
// an integer (rounded by the shifter) and |r| <= ln2/2 (Cody and Waite's
// two parts of ln 2, with fused multiply-adds), e^r by its Taylor
// polynomial in Horner's form (fused multiply-adds), and 2^k added to the
// exponent's bits (k is within [-73, 289]: no overflow, no subnormal).
func exp64(w width, tab Mem, t VecVirtual) VecVirtual {
	VMAXPD(f64Row(w, tab, actTLo), t, t)
	VMINPD(f64Row(w, tab, actTHi), t, t)
	kf, kd := w.reg(), w.reg()
	VMOVUPD(f64Row(w, tab, actShifter), kf)
	VFMADD231PD(f64Row(w, tab, actLog2E), t, kf)  // kf = t/ln2 + shifter, rounded: k in its low bits
	VSUBPD(f64Row(w, tab, actShifter), kf, kd)    // k, exactly
	VFNMADD231PD(f64Row(w, tab, actLn2Hi), kd, t) // t - k·ln2hi
	VFNMADD231PD(f64Row(w, tab, actLn2Lo), kd, t) // r
	p := w.reg()
	VMOVUPD(f64Row(w, tab, actPoly), p)
	for i := 1; i <= expPolyDegree; i++ {
		VFMADD213PD(f64Row(w, tab, actPoly+i), t, p) // p = p·r + c
	}
	VPSLLQ(Imm(52), kf, kf) // k << 52 (the shifter's low bits are zero)
	VPADDQ(kf, p, p)
	return p
}

// activateF64 emits the activation of the float64 lanes of x in place:
// gelu (quant.GeluTanh) x / (1 + e^(-2·√(2/π)·(x + 0.044715·x·x·x))), the
// products in Go's order, or silu x / (1 + e^(-x)).
func activateF64(w width, tab Mem, x VecVirtual, gelu bool) {
	t := w.reg()
	if gelu {
		VMULPD(f64Row(w, tab, actGeluCubic), x, t) // 0.044715·x
		VMULPD(x, t, t)
		VMULPD(x, t, t)
		VADDPD(t, x, t) // x + c
		VMULPD(f64Row(w, tab, actGeluScale), t, t)
		VMULPD(f64Row(w, tab, actMinusTwo), t, t)
	} else {
		VMULPD(f64Row(w, tab, actMinusOne), x, t)
	}
	e := exp64(w, tab, t)
	VADDPD(f64Row(w, tab, actOne), e, e)
	VDIVPD(e, x, x)
}

// activateF32 emits the activation of the float32 lanes of y in place,
// through two registers of float64 lanes, rounded back to float32.
func activateF32(w width, tab Mem, y VecVirtual, gelu bool) {
	lo, hi := w.reg(), w.reg()
	if w.bytes == 64 {
		top := YMM()
		VEXTRACTF64X4(Imm(1), y, top)
		VCVTPS2PD(y.AsY(), lo)
		VCVTPS2PD(top, hi)
	} else {
		top := XMM()
		VEXTRACTF128(Imm(1), y, top)
		VCVTPS2PD(y.AsX(), lo)
		VCVTPS2PD(top, hi)
	}
	activateF64(w, tab, lo, gelu)
	activateF64(w, tab, hi, gelu)
	if w.bytes == 64 {
		VCVTPD2PS(lo, y.AsY())
		top := YMM()
		VCVTPD2PS(hi, top)
		VINSERTF64X4(Imm(1), top, y, y)
		return
	}
	VCVTPD2PSY(lo, y.AsX())
	top := XMM()
	VCVTPD2PSY(hi, top)
	VINSERTF128(Imm(1), top, y, y)
}

// activation emits the kernel of an input activation on rows of dt, two
// registers of lanes per iteration: with gelu, dst = rT(GeluTanh(x)) of
// src; else swiglu, dst = rT(rT(Silu(gate))·up) of gate and up (float32
// product).
func activation(name, dt string, gelu bool, w width, tab Mem) {
	size := elemSize(dt)
	lanes := w.lanes()
	block := 2 * lanes
	if gelu {
		TEXT(name, NOSPLIT, "func(src, dst []byte)")
		Doc(name+" sets dst to the "+dt+" rounding of quant.GeluTanh of the "+dt+" elements of src.",
			fmt.Sprintf("len(dst) must be a multiple of %d elements, and src as long.", block))
	} else {
		TEXT(name, NOSPLIT, "func(gate, up, dst []byte)")
		Doc(name+" sets dst to the "+dt+" rounding of the float32 product of the "+dt+" rounding of",
			"quant.Silu of the "+dt+" elements of gate and those of up.",
			fmt.Sprintf("len(dst) must be a multiple of %d elements, and gate and up as long.", block))
	}
	Pragma("noescape")
	var src, up Register
	if gelu {
		src = Load(Param("src").Base(), GP64())
	} else {
		src, up = Load(Param("gate").Base(), GP64()), Load(Param("up").Base(), GP64())
	}
	dst := Load(Param("dst").Base(), GP64())
	n := Load(Param("dst").Len(), GP64())
	st := newStorer(dt, w)
	Label(name + "_loop")
	CMPQ(n, Imm(0))
	JE(LabelRef(name + "_done"))
	v := make([]VecVirtual, 2)
	for g := range v {
		v[g] = w.reg()
		widenLoad(dt, Mem{Base: src, Disp: lanes * size * g}, v[g])
		activateF32(w, tab, v[g], gelu)
		if !gelu {
			st.round(v[g]) // g = rT(silu(gate))
			u := w.reg()
			widenLoad(dt, Mem{Base: up, Disp: lanes * size * g}, u)
			VMULPS(u, v[g], v[g])
		}
		st.store(v[g], Mem{Base: dst, Disp: lanes * size * g})
	}
	st.finish(v, Mem{Base: dst})
	ADDQ(U32(block*size), src)
	if !gelu {
		ADDQ(U32(block*size), up)
	}
	ADDQ(U32(block*size), dst)
	SUBQ(U32(block*size), n)
	JMP(LabelRef(name + "_loop"))

	Label(name + "_done")
	VZEROUPPER()
	RET()
}

// activationKernels emits the activation kernels of w for each dtype.
func activationKernels(w width) {
	tab := actTable(w)
	for _, dt := range []string{"bfloat16", "float16", "float32"} {
		short := map[string]string{"bfloat16": "BF16", "float16": "F16", "float32": "F32"}[dt]
		activation("geluTanh"+short+w.name, dt, true, w, tab)
		activation("swiGLU"+short+w.name, dt, false, w, tab)
	}
}
