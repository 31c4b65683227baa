// Command _asm generates the AVX2 + F16C and AVX-512 kernels of the cpu
// backend with avo, in two files: kernels_amd64.s (quantize, dequantize and
// the ConvRot rows; -kernels qdq) and linear_amd64.s (the int8 matrix
// products; -kernels linear), so each family's kernels change alone. It
// lives in its own module so avo is never a dependency of kitchen.
// Regenerate from this folder with
//
//	go generate
//
// The kernels follow the INT8 contract exactly (see docs/CONTRACT.md):
//
//   - abs-max: the largest |x| found as the unsigned maximum of the element
//     bits with the sign bit cleared, which orders finite values like the
//     floats and puts NaN and infinity above every finite value;
//   - quantize: y = rT(x / t) with a true IEEE division (VDIVPS) for
//     float32 and stochastic rounding; for bfloat16 and float16 rounded half
//     to even, a product by r = 1/t (rounded to float32) instead, which can
//     round the quotient differently, but never the integer: both operands
//     have at most 11 significant bits, so the quotient's significand and
//     the product's depend only on the two significands (the exponents
//     scale them exactly, save in subnormal range, where every integer is
//     0), and TestReciprocalQuotients tries every pair of significands, the
//     rounding to T and then to an integer: the same integer each time.
//     The rounding to T is done by
//     F16C for float16 and by integer round-to-nearest-even on the bits for
//     bfloat16; then clamped to 127 (which commutes with rounding to an
//     integer; the conversion and the saturating packs take care of values
//     below -128), converted with the default round-to-nearest-even mode,
//     and narrowed with saturation. Stochastic rounding hashes each
//     element's index as quant.Noise does (uint32 multiplies, shifts and
//     XORs) and floors rT(y + rT(u)). Each iteration prefetches the input
//     a given distance ahead (the next row, for row-wise quantization,
//     or, in the AVX2 next-row form, past the next row, which it reads for
//     its abs-max), and at each page a line of the page two pages on
//     (primePage), as the abs-max pass does;
//   - dequantize: out = rOut(float32(q) * s), one multiply, rounded as above;
//   - quantize and dequantize store non-temporally when asked (outputs
//     larger than the last-level cache); sfence, which parallelFor runs
//     once a thread's parts are done, orders those stores;
//   - the ConvRot rows: the rotation of float32 rows in place in exactly
//     quant.Rotate's order of operations (see butterfly); widening float32,
//     float16 and bfloat16 to float32 exactly (F16C returns a signaling
//     float16 NaN quieted, which any arithmetic on it next does too); int8
//     times one scale or a scale per element; rounding float32 rows to T as
//     above; a test for NaN; and rows rotated with their conversions fused
//     in (rotateRows, rotateLoad);
//   - the int8 matrix products of mm_int8 and int8_linear, exact for every
//     int8 value, their epilogue, and a loop that measures the machine's
//     peak at their arithmetic: see linear.go; int8_linear's input
//     activations: see act.go.
//
// Most kernels are written once and emitted for both vector widths: AVX2
// with 256-bit registers and AVX-512 with 512-bit ones (see width), the
// AVX-512 forms doing the same arithmetic on twice the lanes. Some exist
// for one width only (linearKernels says which; among them the dot tile
// and mm_int8's pairs kernel for AVX2, the wide tiles and mm_int8's quad
// kernel without VNNI for AVX-512). The int8 products also come in VNNI
// forms, VPDPBUSD on quads of k: AVX512-VNNI's, emitted as a raw
// instruction since this avo version's instruction set lacks it, and
// AVX-VNNI's on 256 bits, emitted as bytes (see dpbusd).
//
// No kernel uses FMA where the contract computes: it has no multiply-add,
// and fusing would skip a rounding step (only the activations' float64
// exponential, whose last bit the float32 result absorbs, uses it: see
// act.go). Callers pass whole blocks (the unit is in each kernel's doc) and
// finish the tail in Go.
package main

//go:generate go run . -kernels qdq -out ../kernels_amd64.s -stubs ../kernels_amd64_stubs.go -pkg cpu
//go:generate go run . -kernels linear -out ../linear_amd64.s -stubs ../linear_amd64_stubs.go -pkg cpu

import (
	"flag"
	"fmt"
	"os"

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
	mask := absMask(bits, w)
	acc := []VecVirtual{w.reg(), w.reg()}
	for _, a := range acc {
		w.xor(a, a, a)
	}
	vmax := maxFor(bits)
	Label(name + "_loop")
	CMPQ(n, Imm(0))
	JE(LabelRef(name + "_done"))
	primePage(name+"_inpage", ptr)
	for i, a := range acc {
		t := w.reg()
		w.and(Mem{Base: ptr, Disp: w.bytes * i}, mask, t)
		vmax(t, a, a)
	}
	ADDQ(U32(step), ptr)
	SUBQ(U32(step), n)
	JMP(LabelRef(name + "_loop"))

	Label(name + "_done")
	r := foldMax(acc, bits, w)
	VZEROUPPER()
	Store(r, ReturnIndex(0))
	RET()
}

// primePage emits, for a loop whose loads at p advance by a divisor of 4 KiB,
// a prefetch of the first line of the page two pages on (primeAhead bytes)
// where p is at a page boundary at the top of an iteration (so only where p
// starts at a multiple of the step; elsewhere it never fires, which costs
// nothing), with label after it: the hardware's prefetchers stop at the end of
// a page and take a few misses to start on the next, and one line a page sets
// them going early. On a 2-core Zen 5, input out of the caches, alternated in
// one process: absMax over 16 MiB 1.04-1.15 times as fast on two threads with
// AVX-512, 1.11-1.16 with AVX2 (one thread: with AVX2 1.18-1.20, with
// AVX-512 0.99-1.10); tensor-wise quantization of float32 [8352, 3840] 0.85-0.96 of the
// time with AVX-512, 0.88-0.96 with AVX2 (bfloat16 and row-wise: the same). In
// the dequantize kernels, which write four times what they read, it made no
// difference (0.96-1.16), so they do without. Every gemv kernel (1, 2 and 4
// rows of x, in linear.go) uses it too.
func primePage(label string, p Register) {
	TESTQ(U32(4095), p)
	JNZ(LabelRef(label))
	PREFETCHT0(Mem{Base: p, Disp: primeAhead})
	Label(label)
}

// primeAhead is how far on primePage prefetches: 4 KiB and 16 KiB
// measured the same as 8 in the one-row products.
const primeAhead = 8192

// foldMax folds the unsigned bits-bit maxima in acc (clobbered) into one,
// in a new general register: the accumulators, then halves of the
// register down to 128 bits, then byte shifts within it down to one
// element.
func foldMax(acc []VecVirtual, bits int, w width) Register {
	vmax := maxFor(bits)
	for _, a := range acc[1:] {
		vmax(a, acc[0], acc[0])
	}
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
	return r
}

// maxFor is the unsigned maximum of bits-bit lanes (VPMAXUW is AVX512BW
// in its 512-bit form).
func maxFor(bits int) func(a, b, dst Op) {
	if bits == 32 {
		return func(a, b, dst Op) { VPMAXUD(a, b, dst) }
	}
	return func(a, b, dst Op) { VPMAXUW(a, b, dst) }
}

// absMask is the register of sign-clearing masks for bits-bit lanes.
func absMask(bits int, w width) VecVirtual {
	return w.broadcast(map[int]uint32{16: 0x7fff7fff, 32: 0x7fffffff}[bits])
}

// The rows of a width's constant table (see qdqTable), w.bytes apart.
const (
	rowQuantOrder   = iota // VPERMD order of a quantize block after the packs
	rowDequantOrder        // VPERMD order of a bfloat16 dequantize block after the pack
	rowLaneIndex           // 0, 1, 2, ...
	rowPCGMul              // the noise hash's constants (quant.Noise)
	rowPCGAdd
	rowPCGMul2
	rowFour
	rowTwoM24 // 2^-24 as float32
	rowOne    // bfloat16 rounding: the lowest kept bit, the bias, the kept bits
	rowBias
	rowHiMask
	rowQMax // 127.0
	// VPERMD order of a quantize block after the packs when its bfloat16
	// input was widened by unpacking (unpackedOrder)
	rowQuantOrderUnpacked
	rowRegatherA // VPERMI2PS indices of regather (AVX-512)
	rowRegatherB
	tableRows
)

// qdqTable emits w's constant table, one register of lanes per row, which
// the kernels read as memory operands where they have no register to spare.
func qdqTable(w width) Mem {
	lanes := w.lanes()
	groups := lanes / 4 // 128-bit lanes
	m := GLOBL("qdqConst"+w.name, RODATA|NOPTR)
	var rows tableCheck
	defer rows.complete("qdqConst", tableRows)
	row := func(r int, f func(j int) uint32) {
		rows.emit(r)
		for j := range lanes {
			DATA(w.bytes*r+4*j, U32(f(j)))
		}
	}
	// The packs interleave the registers' 128-bit lanes: dword 4l+s of a
	// quantize block holds 4 bytes of register s from its 128-bit lane l,
	// and qword 2l+s of a dequantize block 4 words of register s.
	row(rowQuantOrder, func(j int) uint32 { return uint32(4*(j%groups) + j/groups) })
	row(rowDequantOrder, func(j int) uint32 {
		q := j / 2
		return uint32(2*(2*(q%groups)+q/groups) + j%2)
	})
	row(rowLaneIndex, func(j int) uint32 { return uint32(j) })
	for _, rc := range [][2]uint32{
		{rowPCGMul, 747796405}, {rowPCGAdd, 2891336453}, {rowPCGMul2, 277803737}, {rowFour, 4},
		{rowTwoM24, 0x33800000}, {rowOne, 1}, {rowBias, 0x7fff}, {rowHiMask, 0xffff0000}, {rowQMax, 0x42fe0000},
	} {
		row(int(rc[0]), func(int) uint32 { return rc[1] })
	}
	// (In order of offset: the assembler requires it.)
	unpacked := unpackedOrder(lanes)
	row(rowQuantOrderUnpacked, func(j int) uint32 { return unpacked[j] })
	for i, r := range []int{rowRegatherA, rowRegatherB} {
		row(r, func(p int) uint32 { return regatherIndex(2*i+p/8, p) })
	}
	return m
}

// tableCheck makes the generator fail when a constant table's rows and
// their names disagree: a row named but never written, or written twice,
// would leave a kernel reading zeros or the next row.
type tableCheck map[int]bool

// emit records row r as written.
func (t *tableCheck) emit(r int) {
	if *t == nil {
		*t = tableCheck{}
	}
	if (*t)[r] {
		panic(fmt.Sprintf("table row %d written twice", r))
	}
	(*t)[r] = true
}

// complete panics unless rows 0 to n-1, and no others, were written.
func (t *tableCheck) complete(table string, n int) {
	for r := range n {
		if !(*t)[r] {
			panic(fmt.Sprintf("%s: row %d of %d not written", table, r, n))
		}
	}
	if len(*t) != n {
		panic(fmt.Sprintf("%s: %d rows written, %d named", table, len(*t), n))
	}
}

// regatherIndex is the VPERMI2PS index that puts at position p of a
// first-level result of regather, from the registers of chunks c and c+1
// (c even), value j of chunk c + p%8/4 for block b: position 4j + b of
// that register (c + p%8/4), j = p%4. Blocks 2i and 2i+1 share the
// indices of row i (p/8 picks the block).
func regatherIndex(b, p int) uint32 {
	c, j := p%8/4, p%4
	return uint32(16*c + 4*j + b)
}

// unpackedOrder returns the VPERMD order that puts a quantize block in
// order after the packs when its four registers were widened from
// bfloat16 by unpacking (widenUnpacked): it follows each element through
// the unpacks and the packs, all of which work within 128-bit lanes.
func unpackedOrder(lanes int) []uint32 {
	// elem[r][i]: the element in dword i of register r after widening.
	var elem [4][]int
	for p := range 2 {
		for half := range 2 { // unpack low, unpack high
			r := make([]int, lanes)
			for i := range r {
				l, s := i/4, i%4
				r[i] = p*2*lanes + 8*l + 4*half + s
			}
			elem[2*p+half] = r
		}
	}
	// VPACKSSDW(v1, v0) puts v0's then v1's 4 dwords of each 128-bit lane
	// as words in it; VPACKSSWB(v2', v0') the two's 8 words as bytes.
	words := func(a, b []int) []int {
		out := make([]int, 2*lanes)
		for l := range lanes / 4 {
			copy(out[8*l:], a[4*l:4*l+4])
			copy(out[8*l+4:], b[4*l:4*l+4])
		}
		return out
	}
	w0, w2 := words(elem[0], elem[1]), words(elem[2], elem[3])
	bytes := make([]int, 4*lanes)
	for l := range lanes / 4 {
		copy(bytes[16*l:], w0[8*l:8*l+8])
		copy(bytes[16*l+8:], w2[8*l:8*l+8])
	}
	order := make([]uint32, lanes)
	for d := range lanes {
		order[bytes[4*d]/4] = uint32(d)
	}
	return order
}

// row is row r of the constant table tab.
func (w width) row(tab Mem, r int) Mem { return tab.Offset(w.bytes * r) }

// load and store move a whole register (integer lanes) to and from memory.
func (w width) load(m Mem, v VecVirtual) {
	if w.bytes == 64 {
		VMOVDQU32(m, v)
	} else {
		VMOVDQU(m, v)
	}
}

func (w width) store(v VecVirtual, m Mem, nt bool) {
	switch {
	case nt:
		VMOVNTDQ(v, m)
	case w.bytes == 64:
		VMOVDQU32(v, m)
	default:
		VMOVDQU(v, m)
	}
}

// broadcastGP fills a new register with the 32-bit general register r.
func (w width) broadcastGP(r Register) VecVirtual {
	v := w.reg()
	w.broadcastTo(r, v)
	return v
}

// broadcastTo fills v with the 32-bit general register r (AVX512F
// broadcasts from a general register; AVX2 through v's low lane).
func (w width) broadcastTo(r Register, v interface {
	Vec
	Op
}) {
	if w.bytes == 64 {
		VPBROADCASTD(r, v)
		return
	}
	VMOVD(r, v.AsX())
	VPBROADCASTD(v.AsX(), v)
}

// roundBF16 rounds the float32 lanes of v to bfloat16 in place (nearest,
// ties to even) and leaves them as float32; v must not hold NaN. It adds
// 0x7fff plus the lowest kept bit to the bits, then clears the low half.
// The constants are registers or rows of the table.
func roundBF16(w width, v VecVirtual, one, bias, himask Op) {
	t := w.reg()
	VPSRLD(Imm(16), v, t)
	w.and(one, t, t)
	VPADDD(bias, v, v)
	VPADDD(t, v, v)
	w.and(himask, v, v)
}

// veltkamp rounds the float32 lanes of v in place to the precision of the
// splitter's T, 2^(24-p) + 1 for p significant bits, by Veltkamp's
// splitting: g = v·c, v = g + (v - g), each rounded to float32, which
// rounds to p bits, to nearest with ties to even, wherever v, v·c and the
// result are normal and finite. The lean kernels use it, where |v| <
// 2^15: below T's normal range (float32's, for bfloat16) its result may
// differ from T's rounding, but both then lie below 1/2 and round to the
// same integer, 0. TestVeltkamp checks whole binades, which by scaling
// covers every normal one, and samples those below.
func veltkamp(w width, v, splitter VecVirtual) {
	g, d := w.reg(), w.reg()
	VMULPS(splitter, v, g)
	VSUBPS(g, v, d)
	VADDPS(d, g, v)
}

// widenUnpacked widens two registers of bfloat16 at m to float32 in the
// four registers of v: each register's words unpacked against zero, low
// then high words of each 128-bit lane (v[0] and v[1] from the first,
// v[2] and v[3] from the second), so each 128-bit lane holds elements
// out of order; rowQuantOrderUnpacked puts them back after the packs.
func widenUnpacked(w width, m Mem, zero VecVirtual, v []VecVirtual) {
	for p := range 2 {
		raw := w.reg()
		w.load(m.Offset(w.bytes*p), raw)
		VPUNPCKLWD(raw, zero, v[2*p])
		VPUNPCKHWD(raw, zero, v[2*p+1])
	}
}

// sfence emits the fence that orders the non-temporal stores of the
// quantize and dequantize kernels before the caller's next stores.
func sfence() {
	TEXT("sfence", NOSPLIT, "func()")
	Doc("sfence orders the calling thread's earlier non-temporal stores before its later stores (SFENCE).")
	SFENCE()
	RET()
}

// ntLoops emits a kernel's loop twice, first with ordinary stores, then
// with non-temporal ones, and picks one by the bool in nt. body emits one
// iteration (it returns when n is 0). Non-temporal stores are weakly
// ordered, and Go's memory model assumes ordinary ones: parallelFor runs
// sfence on each thread after its parts, before it publishes them (the
// WaitGroup that hands them to the thread waiting on them). A fence in each call would wait for the stores
// to drain once per row in the row-wise passes (measured 2-3% of a float32
// dequantization).
func ntLoops(name string, n, nt Register, body func(nt bool)) {
	ntLoopsResult(name, n, nt, body, nil)
}

// ntLoopsResult is ntLoops for a kernel that returns a uint32: result,
// if not nil, emits its computation (from the loops' registers) at the
// end.
func ntLoopsResult(name string, n, nt Register, body func(nt bool), result func() Register) {
	TESTB(nt, nt)
	JNZ(LabelRef(name + "_nt"))
	Label(name + "_loop")
	CMPQ(n, Imm(0))
	JE(LabelRef(name + "_done"))
	body(false)
	JMP(LabelRef(name + "_loop"))

	Label(name + "_nt")
	CMPQ(n, Imm(0))
	JE(LabelRef(name + "_ntdone"))
	body(true)
	JMP(LabelRef(name + "_nt"))

	Label(name + "_ntdone")
	Label(name + "_done")
	var r Register
	if result != nil {
		r = result()
	}
	VZEROUPPER()
	if result != nil {
		Store(r, ReturnIndex(0))
	}
	RET()
}

// quantForm is the form of a quantize kernel.
type quantForm struct {
	stochastic bool // the contract's stochastic rounding, not half to even
	bounded    bool // no clamp: every quotient is below 2^15 in magnitude
	next       bool // bounded and lean, also returning the next row's abs-max
	// lean (bounded only): rounding to T by Veltkamp's splitting and
	// bfloat16 widened by unpacking (for bfloat16, 38 instructions per 32
	// elements instead of 48). Only AVX2 has the next form: on a 2-core
	// Zen 4 with AVX-512 (BENCHMARKS.md, "AVX-512 on a 2-core Zen 4") the
	// lean bounded kernels took 0.94-0.99 of the plain ones' time for
	// float16 and bfloat16 row-wise, but the next form was no faster than
	// prefetching the next row (float32 1.07-1.09x slower), and dividing
	// was not the limit (VMULPS in its place, timing only: no faster).
	lean bool
}

// quantize emits the kernel that quantizes dt elements, four registers of
// lanes (one register of int8 results) per iteration, rounding half to
// even, or (stochastic) with the contract's stochastic rounding.
//
// The quotients are clamped only from above: VCVTPS2DQ turns a value
// below -2^31 (or -Inf) into -2^31, which the saturating packs take to
// -128 as they do every value below -128, but a value above 2^31 would
// become -2^31 too, so the clamp to 127 stays. Clamping commutes with
// rounding to an integer. With bounded set the kernel has no clamp at all,
// for callers that know every quotient is below 2^15 in magnitude (a scale
// computed from the abs-max, or one checked against it), so that neither
// float16's rounding (infinite past 65504) nor VCVTPS2DQ overflows: then
// the packs' saturation clamps alone, and a vector instruction per
// register is saved.
//
// Each iteration prefetches the input ahead bytes further on (a row-wise
// caller without the next form passes the row length, so the next row's
// abs-max reads cache while this row is quantized; the next form
// prefetches ahead bytes past the next row's block instead), and a line a
// page two pages on (primePage) of the same stream. With nt the
// int8 results are stored non-temporally (dst must then be aligned to a
// register).
//
// With next set (bounded only), the kernel also returns the abs-max bits
// of the next row, as absMax does, reading it as it quantizes this one:
// the row-wise pass then reads memory for the next row while it computes
// this one's quotients from the cache, and prefetches ahead past the next
// row's block instead of this one's.
func quantize(name string, dt string, form quantForm, w width, tab Mem) {
	stochastic, bounded, next := form.stochastic, form.bounded, form.next
	size := elemSize(dt)
	bits := 8 * size
	lanes := w.lanes()
	block := 4 * lanes
	// bfloat16 and float16 rounded half to even multiply by the divisor's
	// reciprocal: the same integers (see above).
	recip := !stochastic && dt != "float32"
	divisor := "t"
	if recip {
		divisor = "r" // 1/t
	}
	sig := "func(src []byte, dst []byte, " + divisor + " float32, ahead int, nt bool)"
	rule := "roundHalfEven(rT(x[i] / t))"
	switch {
	case stochastic:
		sig = "func(src []byte, dst []byte, t float32, k0 uint64, ahead int, nt bool)"
		rule = "floor(rT(rT(x[i] / t) + rT(u)))"
	case next:
		sig = "func(src []byte, dst []byte, " + divisor + " float32, next []byte, ahead int, nt bool) uint32"
	}
	TEXT(name, NOSPLIT, sig)
	Pragma("noescape")
	doc := []string{
		name + " sets dst[i] = int8(clamp(" + rule + ")) for " + dt + " x in src,",
	}
	if recip {
		doc = append(doc, "by the product by r = 1/t rounded to float32 (the same integers),")
	}
	if bounded {
		doc = append(doc, "each quotient x[i] / t below 2^15 in magnitude (it has no clamp of its own),")
	}
	if next {
		doc = append(doc, fmt.Sprintf("and returns the unsigned maximum of the sign-cleared %d-bit elements of next", bits),
			"(which holds as many elements as src), prefetching ahead bytes past each block of next,",
			"storing non-temporally if nt")
	} else {
		doc = append(doc, "prefetching ahead bytes past each block of src, storing non-temporally if nt")
	}
	doc = append(doc,
		fmt.Sprintf("(dst aligned to %d bytes then). len(dst) must be a multiple of %d", w.bytes, block),
		"and src must hold len(dst) elements.")
	if stochastic {
		doc = append(doc, "u is quant.Noise's for element i with k = k0 + i; the low 32 bits of k0 + i",
			"must not wrap within the call.")
	}
	Doc(doc...)
	src := Load(Param("src").Base(), GP64())
	dst := Load(Param("dst").Base(), GP64())
	n := Load(Param("dst").Len(), GP64())
	ahead := Load(Param("ahead"), GP64())
	nt := Load(Param("nt"), GP8())
	t := w.broadcastParam(divisor)
	// The lean kernels round to T by Veltkamp's splitting (see veltkamp)
	// and widen bfloat16 by unpacking it against zero. (For float16 the
	// split is one instruction more than F16C's round trip, and measured
	// 1-4% faster: BENCHMARKS.md.)
	split := form.lean && dt != "float32"
	unpack := form.lean && dt == "bfloat16"
	perm := w.reg()
	if unpack {
		w.load(w.row(tab, rowQuantOrderUnpacked), perm)
	} else {
		w.load(w.row(tab, rowQuantOrder), perm)
	}
	var splitter, zero VecVirtual
	if split {
		// 2^(24-p) + 1 for T's p significant bits: 65537, 8193.
		splitter = w.broadcast(map[string]uint32{"bfloat16": 0x47800080, "float16": 0x46000400}[dt])
	}
	if unpack {
		zero = w.reg()
		w.xor(zero, zero, zero)
	}
	// The rounding constants: registers, or for the stochastic kernels,
	// whose hash needs the registers, rows of the table.
	var qmax, one, bias, himask Op = w.row(tab, rowQMax), w.row(tab, rowOne), w.row(tab, rowBias), w.row(tab, rowHiMask)
	var k, kStep, kHi VecVirtual
	if stochastic {
		// k's low half per lane, counting up; its high half, the same in
		// every lane of the call.
		k0 := GP64()
		Load(Param("k0"), k0)
		k = w.broadcastGP(k0.As32())
		VPADDD(w.row(tab, rowLaneIndex), k, k)
		SHRQ(Imm(32), k0)
		kHi = w.broadcastGP(k0.As32())
		kStep = w.broadcast(uint32(lanes))
	} else {
		if !bounded {
			qmax = w.broadcast(0x42fe0000) // 127.0
		}
		if dt == "bfloat16" && !split {
			one, bias, himask = w.broadcast(1), w.broadcast(0x7fff), w.broadcast(0xffff0000)
		}
	}
	roundT := func(y VecVirtual) {
		switch {
		case split:
			veltkamp(w, y, splitter)
			return
		}
		switch dt {
		case "bfloat16":
			roundBF16(w, y, one, bias, himask)
		case "float16":
			VCVTPS2PH(Imm(0), y, w.half(y))
			VCVTPH2PS(w.half(y), y)
		}
	}

	var nx Register
	var mask VecVirtual
	var acc []VecVirtual
	if next {
		nx = Load(Param("next").Base(), GP64())
		mask = absMask(bits, w)
		acc = []VecVirtual{w.reg(), w.reg()}
		for _, a := range acc {
			w.xor(a, a, a)
		}
	}
	pf := src
	if next {
		pf = nx
	}

	body := func(nonTemporal bool) {
		for off := 0; off < block*size; off += 64 {
			PREFETCHT0(Mem{Base: pf, Index: ahead, Scale: 1, Disp: off})
		}
		primePage(fmt.Sprintf("%s_inpage%v", name, nonTemporal), pf)
		if next {
			for i := 0; i < block*size/w.bytes; i++ {
				x := w.reg()
				w.and(Mem{Base: nx, Disp: w.bytes * i}, mask, x)
				maxFor(bits)(x, acc[i%2], acc[i%2])
			}
			ADDQ(U32(block*size), nx)
		}
		v := make([]VecVirtual, 4)
		for g := range v {
			v[g] = w.reg()
		}
		if unpack {
			widenUnpacked(w, Mem{Base: src}, zero, v)
		}
		for g := range v {
			y := v[g]
			if !unpack {
				widenLoad(dt, Mem{Base: src, Disp: lanes * size * g}, y)
			}
			// Divide (see above), then round the quotient to T.
			if recip {
				VMULPS(t, y, y)
			} else {
				VDIVPS(t, y, y)
			}
			roundT(y)
			if stochastic {
				u := noise(w, k, kHi, tab)
				VPADDD(kStep, k, k)
				roundT(u)
				VADDPS(u, y, y)
				roundT(y)
				if w.bytes == 64 {
					VRNDSCALEPS(Imm(9), y, y) // floor, no precision exception
				} else {
					VROUNDPS(Imm(9), y, y)
				}
			}
			if !bounded {
				VMINPS(qmax, y, y)
			}
			VCVTPS2DQ(y, y) // round to nearest even (an integer already if stochastic)
			// Pack with saturation as soon as a pair is done, so that
			// fewer registers are live.
			switch g {
			case 1:
				VPACKSSDW(v[1], v[0], v[0])
			case 3:
				VPACKSSDW(v[3], v[2], v[2])
				VPACKSSWB(v[2], v[0], v[0])
			}
		}
		// The packs work within 128-bit lanes; VPERMD puts the dwords
		// back in order.
		VPERMD(v[0], perm, v[0])
		w.store(v[0], Mem{Base: dst}, nonTemporal)
		ADDQ(U32(block*size), src)
		ADDQ(U32(block), dst)
		SUBQ(U32(block), n)
	}
	if !next {
		ntLoops(name, n, nt, body)
		return
	}
	ntLoopsResult(name, n, nt, body, func() Register { return foldMax(acc, bits, w) })
}

// noise returns a new register with quant.Noise's u for the indices whose
// low halves are in k and high half in kHi: pcg of their XOR, all uint32
// arithmetic, then its top 24 bits times 2^-24 (both exact).
func noise(w width, k, kHi VecVirtual, tab Mem) VecVirtual {
	x, sh, word := w.reg(), w.reg(), w.reg()
	w.xor(kHi, k, x)
	VPMULLD(w.row(tab, rowPCGMul), x, x) // state
	VPADDD(w.row(tab, rowPCGAdd), x, x)
	VPSRLD(Imm(28), x, sh)
	VPADDD(w.row(tab, rowFour), sh, sh)
	VPSRLVD(sh, x, word) // state >> ((state >> 28) + 4)
	w.xor(x, word, word)
	VPMULLD(w.row(tab, rowPCGMul2), word, word)
	VPSRLD(Imm(22), word, x)
	w.xor(word, x, x)
	VPSRLD(Imm(8), x, x)
	VCVTDQ2PS(x, x)
	VMULPS(w.row(tab, rowTwoM24), x, x)
	return x
}

// storer writes registers of float32 lanes to memory as dt, rounding to
// nearest, ties to even. Its constants are made once, before a kernel's
// loop.
type storer struct {
	dt               string
	w                width
	one, bias, quiet VecVirtual
}

func newStorer(dt string, w width) storer {
	st := storer{dt: dt, w: w}
	if dt == "bfloat16" {
		st.one, st.bias, st.quiet = w.broadcast(1), w.broadcast(0x7fff), w.broadcast(0x40)
	}
	return st
}

// store writes the lanes of y (which it clobbers) to out. On AVX2 a
// bfloat16 register is only rounded here, and written by finish.
func (st storer) store(y VecVirtual, out Mem) {
	w := st.w
	switch st.dt {
	case "bfloat16":
		st.roundBF16(y)
		if w.narrowStore {
			VPMOVDW(y, out)
		}
	case "float16":
		VCVTPS2PH(Imm(0), y, out)
	default:
		VMOVUPS(y, out)
	}
}

// roundBF16 leaves in each 32-bit lane of y (clobbered) the bfloat16 bits
// of its float32, rounded to nearest even on the bits: the top half; a
// NaN keeps its top bits and is quieted, as the Go conversion does.
func (st storer) roundBF16(y VecVirtual) {
	w := st.w
	top, t := w.reg(), w.reg()
	nan := w.mask()
	VPSRLD(Imm(16), y, top)
	w.and(st.one, top, t)
	VCMPPS(Imm(3), y, y, nan) // unordered: NaN lanes
	VPADDD(st.bias, y, y)
	VPADDD(t, y, y)
	VPSRLD(Imm(16), y, y)
	w.or(st.quiet, top, top)
	w.blend(nan, top, y)
}

// round rounds the float32 lanes of y to dt and back, in place: rT as
// float32 values.
func (st storer) round(y VecVirtual) {
	switch st.dt {
	case "bfloat16":
		st.roundBF16(y)
		VPSLLD(Imm(16), y, y)
	case "float16":
		h := st.w.half(y)
		VCVTPS2PH(Imm(0), y, h)
		VCVTPH2PS(h, y)
	}
}

// finish writes the two bfloat16 registers v that store rounded, on
// AVX2, to out.
func (st storer) finish(v []VecVirtual, out Mem) {
	if st.dt == "bfloat16" && !st.w.narrowStore {
		// The lanes hold values below 1<<16, so the unsigned saturating
		// pack keeps them; it works within 128-bit lanes, VPERMQ restores
		// the order.
		VPACKUSDW(v[1], v[0], v[0])
		VPERMQ(Imm(0xd8), v[0], v[0])
		VMOVDQU(v[0], out)
	}
}

// dequantize emits the kernel that dequantizes int8 to dt, two registers
// of lanes per iteration (four for float32 on AVX2: whole lines, measured
// 2-4% faster), storing non-temporally when asked. The scale
// is finite (the operation checks it), so no product is NaN and the
// bfloat16 rounding needs no NaN case.
func dequantize(name string, dt string, w width, tab Mem) {
	size := elemSize(dt)
	lanes := w.lanes()
	regs := 2
	if dt == "float32" && w.bytes == 32 {
		regs = 4 // two whole lines of output per iteration
	}
	block := regs * lanes
	TEXT(name, NOSPLIT, "func(q []byte, s float32, dst []byte, nt bool)")
	Pragma("noescape")
	Doc(name+" sets dst[i] = "+dt+"(float32(int8(q[i])) * s), s finite,",
		fmt.Sprintf("storing non-temporally if nt (dst aligned to %d bytes then).", w.bytes),
		fmt.Sprintf("len(q) must be a multiple of %d and dst must hold len(q) elements.", block))
	q := Load(Param("q").Base(), GP64())
	n := Load(Param("q").Len(), GP64())
	dst := Load(Param("dst").Base(), GP64())
	nt := Load(Param("nt"), GP8())
	s := w.broadcastParam("s")
	var one, bias, perm VecVirtual
	if dt == "bfloat16" {
		one, bias = w.broadcast(1), w.broadcast(0x7fff)
		if w.bytes == 64 {
			perm = w.reg()
			w.load(w.row(tab, rowDequantOrder), perm)
		}
	}

	ntLoops(name, n, nt, func(nonTemporal bool) {
		v := make([]VecVirtual, regs)
		for g := range v {
			v[g] = w.reg()
			y := v[g]
			// Sign-extend to int32, convert (exact), multiply once.
			VPMOVSXBD(Mem{Base: q, Disp: lanes * g}, y)
			VCVTDQ2PS(y, y)
			VMULPS(s, y, y)
			switch dt {
			case "bfloat16":
				// Round to nearest even on the bits, keep the top half.
				t := w.reg()
				VPSRLD(Imm(16), y, t)
				w.and(one, t, t)
				VPADDD(bias, y, y)
				VPADDD(t, y, y)
				VPSRLD(Imm(16), y, y)
			case "float16":
				if !nonTemporal {
					VCVTPS2PH(Imm(0), y, Mem{Base: dst, Disp: lanes * 2 * g})
				} else {
					VCVTPS2PH(Imm(0), y, w.half(y))
				}
			default:
				if nonTemporal {
					VMOVNTPS(y, Mem{Base: dst, Disp: w.bytes * g})
				} else {
					VMOVUPS(y, Mem{Base: dst, Disp: w.bytes * g})
				}
			}
		}
		switch {
		case dt == "bfloat16":
			// The lanes hold values below 1<<16, which the unsigned
			// saturating pack keeps; it works within 128-bit lanes, the
			// permute restores the order.
			VPACKUSDW(v[1], v[0], v[0])
			if w.bytes == 64 {
				VPERMD(v[0], perm, v[0])
			} else {
				VPERMQ(Imm(0xd8), v[0], v[0])
			}
			w.store(v[0], Mem{Base: dst}, nonTemporal)
		case dt == "float16" && nonTemporal:
			// One whole register for the non-temporal store.
			if w.bytes == 64 {
				VINSERTI64X4(Imm(1), v[1].AsY(), v[0], v[0])
			} else {
				VINSERTI128(Imm(1), v[1].AsX(), v[0], v[0])
			}
			VMOVNTDQ(v[0], Mem{Base: dst})
		}
		ADDQ(U32(block), q)
		ADDQ(U32(block*size), dst)
		SUBQ(U32(block), n)
	})
}

// The ConvRot rotation (quant.Rotate) of float32 rows in place, in
// exactly its order of operations, so the results are the same bits:
//
//   - stage by stage, with strides 1, 4, 16, ... up to g/4; each stage
//     maps every four values a, b, c, d that are stride apart (within a
//     block of 4*stride) to s-2d, s-2c, s-2b, s-2a, where s = ((a+b)+c)+d
//     is summed in that order;
//   - then every value times 2^-(log4 g), which the last stage does right
//     after its subtraction: the same two roundings as a separate pass.
//
// The products by 2 are exact (x+x, as the Go compiler computes them, is
// the same value), and are done by VMULPS so that they run beside the
// additions on CPUs with separate adders and multipliers. Each operation
// keeps the Go code's operand order (a first in every sum, s first in
// every difference, the value first in the product), so even the payload
// of a NaN, which x86 takes from the first operand, matches. Vector lanes
// only do many butterflies at once:
//
//   - strides 1 and 4 within blocks of 16 values: the kernel loads the
//     four 128-bit chunks of a block into four registers, chunk r into
//     register r, one block per 128-bit lane (two blocks on AVX2, four on
//     AVX-512). The stride-4 butterflies are then of whole registers. For
//     the stride-1 ones, a 4x4 transpose within each 128-bit lane puts
//     value j of every chunk into register j, so they are of whole
//     registers too, and a second transpose undoes it;
//   - strides of 16 and more: a, b, c and d are whole registers of
//     consecutive values, stride apart.

// butterfly does the butterflies on the lanes of a, b, c and d, stride
// apart in the rows, and returns the registers that hold the four results
// in row order (d's register holds s-2d, the first, and so on). two holds
// 2.0 in every lane.
func butterfly(w width, two, a, b, c, d VecVirtual) []VecVirtual {
	s := w.reg()
	VADDPS(b, a, s)
	VADDPS(c, s, s)
	VADDPS(d, s, s)
	out := []VecVirtual{d, c, b, a}
	for _, x := range out {
		VMULPS(two, x, x)
		VSUBPS(x, s, x)
	}
	return out
}

// transpose4 transposes the 4x4 matrices of float32 that x[0..3] form in
// each 128-bit lane: lane j of the result's register i is lane i of
// x[j]'s. It is its own inverse.
func transpose4(w width, x []VecVirtual) []VecVirtual {
	t := []VecVirtual{w.reg(), w.reg(), w.reg(), w.reg()}
	VUNPCKLPS(x[1], x[0], t[0]) // x0[0] x1[0] x0[1] x1[1]
	VUNPCKHPS(x[1], x[0], t[1]) // x0[2] x1[2] x0[3] x1[3]
	VUNPCKLPS(x[3], x[2], t[2]) // x2[0] x3[0] x2[1] x3[1]
	VUNPCKHPS(x[3], x[2], t[3]) // x2[2] x3[2] x2[3] x3[3]
	out := []VecVirtual{w.reg(), w.reg(), w.reg(), w.reg()}
	VUNPCKLPD(t[2], t[0], out[0]) // x0[0] x1[0] x2[0] x3[0]
	VUNPCKHPD(t[2], t[0], out[1])
	VUNPCKLPD(t[3], t[1], out[2])
	VUNPCKHPD(t[3], t[1], out[3])
	return out
}

// chunks rearranges four registers of consecutive values (one block of
// 16 per register with AVX-512, one per two registers with AVX2) so that
// register c holds 128-bit chunk c of each block, one block per lane: a
// transpose of 128-bit lanes. unchunks undoes it.
func chunks(w width, x []VecVirtual) []VecVirtual {
	if w.bytes == 64 {
		var out []VecVirtual
		transposeLanesF(w, [4]VecVirtual{x[0], x[1], x[2], x[3]}, func(_ int, o VecVirtual) { out = append(out, o) })
		return out
	}
	// x[0] and x[1] hold block 0, x[2] and x[3] block 1.
	out := []VecVirtual{w.reg(), w.reg(), w.reg(), w.reg()}
	VPERM2F128(Imm(0x20), x[2], x[0], out[0]) // chunk 0 of blocks 0 and 1
	VPERM2F128(Imm(0x31), x[2], x[0], out[1])
	VPERM2F128(Imm(0x20), x[3], x[1], out[2])
	VPERM2F128(Imm(0x31), x[3], x[1], out[3])
	return out
}

// regather emits the rearrangement of four 512-bit registers x from
// register c, lane j, value b to register b, lane c, value j (rotateRegs'
// last): value 4c+j of result b is value 4j+b of x[c]. VPERMI2PS gathers
// from x[c] and x[c+1] (c even) the values of blocks b = 2i and 2i+1 (row
// i of regatherIndex's), in the order of the result's values; VSHUFF32X4
// then joins the halves of x[0..1]'s and x[2..3]'s.
func regather(w width, tab Mem, x []VecVirtual) []VecVirtual {
	var t [4]VecVirtual // t[2h+i]: from x[2h] and x[2h+1], blocks 2i and 2i+1
	for h := range 2 {
		for i := range 2 {
			v := w.reg()
			VMOVDQU32(w.row(tab, rowRegatherA+i), v)
			VPERMI2PS(x[2*h+1], x[2*h], v)
			t[2*h+i] = v
		}
	}
	out := make([]VecVirtual, 4)
	for b := range out {
		out[b] = w.reg()
		imm := uint64(0x44) // lanes 0 and 1 of each: block 2i
		if b%2 == 1 {
			imm = 0xEE // lanes 2 and 3: block 2i+1
		}
		VSHUFF32X4(Imm(imm), t[2+b/2], t[b/2], out[b])
	}
	return out
}

// unchunks is the inverse of chunks.
func unchunks(w width, x []VecVirtual) []VecVirtual {
	if w.bytes == 64 {
		return chunks(w, x) // a transpose is its own inverse
	}
	out := []VecVirtual{w.reg(), w.reg(), w.reg(), w.reg()}
	VPERM2F128(Imm(0x20), x[1], x[0], out[0]) // block 0's chunks 0 and 1
	VPERM2F128(Imm(0x20), x[3], x[2], out[1])
	VPERM2F128(Imm(0x31), x[1], x[0], out[2])
	VPERM2F128(Imm(0x31), x[3], x[2], out[3])
	return out
}

// rotateSmall emits the kernel for g = 4: the stride-1 stage and the
// product by the scale, on four registers of values per iteration.
func rotateSmall(name string, w width) {
	block := 4 * w.lanes()
	TEXT(name, NOSPLIT, "func(v []float32, scale float32)")
	Pragma("noescape")
	Doc(name+" does the stride-1 stage and the product by scale of the ConvRot rotation on v in place.",
		fmt.Sprintf("len(v) must be a multiple of %d.", block))
	p := Load(Param("v").Base(), GP64())
	n := Load(Param("v").Len(), GP64())
	scale := w.broadcastParam("scale")
	two := w.broadcast(0x40000000) // 2.0
	Label(name + "_loop")
	CMPQ(n, Imm(0))
	JE(LabelRef(name + "_done"))
	m := Mem{Base: p}
	x := make([]VecVirtual, 4)
	for i := range x {
		x[i] = w.reg()
		VMOVUPS(m.Offset(w.bytes*i), x[i])
	}
	x = transpose4(w, x)
	x = transpose4(w, butterfly(w, two, x[0], x[1], x[2], x[3]))
	for i, y := range x {
		VMULPS(scale, y, y)
		VMOVUPS(y, m.Offset(w.bytes*i))
	}
	ADDQ(U32(4*block), p)
	SUBQ(U32(block), n)
	JMP(LabelRef(name + "_loop"))

	Label(name + "_done")
	VZEROUPPER()
	RET()
}

// rotateGroups emits the kernel that does every stage of the rotation in
// groups of g values (16, 64, or with AVX-512 256), then (scaled) the
// product by the scale, on max(4, g/lanes) registers of values per
// iteration that stay in registers from load to store. For the stride-1
// and stride-4 stages, chunks puts chunk c of four blocks of 16 in
// register c and transpose4 value j of every chunk in register j (as the
// stride-4 and stride-1 butterflies need, see above), and the inverses
// put them back; the stages of stride 16 and 64 are of whole registers,
// stride/lanes apart.
func rotateGroups(name string, g int, scaled bool, w width, tab Mem) {
	regs := max(4, g/w.lanes())
	sig := "func(v []float32)"
	what := fmt.Sprintf("the stages of the ConvRot rotation in groups of %d", g)
	if scaled {
		sig = "func(v []float32, scale float32)"
		what += ", then the product by scale,"
	}
	TEXT(name, NOSPLIT, sig)
	Pragma("noescape")
	Doc(name+" does "+what+" on v in place.", fmt.Sprintf("len(v) must be a multiple of %d.", regs*w.lanes()))
	p := Load(Param("v").Base(), GP64())
	n := Load(Param("v").Len(), GP64())
	var scale VecVirtual
	if scaled {
		scale = w.broadcastParam("scale")
	}
	two := w.broadcast(0x40000000) // 2.0
	Label(name + "_loop")
	CMPQ(n, Imm(0))
	JE(LabelRef(name + "_done"))
	m := Mem{Base: p}
	r := make([]VecVirtual, regs)
	for i := range r {
		r[i] = w.reg()
		VMOVUPS(m.Offset(w.bytes*i), r[i])
	}
	rotateRegs(w, tab, two, r, g)
	for i, y := range r {
		if scaled {
			VMULPS(scale, y, y)
		}
		VMOVUPS(y, m.Offset(w.bytes*i))
	}
	ADDQ(U32(regs*w.bytes), p)
	SUBQ(U32(regs*w.lanes()), n)
	JMP(LabelRef(name + "_loop"))

	Label(name + "_done")
	VZEROUPPER()
	RET()
}

// rotateRegs emits every stage of the rotation in groups of g (16, 64
// or 256) of the consecutive values in r (a multiple of 4 registers, and
// of g values), leaving the results in r in the same order. tab is the
// constant table (regather's indices).
//
// Four registers hold four blocks of 16 values: register b, 128-bit lane c
// (chunk c), value j. With AVX-512, transpose4 puts value j of every chunk
// in register j (register j, lane c, value b) for the stride-1
// butterflies, transposeLanesF then chunk c in register c (register c,
// lane j, value b) for the stride-4 ones, and regather puts the values
// back in order: three rearrangements of 8 shuffles each. With AVX2
// (two blocks per four registers), chunks, transpose4, transpose4 again
// and unchunks: four.
func rotateRegs(w width, tab Mem, two VecVirtual, r []VecVirtual, g int) {
	for u := 0; u < len(r); u += 4 {
		if w.bytes == 64 {
			x := transpose4(w, r[u:u+4])
			x = chunks(w, butterfly(w, two, x[0], x[1], x[2], x[3]))
			copy(r[u:], regather(w, tab, butterfly(w, two, x[0], x[1], x[2], x[3])))
			continue
		}
		x := transpose4(w, chunks(w, r[u:u+4]))
		x = transpose4(w, butterfly(w, two, x[0], x[1], x[2], x[3]))
		copy(r[u:], unchunks(w, butterfly(w, two, x[0], x[1], x[2], x[3])))
	}
	for stride := 16; stride < g; stride *= 4 {
		d := stride / w.lanes() // registers apart
		for b := 0; b < len(r); b += 4 * d {
			for j := b; j < b+d; j++ {
				y := butterfly(w, two, r[j], r[j+d], r[j+2*d], r[j+3*d])
				r[j], r[j+d], r[j+2*d], r[j+3*d] = y[0], y[1], y[2], y[3]
			}
		}
	}
}

// rotateRows emits a kernel that rotates rows whole in one pass (AVX-512,
// g of 16 to 256: the groups fit in its registers), converting as it
// loads and stores, so that no float32 row goes through memory. With in
// "int8" it is the ConvRot dequantization, rT(rotate(float32(q) * s)),
// written to dst as out; else in = out, a float dtype, and it is the first
// half of the ConvRot quantization: rT(rotate(x)) written to dst, and the
// unsigned maximum of its sign-cleared bits returned (absMaxBits of dst,
// which then holds the row to quantize). The scale is the rotation's,
// 2^-(log4 g). It does the operations of widen (or scaleInt8),
// rotateGroups and narrow, in their order: the same bits.
func rotateRows(name string, g int, in, out string, w width, tab Mem) {
	regs := max(4, g/w.lanes())
	block := regs * w.lanes()
	quant := in != "int8"
	inSize, outSize := 1, elemSize(out)
	if quant {
		inSize = elemSize(in)
		TEXT(name, NOSPLIT, "func(src, dst []byte, scale float32) uint32")
		Doc(fmt.Sprintf("%s sets dst to the %s rounding of the ConvRot rotation in groups of %d of the %s", name, out, g, in),
			"elements of src, returning the unsigned maximum of their sign-cleared bits.",
			fmt.Sprintf("len(src) must be a multiple of %d elements, and dst as long.", block))
	} else {
		TEXT(name, NOSPLIT, "func(src []byte, s float32, dst []byte, scale float32, pf []byte)")
		Doc(fmt.Sprintf("%s sets dst to the %s rounding of the ConvRot rotation in groups of %d of", name, out, g),
			"float32(int8(src[i])) * s, and prefetches pf (the next row to come) as it reads src.",
			fmt.Sprintf("len(src) must be a multiple of %d, dst must hold len(src) elements and pf as many bytes.", block))
	}
	Pragma("noescape")
	p := Load(Param("src").Base(), GP64())
	n := Load(Param("src").Len(), GP64())
	dst := Load(Param("dst").Base(), GP64())
	var s VecVirtual
	var pf Register
	if !quant {
		s = w.broadcastParam("s")
		pf = Load(Param("pf").Base(), GP64())
	}
	scale := w.broadcastParam("scale")
	two := w.broadcast(0x40000000) // 2.0
	st := newStorer(out, w)
	var acc, mask VecVirtual
	if quant {
		acc, mask = w.reg(), absMask(map[int]int{2: 16, 4: 32}[outSize], w)
		w.xor(acc, acc, acc)
	}
	Label(name + "_loop")
	CMPQ(n, Imm(0))
	JE(LabelRef(name + "_done"))
	r := loadRotate(w, tab, two, in, Mem{Base: p}, s, pf, regs, g)
	for i, y := range r {
		VMULPS(scale, y, y)
		at := Mem{Base: dst, Disp: w.lanes() * outSize * i}
		switch {
		case quant && out == "float16":
			// The float16 bits, for the maximum, in 32-bit lanes.
			h := w.half(y)
			VCVTPS2PH(Imm(0), y, h)
			VMOVDQU32(h, at) // EVEX: the register may be past Y15
			VPMOVZXWD(h, y)
		default:
			st.store(y, at) // y holds the stored bits after (32-bit lanes)
		}
		if quant {
			w.and(y, mask, y)
			VPMAXUD(y, acc, acc)
		}
	}
	ADDQ(U32(block*inSize), p)
	ADDQ(U32(block*outSize), dst)
	SUBQ(U32(block*inSize), n)
	JMP(LabelRef(name + "_loop"))

	Label(name + "_done")
	if quant {
		m := foldMax([]VecVirtual{acc}, 32, w)
		VZEROUPPER()
		Store(m, ReturnIndex(0))
		RET()
		return
	}
	VZEROUPPER()
	RET()
}

// rotateLoad emits the first pass of a rotation in two or more passes
// (AVX2, whose registers hold 64 values): the stages of groups of g (16
// or 64) of the values converted as loaded (rotateRows's in), written to
// a float32 row, which later stages finish. (A last pass that also
// rounded to the dtype and took the maximum, as rotateRows does, was
// slower than rotateStage and the narrowing kernel after it: on AVX2 a
// register narrowed on its own costs two more shuffles, and 16 registers
// cannot hold two to narrow together beside the constants.)
func rotateLoad(name string, g int, in string, w width, tab Mem) {
	regs := max(4, g/w.lanes())
	block := regs * w.lanes()
	quant := in != "int8"
	inSize := 1
	if quant {
		inSize = elemSize(in)
		TEXT(name, NOSPLIT, "func(src []byte, dst []float32)")
		Doc(fmt.Sprintf("%s sets dst to the %s elements of src after the ConvRot stages of groups of %d.", name, in, g),
			fmt.Sprintf("len(dst) must be a multiple of %d, and src must hold len(dst) elements.", block))
	} else {
		TEXT(name, NOSPLIT, "func(src []byte, s float32, dst []float32, pf []byte)")
		Doc(fmt.Sprintf("%s sets dst to float32(int8(src[i])) * s after the ConvRot stages of groups of %d,", name, g),
			"and prefetches pf (the next row to come) as it reads src.",
			fmt.Sprintf("len(dst) must be a multiple of %d, and src and pf must hold len(dst) elements.", block))
	}
	Pragma("noescape")
	p := Load(Param("src").Base(), GP64())
	dst := Load(Param("dst").Base(), GP64())
	n := Load(Param("dst").Len(), GP64())
	var s VecVirtual
	var pf Register
	if !quant {
		s = w.broadcastParam("s")
		pf = Load(Param("pf").Base(), GP64())
	}
	two := w.broadcast(0x40000000) // 2.0
	Label(name + "_loop")
	CMPQ(n, Imm(0))
	JE(LabelRef(name + "_done"))
	r := loadRotate(w, tab, two, in, Mem{Base: p}, s, pf, regs, g)
	for i, y := range r {
		VMOVUPS(y, Mem{Base: dst, Disp: w.bytes * i})
	}
	ADDQ(U32(block*inSize), p)
	ADDQ(U32(block*4), dst)
	SUBQ(U32(block), n)
	JMP(LabelRef(name + "_loop"))

	Label(name + "_done")
	VZEROUPPER()
	RET()
}

// loadRotate emits the loads of regs registers of values at m (in
// converted as loadRotated says; with "int8", times s, prefetching along
// pf) and every stage of their rotation in groups of g, returning the
// registers: rotateRows's and rotateLoad's loop body up to the stores.
func loadRotate(w width, tab Mem, two VecVirtual, in string, m Mem, s VecVirtual, pf Register, regs, g int) []VecVirtual {
	size := 1
	if in != "int8" {
		size = elemSize(in)
	}
	r := make([]VecVirtual, regs)
	for i := range r {
		r[i] = w.reg()
		loadRotated(w, in, m.Offset(w.lanes()*size*i), s, r[i])
	}
	if in == "int8" {
		prefetchAlong(pf, regs*w.lanes())
	}
	rotateRegs(w, tab, two, r, g)
	return r
}

// prefetchAlong prefetches the lines of the next n bytes at pf (at least
// one line) and advances pf past them: the dequantizing rotations read
// int8 rows n bytes an iteration, and prefetch the next row to come as
// they go (an embedding's rows come in the indices' order, which the
// hardware cannot guess).
func prefetchAlong(pf Register, n int) {
	for l := 0; l < max(n, 64); l += 64 {
		PREFETCHT0(Mem{Base: pf, Disp: l})
	}
	ADDQ(U32(n), pf)
}

// loadRotated loads the lanes of y from m as a rotation's input: in
// widened, or with in "int8" float32(int8) times s.
func loadRotated(w width, in string, m Mem, s, y VecVirtual) {
	if in != "int8" {
		widenLoad(in, m, y)
		return
	}
	VPMOVSXBD(m, y)
	VCVTDQ2PS(y, y)
	VMULPS(s, y, y)
}

// rotateStage emits the kernel for one stage of stride 16 or more, 16
// values of a, b, c and d per iteration, and (scaled) the product by the
// scale after it, for the last stage.
func rotateStage(name string, scaled bool, w width) {
	sig := "func(v []float32, stride int)"
	if scaled {
		sig = "func(v []float32, stride int, scale float32)"
	}
	TEXT(name, NOSPLIT, sig)
	Pragma("noescape")
	what := "the stage of the given stride"
	if scaled {
		what += ", then the product by scale,"
	}
	Doc(name+" does "+what+" of the ConvRot rotation on v in place.",
		"stride must be a power of 4, at least 16, and len(v) a multiple of 4*stride.")
	p := Load(Param("v").Base(), GP64())
	n := Load(Param("v").Len(), GP64())
	s := Load(Param("stride"), GP64())
	var scale VecVirtual
	if scaled {
		scale = w.broadcastParam("scale")
	}
	two := w.broadcast(0x40000000) // 2.0
	// The stride in bytes.
	SHLQ(Imm(2), s)
	s3 := GP64()
	LEAQ(Mem{Base: s, Index: s, Scale: 2}, s3)
	end, quarter := GP64(), GP64()
	LEAQ(Mem{Base: p, Index: n, Scale: 4}, end)

	// Each block of 4*stride values holds stride butterflies: a from its
	// first quarter, b, c and d stride, 2*stride and 3*stride further.
	Label(name + "_block")
	CMPQ(p, end)
	JAE(LabelRef(name + "_done"))
	LEAQ(Mem{Base: p, Index: s, Scale: 1}, quarter)
	Label(name + "_loop")
	for u := 0; u < 64/w.bytes; u++ {
		at := []Mem{
			{Base: p, Disp: w.bytes * u},
			{Base: p, Index: s, Scale: 1, Disp: w.bytes * u},
			{Base: p, Index: s, Scale: 2, Disp: w.bytes * u},
			{Base: p, Index: s3, Scale: 1, Disp: w.bytes * u},
		}
		x := make([]VecVirtual, 4)
		for i := range x {
			x[i] = w.reg()
			VMOVUPS(at[i], x[i])
		}
		for i, y := range butterfly(w, two, x[0], x[1], x[2], x[3]) {
			if scaled {
				VMULPS(scale, y, y)
			}
			VMOVUPS(y, at[i])
		}
	}
	ADDQ(U32(64), p)
	CMPQ(p, quarter)
	JB(LabelRef(name + "_loop"))
	ADDQ(s3, p) // past b, c and d: the next block
	JMP(LabelRef(name + "_block"))

	Label(name + "_done")
	VZEROUPPER()
	RET()
}

// hasNaN emits the kernel that reports whether float32 values hold a
// NaN, eight registers of lanes per iteration: an unordered compare of
// each pair of registers, the four results ORed together and into the
// accumulator (one dependent OR per iteration).
func hasNaN(name string, w width) {
	block := 8 * w.lanes()
	TEXT(name, NOSPLIT, "func(v []float32) bool")
	Pragma("noescape")
	Doc(name+" reports whether v holds a NaN.", fmt.Sprintf("len(v) must be a multiple of %d.", block))
	p := Load(Param("v").Base(), GP64())
	n := Load(Param("v").Len(), GP64())
	or := func(a, b, dst Register) {
		if w.bytes == 64 {
			KORW(a, b, dst)
		} else {
			VORPS(a, b, dst)
		}
	}
	acc := w.mask()
	if w.bytes == 64 {
		KXORW(acc, acc, acc)
	} else {
		VXORPS(acc, acc, acc)
	}
	Label(name + "_loop")
	CMPQ(n, Imm(0))
	JE(LabelRef(name + "_done"))
	t := make([]Register, 4)
	for i := range t {
		x := w.reg()
		VMOVUPS(Mem{Base: p, Disp: w.bytes * 2 * i}, x)
		t[i] = w.mask()
		VCMPPS(Imm(3), Mem{Base: p, Disp: w.bytes * (2*i + 1)}, x, t[i]) // unordered: a NaN in either
	}
	or(t[1], t[0], t[0])
	or(t[3], t[2], t[2])
	or(t[2], t[0], t[0])
	or(t[0], acc, acc)
	ADDQ(U32(4*block), p)
	SUBQ(U32(block), n)
	JMP(LabelRef(name + "_loop"))

	Label(name + "_done")
	if w.bytes == 64 {
		KORTESTW(acc, acc)
	} else {
		VPTEST(acc, acc)
	}
	r := GP8()
	SETNE(r)
	VZEROUPPER()
	Store(r, ReturnIndex(0))
	RET()
}

// widenLoad fills y with the dt elements at m widened to float32 (exactly):
// bfloat16 is the top half of a float32, float16 is converted by F16C.
func widenLoad(dt string, m Mem, y VecVirtual) {
	switch dt {
	case "bfloat16":
		VPMOVZXWD(m, y)
		VPSLLD(Imm(16), y, y)
	case "float16":
		VCVTPH2PS(m, y)
	default:
		VMOVUPS(m, y)
	}
}

// widen emits the kernel that converts dt elements (exactly) to float32,
// two registers of lanes per iteration.
func widen(name string, dt string, w width) {
	size := elemSize(dt)
	lanes := w.lanes()
	block := 2 * lanes
	TEXT(name, NOSPLIT, "func(src []byte, dst []float32)")
	Pragma("noescape")
	Doc(name+" sets dst[i] to the "+dt+" element i of src.",
		fmt.Sprintf("len(dst) must be a multiple of %d and src must hold len(dst) elements.", block))
	src := Load(Param("src").Base(), GP64())
	dst := Load(Param("dst").Base(), GP64())
	n := Load(Param("dst").Len(), GP64())
	Label(name + "_loop")
	CMPQ(n, Imm(0))
	JE(LabelRef(name + "_done"))
	for g := range 2 {
		y := w.reg()
		widenLoad(dt, Mem{Base: src, Disp: lanes * size * g}, y)
		VMOVUPS(y, Mem{Base: dst, Disp: w.bytes * g})
	}
	ADDQ(U32(block*size), src)
	ADDQ(U32(block*4), dst)
	SUBQ(U32(block), n)
	JMP(LabelRef(name + "_loop"))

	Label(name + "_done")
	VZEROUPPER()
	RET()
}

// narrow emits the kernel that rounds float32 values to dt and stores
// them, two registers of lanes per iteration.
func narrow(name string, dt string, w width) {
	size := elemSize(dt)
	lanes := w.lanes()
	block := 2 * lanes
	TEXT(name, NOSPLIT, "func(v []float32, dst []byte)")
	Pragma("noescape")
	Doc(name+" sets element i of dst to "+dt+"(v[i]), rounded to nearest, ties to even.",
		fmt.Sprintf("len(v) must be a multiple of %d and dst must hold len(v) elements.", block))
	src := Load(Param("v").Base(), GP64())
	n := Load(Param("v").Len(), GP64())
	dst := Load(Param("dst").Base(), GP64())
	st := newStorer(dt, w)
	Label(name + "_loop")
	CMPQ(n, Imm(0))
	JE(LabelRef(name + "_done"))
	v := make([]VecVirtual, 2)
	for g := range v {
		v[g] = w.reg()
		VMOVUPS(Mem{Base: src, Disp: w.bytes * g}, v[g])
		st.store(v[g], Mem{Base: dst, Disp: lanes * size * g})
	}
	st.finish(v, Mem{Base: dst})
	ADDQ(U32(block*4), src)
	ADDQ(U32(block*size), dst)
	SUBQ(U32(block), n)
	JMP(LabelRef(name + "_loop"))

	Label(name + "_done")
	VZEROUPPER()
	RET()
}

// scaleInt8 emits the kernel that widens int8 to float32 and multiplies
// by one scale or (full) by a float32 scale per element, two registers of
// lanes per iteration.
func scaleInt8(name string, full bool, w width) {
	lanes := w.lanes()
	block := 2 * lanes
	sig, what := "func(q []byte, s float32, dst []float32)", "s"
	if full {
		sig, what = "func(q []byte, s []float32, dst []float32)", "s[i]"
	}
	TEXT(name, NOSPLIT, sig)
	Pragma("noescape")
	Doc(name+" sets dst[i] = float32(int8(q[i])) * "+what+".",
		fmt.Sprintf("len(q) must be a multiple of %d and dst (and s) must hold len(q) elements.", block))
	q := Load(Param("q").Base(), GP64())
	n := Load(Param("q").Len(), GP64())
	dst := Load(Param("dst").Base(), GP64())
	var s VecVirtual
	var sp Register
	if full {
		sp = Load(Param("s").Base(), GP64())
	} else {
		s = w.broadcastParam("s")
	}
	Label(name + "_loop")
	CMPQ(n, Imm(0))
	JE(LabelRef(name + "_done"))
	for g := range 2 {
		y := w.reg()
		// Sign-extend to int32, convert (exact), multiply once.
		VPMOVSXBD(Mem{Base: q, Disp: lanes * g}, y)
		VCVTDQ2PS(y, y)
		if full {
			VMULPS(Mem{Base: sp, Disp: w.bytes * g}, y, y)
		} else {
			VMULPS(s, y, y)
		}
		VMOVUPS(y, Mem{Base: dst, Disp: w.bytes * g})
	}
	ADDQ(U32(block), q)
	ADDQ(U32(block*4), dst)
	if full {
		ADDQ(U32(block*4), sp)
	}
	SUBQ(U32(block), n)
	JMP(LabelRef(name + "_loop"))

	Label(name + "_done")
	VZEROUPPER()
	RET()
}

func main() {
	kernels := flag.String("kernels", "", "the kernel family to generate: qdq or linear")
	flag.Parse()
	ConstraintExpr("amd64,!purego")
	switch *kernels {
	case "qdq":
		for _, w := range []width{avx2, avx512} {
			qdqKernels(w)
		}
	case "linear":
		for _, w := range []width{avx2, avx512} {
			linearKernels(w)
		}
	default:
		fmt.Fprintln(os.Stderr, "_asm: -kernels must be qdq or linear")
		os.Exit(2)
	}
	Generate()
}

// qdqKernels emits the quantize, dequantize and ConvRot row kernels for w.
func qdqKernels(w width) {
	if w.bytes == 32 {
		sfence()
	}
	absMax("absMaxBits16"+w.name, 16, w)
	absMax("absMaxBits32"+w.name, 32, w)
	tab := qdqTable(w)
	for _, dt := range []string{"bfloat16", "float16", "float32"} {
		short := map[string]string{"bfloat16": "BF16", "float16": "F16", "float32": "F32"}[dt]
		quantize("quantize"+short+w.name, dt, quantForm{}, w, tab)
		quantize("quantizeBounded"+short+w.name, dt, quantForm{bounded: true, lean: true}, w, tab)
		if w.bytes == 32 {
			quantize("quantizeNext"+short+w.name, dt, quantForm{bounded: true, next: true, lean: true}, w, tab)
		}
		quantize("quantizeSR"+short+w.name, dt, quantForm{stochastic: true}, w, tab)
		dequantize("dequantize"+short+w.name, dt, w, tab)
	}
	rotateSmall("rotate4"+w.name, w)
	rotateGroups("rotate16Scaled"+w.name, 16, true, w, tab)
	rotateGroups("rotate64Scaled"+w.name, 64, true, w, tab)
	if w.bytes == 64 {
		rotateGroups("rotate256Scaled"+w.name, 256, true, w, tab)
		rotateGroups("rotate256"+w.name, 256, false, w, tab) // then the stages of 256 and more
		for _, g := range []int{16, 64, 256} {
			for _, dt := range []string{"bfloat16", "float16", "float32"} {
				short := map[string]string{"bfloat16": "BF16", "float16": "F16", "float32": "F32"}[dt]
				rotateRows(fmt.Sprintf("rotateRows%d%s%s", g, short, w.name), g, dt, dt, w, tab)
				rotateRows(fmt.Sprintf("rotateRowsQ%d%s%s", g, short, w.name), g, "int8", dt, w, tab)
			}
		}
	} else {
		rotateGroups("rotate64"+w.name, 64, false, w, tab) // then the stages of 64 and more
		for _, in := range []string{"bfloat16", "float16", "float32", "int8"} {
			short := map[string]string{"bfloat16": "BF16", "float16": "F16", "float32": "F32", "int8": "Q"}[in]
			rotateLoad(fmt.Sprintf("rotateLoad16%s%s", short, w.name), 16, in, w, tab)
			rotateLoad(fmt.Sprintf("rotateLoad64%s%s", short, w.name), 64, in, w, tab)
		}
	}
	rotateStage("rotateStage"+w.name, false, w)
	rotateStage("rotateStageScaled"+w.name, true, w)
	hasNaN("hasNaN"+w.name, w)
	for _, dt := range []string{"bfloat16", "float16", "float32"} {
		short := map[string]string{"bfloat16": "BF16", "float16": "F16", "float32": "F32"}[dt]
		widen("widen"+short+w.name, dt, w)
		narrow("narrow"+short+w.name, dt, w)
	}
	scaleInt8("scaleInt8"+w.name, false, w)
	scaleInt8("mulInt8"+w.name, true, w)
	// The weight error's sums, in squareLanes float64 lanes.
	for _, dt := range []string{"bfloat16", "float16", "float32"} {
		short := map[string]string{"bfloat16": "BF16", "float16": "F16", "float32": "F32"}[dt]
		squares("squares"+short+w.name, dt, false, w)
		squares("squaresQ"+short+w.name, dt, true, w)
	}
}
