package cpu

// The many-row path (M > fewMax, or fewMaxPlain: linearPath): blocks of
// rows by channels over panels packed once per call (see linear.go).

// manyBody runs blocks of blockRows rows by blockCols channels, numbered
// row block by row block.
type manyBody struct {
	p  *product
	bn int // blocks per row of blocks
}

func (b *manyBody) run(lo, hi int) {
	p := b.p
	nr := gemmCols()
	ldc := 4*blockCols + 64
	c := smallBufs.get(blockRows * ldc)
	defer smallBufs.put(c)
	pb := p.pairBytes()
	passPairs := blockPairs
	switch {
	case p.quads:
		passPairs = quadPass
	case p.i8 && int8Panels():
		passPairs = i8Pass
	}
	var w16 []byte // a pass of every third panel widened, for tilesMix
	if p.mixes() {
		w16 = smallBufs.get(64 * passPairs)
		defer smallBufs.put(w16)
	}
	for u := lo; u < hi; u++ {
		r0, c0 := u/b.bn*blockRows, u%b.bn*blockCols
		rows, cols := min(blockRows, p.m-r0), min(blockCols, p.n-c0)
		for pc := 0; pc < p.kp; pc += passPairs {
			kc := min(passPairs, p.kp-pc)
			for j := 0; j < cols; j += nr {
				at := ((c0+j)/nr*p.kp + pc) * pb
				if w16 != nil && j+3*nr <= cols {
					stride := p.kp * pb
					p.tilesMix(r0, rows, pc, kc, p.wp[at:at+2*stride+kc*pb], stride, c[4*j:], ldc, w16)
					j += 2 * nr
					continue
				}
				if p.wide && j+nr < cols {
					// Two panels at once: the next one starts p.kp
					// pairs after this one. The two after them (if
					// whole) are prefetched as the tiles go.
					stride := p.kp * pb
					next := b.next(u, hi, j, pc, kc, passPairs)
					p.tiles(r0, rows, pc, kc, p.wp[at:at+stride+kc*pb], stride, c[4*j:], ldc, next)
					j += nr
					continue
				}
				p.tiles(r0, rows, pc, kc, p.wp[at:at+kc*pb], 0, c[4*j:], ldc, nil)
			}
		}
		p.fin.finish(r0, c0, rows, cols, c, ldc)
	}
}

// mixes reports whether the product runs tilesMix where it has three
// panels at once: over int8 panels of 16 columns where mixTiles (AVX2's),
// unless the many-row path runs tiles over two panels (tileWide).
func (p *product) mixes() bool { return p.i8 && !p.wide && gemmCols() == mixCols && mixTiles() }

// tilesMix computes rows [r0, r0+rows) by three int8 panels, each pstride
// bytes after the one before, over pairs [pc, pc+kc) of k, with
// gemmTileMix: the third panel's pass widened once into w16 (an int16
// panel), then each of the first two with half of it, 4 rows a tile. Each
// row's broadcast pair of k then feeds 3 registers of weight, not
// gemmTileI8's 2, for 1 widening of the third panel's 32 bytes a pair of k
// a block of rows (BENCHMARKS.md, "A panel and a half"). The few-row
// paths run it too (fewMixBody, fewColsBody), over all their rows.
func (p *product) tilesMix(r0, rows, pc, kc int, panels []byte, pstride int, c []byte, ldc int, w16 []byte) {
	const nr = mixCols
	w16 = w16[:64*kc]
	widenInt8(panels[2*pstride:2*pstride+2*nr*kc], w16)
	tiles := (rows + mixRows - 1) / mixRows
	for h := range 2 {
		b := panels[h*pstride : h*pstride+2*nr*kc]
		b16 := w16[32*h:]
		for t, i := 0, 0; i < rows; t, i = t+1, i+(rows-i)/(tiles-t) {
			mr := (rows - i) / (tiles - t)
			at := (r0+i)*p.lda + 4*pc
			a := p.x[at : at+(mr-1)*p.lda+4*kc]
			cs := c[i*ldc+4*nr*h : (i+mr-1)*ldc+4*nr*(h+1)]
			c16 := c[i*ldc+4*(2*nr+8*h) : (i+mr-1)*ldc+4*(2*nr+8*h+8)]
			gemmTileMix(mr, a, p.lda, b, b16, kc, cs, c16, ldc, pc > 0)
		}
	}
}

// tilesMixPanels computes every row by count int8 panels, each pstride
// bytes after the one before, over pairs [pc, pc+kc) of k: whole triples
// through tilesMix, the one or two left through tiles (the few-row paths'
// units). c holds the panels' columns in order, 4·16 bytes a panel.
func (p *product) tilesMixPanels(pc, kc int, panels []byte, pstride, count int, c []byte, ldc int, w16 []byte) {
	const nr = mixCols
	pn := 0
	for ; pn+3 <= count; pn += 3 {
		p.tilesMix(0, p.m, pc, kc, panels[pn*pstride:], pstride, c[4*nr*pn:], ldc, w16)
	}
	for ; pn < count; pn++ {
		p.tiles(0, p.m, pc, kc, panels[pn*pstride:pn*pstride+kc*p.pairBytes()], 0, c[4*nr*pn:], ldc, nil)
	}
}

// i8Pass is the pairs of k per pass of the many-row path over int8
// panels (128 KiB of each panel with AVX-512, 64 KiB with AVX2). Same-process
// A/B on a 2-core Zen 3: passes of 512 pairs took 0.92 of the time of 256
// at 4096x3072x3072 and 1024x3072x3072, 0.97 at 256x4096x4096 and
// 4096x3072x12288 (768 and 1024 about as 512). On a 2-core Zen 5, medians
// of blocks of calls alternated in one process, passes of 2048 pairs
// against 512: with AVX-512 (no VNNI) 118-121 ms against 123 at
// 4096x3072x3072, 478-483 against 492-494 at 4096x3072x12288, 27.9-28.4
// against 28.8-29.6 at 512x4096x4096; with AVX2 914-923 against 941 at
// 4096x3072x12288, 52.7-53.1 against 53.7-53.9 at 512x4096x4096 (1024
// between the two); `kitchen bench` int8_linear, alternated twice, could
// not tell them apart (122-138 ms and 28.2-33.0 with AVX-512, 240-254 and
// 53.0-56.4 with AVX2).
const i8Pass = 2048

// next returns the part of the two panels whose tiles follow those of
// panels j and j+1 of block u in pass pc (of kc pairs, passes of pass),
// in the blocks up to hi, for the tiles to prefetch; nil if there is none
// or it is not two whole panels.
func (b *manyBody) next(u, hi, j, pc, kc, pass int) []byte {
	p := b.p
	nr := gemmCols()
	pb := p.pairBytes()
	c0, cols := u%b.bn*blockCols, min(blockCols, p.n-u%b.bn*blockCols)
	j += 2 * nr
	switch {
	case j < cols: // this pass, the next two panels
	case pc+kc < p.kp: // the next pass
		j, pc = 0, pc+kc
	case u+1 < hi: // the next block's first pass
		u, j, pc = u+1, 0, 0
		c0, cols = u%b.bn*blockCols, min(blockCols, p.n-u%b.bn*blockCols)
	default:
		return nil
	}
	if j+2*nr > cols {
		return nil
	}
	at := ((c0+j)/nr*p.kp + pc) * pb
	return p.wp[at : at+min(pass, p.kp-pc)*pb]
}
