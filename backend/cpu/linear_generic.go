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
// c, ldc bytes apart.
func gemmTileGeneric(nr, mr int, a []byte, lda int, b []byte, kp int, c []byte, ldc int, add bool) {
	var acc [gemmRows][32]int32
	for p := range kp {
		bp := b[p*nr*4 : (p+1)*nr*4]
		for i := range mr {
			a0, a1 := load16(a, i*lda+4*p), load16(a, i*lda+4*p+2)
			row := &acc[i]
			for j := range nr {
				row[j] += a0*load16(bp, 4*j) + a1*load16(bp, 4*j+2)
			}
		}
	}
	storeTile(&acc, nr, mr, c, ldc, add)
}

// dotTileGeneric adds to sums the dot products of 4 int16 rows of x (ldx
// bytes apart) with 3 int8 rows of w (ldw bytes apart) over steps·16
// values of k: channel c's 4 int32 sums, one per row, at sums[c·lds:].
func dotTileGeneric(x []byte, ldx int, w []byte, ldw, steps int, sums []byte, lds int) {
	for c := range 3 {
		for r := range 4 {
			var s int32
			for k := range 16 * steps {
				s += load16(x, r*ldx+2*k) * int32(int8(w[c*ldw+k]))
			}
			at := sums[c*lds+4*r:]
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

// gemv8Generic sets int32 j of out to the dot product over k of the int16
// row x and the int8 weight row j of w (8 rows, ldw bytes apart).
func gemv8Generic(x, w []byte, ldw, k int, out []byte) {
	for j := range 8 {
		row := w[j*ldw : j*ldw+k]
		var s int32
		for q, v := range row {
			s += load16(x, 2*q) * int32(int8(v))
		}
		binary.LittleEndian.PutUint32(out[4*j:], uint32(s))
	}
}

// gemmTileI8Generic is gemmTileGeneric on a panel of int8 pairs: per pair
// of k, nr columns of two int8 values (k's, then k+1's).
func gemmTileI8Generic(nr, mr int, a []byte, lda int, b []byte, kp int, c []byte, ldc int, add bool) {
	var acc [gemmRows][32]int32
	for p := range kp {
		bp := b[p*nr*2 : (p+1)*nr*2]
		for i := range mr {
			a0, a1 := load16(a, i*lda+4*p), load16(a, i*lda+4*p+2)
			row := &acc[i]
			for j := range nr {
				row[j] += a0*int32(int8(bp[2*j])) + a1*int32(int8(bp[2*j+1]))
			}
		}
	}
	storeTile(&acc, nr, mr, c, ldc, add)
}

// gemvRowsGeneric adds to int32 j of c, j < len(c)/4, the dot product
// over kp pairs of k of the int16 row x and column j of the int8 rows of
// b, ldb bytes apart (rows 2p and 2p+1 for pair p).
func gemvRowsGeneric(x, b []byte, ldb, kp int, c []byte) {
	n := len(c) / 4
	for p := range kp {
		a0, a1 := load16(x, 4*p), load16(x, 4*p+2)
		r0, r1 := b[2*p*ldb:2*p*ldb+n], b[(2*p+1)*ldb:(2*p+1)*ldb+n]
		for j := range n {
			v := int32(binary.LittleEndian.Uint32(c[4*j:])) + a0*int32(int8(r0[j])) + a1*int32(int8(r1[j]))
			binary.LittleEndian.PutUint32(c[4*j:], uint32(v))
		}
	}
}
