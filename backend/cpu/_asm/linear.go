package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	"github.com/mmcloughlin/avo/ir"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The int8 matrix products (mm_int8 and int8_linear), exact for every
// int8 value, -128 included:
//
//   - each int8 is sign-extended to int16 (VPMOVSXBW), and VPMADDWD
//     multiplies int16 lanes and adds adjacent pairs of products into
//     int32 lanes. A product of two int8 is at most 2^14 in magnitude and a
//     pair at most 2^15, so nothing saturates or rounds (VPMADDWD's one
//     overflow, both pairs -32768 * -32768, needs int16 values int8 never
//     reaches). VPMADDUBSW, which multiplies unsigned by signed bytes and
//     saturates the pair sums to int16, is given only a row split into
//     nibbles, where no sum can saturate (quadProducts);
//   - the int32 lanes are added with VPADDD, which wraps modulo 2^32 as Go's
//     int32 does, so the order of the additions cannot change the result:
//     the sum is exact below K = 131,072 and at K = 131,072 only the row and
//     column of all -128 reach 2^31, which wraps to -2^31 in both.
//
// The product kernel, gemmTile, computes a tile of up to 6 rows of
// activations by two registers of columns (output channels), in up to 12
// accumulators. The weight is packed into panels where, for each pair of
// k, a register holds the two int16 values of k and k+1 of consecutive
// channels (packRows from [N, K] rows, packCols from a [K, N] matrix), or
// the panel holds them as int8, sign-extended as the tile loads them
// (every panel of the assembly sets, prepared weights too: packRowsI8,
// packColsI8);
// each activation row is int16, and the same pair of k of a row is
// broadcast to every lane, so one VPMADDWD adds two steps of k to one
// register of outputs. Per pair of k and 6 rows: 2 loads of the weight, 6
// broadcasts, 12 VPMADDWD and 12 VPADDD. (Multiplying along k instead,
// with no packing, needs a load per product and a sum across lanes at the
// end; measured here it ran at about two thirds of this kernel's speed,
// and much less when the weight's rows are a multiple of 4 KiB apart.)
//
// For a few rows, one at a time (gemv), the weight is read as it is,
// [N, K] int8 sign-extended while loading: each register holds 16 (32)
// steps of k of one channel, multiplied with the same steps of the row, 8
// channels one after another, and the lanes are added up at the end.
// Nothing is packed or written, so the weight streams from memory once.
// With VNNI the row stays int8 and the weight's bytes plus 128 (an XOR)
// multiply it with VPDPBUSD, as the quad panels do (below): a register of
// the weight then holds 64 (32) steps of k.
//
// Where the CPU has AVX512-VNNI, gemv and the tiles multiply quads of k
// with VPDPBUSD (the tiles on quad panels, gemmTileQuad): four byte
// products a lane, one side unsigned, which the weight plus 128 is; the
// caller takes 128 times each row's sum off again, wrapping as the sums
// do, so the bits are the same. The AVX2 kernels do the same where the
// CPU has AVX-VNNI (VPDPBUSD's VEX form on 256 bits, emitted as bytes:
// see dpbusd). gemv also has a VPDPWSSD form for pairs (one instruction
// for VPMADDWD and VPADDD, the same wrapping int32 arithmetic; its
// saturating sibling, VPDPWSSDS, is not used), which runs only where
// tests turn the quads off.
//
// linearOut is int8_linear's epilogue on a row of int32 sums, and peak is
// the arithmetic of the tiles alone, from registers, to measure this
// machine's peak for it.

// phys returns the vector registers of w by number: the int8 kernels
// place their 12 accumulators and 4 working registers themselves.
func (w width) phys(i int) VecPhysical {
	if w.bytes == 64 {
		return []VecPhysical{Z0, Z1, Z2, Z3, Z4, Z5, Z6, Z7, Z8, Z9, Z10, Z11, Z12, Z13, Z14, Z15,
			Z16, Z17, Z18, Z19, Z20, Z21, Z22, Z23, Z24, Z25, Z26, Z27, Z28, Z29, Z30, Z31}[i]
	}
	return []VecPhysical{Y0, Y1, Y2, Y3, Y4, Y5, Y6, Y7, Y8, Y9, Y10, Y11, Y12, Y13, Y14, Y15}[i]
}

// panel returns the width's panel layout: nr columns (two registers of
// int32 sums), and per pair of k pairBytes bytes of what, the pairs' type
// (int16, or int8 for the panels that hold int8 pairs).
func (w width) panel(int8 bool) (nr, pairBytes int, what string) {
	nr = 2 * w.lanes()
	if int8 {
		return nr, 2 * nr, "int8"
	}
	return nr, 4 * nr, "int16"
}

// fill sets every 32-bit lane of v to c.
func (w width) fill(c uint32, v VecPhysical) {
	r := GP32()
	MOVL(U32(c), r)
	w.broadcastTo(r, v)
}

// mov is an unaligned move of a whole integer register.
func (w width) mov(src, dst Op) {
	if w.bytes == 64 {
		VMOVDQU32(src, dst)
		return
	}
	VMOVDQU(src, dst)
}

// rows returns the memory operands of the first n rows at p, stride s
// apart, using p3 = p + 3*s (which it sets) for rows 3 to 5.
func rows(n int, p, s, p3 Register, disp int) []Mem {
	out := []Mem{{Base: p, Disp: disp}, {Base: p, Index: s, Scale: 1, Disp: disp}, {Base: p, Index: s, Scale: 2, Disp: disp}}
	if n > 3 {
		out = append(out, Mem{Base: p3, Disp: disp}, Mem{Base: p3, Index: s, Scale: 1, Disp: disp}, Mem{Base: p3, Index: s, Scale: 2, Disp: disp})
	}
	return out[:n]
}

// third sets p3 = p + 3*s.
func third(p, s Register) GPVirtual {
	p3 := GP64()
	LEAQ(Mem{Base: p, Index: s, Scale: 2}, p3)
	ADDQ(s, p3)
	return p3
}

// gemmTile emits the product kernel for tiles of mr rows (1 to 6; see
// above). Registers: 0 to 2*mr-1 the accumulators (row i in 2i and 2i+1),
// 12 and 13 the weight, 14 the broadcast activations, 15 the products. With
// int8 set the panel holds the pairs as int8 (half the bytes to stream:
// prepared weights, and every panel of the assembly sets), sign-extended as
// they are loaded. With wide set (int8 panels, AVX-512) the tile covers two
// panels, pstride bytes apart, as gemmTileQuad's wide form does: each
// broadcast row then feeds four registers of the weight, not two. Registers
// there: 0 to 4*mr-1 the accumulators (row i in 4i to 4i+3), 24 to 27 the
// weight, 28 the broadcast activations, 29 and 30 the products. On a 2-core
// Zen 5 with VNNI turned off, the many-row path in one process, medians of
// blocks of calls alternated: 0.90-0.91 of the one-panel tiles' time at
// 4096x3072x3072 and 4096x3072x12288 (0.85 of the same-run peak against
// 0.77), 0.93-0.94 at 512x4096x4096.
func gemmTile(name string, mr int, w width, int8, wide bool) {
	nr, pairBytes, what := w.panel(int8)
	panels, sig := 1, "func(a []byte, lda int, b []byte, kp int, c []byte, ldc int, add bool)"
	if wide {
		panels, sig = 2, "func(a []byte, lda int, b []byte, pstride int, kp int, c []byte, ldc int, add bool)"
	}
	TEXT(name, NOSPLIT, sig)
	Pragma("noescape")
	doc := []string{fmt.Sprintf("%s computes a tile of %d rows by %d columns of an exact int8 product over kp pairs of k:", name, mr, panels*nr),
		fmt.Sprintf("a holds %d rows of int16 activations, lda bytes apart (each pair of k 4 bytes);", mr),
		fmt.Sprintf("b the packed weight panel: per pair of k, %d columns of %s pairs (%d bytes);", nr, what, pairBytes)}
	if wide {
		doc = append(doc, "the second panel pstride bytes after the first in b;")
	}
	Doc(append(doc, fmt.Sprintf("c gets (add: c +=) the int32 sums, %d rows ldc bytes apart. kp must be at least 1.", mr))...)
	acc, ap, lda, ap3 := tileStart(mr, 2*panels*mr, w)
	wr, bc, ts := []VecPhysical{w.phys(12), w.phys(13)}, w.phys(14), []VecPhysical{w.phys(15)}
	if wide {
		wr, bc, ts = []VecPhysical{w.phys(24), w.phys(25), w.phys(26), w.phys(27)}, w.phys(28), []VecPhysical{w.phys(29), w.phys(30)}
	}
	bp := Load(Param("b").Base(), GP64())
	bases := []Register{bp}
	if wide {
		ps := Load(Param("pstride"), GP64())
		bp2 := GP64()
		LEAQ(Mem{Base: bp, Index: ps, Scale: 1}, bp2)
		bases = append(bases, bp2)
	}
	kp := Load(Param("kp"), GP64())
	clearRegs(acc, w)

	// step emits the work of pair u of an iteration.
	step := func(u int) {
		for h, r := range wr {
			m := Mem{Base: bases[h/2], Disp: u * pairBytes}
			if int8 {
				VPMOVSXBW(m.Offset((h%2)*w.bytes/2), r)
			} else {
				w.mov(m.Offset((h%2)*w.bytes), r)
			}
		}
		for i, m := range rows(mr, ap, lda, ap3, 4*u) {
			VPBROADCASTD(m, bc)
			for h, r := range wr {
				t := ts[h%len(ts)]
				VPMADDWD(r, bc, t)
				VPADDD(t, acc[len(wr)*i+h], acc[len(wr)*i+h])
			}
		}
	}
	advance := func(pairs int) {
		for _, b := range bases {
			ADDQ(U32(pairs*pairBytes), b)
		}
	}
	if int8 && mr <= 2 {
		// A row or two streams the panel from memory (a prepared weight):
		// four pairs per iteration keep more loads in flight for less
		// loop overhead, as gemv does.
		Label(name + "_loop4")
		CMPQ(kp, Imm(4))
		JB(LabelRef(name + "_tail"))
		for u := range 4 {
			step(u)
		}
		ADDQ(Imm(16), ap)
		advance(4)
		SUBQ(Imm(4), kp)
		JMP(LabelRef(name + "_loop4"))
		Label(name + "_tail")
		TESTQ(kp, kp)
		JZ(LabelRef(name + "_done"))
	}
	if w.bytes == 32 && mr == 6 && int8 {
		// The hot tile of AVX2's many-row path: its loop 15 bytes into a
		// 64-byte window (see pcalign).
		pcalign(64)
		for range 15 {
			Instruction(&ir.Instruction{Opcode: "BYTE", Operands: []Op{Imm(0x90)}}) // NOP
		}
	}
	Label(name + "_loop")
	step(0)
	ADDQ(Imm(4), ap)
	if mr > 3 {
		ADDQ(Imm(4), ap3)
	}
	advance(1)
	DECQ(kp)
	JNZ(LabelRef(name + "_loop"))
	Label(name + "_done")

	storeTile(name, mr, acc, w, false)
}

// gemmTileMix emits AVX2's tile over a panel and a half (mr rows,
// 1 to 4, by 24 channels): the 16 channels of an int8 panel, widened into
// registers 12 and 13 as gemmTile's are, and 8 more from a panel already
// widened to int16 (the driver widens every third panel once for a whole
// block of rows: see product.tilesMix), which each VPMADDWD reads from memory. A
// row's broadcast pair then feeds three products, not two: 4 rows take 30
// instructions a pair of k for 12 VPMADDWD where gemmTile's 6 take 32 (and
// the third operand costs a load, not a register: 12 accumulators, 2
// registers of weight, the broadcast in 14 and the products in 15, the
// third product into 14 itself). Two pairs of k an iteration. On a 2-core
// Zen 3 (BENCHMARKS.md, "A panel and a half"), in the first-level cache,
// one thread, its first form ran at 1.05-1.15 of the 6-row tile's speed; in the
// product, 32 same-process A/B pairs at 4096x3072x3072 and 512x4096x4096,
// at 0.91-1.18 of its time (median 0.985), faster in 8 of the 9 pairs
// where the 6-row tile fell below 0.75 of the peak, and never below 0.75
// itself where that tile was not.
func gemmTileMix(name string, mr int, w width) {
	TEXT(name, NOSPLIT, "func(a []byte, lda int, b []byte, b16 []byte, kp int, c []byte, c16 []byte, ldc int, add bool)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s computes a tile of %d rows by 24 columns of an exact int8 product over kp pairs of k:", name, mr),
		fmt.Sprintf("a holds %d rows of int16 activations, lda bytes apart (each pair of k 4 bytes);", mr),
		"b an int8 panel (per pair of k, 16 columns of int8 pairs: 32 bytes), b16 8 more columns of int16 pairs",
		"(32 bytes a pair of k, 64 bytes apart: half of an int16 panel). c gets (add: c +=) the int32 sums of b's",
		fmt.Sprintf("16 columns, c16 those of b16's 8, %d rows ldc bytes apart in each. kp must be at least 1.", mr))
	acc, ap, lda, ap3 := tileStart(mr, 3*mr, w)
	bp := Load(Param("b").Base(), GP64())
	wp := Load(Param("b16").Base(), GP64())
	kp := Load(Param("kp"), GP64())
	clearRegs(acc, w)
	wr, bc, t := []VecPhysical{w.phys(12), w.phys(13)}, w.phys(14), w.phys(15)
	step := func(u int) {
		for h, r := range wr {
			VPMOVSXBW(Mem{Base: bp, Disp: 32*u + 16*h}, r)
		}
		for i, m := range rows(mr, ap, lda, ap3, 4*u) {
			VPBROADCASTD(m, bc)
			for h, r := range wr {
				VPMADDWD(r, bc, t)
				VPADDD(t, acc[3*i+h], acc[3*i+h])
			}
			VPMADDWD(Mem{Base: wp, Disp: 64 * u}, bc, bc)
			VPADDD(bc, acc[3*i+2], acc[3*i+2])
		}
	}
	advance := func(pairs int) {
		ADDQ(Imm(uint64(4*pairs)), ap)
		if mr > 3 {
			ADDQ(Imm(uint64(4*pairs)), ap3)
		}
		ADDQ(U32(32*pairs), bp)
		ADDQ(U32(64*pairs), wp)
	}
	n := GP64()
	MOVQ(kp, n)
	SHRQ(Imm(1), n)
	JZ(LabelRef(name + "_tail"))
	pcalign(64)
	Label(name + "_loop")
	step(0)
	step(1)
	advance(2)
	DECQ(n)
	JNZ(LabelRef(name + "_loop"))
	Label(name + "_tail")
	TESTQ(U32(1), kp)
	JZ(LabelRef(name + "_store"))
	step(0)

	// The end, as storeTile's: c's rows get registers 3i and 3i+1, c16's
	// register 3i+2.
	Label(name + "_store")
	cp := Load(Param("c").Base(), GP64())
	c16 := Load(Param("c16").Base(), GP64())
	ldc := Load(Param("ldc"), GP64())
	var cp3, c163 Register = cp, c16
	if mr > 3 {
		cp3, c163 = third(cp, ldc), third(c16, ldc)
	}
	crow, c16row := rows(mr, cp, ldc, cp3, 0), rows(mr, c16, ldc, c163, 0)
	at := func(i, h int) Mem {
		if h == 2 {
			return c16row[i]
		}
		return crow[i].Offset(32 * h)
	}
	add := Load(Param("add"), GP8())
	TESTB(add, add)
	JZ(LabelRef(name + "_put"))
	for i := range 3 * mr {
		VPADDD(at(i/3, i%3), acc[i], acc[i])
	}
	Label(name + "_put")
	for i := range 3 * mr {
		VMOVDQU(acc[i], at(i/3, i%3))
	}
	VZEROUPPER()
	RET()
}

// tileStart emits the start of a tile kernel's prologue, the rows of the
// parameter a: its base, lda and, for more than 3 rows, the address of row
// 3; and returns its n accumulators, registers 0 to n-1 (see clearRegs).
func tileStart(mr, n int, w width) (acc []VecPhysical, ap, lda, ap3 Register) {
	acc = make([]VecPhysical, n)
	for i := range acc {
		acc[i] = w.phys(i)
	}
	ap = Load(Param("a").Base(), GP64())
	lda = Load(Param("lda"), GP64())
	ap3 = ap
	if mr > 3 {
		ap3 = third(ap, lda)
	}
	return acc, ap, lda, ap3
}

// clearRegs emits the zeroing of the registers acc.
func clearRegs(acc []VecPhysical, w width) {
	for _, a := range acc {
		w.xor(a, a, a)
	}
}

// storeTile emits a tile kernel's end: the accumulators, len(acc)/mr
// registers a row, stored to the rows of the parameter c, ldc bytes
// apart, first adding what c holds if the parameter add is set, or else,
// with corr set, the parameter corr's int32 of the row (the quad tiles').
func storeTile(name string, mr int, acc []VecPhysical, w width, corr bool) {
	per := len(acc) / mr
	cp := Load(Param("c").Base(), GP64())
	ldc := Load(Param("ldc"), GP64())
	var cp3 Register = cp
	if mr > 3 {
		cp3 = third(cp, ldc)
	}
	add := Load(Param("add"), GP8())
	crow := rows(mr, cp, ldc, cp3, 0)
	TESTB(add, add)
	if corr {
		JNZ(LabelRef(name + "_add"))
		kp := Load(Param("corr").Base(), GP64())
		t := w.phys(15) // free in the tiles that pass corr
		if w.bytes == 64 {
			t = w.phys(28)
		}
		for i := range mr {
			VPBROADCASTD(Mem{Base: kp, Disp: 4 * i}, t)
			for h := range per {
				VPADDD(t, acc[per*i+h], acc[per*i+h])
			}
		}
		JMP(LabelRef(name + "_store"))
		Label(name + "_add")
	} else {
		JZ(LabelRef(name + "_store"))
	}
	for i := range mr {
		for h := range per {
			VPADDD(crow[i].Offset(h*w.bytes), acc[per*i+h], acc[per*i+h])
		}
	}
	Label(name + "_store")
	for i := range mr {
		for h := range per {
			w.mov(acc[per*i+h], crow[i].Offset(h*w.bytes))
		}
	}
	VZEROUPPER()
	RET()
}

// gemmTileQuad emits the VNNI tile of mr rows (1 to 6) over quad panels
// (see above): one panel, or two pstride bytes apart (wide),
// each per quad of k 32 channels of 4 bytes, the weight plus 128 as
// unsigned bytes, in two registers. Each row's quad of k, 4 signed bytes,
// is broadcast to every lane, and one VPDPBUSD adds four steps of k to a
// register of 16 channels: twice VPDPWSSD's multiply-adds per
// instruction. Registers: the accumulators from 0 (row i in 2i, 2i+1 or,
// wide, 4i to 4i+3), the weight in 24 to 27 and the broadcast row in 28
// (with 256 bits, one panel only: the weight in 12 and 13, the row in 14).
func gemmTileQuad(name string, mr int, w width, wide bool) {
	panels, sig := 1, "func(a []byte, lda int, b []byte, kq int, c []byte, ldc int, add bool, corr []byte, pf []byte, pfStep int)"
	if wide {
		panels, sig = 2, "func(a []byte, lda int, b []byte, pstride int, kq int, c []byte, ldc int, add bool, corr []byte, pf []byte, pfStep int)"
	}
	nr := 2 * w.lanes()
	quadBytes := 4 * nr
	TEXT(name, NOSPLIT, sig)
	Pragma("noescape")
	doc := []string{fmt.Sprintf("%s computes a tile of %d rows by %d columns of an exact int8 product over kq quads of k:", name, mr, panels*nr),
		fmt.Sprintf("a holds %d rows of int8 activations, lda bytes apart (each quad of k 4 bytes);", mr),
		fmt.Sprintf("b the quad panel: per quad of k, %d columns of 4 bytes, each the weight's int8 plus 128 (%d bytes);", nr, quadBytes)}
	if wide {
		doc = append(doc, "the second panel pstride bytes after the first in b;",
			"step i prefetches pf[i·pfStep] and pf[pstride+i·pfStep] into the second-level cache (pfStep 0 repeats a line);")
	} else {
		doc = append(doc, "step i prefetches pf[i·pfStep] into the second-level cache (pfStep 0 repeats a line);")
	}
	doc = append(doc, fmt.Sprintf("c gets the int32 sums, %d rows ldc bytes apart: with add, c plus the sums;", mr),
		"else the sums plus corr's int32 of each row, -128 times the row's sum, which takes the weight's 128 off.",
		"kq must be at least 1.")
	Doc(doc...)
	acc, ap, lda, ap3 := tileStart(mr, 2*panels*mr, w)
	first := 24 // the weight's registers, then the broadcast row's
	if w.bytes == 32 {
		first = 12
	}
	wr := make([]VecPhysical, 2*panels)
	for i := range wr {
		wr[i] = w.phys(first + i)
	}
	bc := w.phys(first + 2) // 14 with AVX2 (one panel); 28 with AVX-512
	if w.bytes == 64 {
		bc = w.phys(first + 4)
	}
	bp := Load(Param("b").Base(), GP64())
	bases := []Register{bp}
	pf := Load(Param("pf").Base(), GP64())
	pfs := []Register{pf}
	if wide {
		ps := Load(Param("pstride"), GP64())
		bp2, pf2 := GP64(), GP64()
		LEAQ(Mem{Base: bp, Index: ps, Scale: 1}, bp2)
		LEAQ(Mem{Base: pf, Index: ps, Scale: 1}, pf2)
		bases, pfs = append(bases, bp2), append(pfs, pf2)
	}
	pfStep := Load(Param("pfStep"), GP64())
	kq := Load(Param("kq"), GP64())
	clearRegs(acc, w)
	Label(name + "_loop")
	for _, r := range pfs {
		PREFETCHT1(Mem{Base: r})
		ADDQ(pfStep, r)
	}
	for h, r := range wr {
		w.mov(Mem{Base: bases[h/2], Disp: (h % 2) * w.bytes}, r)
	}
	for i, m := range rows(mr, ap, lda, ap3, 0) {
		VPBROADCASTD(m, bc)
		for h, r := range wr {
			w.dpbusd(bc, r, acc[len(wr)*i+h])
		}
	}
	ADDQ(Imm(4), ap)
	if mr > 3 {
		ADDQ(Imm(4), ap3)
	}
	for _, b := range bases {
		ADDQ(U32(quadBytes), b)
	}
	DECQ(kq)
	JNZ(LabelRef(name + "_loop"))

	storeTile(name, mr, acc, w, true)
}

// dpbusd emits VPDPBUSD on registers for w: acc += the four products of
// the unsigned bytes of u with the signed bytes of s in each int32 lane.
// The 512-bit form is AVX512-VNNI's; the 256-bit one AVX-VNNI's VEX form,
// which the Go assembler lacks (it encodes VPDPBUSD on YMM registers as
// EVEX, an AVX512VL instruction), so it is emitted as its bytes: C4, then
// R̄X̄B̄ and map 0F38, then W0, the inverted register of u, L1 and the 66
// prefix, opcode 50, and a register-to-register ModRM of acc and s.
func (w width) dpbusd(s, u, acc VecPhysical) {
	if w.bytes == 64 {
		vpdpbusd(s, u, acc)
		return
	}
	num := func(r VecPhysical) byte { return byte(r.PhysicalIndex()) }
	d, v, m := num(acc), num(u), num(s)
	b1 := byte(0x02) | (^d>>3&1)<<7 | 1<<6 | (^m>>3&1)<<5
	b2 := (^v&15)<<3 | 1<<2 | 0x01
	for _, b := range []byte{0xc4, b1, b2, 0x50, 0xc0 | (d&7)<<3 | m&7} {
		Instruction(&ir.Instruction{Opcode: "BYTE", Operands: []Op{Imm(uint64(b))}})
	}
}

// pcalign emits PCALIGN: the next instruction starts on an n-byte
// boundary (the linker aligns the function to n). The 6-row tile's loop
// (12 VPMADDWD, 12 VPADDD, 8 loads and the loop's 5 instructions) runs at
// the front end's limit on Zen 3, and where it starts in a 64-byte window
// changed its speed: in the first-level cache, 0.92 of the peak loop's
// at offsets 0, 47 and 56, 0.97-0.99 at 8, 15, 16, 32 and 40 (BENCHMARKS.md,
// "The tile loop's alignment"); nothing else placed it.
func pcalign(n int) {
	Instruction(&ir.Instruction{Opcode: "PCALIGN", Operands: []Op{Imm(uint64(n))}})
}

// vpdpwssd emits VPDPWSSD (AVX512-VNNI): acc += the sums of adjacent
// int16 products of a and b, in each int32 lane, wrapping. Avo v0.5.0's
// instruction set lacks it; the Go assembler has it.
func vpdpwssd(a, b, acc Op) {
	Instruction(&ir.Instruction{
		Opcode:   "VPDPWSSD",
		Operands: []Op{a, b, acc},
		Inputs:   []Op{a, b, acc},
		Outputs:  []Op{acc},
		ISA:      []string{"AVX512_VNNI"},
	})
}

// vpdpbusd emits VPDPBUSD (AVX512-VNNI): acc += the sums of the four
// products of the unsigned bytes of u with the signed bytes of s, in each
// int32 lane, wrapping (its saturating sibling, VPDPBUSDS, is not used).
// Avo v0.5.0's instruction set lacks it; the Go assembler has it.
func vpdpbusd(s, u, acc Op) {
	Instruction(&ir.Instruction{
		Opcode:   "VPDPBUSD",
		Operands: []Op{s, u, acc},
		Inputs:   []Op{s, u, acc},
		Outputs:  []Op{acc},
		ISA:      []string{"AVX512_VNNI"},
	})
}

// peak emits the measurement loop: a tile's arithmetic without its loads,
// 12 VPMADDWD and 12 VPADDD (with quad set, 12 VPDPBUSD) into 12
// independent accumulators per iteration, from registers.
func peak(name string, w width, quad bool) {
	TEXT(name, NOSPLIT, "func(n int)")
	Pragma("noescape")
	what := "12 VPMADDWD and 12 VPADDD"
	if quad {
		what = "12 VPDPBUSD"
	}
	Doc(name+" runs n iterations of "+what+" on registers, to time them.",
		"n must be at least 1.")
	n := Load(Param("n"), GP64())
	for i := range 14 {
		r := w.phys(i)
		w.xor(r, r, r)
	}
	Label(name + "_loop")
	for i := range 12 {
		if quad {
			w.dpbusd(w.phys(12), w.phys(13), w.phys(i))
			continue
		}
		t := w.phys(14 + i%2)
		VPMADDWD(w.phys(12), w.phys(13), t)
		VPADDD(t, w.phys(i), w.phys(i))
	}
	DECQ(n)
	JNZ(LabelRef(name + "_loop"))
	VZEROUPPER()
	RET()
}

// gemvAhead is how far ahead of its loads gemv prefetches the weight: with
// several rows of x a line of weight takes many instructions, too many for the
// out-of-order window to keep enough lines in flight, and the hardware
// prefetchers did not make up for it. Measured on a 2-core Zen 5, the
// product's one-row path, 4096x4096, the weight out of the caches, two
// threads, medians: 4 rows 0.98 ms without, 0.60 at 2 KiB, 0.42-0.57 at 4,
// 0.34-0.55 at 8, 0.37-0.38 at 16; one row 0.24-0.44 at 8 KiB against 0.40
// without; the AVX2 kernels 1.5-2 times as fast at 4 rows. With one row of x a
// line takes few instructions and the hardware prefetchers keep up: there the
// prefetch was within the noise on the Zen 5 and cost time on a 2-core Zen 4
// (int8_linear 1x4096x4096, the weight out of the caches, alternating in one
// process: 1.35-1.59 times as long as reading the weight with it, 1.12-1.19
// without; the AVX2 kernels 1.30-1.35 and 1.12-1.14), so the one-row kernels
// do not prefetch every line (but gemv1AheadAVX2, which a Zen 3 takes: on it
// the prefetchers fall behind; see gemv1Ahead in the package). They prefetch
// one a page instead (primePage):
// where their loads reach a 4 KiB boundary, the first line of the page two
// pages on, since the hardware's prefetchers stop at the end of a page and
// take a few misses to start on the next. On a 2-core Zen 5, int8_linear of
// one row, the weight out of the caches, blocks of calls alternated in one
// process: 4096x4096 0.86-0.92 of the time without with AVX-512 and VNNI,
// 0.87-0.92 with AVX-VNNI and with AVX2, 0.87-0.97 with AVX-512 alone;
// 12288x3072 0.80-0.88 and 3072x12288 0.91-0.92 (AVX-512 and VNNI). 4 KiB or
// 16 KiB on took as long as 8 KiB. The kernels for 2 and 4 rows prefetch a
// line a page as well as every line's 8 KiB on: 4096x4096, AVX-512 and VNNI,
// 0.73-0.78 of the time at 2 rows, 0.83-0.95 at 4, 0.90-0.94 at 8 (AVX-VNNI
// 0.92-0.98 at 2, 0.93-0.96 at 4, 0.94-0.98 at 8; AVX-512 alone 0.94-0.99 at
// 4; AVX2 0.89-0.96 at 2, 1.00-1.03 at 4, 1.02-1.04 at 8). With the page's
// line alone, without every line's, 0.87-0.97 at 2 rows but 1.13-1.49 times as
// long at 4 and 8.
const gemvAhead = 8192

// prefetchDoc is the sentence of a gemv kernel's doc comment on its
// prefetching.
func prefetchDoc(ahead bool) string {
	page := fmt.Sprintf(" Where an iteration starts at a multiple of 4096 bytes of wt, it prefetches the line %d bytes on.", primeAhead)
	if !ahead {
		return page
	}
	return fmt.Sprintf(" It prefetches wt %d bytes ahead of its loads.", gemvAhead) + page
}

// The forms of the one-row kernel: how it multiplies a register of the
// weight with the same values of k of a row of x.
const (
	gemvPairs     = iota // VPMOVSXBW widens the weight to int16, VPMADDWD and VPADDD multiply and add (int16 x)
	gemvPairsVNNI        // the same with VPDPWSSD, which multiplies and adds in one instruction
	gemvQuads            // VPDPBUSD on the weight plus 128 as unsigned bytes (int8 x), four products a lane
)

// gemv emits the one-row kernel (see above) for xrows rows of x (1, 2 or
// 4) at once, in the given form, prefetching every line gemvAhead on if
// ahead (set for 2 and 4 rows; for one row, a form the dispatch takes on
// processors where it measured faster: see gemv1Ahead in the package).
// It reads the 8 weight rows one after another, not side by side: a
// group of a plain weight's rows is then one sequential stream, which the
// hardware prefetchers follow better than 8 streams a row apart (on a 2-core Zen 5, the weight out of the caches:
// 1.35-1.5 times as fast at k = 1024 and 2048, 1.2-1.35 against an AVX2
// form that prefetched the next group, 1.04-1.17 at 4096; see
// BENCHMARKS.md). Each register of a weight row (widened, or with quads
// its bytes plus 128) serves every row of x, read from the cache;
// registers 0 to 7 accumulate (row r, unrolled step u at r·unroll+u: four
// steps an iteration for one row, so that the loads overlap, two for two
// and four rows), 8 to 11 hold the weight's values and 12 to 13 the
// products (gemvPairs) or, with quads on 256 bits, the values of x, whose
// AVX-VNNI form takes no memory operand here (see dpbusd); with quads,
// register 14 holds 0x80 in every byte. VPDPWSSD and VPDPBUSD add with
// the same wrapping arithmetic as VPADDD. With quads a register holds
// twice the values of k, so there are half the loads and instructions a
// byte of weight of the other forms; the caller takes 128 times the sum
// of x off again (see product.corr). That matters where the rows of x are
// several (on a 2-core Zen 5, int8_linear of 4096x4096, the weight out of
// the caches, blocks of calls alternated in one process: 8 rows took
// 0.86-0.90 of the pairs' time with AVX-512, 0.69 with AVX-VNNI, whose 2
// and 4 rows took 0.85-0.95), not for one, which waits for memory either
// way (0.97-1.02). Where ahead, each iteration prefetches the lines
// gemvAhead bytes past the ones it reads; every kernel, a line a page (see
// gemvAhead; where ahead, the page's line is one of those, fetched twice).
func gemv(name string, w width, form, xrows int, ahead bool) {
	step, xsize := 2*w.lanes(), 2 // k per register of the weight; bytes of x a value of k
	if form == gemvQuads {
		step, xsize = w.bytes, 1
	}
	unroll := max(2, 4/xrows)
	TEXT(name, NOSPLIT, "func(x []byte, ldx int, wt []byte, ldw int, k int, out []byte, lds int)")
	Pragma("noescape")
	what, sums := "int16", "the dot product"
	if form == gemvQuads {
		what, sums = "int8", "the dot product, plus 128 times the sum of the row's values,"
	}
	Doc(fmt.Sprintf("%s sets int32 j of row r of out (lds bytes a row) to %s of %s row r of x", name, sums, what),
		fmt.Sprintf("(%d rows, ldx bytes apart) and int8 weight row j of wt (8 rows, ldw bytes apart, one after another)", xrows),
		fmt.Sprintf("over k steps, wrapping. k must be a multiple of %d and at least %d.%s", step, step, prefetchDoc(ahead)))
	x0 := Load(Param("x").Base(), GP64())
	ldx := Load(Param("ldx"), GP64())
	wp := Load(Param("wt").Base(), GP64())
	ldw := Load(Param("ldw"), GP64())
	k := Load(Param("k"), GP64())
	op := Load(Param("out").Base(), GP64())
	lds := Load(Param("lds"), GP64())
	chans, xp, wr, n := GP64(), GP64(), GP64(), GP64()
	acc := func(r, u int) VecPhysical { return w.phys(r*unroll + u) }
	bias := w.phys(14)
	if form == gemvQuads {
		w.fill(0x80808080, bias)
	}
	// xrow is row r of x at the iteration's step u; x3 = xp + 3·ldx, set
	// for four rows.
	var x3 Register
	xrow := func(r, u int) Mem { return rows(xrows, xp, ldx, x3, xsize*step*u)[r] }
	load := func(u int) {
		m := Mem{Base: wr, Disp: u * step}
		if form == gemvQuads {
			w.xor(m, bias, w.phys(8+u))
			return
		}
		VPMOVSXBW(m, w.phys(8+u))
	}
	madd := func(xm Mem, wv VecPhysical, r, u int) {
		t := w.phys(12 + (r*unroll+u)%2)
		switch {
		case form == gemvQuads && w.bytes == 64:
			vpdpbusd(xm, wv, acc(r, u))
		case form == gemvQuads:
			VMOVDQU(xm, t)
			w.dpbusd(t, wv, acc(r, u))
		case form == gemvPairsVNNI:
			vpdpwssd(xm, wv, acc(r, u))
		default:
			VPMADDWD(xm, wv, t)
			VPADDD(t, acc(r, u), acc(r, u))
		}
	}
	advance := func(ks int) {
		ADDQ(U32(ks), wr)
		ADDQ(U32(xsize*ks), xp)
		if xrows == 4 {
			ADDQ(U32(xsize*ks), x3)
		}
		SUBQ(U32(ks), n)
	}
	MOVQ(U32(8), chans)
	Label(name + "_row")
	MOVQ(x0, xp)
	if xrows == 4 {
		x3 = third(xp, ldx)
	}
	MOVQ(wp, wr)
	MOVQ(k, n)
	for r := range xrows {
		for u := range unroll {
			w.xor(acc(r, u), acc(r, u), acc(r, u))
		}
	}
	Label(name + "_loopu")
	CMPQ(n, U32(unroll*step))
	JB(LabelRef(name + "_tail"))
	for l := 0; ahead && l < unroll*step; l += 64 {
		PREFETCHT0(Mem{Base: wr, Disp: gemvAhead + l})
	}
	primePage(name+"_inpage", wr)
	for u := range unroll {
		load(u)
	}
	for u := range unroll {
		for r := range xrows {
			madd(xrow(r, u), w.phys(8+u), r, u)
		}
	}
	advance(unroll * step)
	JMP(LabelRef(name + "_loopu"))
	Label(name + "_tail")
	TESTQ(n, n)
	JZ(LabelRef(name + "_sum"))
	Label(name + "_loop")
	load(0)
	for r := range xrows {
		madd(xrow(r, 0), w.phys(8), r, 0)
	}
	advance(step)
	JNZ(LabelRef(name + "_loop"))

	// Each row's sum: its accumulators, then halves down to a lane,
	// stored as the row's int32 for the channel.
	Label(name + "_sum")
	o := GP64()
	MOVQ(op, o)
	for r := range xrows {
		a := acc(r, 0)
		for u := 1; u < unroll; u++ {
			VPADDD(acc(r, u), a, a)
		}
		y := a.AsY()
		if w.bytes == 64 {
			hi := YMM()
			VEXTRACTI64X4(Imm(1), a, hi)
			VPADDD(hi, y, y)
		}
		sum, t := XMM(), XMM()
		VEXTRACTI128(Imm(1), y, sum)
		VPADDD(sum, a.AsX(), sum)
		VPSHUFD(Imm(0x4e), sum, t) // swap the 64-bit halves
		VPADDD(t, sum, sum)
		VPSHUFD(Imm(0xb1), sum, t) // swap the 32-bit lanes of each half
		VPADDD(t, sum, sum)
		VMOVD(sum, Mem{Base: o})
		if r+1 < xrows {
			ADDQ(lds, o)
		}
	}
	ADDQ(U32(4), op)
	ADDQ(ldw, wp)
	DECQ(chans)
	JNZ(LabelRef(name + "_row"))
	VZEROUPPER()
	RET()
}

// dotTile emits the dot path's kernel (AVX2: linearPath takes the dot path
// with the AVX2 set without VNNI only; the quad panels, and AVX-512's wider
// tiles, are faster), which reads the weight as it is, [N, K] rows, without
// packing it: 4 rows of A by 3 channels, each of the 12 products a vector
// of partial dot products along k (VPMOVSXBW widens 16 of a channel's int8
// values, VPMADDWD multiplies them with 16 of a row's int16 ones from
// memory), folded at the end by VPHADDD into the 4 rows' sums of each
// channel, which it transposes into rows of the 3 channels' sums and adds
// to sums, the row-major layout the epilogue reads (copying them out of a
// channel-major layout in Go took 4% of 16 rows' time). The 4 rows of x
// come interleaved a step at a time (a step's 16 values of each row, 32
// bytes, then the next row's): a step reads 128 contiguous bytes of x
// rather than 32 of each of 4 rows a row apart, fewer streams for the
// caches to bring in (on a 2-core Zen 3, one thread, the tile over 16 rows
// by 48 or 4095 channels: 0.90-0.95 of the time over rows). Registers 0 to
// 11 accumulate (row r, channel c at 3r+c), 12 to 14 hold the channels'
// values, 15 the products. Each step also prefetches a line of pf, pfStep
// bytes further each time: the caller's choice of what memory should bring
// in while the tile computes (see dotBody.prefetch). The forms for 1 to 3
// rows multiply and store only those, for a last group of fewer than 4: 9
// rows cost 8 rows and one, not 12.
func dotTile(name string, w width, rows int) {
	TEXT(name, NOSPLIT, "func(x []byte, wt []byte, ldw int, steps int, sums []byte, lds int, pf []byte, pfStep int)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s adds to sums the dot products of the first %d of 4 int16 rows of x, interleaved a step of 16 values (32 bytes) at a time,", name, rows),
		fmt.Sprintf("with 3 int8 rows of wt (ldw bytes apart) over steps·16 values of k: row r's 3 int32 sums, one per channel, at sums[r·lds:], for r < %d,", rows),
		"wrapping; it adds 0 to the int32 after them, which must be there. steps must be at least 1. Step i prefetches pf[i·pfStep] (0 repeats one line).")
	xp := Load(Param("x").Base(), GP64())
	wp := Load(Param("wt").Base(), GP64())
	ldw := Load(Param("ldw"), GP64())
	n := Load(Param("steps"), GP64())
	pfp := Load(Param("pf").Base(), GP64())
	pfs := Load(Param("pfStep"), GP64())
	for i := range 12 {
		VPXOR(w.phys(i), w.phys(i), w.phys(i))
	}
	xrow := []Mem{{Base: xp}, {Base: xp, Disp: 32}, {Base: xp, Disp: 64}, {Base: xp, Disp: 96}}
	wrow := []Mem{{Base: wp}, {Base: wp, Index: ldw, Scale: 1}, {Base: wp, Index: ldw, Scale: 2}}
	t := w.phys(15)
	// Step u of an iteration prefetches pf[u·pfStep] past the iteration's
	// start: pfx[u] is u·pfStep (pfx[2] and pfx[3] set below).
	var pfx [4]Register
	pfx[1] = pfs
	step := func(u int) {
		if u == 0 {
			PREFETCHT0(Mem{Base: pfp})
		} else {
			PREFETCHT0(Mem{Base: pfp, Index: pfx[u], Scale: 1})
		}
		for c := range 3 {
			VPMOVSXBW(wrow[c].Offset(16*u), w.phys(12+c))
		}
		for r := range rows {
			for c := range 3 {
				VPMADDWD(xrow[r].Offset(128*u), w.phys(12+c), t)
				VPADDD(t, w.phys(3*r+c), w.phys(3*r+c))
			}
		}
	}
	// Four steps an iteration (the last 0 to 3 one at a time after): 29.25
	// instructions a step, not 33. On a 2-core Zen 3, int8_linear
	// 4096x4096, same-process A/B runs, p50: two steps an iteration against
	// one, seven runs, 0.94-1.01 of the time at 16 rows (6 of 7 faster),
	// 0.95-1.02 at 8, 0.94-1.03 at 32; then four against two, five runs,
	// 0.98-1.00 at 16 (5 of 5), 0.93-1.00 at 8, 0.97-1.02 at 32
	// (BENCHMARKS.md, "A panel and a half"): fewer instructions hold up
	// better in the minutes when they arrive slowly.
	it := GP64()
	MOVQ(n, it)
	SHRQ(Imm(2), it)
	JZ(LabelRef(name + "_tail"))
	pfx[2], pfx[3] = GP64(), GP64()
	LEAQ(Mem{Base: pfs, Index: pfs, Scale: 1}, pfx[2])
	LEAQ(Mem{Base: pfx[2], Index: pfs, Scale: 1}, pfx[3])
	pf4 := GP64()
	LEAQ(Mem{Base: pfx[2], Index: pfx[2], Scale: 1}, pf4)
	// advance moves past steps steps, pf by pfBy (steps·pfStep).
	advance := func(steps int, pfBy Register) {
		ADDQ(U32(128*steps), xp)
		ADDQ(Imm(uint64(16*steps)), wp)
		ADDQ(pfBy, pfp)
	}
	Label(name + "_loop")
	for u := range 4 {
		step(u)
	}
	advance(4, pf4)
	DECQ(it)
	JNZ(LabelRef(name + "_loop"))
	Label(name + "_tail")
	r := GP64()
	MOVQ(n, r)
	ANDQ(Imm(3), r)
	JZ(LabelRef(name + "_fold"))
	Label(name + "_one")
	step(0)
	advance(1, pfs)
	DECQ(r)
	JNZ(LabelRef(name + "_one"))
	Label(name + "_fold")

	// Fold: for each channel, VPHADDD pairs the rows' lanes twice, then
	// the two 128-bit halves are added: rows 0 to 3 of the channel.
	for c := range 3 {
		a, b, cc, d := w.phys(c), w.phys(3+c), w.phys(6+c), w.phys(9+c)
		VPHADDD(b, a, a)   // rows 0 and 1, pairwise
		VPHADDD(d, cc, cc) // rows 2 and 3
		VPHADDD(cc, a, a)  // per 128-bit half: rows 0 to 3
		hi := w.phys(12).AsX()
		VEXTRACTI128(Imm(1), a, hi)
		VPADDD(hi, a.AsX(), a.AsX())
	}
	// Transpose the channels' columns into rows (a fourth channel of
	// zeros), which the caller's finisher reads as they are. The folds'
	// 128-bit forms cleared the high lanes, so the low lanes' transpose
	// is the rows.
	VPXOR(w.phys(3), w.phys(3), w.phys(3))
	byRow := transposeDwords(w, [4]VecPhysical{w.phys(0), w.phys(1), w.phys(2), w.phys(3)})
	sp := Load(Param("sums").Base(), GP64())
	lds := Load(Param("lds"), GP64())
	for r := range rows {
		v := byRow[r].AsX()
		VPADDD(Mem{Base: sp}, v, v)
		VMOVDQU(v, Mem{Base: sp})
		if r < rows-1 {
			ADDQ(lds, sp)
		}
	}
	VZEROUPPER()
	RET()
}

// gemvRows emits mm_int8's kernel for a row of a times b read as it is,
// [K, N] row-major, so that b is never packed: k outermost, it streams
// rows of b whole and adds a[k]·b[k, :] to the int32 sums c[:], 64
// columns at a time, two pairs of k (four rows of b) per pass over c
// while they last: the 16 bytes of rows 2p and 2p+1 for 16 columns are
// interleaved (VPUNPCKLBW, VPUNPCKHBW: the int8 pairs of 8 columns),
// widened (VPMOVSXBW) and multiplied with the row's pair p, broadcast;
// both pairs' products are added to c in memory (which stays in the cache
// while b streams past). Each step prefetches the same columns of the
// rows of the next pass (against none, on a 2-core Zen 4, one row of A, b
// out of the caches, with the rows two passes on: 0.94-0.97 of the time at
// 4096 by 4096, 0.82 at 8192 by 2048; against two passes on, a 2-core Zen
// 5, blocks of calls alternated in one process: 0.95-0.98 at one row,
// 0.92 at 4 rows, 0.93 at 8). AVX2 only: with AVX-512, gemvRowsQuad
// serves the sets with VNNI and without. Registers: 0 and 1 the row's
// pairs, 2 to 5 the rows' bytes, 6 to 9 their products.
func gemvRows(name string, w width) {
	TEXT(name, NOSPLIT, "func(x []byte, b []byte, ldb int, kp int, c []byte)")
	Pragma("noescape")
	Doc(name+" adds to int32 j of c, for j < len(c)/4 (a multiple of 64), the dot product over kp pairs of k",
		"of the int16 row x (4 bytes a pair) and column j of the int8 rows of b, ldb bytes apart",
		"(rows 2p and 2p+1 for pair p). kp must be at least 1.")
	xp := Load(Param("x").Base(), GP64())
	bp := Load(Param("b").Base(), GP64())
	ldb := Load(Param("ldb"), GP64())
	kp := Load(Param("kp"), GP64())
	cp := Load(Param("c").Base(), GP64())
	n := Load(Param("c").Len(), GP64())
	SHRQ(Imm(2), n) // columns
	ld2, ld3 := GP64(), GP64()
	LEAQ(Mem{Base: ldb, Index: ldb, Scale: 1}, ld2)
	LEAQ(Mem{Base: ld2, Index: ldb, Scale: 1}, ld3)
	ahead := GP64() // 4 rows of b: a pass
	MOVQ(ldb, ahead)
	SHLQ(Imm(2), ahead)
	// pass emits one pass over c with pairs pairs (1 or 2) of rows.
	pass := func(label string, pairs int) {
		for q := range pairs {
			VPBROADCASTD(Mem{Base: xp, Disp: 4 * q}, w.phys(q))
		}
		j, b0, c0 := GP64(), GP64(), GP64()
		MOVQ(n, j)
		MOVQ(bp, b0)
		MOVQ(cp, c0)
		pf := GP64()
		MOVQ(bp, pf)
		ADDQ(ahead, pf)
		Label(label)
		// The same columns of the rows of the next pass, at every step:
		// prefetching only each row's first line, as gemvRowsQuad does,
		// took this kernel, with more instructions a byte, 1.43-1.48
		// times as long at one row.
		PREFETCHT0(Mem{Base: pf})
		PREFETCHT0(Mem{Base: pf, Index: ldb, Scale: 1})
		PREFETCHT0(Mem{Base: pf, Index: ldb, Scale: 2})
		PREFETCHT0(Mem{Base: pf, Index: ld3, Scale: 1})
		ADDQ(Imm(64), pf)
		// A group is 16 columns of each pair of rows.
		const cols = 16
		half := func(v VecPhysical) Op { return v.AsX() }
		for g := range 64 / cols {
			var lo, hi [2]VecPhysical
			for q := range pairs {
				r0, r1 := half(w.phys(2+2*q)), half(w.phys(3+2*q))
				lo[q], hi[q] = w.phys(6+2*q), w.phys(7+2*q)
				// Rows 2p+2q and 2p+2q+1 of b.
				for i, m := range []Mem{
					{Base: b0, Index: []Register{nil, ld2}[q], Scale: uint8(q), Disp: cols * g},
					{Base: b0, Index: []Register{ldb, ld3}[q], Scale: 1, Disp: cols * g},
				} {
					VMOVDQU(m, []Op{r0, r1}[i])
				}
				VPUNPCKLBW(r1, r0, half(lo[q])) // the group's first half of columns: k's byte, then k+1's
				VPUNPCKHBW(r1, r0, half(hi[q])) // its second half
				VPMOVSXBW(half(lo[q]), lo[q])
				VPMOVSXBW(half(hi[q]), hi[q])
				VPMADDWD(w.phys(q), lo[q], lo[q])
				VPMADDWD(w.phys(q), hi[q], hi[q])
			}
			if pairs == 2 {
				VPADDD(lo[1], lo[0], lo[0])
				VPADDD(hi[1], hi[0], hi[0])
			}
			VPADDD(Mem{Base: c0, Disp: 4 * cols * g}, lo[0], lo[0])
			VPADDD(Mem{Base: c0, Disp: 4*cols*g + w.bytes}, hi[0], hi[0])
			w.mov(lo[0], Mem{Base: c0, Disp: 4 * cols * g})
			w.mov(hi[0], Mem{Base: c0, Disp: 4*cols*g + w.bytes})
		}
		ADDQ(Imm(64), b0)
		ADDQ(U32(256), c0)
		SUBQ(Imm(64), j)
		JNZ(LabelRef(label))
		ADDQ(U32(4*pairs), xp)
		for range pairs {
			LEAQ(Mem{Base: bp, Index: ldb, Scale: 2}, bp)
		}
	}
	passes(name, kp, pass)
}

// gemvRowsQuad emits gemvRows's VNNI form: the same walk over b, [K, N]
// read as it is, with quads of k (four rows of b) a step. The bytes of rows
// 4q to 4q+3 for a register of columns, plus 128 (an XOR), are interleaved
// into each column's quad (VPUNPCKLBW/VPUNPCKHBW, then
// VPUNPCKLWD/VPUNPCKHWD) and multiplied with the row's quad q, broadcast,
// by VPDPBUSD: fewer instructions a byte of b than gemvRows, which ran at
// 39-42 GB/s a thread with b in the cache on a 2-core Zen 5, not much
// faster than one thread reads memory there (42-46); this one at 64-75
// (AVX-512) and 44-54 (AVX-VNNI). The unpacking works within 128-bit lanes,
// so c holds each quadCols columns' sums (64 with AVX-512, 32 with AVX2) in
// the order quadColumn gives, which the caller puts back (with 128 times
// the row's sum taken off, as for the quad panels). Two quads a pass over c
// while they last. Each pass prefetches the first line of each row of the
// pass after next and leaves the rest of the rows to the hardware's
// prefetchers. Against a line of each row prefetched at every step, on a
// 2-core Zen 5, b 4096x4096 out of the caches, blocks of calls alternated
// in one process: mm_int8 took 0.89-0.96 of the time at 1 row and 0.77-0.81
// at 3 with AVX-512, 0.74 at 8 rows with AVX-VNNI (1 row: the same).
// gemvRows, whose pairs take more instructions a byte, took 1.43-1.48 times
// as long at 1 row so, and keeps its prefetch at every step.
//
// Without VNNI (the AVX-512 form only: AVX2's 16 registers cannot hold its
// sums) quadProducts does VPDPBUSD's arithmetic, the same sums bit for bit,
// in about twice the instructions; from the second-level cache it runs as
// fast as the VNNI form (95 GB/s a thread on a 2-core Zen 5, the pairs
// kernel 56). From memory it reads fastest with cold set, which also
// prefetches, at every step, the next line of each row of the next pass
// (the VNNI form does not gain from such prefetching: 1.08-1.14 times as
// long at one row): one row of A times b 4096x4096 out of the caches,
// blocks of calls alternated in one process, took 0.92-0.95 of the time
// without it with the lines two passes on, and 0.90-0.96 of that with them
// one pass on (as fast as the VNNI form); for the rows after the first,
// which find b's chunk in the cache, the extra prefetches cost time.
// Against the pairs kernel (gemvRows's old AVX-512 form, now gone) mm_int8
// took 0.91-0.95 of the time at one row, 0.79 at 3 and 0.70 at 5 (with the
// lines two passes on).
//
// Registers: 0 and 1 the row's quads (without VNNI their low nibbles,
// 16 and 17 the high ones), 2 to 5 the sums of a register of columns
// each, 6 to 13 the rows and their interleavings, 15 the 0x80 bytes;
// without VNNI, 18 and 19 int16 ones and sixteens, 20 to 27 the int16
// sums of quadProducts.
func gemvRowsQuad(name string, w width, vnni, cold bool) {
	TEXT(name, NOSPLIT, "func(x []byte, b []byte, ldb int, kq int, c []byte)")
	Pragma("noescape")
	Doc(name+" adds to the int32 of c, len(c)/4 of them (a multiple of 64), for each column j of the int8 rows",
		"of b (ldb bytes apart, rows 4q to 4q+3 for quad q), the sum over kq quads of k of the products of",
		"its bytes plus 128, as unsigned bytes, with the int8 row x (4 bytes a quad), wrapping; each "+fmt.Sprint(4*w.lanes()),
		"columns' sums in c in the order of quadColumn. kq must be at least 1.")
	xp := Load(Param("x").Base(), GP64())
	bp := Load(Param("b").Base(), GP64())
	ldb := Load(Param("ldb"), GP64())
	kq := Load(Param("kq"), GP64())
	cp := Load(Param("c").Base(), GP64())
	n := Load(Param("c").Len(), GP64())
	SHRQ(Imm(2), n) // columns
	ld3 := GP64()
	LEAQ(Mem{Base: ldb, Index: ldb, Scale: 2}, ld3)
	ahead := GP64() // 16 rows of b: two passes
	MOVQ(ldb, ahead)
	SHLQ(Imm(4), ahead)
	bias := w.phys(15)
	w.fill(0x80808080, bias)
	xhi := func(q int) VecPhysical { return w.phys(16 + q) }
	var ones, sixteens VecPhysical
	if !vnni {
		ones, sixteens = w.phys(18), w.phys(19)
		w.fill(0x00010001, ones)
		w.fill(0x00100010, sixteens)
	}
	rowAt := func(base Register, r int, disp int) Mem {
		return []Mem{{Base: base, Disp: disp}, {Base: base, Index: ldb, Scale: 1, Disp: disp},
			{Base: base, Index: ldb, Scale: 2, Disp: disp}, {Base: base, Index: ld3, Scale: 1, Disp: disp}}[r]
	}
	// pass emits one pass over c with quads quads (1 or 2) of rows.
	pass := func(label string, quads int) {
		for q := range quads {
			VPBROADCASTD(Mem{Base: xp, Disp: 4 * q}, w.phys(q))
			if !vnni {
				splitQuad(w, w.phys(q), xhi(q), w.phys(6), w.phys(7))
			}
		}
		j, b0, c0, pf, hi := GP64(), GP64(), GP64(), GP64(), GP64()
		MOVQ(n, j)
		MOVQ(bp, b0)
		MOVQ(cp, c0)
		prefetch := func(base Register, disp int) { // the line at disp of each of a pass's rows from base
			LEAQ(Mem{Base: base, Index: ldb, Scale: 4}, hi)
			for r := range 4 * quads {
				PREFETCHT0(rowAt([]Register{base, hi}[r/4], r%4, disp))
			}
		}
		// The first line of each row of the pass after next: the rest of
		// each row the hardware's prefetchers fetch, which a row's first
		// miss sets going (see the function's doc).
		MOVQ(bp, pf)
		ADDQ(ahead, pf)
		prefetch(pf, 0)
		var next Register
		if cold {
			next = GP64() // the next pass's rows, 4·quads on
			MOVQ(ldb, next)
			SHLQ(Imm(uint64(1+quads)), next)
			ADDQ(bp, next)
		}
		Label(label)
		if cold {
			prefetch(next, 64) // and, at every step, the next line of each row of the next pass
			ADDQ(Imm(64), next)
		}
		LEAQ(Mem{Base: b0, Index: ldb, Scale: 4}, hi)
		for h := 0; h < 64; h += w.bytes {
			acc := []VecPhysical{w.phys(2), w.phys(3), w.phys(4), w.phys(5)}
			for i, a := range acc {
				w.mov(Mem{Base: c0, Disp: 4*h + i*w.bytes}, a)
			}
			for q := range quads {
				base := b0
				if q == 1 {
					base = hi
				}
				r := []VecPhysical{w.phys(6), w.phys(7), w.phys(8), w.phys(9)}
				t := []VecPhysical{w.phys(10), w.phys(11), w.phys(12), w.phys(13)}
				for i := range r {
					w.xor(rowAt(base, i, h), bias, r[i])
				}
				VPUNPCKLBW(r[1], r[0], t[0]) // columns 0-7 of each 16: row 0's byte, then row 1's
				VPUNPCKHBW(r[1], r[0], t[1]) // columns 8-15
				VPUNPCKLBW(r[3], r[2], t[2])
				VPUNPCKHBW(r[3], r[2], t[3])
				VPUNPCKLWD(t[2], t[0], r[0]) // columns 0-3: the quads
				VPUNPCKHWD(t[2], t[0], r[1]) // 4-7
				VPUNPCKLWD(t[3], t[1], r[2]) // 8-11
				VPUNPCKHWD(t[3], t[1], r[3]) // 12-15
				for i, a := range acc {
					if vnni {
						w.dpbusd(w.phys(q), r[i], a)
						continue
					}
					quadProducts(q, w.phys(q), xhi(q), r[i], t[i], w.phys(20+i), w.phys(24+i))
				}
			}
			if !vnni {
				for i, a := range acc {
					lo, hi := w.phys(20+i), w.phys(24+i)
					VPMADDWD(ones, lo, lo)
					VPMADDWD(sixteens, hi, hi)
					VPADDD(lo, a, a)
					VPADDD(hi, a, a)
				}
			}
			for i, a := range acc {
				w.mov(a, Mem{Base: c0, Disp: 4*h + i*w.bytes})
			}
		}
		ADDQ(Imm(64), b0)
		ADDQ(U32(256), c0)
		SUBQ(Imm(64), j)
		JNZ(LabelRef(label))
		ADDQ(U32(4*quads), xp)
		for range quads {
			LEAQ(Mem{Base: bp, Index: ldb, Scale: 4}, bp)
		}
	}
	passes(name, kq, pass)
}

// splitQuad splits the int8 quad broadcast in x as 16·hi + lo (see
// quadProducts): lo, in x, the low nibbles, 0 to 15, and hi the high
// ones, -8 to 7; t and u are scratch.
func splitQuad(w width, x, hi, t, u VecPhysical) {
	w.fill(0x0f0f0f0f, t)
	w.fill(0x08080808, u)
	VPSRLW(Imm(4), x, hi)
	w.and(t, hi, hi)
	w.xor(u, hi, hi) // the sign: (v ^ 8) - 8
	VPSUBB(u, hi, hi)
	w.and(t, x, x)
}

// quadProducts is VPDPBUSD's arithmetic without VNNI, for gemvRowsQuad's
// AVX-512 form: the quads of a register of columns (r, unsigned bytes: b
// plus 128) times x's quad q, split as 16·hi + lo (splitQuad), with
// VPMADDUBSW, which multiplies unsigned bytes by signed ones and adds
// each two products into an int16, saturating. Nothing saturates: two
// products with lo are at most 2·255·15 = 7650, with hi -4080 to 3570,
// and the pass's two quads are added into the int16 sums lo and hi
// (quad 0 sets them; t is scratch) before VPMADDWD adds each int16 pair,
// by 1 for lo and by 16 for hi, into int32 (the caller): the sums are
// VPDPBUSD's bit for bit.
func quadProducts(q int, xlo, xhi, r, t, lo, hi VecPhysical) {
	if q == 0 {
		VPMADDUBSW(xlo, r, lo)
		VPMADDUBSW(xhi, r, hi)
		return
	}
	VPMADDUBSW(xlo, r, t)
	VPADDW(t, lo, lo)
	VPMADDUBSW(xhi, r, r)
	VPADDW(r, hi, hi)
}

// unquad emits the end of mm_int8's cols path with quads: gemvRowsQuad's
// sums, plus another accumulator's and a row's corr, put back in column
// order. A register of w columns' sums holds, lane by lane, the columns 4i
// to 4i+3 of each 16 (see quadColumn in linear_cols.go), as packColsQuad's
// interleaved rows do, and the same shuffles put them in order
// (inColumnOrder). On a 2-core Zen 5, 4096 columns in the cache: 0.16 µs,
// against 11.5 for the same in Go (unquadGeneric).
func unquad(name string, w width) {
	TEXT(name, NOSPLIT, "func(sums []byte, other []byte, corr int32)")
	Pragma("noescape")
	Doc(name+" adds corr and, if other is not empty, the int32 of other to those of sums (len(sums) bytes of each,",
		fmt.Sprintf("a multiple of %d), and puts each %d int32 of sums, in the order of quadColumn, in column order.", 4*w.bytes, w.lanes()*4))
	sp := Load(Param("sums").Base(), GP64())
	n := Load(Param("sums").Len(), GP64())
	op := Load(Param("other").Base(), GP64())
	on := Load(Param("other").Len(), GP64())
	corr := Load(Param("corr"), GP32())
	cv := w.broadcastGP(corr)
	block := 4 * w.bytes
	loop := func(label string, other bool) {
		Label(label)
		CMPQ(n, Imm(0))
		JE(LabelRef(name + "_done"))
		var t [4]VecVirtual
		for i := range t {
			t[i] = w.reg()
			w.mov(Mem{Base: sp, Disp: i * w.bytes}, t[i])
			if other {
				VPADDD(Mem{Base: op, Disp: i * w.bytes}, t[i], t[i])
			}
			VPADDD(cv, t[i], t[i])
		}
		inColumnOrder(w, t, func(j int, v VecVirtual) {
			w.mov(v, Mem{Base: sp, Disp: j * w.bytes})
		})
		ADDQ(U32(block), sp)
		if other {
			ADDQ(U32(block), op)
		}
		SUBQ(U32(block), n)
		JMP(LabelRef(label))
	}
	TESTQ(on, on)
	JZ(LabelRef(name + "_alone"))
	loop(name+"_loop", true)
	loop(name+"_alone", false)
	Label(name + "_done")
	VZEROUPPER()
	RET()
}

// passes emits the end of gemvRows and gemvRowsQuad: pass(label, 2) for
// each two of the n steps of k (pairs or quads) in the register n, then
// pass(label, 1) for the last if n is odd, and the return.
func passes(name string, n Register, pass func(label string, steps int)) {
	Label(name + "_two")
	CMPQ(n, Imm(2))
	JB(LabelRef(name + "_one"))
	pass(name+"_cols2", 2)
	SUBQ(Imm(2), n)
	JMP(LabelRef(name + "_two"))
	Label(name + "_one")
	TESTQ(n, n)
	JZ(LabelRef(name + "_done"))
	pass(name+"_cols1", 1)
	Label(name + "_done")
	VZEROUPPER()
	RET()
}

// roundKeep rounds the float32 lanes of y to dt in place and keeps them
// as float32, as dtype.Round does: bfloat16 to nearest even on the bits,
// a NaN keeping its top half and quieted; float16 through F16C, which
// quiets a NaN and keeps the top of its payload as Go's conversion does.
func (st storer) roundKeep(y, himask, quietHi VecVirtual) {
	w := st.w
	switch st.dt {
	case "bfloat16":
		top, t := w.reg(), w.reg()
		nan := w.mask()
		w.and(himask, y, top) // NaN: the top half ...
		VPSRLD(Imm(16), y, t)
		w.and(st.one, t, t)
		VCMPPS(Imm(3), y, y, nan) // unordered: NaN lanes
		VPADDD(st.bias, y, y)
		VPADDD(t, y, y)
		w.and(himask, y, y)
		w.or(quietHi, top, top) // ... with the quiet bit
		w.blend(nan, top, y)
	case "float16":
		VCVTPS2PH(Imm(0), y, w.half(y))
		VCVTPH2PS(w.half(y), y)
	}
}

// linearOut emits int8_linear's epilogue for a row of sums, two registers
// of lanes per iteration: c = xs*ws[n], y = float32(acc)*c (each product
// rounded on its own, no FMA), then rOut(y); with a bias,
// rOut(rOut(y) + bias[n]), the bias already rounded to the output type.
func linearOut(name, dt string, bias bool, w width) {
	size := elemSize(dt)
	lanes := w.lanes()
	block := 2 * lanes
	sig, what := "func(acc []byte, xs float32, ws []float32, dst []byte)", "rOut(float32(acc[i]) * (xs*ws[i]))"
	if bias {
		sig, what = "func(acc []byte, xs float32, ws []float32, bias []float32, dst []byte)", "rOut(rOut(float32(acc[i]) * (xs*ws[i])) + bias[i])"
	}
	TEXT(name, NOSPLIT, sig)
	Pragma("noescape")
	Doc(name+" sets element i of dst to the "+dt+" "+what+", every product and sum rounded to float32,",
		"for the int32 sums in acc.",
		fmt.Sprintf("len(ws) must be a multiple of %d; acc, dst (and bias) must hold len(ws) elements.", block))
	ap := Load(Param("acc").Base(), GP64())
	sp := Load(Param("ws").Base(), GP64())
	n := Load(Param("ws").Len(), GP64())
	dp := Load(Param("dst").Base(), GP64())
	var bp Register
	if bias {
		bp = Load(Param("bias").Base(), GP64())
	}
	xs := w.broadcastParam("xs")
	st := newStorer(dt, w)
	var himask, quietHi VecVirtual
	if bias && dt == "bfloat16" {
		himask, quietHi = w.broadcast(0xffff0000), w.broadcast(0x00400000)
	}

	Label(name + "_loop")
	CMPQ(n, Imm(0))
	JE(LabelRef(name + "_done"))
	v := make([]VecVirtual, 2)
	for g := range v {
		c, y := w.reg(), w.reg()
		v[g] = y
		VMULPS(Mem{Base: sp, Disp: w.bytes * g}, xs, c) // xs * ws
		VCVTDQ2PS(Mem{Base: ap, Disp: w.bytes * g}, y)  // exact below 2^24, else to nearest even, as Go
		VMULPS(c, y, y)
		if bias {
			st.roundKeep(y, himask, quietHi)
			VADDPS(Mem{Base: bp, Disp: w.bytes * g}, y, y) // y + bias: y is the first operand, as in Go
		}
		st.store(y, Mem{Base: dp, Disp: lanes * size * g})
	}
	st.finish(v, Mem{Base: dp})
	ADDQ(U32(4*block), ap)
	ADDQ(U32(4*block), sp)
	if bias {
		ADDQ(U32(4*block), bp)
	}
	ADDQ(U32(block*size), dp)
	SUBQ(U32(block), n)
	JMP(LabelRef(name + "_loop"))

	Label(name + "_done")
	VZEROUPPER()
	RET()
}

// widenInt8 emits the kernel that sign-extends int8 to int16, two
// registers of int16 per iteration.
func widenInt8(name string, w width) {
	block := w.bytes // int8 in per iteration: two registers' worth of int16
	TEXT(name, NOSPLIT, "func(q []byte, dst []byte)")
	Pragma("noescape")
	Doc(name+" sets int16 i of dst to int8(q[i]).",
		fmt.Sprintf("len(q) must be a multiple of %d and dst must hold 2*len(q) bytes.", block))
	q := Load(Param("q").Base(), GP64())
	n := Load(Param("q").Len(), GP64())
	dp := Load(Param("dst").Base(), GP64())
	Label(name + "_loop")
	CMPQ(n, Imm(0))
	JE(LabelRef(name + "_done"))
	for g := range 2 {
		y := w.reg()
		VPMOVSXBW(Mem{Base: q, Disp: block / 2 * g}, y)
		w.mov(y, Mem{Base: dp, Disp: w.bytes * g})
	}
	ADDQ(U32(block), q)
	ADDQ(U32(2*block), dp)
	SUBQ(U32(block), n)
	JMP(LabelRef(name + "_loop"))

	Label(name + "_done")
	VZEROUPPER()
	RET()
}

// packRows emits the kernel that packs whole weight panels from [N, K]
// rows: 2*lanes rows (the panel's channels), 8 pairs of k per iteration.
// Each row's 16 bytes are 8 words, one per pair of k; the rows go into
// the 128-bit lanes of 8 registers (rows i, i+8, i+16 and i+24 of the
// panel in lanes 0 to 3 of register i), and three rounds of unpacks
// (words, dwords, qwords) transpose each lane's 8x8 words, so register q
// holds pair q of every channel, in channel order. VPMOVSXBW widens each
// half to int16 pairs, which are the panel's row for that pair of k; with
// int8 set (a prepared weight) the register is stored as it is.
func packRows(name string, w width, int8 bool) {
	nr, pairBytes, what := w.panel(int8)
	TEXT(name, NOSPLIT, "func(src []byte, ldw int, kp int, dst []byte)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s packs %d int8 weight rows of src, ldw bytes apart, into dst: for each of kp pairs of k,", name, nr),
		fmt.Sprintf("the %d channels' two values as %s (%d bytes). kp must be a multiple of 8.", nr, what, pairBytes))
	sp := Load(Param("src").Base(), GP64())
	ldw := Load(Param("ldw"), GP64())
	n := Load(Param("kp"), GP64())
	dp := Load(Param("dst").Base(), GP64())
	// Rows 0 to 7 one after the other, each lane's rows 8 further.
	ld8 := GP64()
	MOVQ(ldw, ld8)
	SHLQ(Imm(3), ld8) // 8 rows
	lanes := w.bytes / 16
	Label(name + "_loop")
	CMPQ(n, Imm(0))
	JE(LabelRef(name + "_done"))
	r := make([]VecVirtual, 8)
	p := GP64()
	MOVQ(sp, p)
	for i := range r {
		// A broadcast writes the whole register (the lanes after the
		// first are then replaced), so no earlier value stays live.
		r[i] = w.reg()
		q := GP64()
		MOVQ(p, q)
		if w.bytes == 64 {
			VBROADCASTI32X4(Mem{Base: p}, r[i])
		} else {
			VBROADCASTI128(Mem{Base: p}, r[i])
		}
		for l := 1; l < lanes; l++ {
			ADDQ(ld8, q)
			if w.bytes == 64 {
				VINSERTI32X4(Imm(uint64(l)), Mem{Base: q}, r[i], r[i])
			} else {
				VINSERTI128(Imm(uint64(l)), Mem{Base: q}, r[i], r[i])
			}
		}
		ADDQ(ldw, p)
	}
	transposePairs(w, r, func(q int, v VecVirtual) {
		if int8 {
			w.mov(v, Mem{Base: dp, Disp: pairBytes * q})
			return
		}
		lo, hi := w.reg(), w.reg()
		VPMOVSXBW(w.half(v), lo)
		if w.bytes == 64 {
			top := YMM()
			VEXTRACTI64X4(Imm(1), v, top)
			VPMOVSXBW(top, hi)
		} else {
			top := XMM()
			VEXTRACTI128(Imm(1), v, top)
			VPMOVSXBW(top, hi)
		}
		w.mov(lo, Mem{Base: dp, Disp: 4 * nr * q})
		w.mov(hi, Mem{Base: dp, Disp: 4*nr*q + w.bytes})
	})
	ADDQ(Imm(16), sp)
	ADDQ(U32(8*pairBytes), dp)
	SUBQ(Imm(8), n)
	JMP(LabelRef(name + "_loop"))

	Label(name + "_done")
	VZEROUPPER()
	RET()
}

// transposePairs emits the transpose of the 8x8 words in each 128-bit
// lane of r (three rounds of unpacks: words, dwords, qwords), handing each
// result to use as soon as it is made: word i of lane l of result q is
// word q of lane l of r[i].
func transposePairs(w width, r []VecVirtual, use func(q int, v VecVirtual)) {
	// Words: t[2i], t[2i+1] interleave r[2i] and r[2i+1].
	t := make([]VecVirtual, 8)
	for i := range 4 {
		t[2*i], t[2*i+1] = w.reg(), w.reg()
		VPUNPCKLWD(r[2*i+1], r[2*i], t[2*i])
		VPUNPCKHWD(r[2*i+1], r[2*i], t[2*i+1])
	}
	// Dwords: u[0..3] words 0-1, 2-3, 4-5, 6-7 of r[0..3], u[4..7] of r[4..7].
	u := make([]VecVirtual, 8)
	for h := range 2 {
		a, b, c, d := t[4*h], t[4*h+1], t[4*h+2], t[4*h+3]
		for i := range 4 {
			u[4*h+i] = w.reg()
		}
		VPUNPCKLDQ(c, a, u[4*h])
		VPUNPCKHDQ(c, a, u[4*h+1])
		VPUNPCKLDQ(d, b, u[4*h+2])
		VPUNPCKHDQ(d, b, u[4*h+3])
	}
	// Qwords: word q of r[0..7].
	for q := range 8 {
		v := w.reg()
		if q%2 == 0 {
			VPUNPCKLQDQ(u[4+q/2], u[q/2], v)
		} else {
			VPUNPCKHQDQ(u[4+q/2], u[q/2], v)
		}
		use(q, v)
	}
}

// packQuads emits the kernel that packs whole quad panels (see
// gemmTileQuad) from [N, K] rows on 256-bit registers: the panel's 16 rows
// (its channels), 4 quads of k per iteration. Each row's 16 bytes are 4
// dwords, one per quad; for each half of the panel, rows i and i+4 go into
// the two 128-bit lanes of register i (i = 0 to 3), and transposeDwords
// leaves in register q quad q of the half's 8 channels in order. Each byte
// is XORed with 0x80 (the weight plus 128, as an unsigned byte).
func packQuads(name string, w width) {
	nr := 2 * w.lanes()
	quadBytes := 4 * nr
	TEXT(name, NOSPLIT, "func(src []byte, ldw int, kq int, dst []byte)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s packs %d int8 weight rows of src, ldw bytes apart, into dst: for each of kq quads of k,", name, nr),
		fmt.Sprintf("the %d channels' four values plus 128, as unsigned bytes (%d bytes). kq must be a multiple of 4.", nr, quadBytes))
	sp := Load(Param("src").Base(), GP64())
	ldw := Load(Param("ldw"), GP64())
	n := Load(Param("kq"), GP64())
	dp := Load(Param("dst").Base(), GP64())
	ld4 := GP64()
	MOVQ(ldw, ld4)
	SHLQ(Imm(2), ld4) // 4 rows
	bias := w.broadcast(0x80808080)
	Label(name + "_loop")
	CMPQ(n, Imm(0))
	JE(LabelRef(name + "_done"))
	p := GP64()
	MOVQ(sp, p)
	for h := range 2 {
		var r [4]VecVirtual
		for i := range r {
			r[i] = w.reg()
			q := GP64()
			LEAQ(Mem{Base: p, Index: ld4, Scale: 1}, q)
			VBROADCASTI128(Mem{Base: p}, r[i])
			VINSERTI128(Imm(1), Mem{Base: q}, r[i], r[i])
			w.xor(bias, r[i], r[i])
			ADDQ(ldw, p)
		}
		if h == 0 {
			ADDQ(ld4, p) // from row 4 of the half to the next half's first
		}
		for q, v := range transposeDwords(w, r) {
			w.mov(v, Mem{Base: dp, Disp: quadBytes*q + w.bytes*h})
		}
	}
	ADDQ(Imm(16), sp)
	ADDQ(U32(4*quadBytes), dp)
	SUBQ(Imm(4), n)
	JMP(LabelRef(name + "_loop"))

	Label(name + "_done")
	VZEROUPPER()
	RET()
}

// transposeDwords emits the transpose of the 4x4 dwords in each 128-bit
// lane of r (two rounds of unpacks): dword d of lane l of result q is
// dword q of lane l of r[d].
func transposeDwords[R Op](w width, r [4]R) [4]VecVirtual {
	var t, v [4]VecVirtual
	for i := range t {
		t[i], v[i] = w.reg(), w.reg()
	}
	VPUNPCKLDQ(r[1], r[0], t[0])
	VPUNPCKHDQ(r[1], r[0], t[1])
	VPUNPCKLDQ(r[3], r[2], t[2])
	VPUNPCKHDQ(r[3], r[2], t[3])
	for q := range v {
		if q%2 == 0 {
			VPUNPCKLQDQ(t[2+q/2], t[q/2], v[q])
		} else {
			VPUNPCKHQDQ(t[2+q/2], t[q/2], v[q])
		}
	}
	return v
}

// transposeLanes emits the transpose of the 4x4 128-bit lanes of c (two
// rounds of VSHUFI32X4; 512-bit), handing each result to use as soon as it
// is made: lane l of result j is lane j of c[l].
func transposeLanes(w width, c [4]VecVirtual, use func(j int, o VecVirtual)) {
	shuffleLanes(w, VSHUFI32X4, c, use)
}

// transposeLanesF is transposeLanes for float32 values (VSHUFF32X4).
func transposeLanesF(w width, c [4]VecVirtual, use func(j int, o VecVirtual)) {
	shuffleLanes(w, VSHUFF32X4, c, use)
}

// shuffleLanes is transposeLanes with the shuffle shuf.
func shuffleLanes(w width, shuf func(ops ...Op), c [4]VecVirtual, use func(j int, o VecVirtual)) {
	// x[0] = c0.l0 c0.l1 c1.l0 c1.l1, x[1] = c0.l2 c0.l3 c1.l2 c1.l3,
	// x[2] and x[3] the same of c2 and c3.
	var x [4]VecVirtual
	for i := range x {
		x[i] = w.reg()
	}
	shuf(Imm(0x44), c[1], c[0], x[0])
	shuf(Imm(0xEE), c[1], c[0], x[1])
	shuf(Imm(0x44), c[3], c[2], x[2])
	shuf(Imm(0xEE), c[3], c[2], x[3])
	// Result j: lanes j%2 and j%2+2 of x[j/2], then of x[2+j/2].
	for j := range 4 {
		o := w.reg()
		imm := uint64(0x88)
		if j%2 == 1 {
			imm = 0xDD
		}
		shuf(Imm(imm), x[2+j/2], x[j/2], o)
		use(j, o)
	}
}

// packQuadLines emits packQuads's 512-bit form, which reads whole lines:
// per iteration 16 quads of k (a 64-byte line of each row) of the 32
// rows, 16 rows at a time, each line loaded once. (packQuads, 16 bytes of
// each of the 32 rows an iteration, keeps 32 lines in use at once; with
// rows 4 KiB apart they all fall into one set of the first-level cache,
// which has 12 ways.) For 16 rows, the first two rounds of unpacks leave
// in lane l of register (j, q') quad 4l+q' of rows 4j to 4j+3; two rounds
// of VSHUFI32X4 then transpose the 4x4 lanes of the registers (0..3, q'),
// as packColsQuads does, so each result holds one quad of the 16 rows.
func packQuadLines(name string, w width) {
	nr := 2 * w.lanes()
	quadBytes := 4 * nr
	TEXT(name, NOSPLIT, "func(src []byte, ldw int, kq int, dst []byte)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s packs %d int8 weight rows of src, ldw bytes apart, into dst: for each of kq quads of k,", name, nr),
		fmt.Sprintf("the %d channels' four values plus 128, as unsigned bytes (%d bytes). kq must be a multiple of 16.", nr, quadBytes))
	sp := Load(Param("src").Base(), GP64())
	ldw := Load(Param("ldw"), GP64())
	n := Load(Param("kq"), GP64())
	dp := Load(Param("dst").Base(), GP64())
	bias := w.broadcast(0x80808080)
	Label(name + "_loop")
	CMPQ(n, Imm(0))
	JE(LabelRef(name + "_done"))
	p := GP64()
	MOVQ(sp, p)
	for g := range nr / 16 {
		r := make([]VecVirtual, 16)
		for i := range r {
			r[i] = w.reg()
			w.xor(Mem{Base: p}, bias, r[i])
			ADDQ(ldw, p)
		}
		// v[j][q']: lane l holds quad 4l+q' of rows 4j to 4j+3.
		var v [4][4]VecVirtual
		for j := range v {
			v[j] = transposeDwords(w, [4]VecVirtual{r[4*j], r[4*j+1], r[4*j+2], r[4*j+3]})
		}
		for q := range 4 {
			transposeLanes(w, [4]VecVirtual{v[0][q], v[1][q], v[2][q], v[3][q]}, func(l int, o VecVirtual) {
				w.mov(o, Mem{Base: dp, Disp: quadBytes*(4*l+q) + w.bytes*g})
			})
		}
	}
	ADDQ(Imm(64), sp)
	ADDQ(U32(16*quadBytes), dp)
	SUBQ(Imm(16), n)
	JMP(LabelRef(name + "_loop"))

	Label(name + "_done")
	VZEROUPPER()
	RET()
}

// packColsQuads emits the kernel that packs one quad of k of whole quad
// panels from a [K, N] matrix: rows 4q to 4q+3, two panels' 64 columns
// at a time. The four rows' bytes are interleaved by VPUNPCKLBW/HBW (rows
// 0 and 1, 2 and 3) and VPUNPCKLWD/HWD, which leaves in lane l of the
// four results the columns 16l to 16l+3, +4 to +7, +8 to +11 and +12 to
// +15; two rounds of VSHUFI32X4 transpose those 4x4 lanes, so each
// register holds 16 columns in order (with 256 bits, 32 columns at a
// time, VPERM2I128 pairs the lanes: 8 columns a register). Each byte is
// XORed with 0x80. With down, the kernel instead packs one pair of panels
// for a run of quads, moving down the rows rather than across the
// columns, as the few-row path packs mm_int8's b just before it
// multiplies it.
func packColsQuads(name string, w width, down bool) {
	nr := 2 * w.lanes()
	count := "pairs"
	doc := []string{
		fmt.Sprintf("%s packs four int8 rows of src (ldb bytes apart), %d columns for each of pairs pairs of panels, into dst:", name, 2*nr),
		fmt.Sprintf("per panel, pstride bytes apart, the %d columns' four values plus 128, as unsigned bytes (%d bytes).", nr, 4*nr),
	}
	if down {
		count = "quads"
		doc = []string{
			fmt.Sprintf("%s packs %d columns of quads quads of int8 rows of src (four rows, ldb bytes apart, a quad) into two panels of dst,", name, 2*nr),
			fmt.Sprintf("pstride bytes apart: per quad, the %d columns' four values plus 128, as unsigned bytes (%d bytes).", nr, 4*nr),
		}
	}
	TEXT(name, NOSPLIT, "func(src []byte, ldb int, "+count+" int, dst []byte, pstride int)")
	Pragma("noescape")
	Doc(doc...)
	sp := Load(Param("src").Base(), GP64())
	ldb := Load(Param("ldb"), GP64())
	n := Load(Param(count), GP64())
	dp := Load(Param("dst").Base(), GP64())
	ps := Load(Param("pstride"), GP64())
	sp3 := third(sp, ldb)
	var rows GPVirtual // down: four rows
	if down {
		rows = GP64()
		MOVQ(ldb, rows)
		SHLQ(Imm(2), rows)
	}
	bias := w.broadcast(0x80808080)
	Label(name + "_loop")
	CMPQ(n, Imm(0))
	JE(LabelRef(name + "_done"))
	packColsQuad(w, sp, sp3, ldb, dp, ps, bias)
	if down {
		ADDQ(rows, sp)
		ADDQ(rows, sp3)
		ADDQ(U32(4*nr), dp)
	} else {
		ADDQ(Imm(uint64(w.bytes)), sp)
		ADDQ(Imm(uint64(w.bytes)), sp3)
		LEAQ(Mem{Base: dp, Index: ps, Scale: 2}, dp)
	}
	DECQ(n)
	JMP(LabelRef(name + "_loop"))

	Label(name + "_done")
	VZEROUPPER()
	RET()
}

// packColsQuad emits one step of packColsQuads: the four rows at sp (sp3
// the fourth), two panels' columns, stored at dp and dp + ps.
func packColsQuad(w width, sp, sp3, ldb, dp, ps Register, bias VecVirtual) {
	r := make([]VecVirtual, 4)
	for i, m := range []Mem{{Base: sp}, {Base: sp, Index: ldb, Scale: 1}, {Base: sp, Index: ldb, Scale: 2}, {Base: sp3}} {
		r[i] = w.reg()
		w.xor(m, bias, r[i])
	}
	lo01, hi01, lo23, hi23 := w.reg(), w.reg(), w.reg(), w.reg()
	VPUNPCKLBW(r[1], r[0], lo01)
	VPUNPCKHBW(r[1], r[0], hi01)
	VPUNPCKLBW(r[3], r[2], lo23)
	VPUNPCKHBW(r[3], r[2], hi23)
	var c [4]VecVirtual // lane l: columns 16l+4i to 16l+4i+3
	for i := range c {
		c[i] = w.reg()
	}
	VPUNPCKLWD(lo23, lo01, c[0])
	VPUNPCKHWD(lo23, lo01, c[1])
	VPUNPCKLWD(hi23, hi01, c[2])
	VPUNPCKHWD(hi23, hi01, c[3])
	// The registers of columns in order, stored as they are made: the
	// first panel's two, then the second's.
	inColumnOrder(w, c, func(j int, v VecVirtual) {
		if j < 2 {
			w.mov(v, Mem{Base: dp, Disp: w.bytes * j})
		} else {
			w.mov(v, Mem{Base: dp, Index: ps, Scale: 1, Disp: w.bytes * (j - 2)})
		}
	})
}

// inColumnOrder emits the reordering of four registers of 4-byte column
// values whose lane l holds, in c[i], the columns 16l+4i to 16l+4i+3 (what
// interleaving four rows within 128-bit lanes leaves) into registers of
// columns in order, handing each to use as it is made: result j holds the
// columns from w.lanes()*j.
func inColumnOrder(w width, c [4]VecVirtual, use func(j int, v VecVirtual)) {
	if w.bytes == 64 {
		// Columns 0-15: lane 0 of c0 to c3; 16-31: lane 1; and so on.
		transposeLanes(w, c, use)
		return
	}
	// Columns 0-7: c0.l0 c1.l0; 8-15: c2.l0 c3.l0; 16-31 the same of the
	// high lanes.
	for j := range 4 {
		v := w.reg()
		imm := uint64(0x20)
		if j >= 2 {
			imm = 0x31
		}
		VPERM2I128(Imm(imm), c[2*(j%2)+1], c[2*(j%2)], v)
		use(j, v)
	}
}

// packColsI8 emits the kernel that packs two pairs of k of whole int8
// panels (the few-row path's and a prepared weight's layout) from a [K, N]
// matrix: rows 4q to 4q+3, a panel's columns at a time (16 on AVX2, 32 on
// AVX-512), each pair's two rows' bytes interleaved (VPUNPCKLBW and
// VPUNPCKHBW, which work within 128-bit lanes, so the 256-bit form puts
// the lanes back in order with VPERM2I128), stored non-temporally if
// asked: on AVX2 the two pairs' 64 bytes are one line of the panel, on
// AVX-512 each pair's. The AVX2 form prefetches the same columns of the
// rows packColsAhead on, which the caller packs next: the hardware's
// prefetchers do not follow reads of a few lines a row, rows a page or
// more apart (mm_int8's few-row path, fewColsBody, reads 512 bytes of
// each of b's rows a pass). On a 2-core Zen 3, mm_int8 with a 4096x4096 b
// evicted before each call, medians of blocks of calls alternated in one
// process (one to three runs a row count): 0.80-0.84 of the time at 9
// rows, 0.81-0.85 at 16, 0.88 at 32, 0.76-0.93 at 48, 0.95-1.04 at 96,
// the same at 512 (the many-row path packs b's rows whole, which the
// prefetchers follow); b in the cache, 0.86 at 16 rows and 0.89 at 48. The AVX-512 form, not
// measured, does not prefetch.
func packColsI8(name string, w width) {
	nr, pairBytes, _ := w.panel(true)
	TEXT(name, NOSPLIT, "func(src []byte, ldb int, panels int, dst []byte, pstride int, nt bool)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s packs four int8 rows of src (ldb bytes apart), %d columns for each of panels panels, into dst:", name, nr),
		fmt.Sprintf("per panel, pstride bytes apart, the first two rows' bytes interleaved (%d bytes), then the last two's.", pairBytes),
		"panels must be at least 1; with nt set the stores are non-temporal, and dst and pstride must be multiples of 32."+prefetchRows(nr))
	sp := Load(Param("src").Base(), GP64())
	ldb := Load(Param("ldb"), GP64())
	n := Load(Param("panels"), GP64())
	dp := Load(Param("dst").Base(), GP64())
	ps := Load(Param("pstride"), GP64())
	l3 := GP64()
	LEAQ(Mem{Base: ldb, Index: ldb, Scale: 2}, l3)
	store := func(nt bool, v Op, m Mem) {
		if nt {
			VMOVNTDQ(v, m)
		} else {
			VMOVDQU(v, m)
		}
	}
	var pp Register // AVX2: the same columns packColsAhead rows on
	if nr == 16 {
		pp = GP64()
		MOVQ(ldb, pp)
		SHLQ(Imm(packColsAheadShift), pp)
		ADDQ(sp, pp)
	}
	fourRows := func(base Register) []Mem {
		return []Mem{{Base: base}, {Base: base, Index: ldb, Scale: 1}, {Base: base, Index: ldb, Scale: 2}, {Base: base, Index: l3, Scale: 1}}
	}
	ntLoops(name, n, Load(Param("nt"), GP8()), func(nt bool) {
		if pp != nil {
			for _, m := range fourRows(pp) {
				PREFETCHT0(m)
			}
			ADDQ(Imm(uint64(nr)), pp)
		}
		rows := make([]VecVirtual, 4)
		for i, m := range fourRows(sp) {
			if nr == 16 {
				rows[i] = XMM()
			} else {
				rows[i] = YMM()
			}
			VMOVDQU(m, rows[i])
		}
		for q := range 2 {
			if nr == 16 {
				lo, hi, y := XMM(), XMM(), YMM()
				VPUNPCKLBW(rows[2*q+1], rows[2*q], lo) // columns 0 to 7
				VPUNPCKHBW(rows[2*q+1], rows[2*q], hi) // 8 to 15
				VINSERTI128(Imm(1), hi, lo.AsY(), y)
				store(nt, y, Mem{Base: dp, Disp: pairBytes * q})
				continue
			}
			lo, hi, a, b := YMM(), YMM(), YMM(), YMM()
			VPUNPCKLBW(rows[2*q+1], rows[2*q], lo) // columns 0 to 7, then 16 to 23
			VPUNPCKHBW(rows[2*q+1], rows[2*q], hi) // 8 to 15, then 24 to 31
			VPERM2I128(Imm(0x20), hi, lo, a)       // 0 to 15
			VPERM2I128(Imm(0x31), hi, lo, b)       // 16 to 31
			store(nt, a, Mem{Base: dp, Disp: pairBytes * q})
			store(nt, b, Mem{Base: dp, Disp: pairBytes*q + 32})
		}
		ADDQ(Imm(uint64(nr)), sp)
		ADDQ(ps, dp)
		DECQ(n)
	})
}

// packColsAhead is how many rows past those it packs packColsI8's AVX2
// form prefetches (a power of 2, for a shift); 8 was about as fast.
const (
	packColsAheadShift = 4
	packColsAhead      = 1 << packColsAheadShift
)

// prefetchRows is the sentence packColsI8's doc comment adds for the form
// with nr columns a panel.
func prefetchRows(nr int) string {
	if nr != 16 {
		return ""
	}
	return fmt.Sprintf(" It prefetches the same columns of the 4 rows %d rows on (a hint: past src too).", packColsAhead)
}

// packCols emits the kernel that packs one pair of k of whole weight
// panels from a [K, N] matrix (mm_int8's b): rows 2p and 2p+1, read in
// order, 16 columns at a time, their bytes interleaved (VPUNPCKLBW and
// VPUNPCKHBW) and widened to int16, each panel's part written to its
// place in the panels.
func packCols(name string, w width) {
	nr := 2 * w.lanes()
	TEXT(name, NOSPLIT, "func(src []byte, ldb int, panels int, dst []byte, pstride int)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s packs a pair of int8 rows of src (the second ldb bytes after the first), %d columns", name, nr),
		fmt.Sprintf("for each of panels panels, into dst: per panel, pstride bytes apart, each column's two values as int16 (%d bytes).", 4*nr),
		"panels must be at least 1.")
	sp := Load(Param("src").Base(), GP64())
	ldb := Load(Param("ldb"), GP64())
	n := Load(Param("panels"), GP64())
	dp := Load(Param("dst").Base(), GP64())
	ps := Load(Param("pstride"), GP64())
	Label(name + "_loop")
	for h := range nr / 16 {
		a, b := XMM(), XMM()
		VMOVDQU(Mem{Base: sp, Disp: 16 * h}, a)
		VMOVDQU(Mem{Base: sp, Index: ldb, Scale: 1, Disp: 16 * h}, b)
		lo, hi := XMM(), XMM()
		VPUNPCKLBW(b, a, lo) // columns 16h to 16h+7
		VPUNPCKHBW(b, a, hi) // 16h+8 to 16h+15
		if w.bytes == 64 {
			y, z := YMM(), ZMM()
			VINSERTI128(Imm(1), hi, lo.AsY(), y) // lo's upper half is replaced
			VPMOVSXBW(y, z)
			VMOVDQU32(z, Mem{Base: dp, Disp: 64 * h})
		} else {
			for i, x := range []VecVirtual{lo, hi} {
				y := YMM()
				VPMOVSXBW(x, y)
				VMOVDQU(y, Mem{Base: dp, Disp: 64*h + 32*i})
			}
		}
	}
	ADDQ(U32(nr), sp)
	ADDQ(ps, dp)
	DECQ(n)
	JNZ(LabelRef(name + "_loop"))
	VZEROUPPER()
	RET()
}

// copyStream emits the kernel that copies whole registers with
// non-temporal stores, two registers an iteration: for products whose
// int32 output outgrows the last-level cache, which ordinary stores would
// read into the caches first.
func copyStream(name string, w width) {
	TEXT(name, NOSPLIT, "func(dst, src []byte)")
	Pragma("noescape")
	Doc(name+" copies src to dst with non-temporal stores.",
		fmt.Sprintf("len(src) must be a multiple of %d, dst as long and aligned to %d bytes.", 2*w.bytes, w.bytes))
	d := Load(Param("dst").Base(), GP64())
	sp := Load(Param("src").Base(), GP64())
	n := Load(Param("src").Len(), GP64())
	Label(name + "_loop")
	CMPQ(n, Imm(0))
	JE(LabelRef(name + "_done"))
	for i := range 2 {
		v := w.reg()
		w.mov(Mem{Base: sp, Disp: w.bytes * i}, v)
		VMOVNTDQ(v, Mem{Base: d, Disp: w.bytes * i})
	}
	ADDQ(U32(2*w.bytes), sp)
	ADDQ(U32(2*w.bytes), d)
	SUBQ(U32(2*w.bytes), n)
	JMP(LabelRef(name + "_loop"))

	Label(name + "_done")
	VZEROUPPER()
	RET()
}

// linearKernels emits the int8 product kernels for w.
func linearKernels(w width) {
	for mr := 1; mr <= 6; mr++ {
		gemmTile(fmt.Sprintf("gemmTile%d%s", mr, w.name), mr, w, false, false)
		gemmTile(fmt.Sprintf("gemmTile%dI8%s", mr, w.name), mr, w, true, false)
		if w.bytes == 64 {
			gemmTile(fmt.Sprintf("gemmTileWide%dI8%s", mr, w.name), mr, w, true, true)
			gemmTileQuad(fmt.Sprintf("gemmTileWide%dQuadVNNI%s", mr, w.name), mr, w, true)
		}
		gemmTileQuad(fmt.Sprintf("gemmTile%dQuadVNNI%s", mr, w.name), mr, w, false)
	}
	peak("peak"+w.name, w, false)
	peak("peakQuadVNNI"+w.name, w, true)
	for _, rows := range []int{1, 2, 4} {
		gemv(fmt.Sprintf("gemv%d%s", rows, w.name), w, gemvPairs, rows, rows > 1)
		if w.bytes == 64 {
			gemv(fmt.Sprintf("gemv%dVNNI%s", rows, w.name), w, gemvPairsVNNI, rows, rows > 1)
		}
		gemv(fmt.Sprintf("gemv%dQuadVNNI%s", rows, w.name), w, gemvQuads, rows, rows > 1)
	}
	if w.bytes == 32 {
		gemv("gemv1Ahead"+w.name, w, gemvPairs, 1, true) // see gemv1Ahead in the package
	}
	widenInt8("widenInt8"+w.name, w)
	packRows("packRows"+w.name, w, false)
	packRows("packRowsI8"+w.name, w, true)
	gemvRowsQuad("gemvRowsQuadVNNI"+w.name, w, true, false)
	if w.bytes == 64 {
		gemvRowsQuad("gemvRowsQuad"+w.name, w, false, false)
		gemvRowsQuad("gemvRowsQuadCold"+w.name, w, false, true)
	} else {
		gemvRows("gemvRows"+w.name, w)
	}
	unquad("unquad"+w.name, w)
	if w.bytes == 32 {
		for mr := 1; mr <= 4; mr++ {
			gemmTileMix(fmt.Sprintf("gemmTileMix%d%s", mr, w.name), mr, w) // many and few rows: AVX2 without VNNI
		}
		for rows := 1; rows <= 4; rows++ {
			dotTile(fmt.Sprintf("dotTile%d%s", rows, w.name), w, rows) // the dot path: AVX2 without VNNI
		}
	}
	packColsI8("packColsI8"+w.name, w)
	if w.bytes == 64 {
		packQuadLines("packQuadsVNNI"+w.name, w)
	} else {
		packQuads("packQuadsVNNI"+w.name, w)
	}
	packColsQuads("packColsQuadsVNNI"+w.name, w, false)
	packColsQuads("packColsQuadsRunVNNI"+w.name, w, true)
	packCols("packCols"+w.name, w)
	for _, dt := range []string{"bfloat16", "float16", "float32"} {
		short := map[string]string{"bfloat16": "BF16", "float16": "F16", "float32": "F32"}[dt]
		linearOut("linearOut"+short+w.name, dt, false, w)
		linearOut("linearOutBias"+short+w.name, dt, true, w)
	}
	activationKernels(w)
	copyStream("copyStream"+w.name, w)
}
