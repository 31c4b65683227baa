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
// the sums of every column; gemvRowsQuad where quadPanels), in parts of
// colsPairs pairs (colsQuads quads) of k: each part sums its rows of b
// into sums of its own, then adds them to the total (int32 addition
// wraps, so the order of the parts cannot change a sum). With more than
// one row of A, each pass of colsChunk bytes of b is run for every row
// while it is in the cache. The kernels take whole pairs (quads) of rows
// and the columns to a multiple of 64; Go adds the rest of the columns
// here, and K's last rows in runCols. With quads every sum is the quad
// arithmetic's, b plus 128 times a, Go's part too: runCols takes the
// rows' corr off and puts the kernel's columns back in order.
type colsBody struct {
	p     *product
	mu    sync.Mutex
	total []byte // [M, N] int32
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
	part := getBuf(4 * p.m * p.n)
	clear(part)
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
				if n64 > 0 {
					gemvRowsQuad(x[4*pc:4*(pc+kc)], rows[:(4*kc-1)*p.n+n64], p.n, kc, c[:4*n64])
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
	addInt32s(b.total, part)
	b.mu.Unlock()
	putBuf(part)
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

// unquad puts the sums of gemvRowsQuad's columns, row, back in order and
// adds corr to each (see quadColumn).
func unquad(row []byte, corr int32) {
	w := quadCols()
	order := &quadOrder[w/64]
	var block [64]int32
	for at := 0; at < len(row); at += 4 * w {
		for p, j := range order[:w] {
			block[j] = int32(binary.LittleEndian.Uint32(row[at+4*p:])) + corr
		}
		for j := range w {
			binary.LittleEndian.PutUint32(row[at+4*j:], uint32(block[j]))
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
	b := &colsBody{p: p, total: getBuf(4 * p.m * p.n)}
	defer putBuf(b.total)
	clear(b.total)
	step, per := 2, colsPairs
	if p.quads {
		step, per = 4, colsQuads
	}
	units := (p.k/step + per - 1) / per
	if err := parallelForParts(ctx, b, units, max(1, grainMACs/(step*per*p.m*max(1, p.n))), 2); err != nil {
		return err
	}
	if p.quads {
		n64 := p.n &^ 63
		for i := range p.m {
			row, corr := b.total[4*i*p.n:4*(i+1)*p.n], int32(binary.LittleEndian.Uint32(p.corr[4*i:]))
			unquad(row[:4*n64], corr)
			for j := 4 * n64; j < len(row); j += 4 {
				binary.LittleEndian.PutUint32(row[j:], binary.LittleEndian.Uint32(row[j:])+uint32(corr))
			}
		}
	}
	for q := p.k / step * step; q < p.k; q++ { // K's last rows, short of a pair (quad), in order
		for i := range p.m {
			row, bq := b.total[4*i*p.n:4*(i+1)*p.n], p.w[q*p.n:(q+1)*p.n]
			if p.quads {
				addRowQuad(row, int32(int8(p.x[i*p.lda+q])), bq)
			} else {
				addRow(row, load16(p.x[i*p.lda:], 2*q), bq)
			}
		}
	}
	p.fin.finish(0, 0, p.m, p.n, b.total, 4*p.n)
	return nil
}
