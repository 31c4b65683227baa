package cpu

import (
	"encoding/binary"
	"math"

	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/quant"
)

// The portable int8 product kernels, with the data layouts of the
// assembly ones (see _asm/linear.go) so that the same driver runs either.
// Sums are int32 and wrap as the contract says.

func load16(b []byte, i int) int32 { return int32(int16(binary.LittleEndian.Uint16(b[i:]))) }

// gemmTileGeneric computes a tile of mr rows (1 to gemmRows) by nr
// columns over kp pairs of k. Activation row i is the int16 values
// a[i*lda:], each pair of k 4 bytes; the weight panel b holds, per pair of
// k, nr int16 pairs; the sums go to (add: are added to) the int32 rows of
// c, ldc bytes apart. Two rows share each multiplication (see
// packRowPairs), two columns at a time.
func gemmTileGeneric(nr, mr int, a []byte, lda int, b []byte, kp int, c []byte, ldc int, add bool) {
	var acc [gemmRows][32]int32
	var pa [tileChunk][gemmRows]int64
	for p0 := 0; p0 < kp; p0 += tileChunk {
		n := min(tileChunk, kp-p0)
		packRowPairs(a, lda, mr, p0, n, &pa)
		for j := 0; j < nr; j += 2 {
			var s0, s1, s2, t0, t1, t2 int64 // columns j and j+1, row pairs 0 to 2
			o := p0*nr*4 + 4*j
			for p := range pa[:n] {
				w := b[o : o+8 : o+8]
				o += 4 * nr
				u0, u1 := int64(int16(binary.LittleEndian.Uint16(w[0:]))), int64(int16(binary.LittleEndian.Uint16(w[2:])))
				v0, v1 := int64(int16(binary.LittleEndian.Uint16(w[4:]))), int64(int16(binary.LittleEndian.Uint16(w[6:])))
				r := &pa[p]
				s0, t0 = s0+r[0]*u0+r[1]*u1, t0+r[0]*v0+r[1]*v1
				s1, t1 = s1+r[2]*u0+r[3]*u1, t1+r[2]*v0+r[3]*v1
				s2, t2 = s2+r[4]*u0+r[5]*u1, t2+r[4]*v0+r[5]*v1
			}
			unpackRowPairs(&acc, j, s0, s1, s2)
			unpackRowPairs(&acc, j+1, t0, t1, t2)
		}
	}
	storeTile(&acc, nr, mr, c, ldc, add)
}

// tileChunk is how many pairs of k the Go tiles take at a time: few enough
// that their packed rows fit on the stack (12 KiB) and that no half of a
// packed sum grows past 2^24 in magnitude (the rows and panels hold int8
// values, widened: 256 pairs add at most 512 products of 2^14).
const tileChunk = 256

// packRowPairs packs pairs of k [p0, p0+n) of the mr int16 rows of a (lda
// bytes apart) for the Go tiles: for pair of k p and pair of rows g, pa[p]
// holds rows 2g and 2g+1's values at k (entry 2g) and at k+1 (entry 2g+1)
// as one int64, v(2g) + v(2g+1)·2^32, so that one multiplication by a
// weight value multiplies both rows (unpackRowPairs separates the sums).
// Rows past mr are zeros.
func packRowPairs(a []byte, lda, mr, p0, n int, pa *[tileChunk][gemmRows]int64) {
	for g := range gemmRows / 2 {
		var lo, hi []byte // rows 2g and 2g+1 over the chunk, or nil past mr
		if 2*g < mr {
			lo = a[2*g*lda+4*p0 : 2*g*lda+4*(p0+n)]
		}
		if 2*g+1 < mr {
			hi = a[(2*g+1)*lda+4*p0 : (2*g+1)*lda+4*(p0+n)]
		}
		for p := range n {
			var l0, l1, h0, h1 int64
			if lo != nil {
				l0, l1 = int64(load16(lo, 4*p)), int64(load16(lo, 4*p+2))
			}
			if hi != nil {
				h0, h1 = int64(load16(hi, 4*p)), int64(load16(hi, 4*p+2))
			}
			pa[p][2*g], pa[p][2*g+1] = l0+h0<<32, l1+h1<<32
		}
	}
}

// unpackRowPairs adds column j's sums of the three row pairs, each packed
// as packRowPairs's values are (low half first; each half is below 2^31 in
// magnitude), to the int32 sums of acc.
func unpackRowPairs(acc *[gemmRows][32]int32, j int, s ...int64) {
	for g, v := range s {
		lo := int64(int32(v))
		acc[2*g][j] += int32(lo)
		acc[2*g+1][j] += int32((v - lo) >> 32)
	}
}

// dotTileGeneric adds to sums the dot products of the first rows of 4
// int16 rows of x, interleaved a step of dotStep values at a time (see
// dotAt), with 3 int8 rows of w (ldw bytes apart) over steps·dotStep
// values of k: row r's int32 sums, one per channel, at sums[r·lds:].
func dotTileGeneric(rows int, x []byte, w []byte, ldw, steps int, sums []byte, lds int) {
	for c := range 3 {
		for r := range rows {
			var s int32
			for k := range dotStep * steps {
				s += load16(x, dotAt(r, k)) * int32(int8(w[c*ldw+k]))
			}
			at := sums[r*lds+4*c:]
			binary.LittleEndian.PutUint32(at, binary.LittleEndian.Uint32(at)+uint32(s))
		}
	}
}

// storeTile stores (add: adds) mr rows of nr sums of acc into the int32
// rows of c, ldc bytes apart.
func storeTile(acc *[gemmRows][32]int32, nr, mr int, c []byte, ldc int, add bool) {
	for i := range mr {
		for j := range nr {
			at := c[i*ldc+4*j:]
			v := acc[i][j]
			if add {
				v += int32(binary.LittleEndian.Uint32(at))
			}
			binary.LittleEndian.PutUint32(at, uint32(v))
		}
	}
}

// widenInt8Generic sets int16 i of dst to int8(q[i]).
func widenInt8Generic(q, dst []byte) {
	for i, v := range q {
		binary.LittleEndian.PutUint16(dst[2*i:], uint16(int8(v)))
	}
}

// linearOutGeneric is int8_linear's epilogue for the len(ws) int32 sums of
// acc, with row scale xs, weight scales ws and (unless nil) a bias already
// rounded to out: y = rOut(LinearOut(acc, xs, ws)), then with a bias
// rOut(y + bias), stored as out.
func linearOutGeneric(out dtype.DType, acc []byte, xs float32, ws, bias []float32, dst []byte) {
	for i, s := range ws {
		y := out.Round(quant.LinearOut(int32(binary.LittleEndian.Uint32(acc[4*i:])), xs, s))
		if bias != nil {
			y = out.Round(y + bias[i])
		}
		switch out {
		case dtype.BFloat16:
			binary.LittleEndian.PutUint16(dst[2*i:], dtype.BFloat16FromFloat32(y))
		case dtype.Float16:
			binary.LittleEndian.PutUint16(dst[2*i:], dtype.Float16FromFloat32(y))
		default:
			binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(y))
		}
	}
}

// gemvGeneric sets int32 j of row r of out (lds bytes a row) to the dot
// product over k of int16 row r of x (rows rows, ldx bytes apart) and
// int8 weight row j of w (8 rows, ldw bytes apart).
func gemvGeneric(rows int, x []byte, ldx int, w []byte, ldw, k int, out []byte, lds int) {
	for r := range rows {
		gemv8Generic(x[r*ldx:], w, ldw, k, out[r*lds:])
	}
}

// gemv8Generic is gemvGeneric for one row, four weight rows at a time so
// that each value of x is loaded once for four.
func gemv8Generic(x, w []byte, ldw, k int, out []byte) {
	x = x[:2*k]
	for j := 0; j < 8; j += 4 {
		r0 := w[j*ldw : j*ldw+k]
		r1, r2, r3 := w[(j+1)*ldw:][:len(r0)], w[(j+2)*ldw:][:len(r0)], w[(j+3)*ldw:][:len(r0)]
		var s0, s1, s2, s3 int32
		for q, v := range r0 {
			xq := load16(x, 2*q)
			s0 += xq * int32(int8(v))
			s1 += xq * int32(int8(r1[q]))
			s2 += xq * int32(int8(r2[q]))
			s3 += xq * int32(int8(r3[q]))
		}
		for i, s := range [4]int32{s0, s1, s2, s3} {
			binary.LittleEndian.PutUint32(out[4*(j+i):], uint32(s))
		}
	}
}

// gemmTileI8Generic is gemmTileGeneric on a panel of int8 pairs: per pair
// of k, nr columns of two int8 values (k's, then k+1's).
func gemmTileI8Generic(nr, mr int, a []byte, lda int, b []byte, kp int, c []byte, ldc int, add bool) {
	var acc [gemmRows][32]int32
	var pa [tileChunk][gemmRows]int64
	for p0 := 0; p0 < kp; p0 += tileChunk {
		n := min(tileChunk, kp-p0)
		packRowPairs(a, lda, mr, p0, n, &pa)
		for j := 0; j < nr; j += 2 {
			var s0, s1, s2, t0, t1, t2 int64 // columns j and j+1, row pairs 0 to 2
			o := p0*nr*2 + 2*j
			for p := range pa[:n] {
				w := b[o : o+4 : o+4]
				o += 2 * nr
				u0, u1, v0, v1 := int64(int8(w[0])), int64(int8(w[1])), int64(int8(w[2])), int64(int8(w[3]))
				r := &pa[p]
				s0, t0 = s0+r[0]*u0+r[1]*u1, t0+r[0]*v0+r[1]*v1
				s1, t1 = s1+r[2]*u0+r[3]*u1, t1+r[2]*v0+r[3]*v1
				s2, t2 = s2+r[4]*u0+r[5]*u1, t2+r[4]*v0+r[5]*v1
			}
			unpackRowPairs(&acc, j, s0, s1, s2)
			unpackRowPairs(&acc, j+1, t0, t1, t2)
		}
	}
	storeTile(&acc, nr, mr, c, ldc, add)
}

// gemmTileMixGeneric computes a tile of mr rows by a panel and a half:
// gemmTileI8Generic's over the int8 panel b (16 columns) into c, and over
// b16's 8 columns of int16 pairs (32 bytes a pair of k, 64 bytes apart:
// half of an int16 panel) into c16, mr rows ldc bytes apart in each.
func gemmTileMixGeneric(mr int, a []byte, lda int, b, b16 []byte, kp int, c, c16 []byte, ldc int, add bool) {
	gemmTileI8Generic(16, mr, a, lda, b, kp, c, ldc, add)
	for r := range mr {
		for j := range 8 {
			var s int32
			for p := range kp {
				x, w := r*lda+4*p, 64*p+4*j
				s += load16(a, x)*load16(b16, w) + load16(a, x+2)*load16(b16, w+2)
			}
			at := r*ldc + 4*j
			if add {
				s += int32(binary.LittleEndian.Uint32(c16[at:]))
			}
			binary.LittleEndian.PutUint32(c16[at:], uint32(s))
		}
	}
}

// gemvRowsGeneric adds to int32 j of c, j < len(c)/4, the dot product
// over kp pairs of k of the int16 row x and column j of the int8 rows of
// b, ldb bytes apart (rows 2p and 2p+1 for pair p): two pairs of k a pass
// over c.
func gemvRowsGeneric(x, b []byte, ldb, kp int, c []byte) {
	n := len(c) / 4
	c = c[:4*n]
	p := 0
	for ; p+1 < kp; p += 2 {
		a0, a1, a2, a3 := load16(x, 4*p), load16(x, 4*p+2), load16(x, 4*p+4), load16(x, 4*p+6)
		r0 := b[2*p*ldb : 2*p*ldb+n]
		r1, r2, r3 := b[(2*p+1)*ldb:][:n], b[(2*p+2)*ldb:][:n], b[(2*p+3)*ldb:][:n]
		for j, v := range r0 {
			s := int32(binary.LittleEndian.Uint32(c[4*j:])) + a0*int32(int8(v)) + a1*int32(int8(r1[j])) +
				a2*int32(int8(r2[j])) + a3*int32(int8(r3[j]))
			binary.LittleEndian.PutUint32(c[4*j:], uint32(s))
		}
	}
	if p < kp {
		a0, a1 := load16(x, 4*p), load16(x, 4*p+2)
		r0, r1 := b[2*p*ldb:2*p*ldb+n], b[(2*p+1)*ldb:][:n]
		for j, v := range r0 {
			s := int32(binary.LittleEndian.Uint32(c[4*j:])) + a0*int32(int8(v)) + a1*int32(int8(r1[j]))
			binary.LittleEndian.PutUint32(c[4*j:], uint32(s))
		}
	}
}

// gemvRowsQuadGeneric adds to the int32 of c, len(c)/4 of them (a multiple
// of 64), for each column j of b's int8 rows (ldb bytes apart), the sum
// over kq quads of k of x[k]·(b[k, j]+128), wrapping, where x holds int8;
// the sums of each w columns in the order of quadColumn (w 32 or 64), as
// the assembly kernels keep them.
func gemvRowsQuadGeneric(w int, x, b []byte, ldb, kq int, c []byte) {
	n := len(c) / 4
	for p := range n {
		j := p/w*w + quadColumn(p%w, w)
		s := int32(binary.LittleEndian.Uint32(c[4*p:]))
		for k := range 4 * kq {
			s += int32(int8(x[k])) * int32(b[k*ldb+j]^0x80)
		}
		binary.LittleEndian.PutUint32(c[4*p:], uint32(s))
	}
}
