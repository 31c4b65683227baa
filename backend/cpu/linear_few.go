package cpu

import "encoding/binary"

// The few-row path (gemvMax < M <= fewMax, or fewMaxPlain: linearPath):
// panels packed just before their tiles use them, or a prepared weight's
// (see linear.go).

// fewBody runs panels [lo, hi) over every row: it packs a pass of k of the
// panel (the whole of k, unless k is very long) as int8 pairs, or quads
// where quadPanels, then runs the tiles in turn over parts of it small
// enough to stay in the first-level cache (with AVX2's int8 panels,
// fewMixBody instead). A prepared weight's panels are used as they are.
// (Packing int8 pairs rather than int16 skips the widening and halves the
// panel: the tiles widen as they load, which costs them less than the
// packing saves.)
type fewBody struct{ p *product }

func (b *fewBody) run(lo, hi int) {
	p := b.p
	nr := gemmCols()
	pb := p.pairBytes() // int8 pairs or quads, prepared or not
	pairs := min(fewPairs, p.kp)
	if p.quads {
		pairs = min(fewPairs/2, p.kp) // as many bytes
	}
	var panel []byte
	if p.wp == nil {
		panel = smallBufs.get(pairs * pb)
		defer smallBufs.put(panel)
	}
	ldc := 4*nr + 64
	c := smallBufs.get(p.m * ldc)
	defer smallBufs.put(c)
	for pn := lo; pn < hi; pn++ {
		n0 := pn * nr
		for pc := 0; pc < p.kp; pc += pairs {
			kc := min(pairs, p.kp-pc)
			if p.wp != nil {
				at := (pn*p.kp + pc) * pb
				panel = p.wp[at : at+kc*pb]
			} else if p.quads {
				packQuadPanel(p.w, p.k, p.n, n0, pc, kc, panel[:kc*pb])
			} else {
				packPanel(p.w, p.k, p.n, n0, pc, kc, panel[:kc*pb], true)
			}
			next := b.next(pn, hi, pc, kc, pairs)
			for q := 0; q < kc; q += blockPairs {
				qc := min(blockPairs, kc-q)
				var pf []byte
				if next != nil {
					pf = next[len(next)*q/kc : len(next)*(q+qc)/kc]
				}
				p.tiles(0, p.m, pc+q, qc, panel[q*pb:(q+qc)*pb], 0, c, ldc, pf)
			}
		}
		p.fin.finish(0, n0, p.m, min(nr, p.n-n0), c, ldc)
	}
}

// fewMixBody is fewBody where the product mixes (p.mixes(): AVX2's int8
// panels): it runs units [lo, hi) of three panels, which tilesMix takes at
// once (a last unit of one or two panels as fewBody does), over a whole
// pass of k at a time, as the many-row path's passes (192 KiB of panels,
// the third widened into 128 KiB, in the second-level cache): not over
// parts that stay in the first-level one, as fewBody's tiles go, since
// tilesMix ends fewer passes then. On a 2-core Zen 3, 4096x4096, calls
// of the two forms run in turn in one process: 0.95-0.97 of the time over
// parts of blockPairs pairs from 56 to 96 rows (the median of their
// ratios), a prepared weight 0.93-0.96 from 48 to 96 (each form's median
// ratio to calls with a plain weight, one over the other).
type fewMixBody struct{ p *product }

func (b *fewMixBody) run(lo, hi int) {
	p := b.p
	const nr = mixCols
	pb := p.pairBytes()
	pairs := min(fewPairs, p.kp)
	var buf []byte
	if p.wp == nil {
		buf = smallBufs.get(3 * pairs * pb)
		defer smallBufs.put(buf)
	}
	w16 := smallBufs.get(64 * pairs)
	defer smallBufs.put(w16)
	ldc := 4*3*nr + 64
	c := smallBufs.get(p.m * ldc)
	defer smallBufs.put(c)
	panels := roundUp(p.n, nr) / nr
	for u := lo; u < hi; u++ {
		pn0 := 3 * u
		count := min(3, panels-pn0)
		for pc := 0; pc < p.kp; pc += pairs {
			kc := min(pairs, p.kp-pc)
			var set []byte // the unit's panels, pstride bytes apart
			pstride := kc * pb
			if p.wp != nil {
				at := (pn0*p.kp + pc) * pb
				pstride = p.kp * pb
				set = p.wp[at : at+(count-1)*pstride+kc*pb]
			} else {
				for i := range count {
					packPanel(p.w, p.k, p.n, (pn0+i)*nr, pc, kc, buf[i*pstride:(i+1)*pstride], true)
				}
				set = buf[:count*pstride]
			}
			p.tilesMixPanels(pc, kc, set, pstride, count, c, ldc, w16)
		}
		for i := range count {
			c0 := (pn0 + i) * nr
			p.fin.finish(0, c0, p.m, min(nr, p.n-c0), c[4*nr*i:], ldc)
		}
	}
}

// packColsLate says whether mm_int8's few-row path packs b a few pairs of
// panels at a time, as the tiles need them (fewColsBody), rather than
// whole before it multiplies (a variable for tests and measurements, which
// run both).
var packColsLate = true

// fewColsBody runs the few-row path over mm_int8's b, [K, N], as it is,
// group pairs of panels at a time: each pass of k packs the pairs'
// columns into a buffer in the cache (packColsQuadPair, or with pairs of
// k packColsPairs, the unit's panels at once) and runs the tiles over
// each pair at once, so b comes from memory once, where packing it whole
// first wrote the panels out and read them back (three times the bytes).
// The AVX2 kernel that packs pairs (no VNNI) prefetches the rows of b it
// packs next (see packColsI8 in the generator): a pass reads 512 bytes of
// each row, rows a page or more apart, which the hardware's prefetchers do
// not follow.
// With pairs (no VNNI), against packing b whole, on a 2-core Zen 5, its
// AVX2 kernels, `kitchen bench` alternated: 9 rows of 4096x4096 2.06-2.15
// ms against 3.18-3.27, 16 rows 2.64-2.89 against 3.90-4.00, 48 rows
// 5.72-6.03 against 7.05-7.16, 96 rows 10.35-10.50 against 11.90-12.03,
// 16x4096x12288 8.2-9.7 against 11.4-11.7, 32x12288x4096 13.1-13.4
// against 15.2-15.5; its AVX-512 kernels without VNNI, 16 and 96 rows,
// within the noise (0.93-1.07). With AVX2's int8 panels a unit's panels
// go to tilesMix three at a time (the last one or two to the tiles), as
// fewMixBody's do.
type fewColsBody struct {
	p     *product
	group int // pairs of panels a unit (colsGroup)
}

func (b *fewColsBody) run(lo, hi int) {
	p, group := b.p, b.group
	nr := gemmCols()
	pb := p.pairBytes()
	pass := min(colsPass, p.kp)
	if !p.quads {
		pass = min(2*colsPass, p.kp) // as many rows of b
	}
	buf := smallBufs.get(2 * group * pass * pb)
	defer smallBufs.put(buf)
	ldc := 8*nr*group + 64
	c := smallBufs.get(p.m * ldc)
	defer smallBufs.put(c)
	var w16 []byte // a pass of a panel widened, for tilesMix
	if p.mixes() {
		w16 = smallBufs.get(64 * pass)
		defer smallBufs.put(w16)
	}
	for u := lo; u < hi; u++ {
		for pc := 0; pc < p.kp; pc += pass {
			kc := min(pass, p.kp-pc)
			pstride := kc * pb
			if p.quads {
				for g := range group {
					if n0 := 2 * (u*group + g) * nr; n0 < p.n {
						packColsQuadPair(p.w, p.k, p.n, n0, pc, kc, buf[2*g*pstride:2*(g+1)*pstride], pstride)
					}
				}
			} else {
				n0 := 2 * u * group * nr
				panels := min(2*group, (p.n-n0+nr-1)/nr)
				packColsPairs(p.w, p.k, p.n, n0, panels, pc, kc, buf, pstride)
				if w16 != nil {
					p.tilesMixPanels(pc, kc, buf, pstride, panels, c, ldc, w16)
					continue
				}
			}
			for g := range group {
				n0 := 2 * (u*group + g) * nr
				if n0 >= p.n {
					break
				}
				ps := pstride
				if n0+nr >= p.n {
					ps = 0 // one panel
				}
				p.tiles(0, p.m, pc, kc, buf[2*g*pstride:2*(g+1)*pstride], ps, c[8*nr*g:], ldc, nil)
			}
		}
		for pn := range 2 * group {
			if c0 := (2*u*group + pn) * nr; c0 < p.n {
				p.fin.finish(0, c0, p.m, min(nr, p.n-c0), c[4*nr*pn:], ldc)
			}
		}
	}
}

// colsGroup is how many pairs of panels fewColsBody packs before it runs
// their tiles, for pairs pairs of panels on threads threads: as many as
// leave each thread two units, from 2 to colsGroupMax.
func colsGroup(pairs, threads int) int {
	return min(max(2, pairs/(2*threads)), colsGroupMax)
}

// colsGroupFor is colsGroup, a variable for tests, which run other sizes.
var colsGroupFor = colsGroup

// colsGroupMax is the most pairs of panels, colsPass the quads of k, that
// fewColsBody packs at a time (1 MiB of panels with AVX-512): each of b's
// rows is read a kilobyte at a time, 16 lines in the same page, instead of
// the two lines of two pairs, and the pass keeps what the next pair reads
// of those rows in the cache. Against 2 pairs and passes of 1024 quads
// (which read each row's two lines for the whole of K at once), throwaway
// test alternating them in one process, medians, two runs, b out of the
// caches: 16x4096x4096 1.09-1.17 ms against 1.45-1.50, 48 rows 2.01-2.03
// against 2.24-2.28, 96 rows 3.23-3.42 against 3.43-3.49, 16x4096x12288
// 3.27-3.66 against 4.51-4.85, 32x12288x4096 4.51-4.82 against 6.79-6.89,
// 16x2048x2048 and 32x4096x1024 within the noise; the AVX2 kernels with
// AVX-VNNI 0.78-1.00 of the time. 8 pairs, or passes of 128 or 512 quads,
// were slower; 32 pairs as fast as 16.
const (
	colsGroupMax = 16
	colsPass     = 256
)

// packColsQuadPair packs quads [qc, qc+kc) of k of the pair of quad panels
// from column n0 of b, [K, N] (the second only where n0+gemmCols < N),
// into dst, the second panel pstride bytes after the first: the kernel
// the whole quads of a whole pair, Go the rest (zero past K and N).
func packColsQuadPair(b []byte, k, n, n0, qc, kc int, dst []byte, pstride int) {
	nr := gemmCols()
	qb := 4 * nr
	done := 0
	if full := min(kc, k/4-qc); full > 0 && n0+2*nr <= n {
		packColsQuadsRun(b[4*qc*n+n0:(4*(qc+full)-1)*n+n0+2*nr], n, full, dst, pstride)
		done = full
	}
	for pn := range 2 {
		if c0 := n0 + pn*nr; c0 < n {
			for q := done; q < kc; q++ {
				packColsQuadGo(b, k, n, c0, qc+q, dst[pn*pstride+q*qb:pn*pstride+(q+1)*qb])
			}
		}
	}
}

// packColsPairs packs pairs [pc, pc+kc) of k of panels int8 panels from
// column n0 of b, [K, N], into dst, pstride bytes a panel: the kernel four
// rows of b at a time across the whole panels (each row's columns for all
// of them at once, in order), Go the rest (zero past K and N).
func packColsPairs(b []byte, k, n, n0, panels, pc, kc int, dst []byte, pstride int) {
	nr := gemmCols()
	pb := 2 * nr
	whole := min(panels, (n-n0)/nr)
	done := 0
	for whole > 0 && done+1 < kc && 2*(pc+done)+3 < k {
		r := 2 * (pc + done)
		if packColsQuad(b[r*n+n0:(r+3)*n+n0+whole*nr], n, whole, dst[done*pb:(whole-1)*pstride+(done+2)*pb], pstride, false) == 0 {
			break
		}
		done += 2
	}
	for pn := range panels {
		from := done
		if pn >= whole {
			from = 0
		}
		for q := from; q < kc; q++ {
			packColsPairGo(b, k, n, n0+pn*nr, pc+q, dst[pn*pstride+q*pb:pn*pstride+(q+1)*pb])
		}
	}
}

// packColsPairGo packs pair q of k of the int8 panel from column c0 of b,
// [K, N], into d: each column's two values (zero past K and N).
func packColsPairGo(b []byte, k, n, c0, q int, d []byte) {
	for j := range len(d) / 2 {
		var v0, v1 byte // k's value, k+1's
		if c := c0 + j; c < n {
			if r := 2 * q; r < k {
				v0 = b[r*n+c]
			}
			if r := 2*q + 1; r < k {
				v1 = b[r*n+c]
			}
		}
		d[2*j], d[2*j+1] = v0, v1
	}
}

// packColsQuadGo packs quad q of k of the quad panel from column c0 of b,
// [K, N], into d: each column's four values plus 128 (zero past K and N).
func packColsQuadGo(b []byte, k, n, c0, q int, d []byte) {
	for j := range len(d) / 4 {
		var quad uint32
		for e := range 4 {
			v := byte(0)
			if c, r := c0+j, 4*q+e; c < n && r < k {
				v = b[r*n+c]
			}
			quad |= uint32(v^0x80) << (8 * e)
		}
		binary.LittleEndian.PutUint32(d[4*j:], quad)
	}
}

// next returns what the few-row path reads after pass pc (of kc pairs,
// passes of pass) of panel pn, in the panels up to hi, for the quad tiles
// to prefetch: the prepared panels' next part, or the next panel's weight
// rows when one pass takes all of k (else they are not contiguous); nil if
// there is none.
func (b *fewBody) next(pn, hi, pc, kc, pass int) []byte {
	p := b.p
	if !p.quads {
		return nil
	}
	nr := gemmCols()
	pb := p.pairBytes()
	switch {
	case p.wp != nil && pc+kc < p.kp:
		at := (pn*p.kp + pc + kc) * pb
		return p.wp[at : at+min(pass, p.kp-pc-kc)*pb]
	case pc+kc < p.kp || pn+1 >= hi:
		return nil
	case p.wp != nil:
		at := (pn + 1) * p.kp * pb
		return p.wp[at : at+min(pass, p.kp)*pb]
	}
	n0 := (pn + 1) * nr
	return p.w[n0*p.k : min(n0+nr, p.n)*p.k]
}
