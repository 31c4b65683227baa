package cpu

import (
	"context"
	"encoding/binary"
	"sync"
)

// mm_int8's path for a few rows, which reads b [K, N] as it is, k
// outermost (see linear.go).

// colsBody runs mm_int8's product with b [K, N] read as it is, k
// outermost (gemvRows streams whole rows of b, in order, adding them into
// the sums of every column; gemvRowsQuad where colsInQuads), in parts of
// colsPairs pairs (colsQuads quads) of k: each part adds its rows of b
// into an accumulator ([M, N] int32) that no other part is using at the
// time, at most one a thread, and runCols adds the accumulators up at the
// end (int32 addition wraps, so neither the order of the parts nor which
// accumulator took which can change a sum). With more than
// one row of A, each pass of colsChunk bytes of b is run for every row
// while it is in the cache. The kernels take whole pairs (quads) of rows
// and the columns to a multiple of 64; Go adds the rest of the columns
// here, and K's last rows in runCols. With quads every sum is the quad
// arithmetic's, b plus 128 times a, Go's part too: runCols takes the
// rows' corr off and puts the kernel's columns back in order.
type colsBody struct {
	p    *product
	mu   sync.Mutex
	free [][]byte // the accumulators no part is using
	all  [][]byte // every accumulator made
}

// acc returns an accumulator that no part is using, zeroed when made.
func (b *colsBody) acc() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	if n := len(b.free); n > 0 {
		a := b.free[n-1]
		b.free = b.free[:n-1]
		return a
	}
	a := getBuf(4 * b.p.m * b.p.n)
	clear(a)
	b.all = append(b.all, a)
	return a
}

// colsPairs (colsQuads) is the pairs (quads) of k per unit of colsBody;
// colsChunk the bytes of b per pass when A has more than one row.
const (
	colsPairs = 64
	colsQuads = colsPairs / 2
	colsChunk = 32 << 10
)

func (b *colsBody) run(lo, hi int) {
	p := b.p
	part := b.acc()
	step, per := 2, colsPairs // rows of b a pair (quad), pairs (quads) a unit
	if p.quads {
		step, per = 4, colsQuads
	}
	first, last := lo*per, min(hi*per, p.k/step)
	chunk := last - first
	if p.m > 1 {
		chunk = max(1, colsChunk/(step*p.n))
	}
	n64 := p.n &^ 63
	for pc := first; pc < last; pc += chunk {
		kc := min(chunk, last-pc)
		rows := p.w[step*pc*p.n:]
		for i := range p.m {
			c := part[4*i*p.n : 4*(i+1)*p.n]
			if p.quads {
				x := p.x[i*p.lda : i*p.lda+p.k]
				if n64 > 0 { // the first row reads the pass from memory, the others from the cache
					gemvRowsQuad(x[4*pc:4*(pc+kc)], rows[:(4*kc-1)*p.n+n64], p.n, kc, c[:4*n64], i == 0)
				}
				for q := 4 * pc; q < 4*(pc+kc); q++ {
					addRowQuad(c[4*n64:], int32(int8(x[q])), p.w[q*p.n+n64:(q+1)*p.n])
				}
				continue
			}
			x := p.x[i*p.lda : i*p.lda+2*p.k]
			if n64 > 0 {
				gemvRows(x[4*pc:4*(pc+kc)], rows[:(2*kc-1)*p.n+n64], p.n, kc, c[:4*n64])
			}
			for q := 2 * pc; q < 2*(pc+kc); q++ {
				addRow(c[4*n64:], load16(x, 2*q), p.w[q*p.n+n64:(q+1)*p.n])
			}
		}
	}
	b.mu.Lock()
	b.free = append(b.free, part)
	b.mu.Unlock()
}

// addRow adds a·int8(row[j]) to int32 j of c.
func addRow(c []byte, a int32, row []byte) {
	for j, v := range row {
		binary.LittleEndian.PutUint32(c[4*j:], uint32(int32(binary.LittleEndian.Uint32(c[4*j:]))+a*int32(int8(v))))
	}
}

// addRowQuad adds a·(row[j]+128), row[j] an int8, to int32 j of c: the
// quad arithmetic (see colsBody).
func addRowQuad(c []byte, a int32, row []byte) {
	for j, v := range row {
		binary.LittleEndian.PutUint32(c[4*j:], uint32(int32(binary.LittleEndian.Uint32(c[4*j:]))+a*int32(v^0x80)))
	}
}

// unquadGeneric puts the sums of gemvRowsQuad's columns, bytes [lo, hi)
// of total, back in order (see quadColumn), adding the same bytes of each
// of others and corr to each: unquad's arithmetic, in Go.
func unquadGeneric(total []byte, others [][]byte, lo, hi int, corr int32) {
	w := quadCols()
	order := &quadOrder[w/64]
	var block [64]int32
	for at := lo; at < hi; at += 4 * w {
		for p, j := range order[:w] {
			v := int32(binary.LittleEndian.Uint32(total[at+4*p:])) + corr
			for _, a := range others {
				v += int32(binary.LittleEndian.Uint32(a[at+4*p:]))
			}
			block[j] = v
		}
		for j := range w {
			binary.LittleEndian.PutUint32(total[at+4*j:], uint32(block[j]))
		}
	}
}

// quadOrder is quadColumn for 32 and 64 columns, by position.
var quadOrder = func() (o [2][64]uint8) {
	for i, w := range []int{32, 64} {
		for p := range w {
			o[i][p] = uint8(quadColumn(p, w))
		}
	}
	return o
}()

// quadColumn is the column, of w, whose sum gemvRowsQuad keeps at position
// p of each w columns: a register of w columns' quads is interleaved
// within 128-bit lanes, so the sums of register i hold, lane by lane, the
// columns 4i to 4i+3 of each 16.
func quadColumn(p, w int) int {
	i, d := p/(w/4), p%(w/4)
	return 16*(d/4) + 4*i + d%4
}

// addInt32s adds the int32 of src to those of dst, wrapping.
func addInt32s(dst, src []byte) {
	for i := 0; i < len(src); i += 4 {
		binary.LittleEndian.PutUint32(dst[i:], binary.LittleEndian.Uint32(dst[i:])+binary.LittleEndian.Uint32(src[i:]))
	}
}

// runCols runs the product on the colsRows path.
func (p *product) runCols(ctx context.Context) error {
	b := &colsBody{p: p}
	step, per := 2, colsPairs
	if p.quads {
		step, per = 4, colsQuads
	}
	units := (p.k/step + per - 1) / per
	// Parts as small as the products' (productParts): with an accumulator
	// a thread rather than a part, a part costs no clearing and no adding
	// up, and small last parts keep a thread that joins late from waiting
	// on the other's. Against parts of a quarter of the call, each summed
	// into a buffer of its own, on a 2-core Zen 5, b 4096x4096 out of the
	// caches, medians of blocks of 100 calls alternated in one process:
	// with AVX-512 and VNNI, 0.84-0.89 of the time at 3 rows and 0.91-1.01
	// at 1 (in seven blocks of eight; 1.19 in one); with AVX2 and
	// AVX-VNNI, 0.84-0.90 at 8 rows and 0.94-1.00 at 1; with AVX2's pairs,
	// 0.88-0.92 at 4 rows.
	if err := parallelForParts(ctx, b, units, max(1, grainMACs/(step*per*p.m*max(1, p.n))), productParts); err != nil {
		for _, a := range b.all {
			putBuf(a)
		}
		return err
	}
	total, others := b.all[0], b.all[1:] // a part ran, if only over none of k (K short of a quad)
	defer putBuf(total)
	if p.quads {
		// The other accumulators are added in the pass that puts the
		// kernel's columns back in order (unquad, a kernel: the Go loop
		// took 8-12 µs for 4096 columns, in this serial end of a one-row
		// call of about 300).
		n64 := p.n &^ 63
		for i := range p.m {
			at, corr := 4*i*p.n, int32(binary.LittleEndian.Uint32(p.corr[4*i:]))
			unquad(total, others, at, at+4*n64, corr)
			for j := at + 4*n64; j < 4*(i+1)*p.n; j += 4 {
				v := binary.LittleEndian.Uint32(total[j:]) + uint32(corr)
				for _, a := range others {
					v += binary.LittleEndian.Uint32(a[j:])
				}
				binary.LittleEndian.PutUint32(total[j:], v)
			}
		}
	} else {
		for _, a := range others {
			addInt32s(total, a)
		}
	}
	for _, a := range others {
		putBuf(a)
	}
	for q := p.k / step * step; q < p.k; q++ { // K's last rows, short of a pair (quad), in order
		for i := range p.m {
			row, bq := total[4*i*p.n:4*(i+1)*p.n], p.w[q*p.n:(q+1)*p.n]
			if p.quads {
				addRowQuad(row, int32(int8(p.x[i*p.lda+q])), bq)
			} else {
				addRow(row, load16(p.x[i*p.lda:], 2*q), bq)
			}
		}
	}
	p.fin.finish(0, 0, p.m, p.n, total, 4*p.n)
	return nil
}
