package cpu

import "encoding/binary"

// Packing weights into the panels the tiles read (see linear.go).

// packPanel packs pairs [pc, pc+kc) of k of the panel of channels from n0
// of a [n, k] weight into dst: per pair, each channel's two values as
// int16, or with i8 as int8 (the second zero past k). Channels past n are
// left as they are. The kernel packs what it can of a whole panel, Go the
// rest.
func packPanel(w []byte, k, n, n0, pc, kc int, dst []byte, i8 bool) {
	nr := gemmCols()
	cols := min(nr, n-n0)
	done := 0
	if full := min(kc, k/2-pc) &^ 7; cols == nr && full > 0 {
		src := w[n0*k+2*pc : (n0+nr-1)*k+2*(pc+full)]
		if i8 {
			done = packRowsPanelI8(src, k, full, dst)
		} else {
			done = packRowsPanel(src, k, full, dst)
		}
	}
	for j := range cols {
		row := w[(n0+j)*k : (n0+j+1)*k]
		for q := done; q < kc; q++ {
			var v0, v1 byte // k's value, k+1's (zero past k)
			if e := 2 * (pc + q); e < k {
				v0 = row[e]
				if e+1 < k {
					v1 = row[e+1]
				}
			}
			if i8 {
				dst[q*2*nr+2*j], dst[q*2*nr+2*j+1] = v0, v1
			} else {
				binary.LittleEndian.PutUint32(dst[q*4*nr+4*j:], uint32(uint16(int8(v0)))|uint32(uint16(int8(v1)))<<16)
			}
		}
	}
}

// packQuadPanel packs quads [qc, qc+kc) of k of the quad panel of
// channels from n0 of a [n, k] weight into dst: per quad, each channel's
// four values plus 128, as unsigned bytes (weight 0 past k). Channels past
// n are left as they are. The kernel packs what it can of a whole panel,
// Go the rest.
func packQuadPanel(w []byte, k, n, n0, qc, kc int, dst []byte) {
	nr := gemmCols()
	cols := min(nr, n-n0)
	done := 0
	if full := min(kc, k/4-qc); cols == nr && full > 0 {
		done = packQuadsPanel(w[n0*k+4*qc:(n0+nr-1)*k+4*(qc+full)], k, full, dst)
	}
	for j := range cols {
		row := w[(n0+j)*k : (n0+j+1)*k]
		for q := done; q < kc; q++ {
			var quad [4]byte
			if e := 4 * (qc + q); e < k {
				copy(quad[:], row[e:])
			}
			binary.LittleEndian.PutUint32(dst[q*4*nr+4*j:], binary.LittleEndian.Uint32(quad[:])^0x80808080)
		}
	}
}

// packColsQuadsBody packs quads [lo, hi) of k of every quad panel from a
// [K, N] matrix, reading its rows in order: the kernel the whole pairs of
// panels of four rows, Go the rest (an odd or partial last panel, and the
// last rows of a K that is not a multiple of 4, weight 0 past K).
type packColsQuadsBody struct {
	p   *product
	src []byte
}

func (b *packColsQuadsBody) run(lo, hi int) {
	p := b.p
	nr := gemmCols()
	qb := 4 * nr
	pstride := p.kp * qb
	panels, whole := roundUp(p.n, nr)/nr, p.n/nr
	for q := lo; q < hi; q++ {
		done := 0
		if 4*q+3 < p.k && whole >= 2 {
			done = packColsQuadsPanels(b.src[4*q*p.n:(4*q+3)*p.n+whole*nr], p.n, whole, p.wp[q*qb:], pstride)
		}
		for pn := done; pn < panels; pn++ {
			packColsQuadGo(b.src, p.k, p.n, pn*nr, q, p.wp[pn*pstride+q*qb:pn*pstride+(q+1)*qb])
		}
	}
}

// int8Panels reports whether the many-row path packs a plain weight into
// int8 pairs, as a prepared weight's panels are (the tiles widen them as
// they load them: half the bytes to write and read again), rather than
// int16 ones: on the assembly sets. Same-process A/B against int16 panels
// (each with its passes of pairs, see manyBody.run): on a 2-core Zen 3
// (AVX2) 0.90-0.96 of the time from 128 to 1024 rows and as long at 4096;
// on a 2-core Zen 4 (AVX-512) 0.85-0.96 from 128 to 4096 rows, with VNNI
// or without. A variable so that tests also run the int16 layout where
// the set would pack int8 panels.
var int8Panels = func() bool { return impl != implGeneric }

// packBody packs whole panels [lo, hi) of an [N, K] weight of k values a
// row and n rows into dst, kp pairs of k a panel, as int8 pairs (i8) or
// int16 ones: a call's panels, or a prepared weight's.
type packBody struct {
	src, dst  []byte
	k, n, kp  int // kp: pairs of k, or with quads quads
	i8, quads bool
}

func (b *packBody) run(lo, hi int) {
	nr := gemmCols()
	size := b.kp * 4 * nr
	if b.i8 {
		size /= 2
	}
	for pn := lo; pn < hi; pn++ {
		if b.quads {
			packQuadPanel(b.src, b.k, b.n, pn*nr, 0, b.kp, b.dst[pn*size:(pn+1)*size])
			continue
		}
		packPanel(b.src, b.k, b.n, pn*nr, 0, b.kp, b.dst[pn*size:(pn+1)*size], b.i8)
	}
}

// packColsI8Body packs quads [lo, hi) of k (two pairs) of every int8
// panel from a [K, N] matrix, reading its rows in order: the kernel the
// whole panels of four rows (each panel's part whole lines), Go the rest (the
// last panel's part, and the last rows of a K that is not a multiple of
// 4, zero past K).
type packColsI8Body struct {
	p      *product
	src    []byte
	stream bool // b and its panels are larger than the last-level cache
}

func (b *packColsI8Body) run(lo, hi int) {
	p := b.p
	nr := gemmCols()
	pb := 2 * nr
	pstride := p.kp * pb
	panels, whole := roundUp(p.n, nr)/nr, p.n/nr
	for u := lo; u < hi; u++ {
		q := 2 * u
		done := 0
		if 2*q+3 < p.k && whole > 0 {
			done = packColsQuad(b.src[2*q*p.n:(2*q+3)*p.n+whole*nr], p.n, whole, p.wp[q*pb:(whole-1)*pstride+(q+2)*pb], pstride, b.stream)
		}
		for pn := done; pn < panels; pn++ {
			for qq := q; qq < min(q+2, p.kp); qq++ {
				packColsPairGo(b.src, p.k, p.n, pn*nr, qq, p.wp[pn*pstride+qq*pb:pn*pstride+(qq+1)*pb])
			}
		}
	}
}

// packColsBody packs pairs [lo, hi) of k of every panel from a [K, N]
// matrix, reading its rows in order. The kernel packs the whole panels of
// a pair of rows, Go the last panel's part and an odd K's last row.
type packColsBody struct {
	p   *product
	src []byte
}

func (b *packColsBody) run(lo, hi int) {
	p := b.p
	nr := gemmCols()
	stride := 4 * nr
	pstride := p.kp * stride
	panels, whole := roundUp(p.n, nr)/nr, p.n/nr
	for q := lo; q < hi; q++ {
		r0 := b.src[2*q*p.n : (2*q+1)*p.n]
		done := 0
		if 2*q+1 < p.k && whole > 0 {
			done = packColsPair(b.src[2*q*p.n:(2*q+1)*p.n+whole*nr], p.n, whole, p.wp[q*stride:(whole-1)*pstride+(q+1)*stride], pstride)
		}
		var r1 []byte
		if 2*q+1 < p.k {
			r1 = b.src[(2*q+1)*p.n : (2*q+2)*p.n]
		}
		for pn := done; pn < panels; pn++ {
			d := p.wp[pn*pstride+q*stride : pn*pstride+(q+1)*stride]
			for j := range min(nr, p.n-pn*nr) {
				pair := uint32(uint16(int8(r0[pn*nr+j])))
				if r1 != nil {
					pair |= uint32(uint16(int8(r1[pn*nr+j]))) << 16
				}
				binary.LittleEndian.PutUint32(d[4*j:], pair)
			}
		}
	}
}
