package cpu

import "encoding/binary"

// The paths that read the weight rows as they are: one row at a time
// (M <= gemvMax) and, on some kernel sets, dot products (see linear.go).

// dotBody runs blocks [lo, hi) of dotChannels channels over every row with
// dotTile, which reads the weight rows as they are: no packing, so the
// weight streams from memory while the tiles compute (the few-row path
// packs each panel first, memory-bound, then computes it). For each tile's
// 3 channels, the tiles run over all of k for each group of four rows in
// turn: the channels' weight rows stream from memory for the first group
// and are read from the cache for the rest, and the rows of x, each group
// interleaved a step at a time (dotAt), come from the second-level cache.
// The sums wrap as the contract's int32 does, so the fold in the kernel
// changes none. Go adds the values of a K that is not
// a multiple of the tile's step past the last whole step (linearPath
// never chooses the path for a K that is not a multiple of 16, but the
// path takes any shape, as the tests run it), and pads a last group of
// fewer channels than a tile's with zero rows.
type dotBody struct{ p *product }

// dotChannels is the number of channels in a block of the dot path (a
// multiple of dotTileChannels); dotTileRows, dotTileChannels and dotStep
// the rows, channels and values of k a step of a dotTile.
const (
	dotChannels     = 48
	dotTileRows     = 4
	dotTileChannels = 3
	dotStep         = 16
)

// dotAt is the byte offset of int16 value k of row r (0 to dotTileRows-1)
// in a group of the dot path's rows of A, which interleave the rows a step
// of dotStep values at a time, so that a tile's step reads one run of
// bytes (see dotTile in the generator).
func dotAt(r, k int) int {
	return k/dotStep*dotTileRows*2*dotStep + r*2*dotStep + 2*(k%dotStep)
}

// dotGroup is the group of rows of A that holds row r, on the dot path.
func (p *product) dotGroup(r int) []byte { return p.x[r/dotTileRows*dotTileRows*p.lda:] }

// setDotRow sets row r of A from int8 values on the dot path.
func (p *product) setDotRow(r int, q []byte) {
	row := smallBufs.get(2 * p.k)
	defer smallBufs.put(row)
	widenInt8(q[:p.k], row)
	g := p.dotGroup(r)
	for k0 := 0; k0 < p.k; k0 += dotStep {
		at := dotAt(r%dotTileRows, k0)
		copy(g[at:at+2*dotStep], row[2*k0:min(2*p.k, 2*(k0+dotStep))])
	}
}

func (b *dotBody) run(lo, hi int) {
	p := b.p
	lds := 4 * dotChannels
	// [row][channel], as the finisher reads them; a tile adds 0 to the
	// int32 past its row's three, the last row's too.
	sums := smallBufs.get(p.m*lds + 4)
	defer smallBufs.put(sums)
	step, ch := dotStep, dotTileChannels
	var pad []byte          // a last group's weight rows, zero-padded to ch
	kd := p.k &^ (step - 1) // whole steps
	groups, steps, end := (p.m+dotTileRows-1)/dotTileRows, kd/step, min(hi*dotChannels, p.n)
	for u := lo; u < hi; u++ {
		c0 := u * dotChannels
		cols := min(dotChannels, p.n-c0)
		clear(sums)
		for c := 0; c < cols && kd > 0; c += ch {
			w, ldw := p.w[(c0+c)*p.k:], p.k
			if c+ch > cols {
				if pad == nil {
					pad = make([]byte, ch*kd)
				}
				clear(pad)
				for j := range cols - c {
					copy(pad[j*kd:(j+1)*kd], p.w[(c0+c+j)*p.k:])
				}
				w, ldw = pad, kd
			}
			for r := 0; r < p.m; r += dotTileRows {
				x := p.dotGroup(r)
				pf, pfStep := b.prefetch(c0+c+ch, ch, end, r/dotTileRows, groups, steps)
				if pf == nil {
					pf = x // in the cache already
				}
				dotTile(min(dotTileRows, p.m-r), x, w, ldw, steps, sums[r*lds+4*c:], lds, pf, pfStep)
			}
		}
		if kd < p.k {
			for c := range cols {
				row := p.w[(c0+c)*p.k : (c0+c+1)*p.k]
				for r := range p.m {
					at := sums[r*lds+4*c:]
					s := int32(binary.LittleEndian.Uint32(at))
					g, gr := p.dotGroup(r), r%dotTileRows
					for k := kd; k < p.k; k++ {
						s += load16(g, dotAt(gr, k)) * int32(int8(row[k]))
					}
					binary.LittleEndian.PutUint32(at, uint32(s))
				}
			}
		}
		p.fin.finish(0, c0, p.m, cols, sums, lds)
	}
}

// prefetch returns what the tile of row group g (of groups) over the ch
// channels before next prefetches: the first group streams its ch weight
// rows from memory and the others read them from the cache, leaving the
// memory idle, so the others fetch the next ch rows (ch·K contiguous
// bytes, if channels next to next+ch are below end) spread evenly over
// their tiles of steps steps (of dotStep values of k), step bytes a step; a
// single group fetches them as it goes. Nil if the tile has nothing to
// fetch. Measured on 4-16 rows (AVX2): 7-16% faster; at 48 rows no
// different. A step prefetches one line, so a step above 64 bytes leaves
// lines to the hardware's prefetchers: 48 bytes with one group.
func (b *dotBody) prefetch(next, ch, end, g, groups, steps int) (pf []byte, step int) {
	p := b.p
	if next+ch > end {
		return nil, 0
	}
	if groups == 1 {
		return p.w[next*p.k:], ch * dotStep
	}
	if g == 0 {
		return nil, 0
	}
	step = dotStep * ((ch + groups - 2) / (groups - 1)) // a step's bytes of a row times ch/(groups-1), rounded up
	off := (g - 1) * step * steps
	if off >= ch*p.k {
		return nil, 0
	}
	return p.w[next*p.k+off:], step
}

// gemvBody runs blocks [lo, hi) of gemvChannels channels over every row,
// up to 4 rows at a time (gemv's widest) and 8 channels at a time: the
// weight rows come from memory for the first rows and from the cache for
// the next. The kernel takes whole groups of 8 and whole registers of k;
// Go adds the rest of k, and does a last partial group. With quads (rows
// of int8, VPDPBUSD) every sum is the quad arithmetic's, the weight plus
// 128 times x, Go's part too, and each row's corr comes off at the end.
type gemvBody struct{ p *product }

// gemvChannels is the number of channels in a block of the one-row path.
const gemvChannels = 64

func (b *gemvBody) run(lo, hi int) {
	p := b.p
	kf := p.k / gemvStep() * gemvStep()
	lds := 4 * gemvChannels
	c := smallBufs.get(lds * p.m) // the block's sums
	defer smallBufs.put(c)
	for u := lo; u < hi; u++ {
		c0 := u * gemvChannels
		cols := min(gemvChannels, p.n-c0)
		for i := 0; i < p.m; {
			rows := 4
			for rows > p.m-i {
				rows /= 2
			}
			x := p.x[i*p.lda:]
			for g := 0; g < cols; g += 8 {
				n0 := c0 + g
				sums := c[i*lds+4*g:]
				from := 0
				if n0+8 <= p.n && kf > 0 {
					gemv(rows, x, p.lda, p.w[n0*p.k:(n0+7)*p.k+kf], p.k, kf, sums, lds)
					from = kf
				}
				for r := range rows {
					for j := range min(8, p.n-n0) {
						row := p.w[(n0+j)*p.k : (n0+j+1)*p.k]
						var s int32
						if from > 0 {
							s = int32(binary.LittleEndian.Uint32(sums[r*lds+4*j:]))
						}
						if p.quads {
							xr := x[r*p.lda : r*p.lda+p.k]
							for q := from; q < p.k; q++ {
								s += int32(row[q]^0x80) * int32(int8(xr[q]))
							}
							s += int32(binary.LittleEndian.Uint32(p.corr[4*(i+r):]))
						} else {
							xr := x[r*p.lda : r*p.lda+2*p.k]
							for q := from; q < p.k; q++ {
								s += load16(xr, 2*q) * int32(int8(row[q]))
							}
						}
						binary.LittleEndian.PutUint32(sums[r*lds+4*j:], uint32(s))
					}
				}
			}
			i += rows
		}
		p.fin.finish(0, c0, p.m, cols, c, lds)
	}
}
