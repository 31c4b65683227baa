//go:build amd64 && !purego

package cpu

import (
	"math/bits"

	"github.com/klauspost/cpuid/v2"

	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/op"
)

// The dispatch of the int8 product kernels (see _asm/linear.go); the
// quantize and dequantize ones are in kernels_amd64.go.

// int8_linear's epilogue kernels of each kernel set, without and with a
// bias, by output dtype.
var (
	linearOutKernels = [...][3]func(acc []byte, xs float32, ws []float32, dst []byte){
		implAVX2:   {linearOutBF16AVX2, linearOutF16AVX2, linearOutF32AVX2},
		implAVX512: {linearOutBF16AVX512, linearOutF16AVX512, linearOutF32AVX512},
	}
	linearOutBiasKernels = [...][3]func(acc []byte, xs float32, ws, bias []float32, dst []byte){
		implAVX2:   {linearOutBiasBF16AVX2, linearOutBiasF16AVX2, linearOutBiasF32AVX2},
		implAVX512: {linearOutBiasBF16AVX512, linearOutBiasF16AVX512, linearOutBiasF32AVX512},
	}
)

// gemmCols is the number of columns (output channels) of a gemmTile
// tile: two registers of int32. The packed weight panels are this wide.
func gemmCols() int {
	if impl == implAVX512 {
		return 32
	}
	return 16
}

// gemmTiles are the tile kernels of each kernel set, by row count - 1.
var gemmTiles = [...][gemmRows]func(a []byte, lda int, b []byte, kp int, c []byte, ldc int, add bool){
	implAVX2:   {gemmTile1AVX2, gemmTile2AVX2, gemmTile3AVX2, gemmTile4AVX2, gemmTile5AVX2, gemmTile6AVX2},
	implAVX512: {gemmTile1AVX512, gemmTile2AVX512, gemmTile3AVX512, gemmTile4AVX512, gemmTile5AVX512, gemmTile6AVX512},
}

// gemmTile computes a tile of mr rows (1 to gemmRows) of an int8 product:
// see gemmTileGeneric.
func gemmTile(mr int, a []byte, lda int, b []byte, kp int, c []byte, ldc int, add bool) {
	if impl == implGeneric {
		gemmTileGeneric(16, mr, a, lda, b, kp, c, ldc, add)
		return
	}
	gemmTiles[impl][min(mr, gemmRows)-1](a, lda, b, kp, c, ldc, add)
}

// widenInt8 sets int16 i of dst to int8(q[i]).
func widenInt8(q, dst []byte) {
	var n int
	switch impl {
	case implAVX512:
		n = len(q) &^ 63
		widenInt8AVX512(q[:n], dst)
	case implAVX2:
		n = len(q) &^ 31
		widenInt8AVX2(q[:n], dst)
	}
	widenInt8Generic(q[n:], dst[2*n:])
}

// linearOut is int8_linear's epilogue on a row of int32 sums: see
// linearOutGeneric. The kernels convert a sum of -2^31 as it is; the
// driver sends sums that can be it (K = op.MaxK) to linearOutGeneric.
func linearOut(out dtype.DType, acc []byte, xs float32, ws, bias []float32, dst []byte) {
	size := out.Size()
	var n int
	switch impl {
	case implAVX512:
		n = len(ws) &^ 31
	case implAVX2:
		n = len(ws) &^ 15
	}
	if n > 0 {
		a, w, d := acc[:4*n], ws[:n], dst[:n*size]
		if bias == nil {
			linearOutKernels[impl][kernelIndex(out)](a, xs, w, d)
		} else {
			linearOutBiasKernels[impl][kernelIndex(out)](a, xs, w, bias[:n], d)
		}
	}
	if bias != nil {
		bias = bias[n:]
	}
	linearOutGeneric(out, acc[4*n:], xs, ws[n:], bias, dst[n*size:])
}

// peakLoop runs n iterations of the many-row tiles' arithmetic (VPDPBUSD
// with quad panels) on registers and returns the number of operations (2
// per multiply-add) they did, or 0 for the generic kernels, which have no
// such loop.
func peakLoop(n int) int64 {
	switch impl {
	case implAVX512:
		if quadPanels() {
			peakQuadVNNIAVX512(n)
			return int64(n) * 12 * 128
		}
		peakAVX512(n)
		return int64(n) * 12 * 64
	case implAVX2:
		if quadPanels() {
			peakQuadVNNIAVX2(n)
			return int64(n) * 12 * 64
		}
		peakAVX2(n)
		return int64(n) * 12 * 32
	}
	return 0
}

// packRowsPanel packs the first kp pairs of k, rounded down to a multiple
// of 8, of a whole weight panel (gemmCols rows of src, ldw bytes apart)
// into dst, and returns how many pairs it packed.
func packRowsPanel(src []byte, ldw, kp int, dst []byte) int {
	kp &^= 7
	switch impl {
	case implAVX512:
		packRowsAVX512(src, ldw, kp, dst)
	case implAVX2:
		packRowsAVX2(src, ldw, kp, dst)
	default:
		return 0
	}
	return kp
}

// packColsPair packs one pair of rows of a [K, N] matrix (the second ldb
// bytes after the first) into panels whole int16 panels, pstride bytes
// apart, and returns how many it packed. The assembly sets pack int8
// panels (packColsQuad) and run this only where tests ask for the int16
// layout.
func packColsPair(src []byte, ldb, panels int, dst []byte, pstride int) int {
	if panels == 0 {
		return 0
	}
	switch impl {
	case implAVX512:
		packColsAVX512(src, ldb, panels, dst, pstride)
	case implAVX2:
		packColsAVX2(src, ldb, panels, dst, pstride)
	default:
		return 0
	}
	return panels
}

// packColsQuad packs two pairs of rows of a [K, N] matrix (four rows,
// ldb bytes apart) into panels whole int8 panels, pstride bytes apart, and
// returns how many it packed (none with the Go kernels). With stream set
// the stores are non-temporal where each store fills whole lines (dst and
// pstride multiples of 64: on AVX2, whose panels hold two pairs in a
// line, an even number of pairs).
func packColsQuad(src []byte, ldb, panels int, dst []byte, pstride int, stream bool) int {
	if panels == 0 || impl == implGeneric {
		return 0
	}
	nt := stream && alignHead(dst, 1, 64) == 0 && pstride%64 == 0 // whole lines
	if impl == implAVX512 {
		packColsI8AVX512(src, ldb, panels, dst, pstride, nt)
	} else {
		packColsI8AVX2(src, ldb, panels, dst, pstride, nt)
	}
	return panels
}

// gemvStep is the multiple of k that gemv takes: a register of the
// weight's values widened to int16, or where quadPanels a register of its
// bytes.
func gemvStep() int {
	step := 16
	if impl == implAVX512 {
		step = 32
	}
	if quadPanels() {
		step *= 2
	}
	return step
}

// gemv sets int32 j of row r of out (lds bytes a row) to the product of
// row r of x (rows rows, 1, 2 or 4, ldx bytes apart) with int8 weight row
// j of w (8 rows, ldw bytes apart): see gemvGeneric. Where quadPanels, x
// is int8 and each sum holds 128 times the sum of the row's values more,
// which gemvBody takes off; elsewhere x is int16.
func gemv(rows int, x []byte, ldx int, w []byte, ldw, k int, out []byte, lds int) {
	i := bits.Len(uint(rows)) - 1 // 1, 2, 4 rows: 0, 1, 2
	switch {
	case quadPanels() && impl == implAVX512:
		gemvQuadAVX512[i](x, ldx, w, ldw, k, out, lds)
	case quadPanels() && impl == implAVX2:
		gemvQuadAVX2[i](x, ldx, w, ldw, k, out, lds)
	case impl == implAVX512 && vnni:
		gemvVNNI[i](x, ldx, w, ldw, k, out, lds)
	case impl == implAVX512:
		gemvAVX512[i](x, ldx, w, ldw, k, out, lds)
	case impl == implAVX2:
		gemvAVX2[i](x, ldx, w, ldw, k, out, lds)
	default:
		gemvGeneric(rows, x, ldx, w, ldw, k, out, lds)
	}
}

// gemv1Ahead is whether the AVX2 set's kernel for one row of x
// prefetches every line of the weight 8 KiB on, as the kernels for 2 and
// 4 rows do (gemv1AheadAVX2): on a Zen 3 (zen3).
// There the hardware's prefetchers fall behind one row's reading: on a
// 2-core Zen 3, `kitchen bench --op int8_linear`, the two binaries
// alternated, the one row's time over the same-run streaming reference
// was 0.99-1.14 against 1.17-1.28 at 1x4096x4096 (five alternations),
// 0.99-1.07 against 1.15-1.21 at 1x3072x12288 and 0.89-0.98 against
// 1.10-1.18 at 1x12288x3072 (three each). On a 2-core Zen 4 (family 19h
// with AVX-512) the same prefetch made the AVX2 kernel slower (see
// gemvAhead in the generator), and on a Zen 5 it was within the noise.
var gemv1Ahead = zen3

// gemv1For is the AVX2 set's kernel for one row of x: gemv1AheadAVX2
// where ahead (see gemv1Ahead), else gemv1AVX2.
func gemv1For(ahead bool) gemvKernel {
	if ahead {
		return gemv1AheadAVX2
	}
	return gemv1AVX2
}

// A gemvKernel is one assembly set's one-row kernel for some rows of x.
type gemvKernel func(x []byte, ldx int, wt []byte, ldw int, k int, out []byte, lds int)

// The one-row kernels of each assembly set, for 1, 2 and 4 rows of x.
var (
	gemvAVX2       = [...]gemvKernel{gemv1For(gemv1Ahead), gemv2AVX2, gemv4AVX2}
	gemvAVX512     = [...]gemvKernel{gemv1AVX512, gemv2AVX512, gemv4AVX512}
	gemvVNNI       = [...]gemvKernel{gemv1VNNIAVX512, gemv2VNNIAVX512, gemv4VNNIAVX512}
	gemvQuadAVX2   = [...]gemvKernel{gemv1QuadVNNIAVX2, gemv2QuadVNNIAVX2, gemv4QuadVNNIAVX2}
	gemvQuadAVX512 = [...]gemvKernel{gemv1QuadVNNIAVX512, gemv2QuadVNNIAVX512, gemv4QuadVNNIAVX512}
)

// dotTile computes dotTileGeneric's sums over steps of dotStep values of k
// for the first rows (1 to dotTileRows) of a group of rows by
// dotTileChannels channels, with the AVX2 kernels (the dot path runs with
// the AVX2 set without VNNI; tests run it on AVX-512 too), which also
// prefetch pf as dotTile4AVX2 says; Go ignores pf. The kernels also add 0
// to the int32 after each row's three sums: sums must reach 16 bytes past
// the start of the last row.
func dotTile(rows int, x []byte, w []byte, ldw, steps int, sums []byte, lds int, pf []byte, pfStep int) {
	if impl == implGeneric {
		dotTileGeneric(rows, x, w, ldw, steps, sums, lds)
		return
	}
	dotTilesAVX2[rows-1](x, w, ldw, steps, sums, lds, pf, pfStep)
}

// dotTilesAVX2 are the dot tiles for 1 to 4 rows.
var dotTilesAVX2 = [...]func(x []byte, wt []byte, ldw int, steps int, sums []byte, lds int, pf []byte, pfStep int){
	dotTile1AVX2, dotTile2AVX2, dotTile3AVX2, dotTile4AVX2,
}

// gemmTilesI8 are the tile kernels on int8 panels of each kernel set, by
// row count - 1.
var gemmTilesI8 = [...][gemmRows]func(a []byte, lda int, b []byte, kp int, c []byte, ldc int, add bool){
	implAVX2:   {gemmTile1I8AVX2, gemmTile2I8AVX2, gemmTile3I8AVX2, gemmTile4I8AVX2, gemmTile5I8AVX2, gemmTile6I8AVX2},
	implAVX512: {gemmTile1I8AVX512, gemmTile2I8AVX512, gemmTile3I8AVX512, gemmTile4I8AVX512, gemmTile5I8AVX512, gemmTile6I8AVX512},
}

// gemmTileI8 computes a tile of mr rows (1 to gemmRows) of an int8
// product from an int8 panel: see gemmTileI8Generic.
func gemmTileI8(mr int, a []byte, lda int, b []byte, kp int, c []byte, ldc int, add bool) {
	if impl == implGeneric {
		gemmTileI8Generic(16, mr, a, lda, b, kp, c, ldc, add)
		return
	}
	gemmTilesI8[impl][min(mr, gemmRows)-1](a, lda, b, kp, c, ldc, add)
}

// gemmTilesMix are AVX2's tiles over a panel and a half, by row count - 1.
var gemmTilesMix = [...]func(a []byte, lda int, b, b16 []byte, kp int, c, c16 []byte, ldc int, add bool){
	gemmTileMix1AVX2, gemmTileMix2AVX2, gemmTileMix3AVX2, gemmTileMix4AVX2,
}

// mixTiles reports whether the many-row path runs gemmTileMix over its
// int8 panels (see product.tilesMix): on the AVX2 set, whose 16 registers
// hold 12 sums; AVX-512's 32 hold its wider tiles.
var mixTiles = func() bool { return impl == implAVX2 }

// gemmTileMix computes a tile of mr rows (1 to mixRows) by a panel and a
// half: see gemmTileMixGeneric.
func gemmTileMix(mr int, a []byte, lda int, b, b16 []byte, kp int, c, c16 []byte, ldc int, add bool) {
	if impl != implAVX2 {
		gemmTileMixGeneric(mr, a, lda, b, b16, kp, c, c16, ldc, add)
		return
	}
	gemmTilesMix[mr-1](a, lda, b, b16, kp, c, c16, ldc, add)
}

// wideMinRowsFor is wideMinRows for this processor: its vendor, since
// the one measurement of each (Zen 4, Emerald Rapids, with the VPDPWSSD
// tiles that the quad tiles replaced) disagreed below 2048 rows.
func wideMinRowsFor() int {
	if cpuid.CPU.VendorID == cpuid.AMD {
		return fewMax + 1
	}
	return 2048
}

// packRowsPanelI8 packs the first kp pairs of k, rounded down to a
// multiple of 8, of a whole int8 panel (gemmCols rows of src, ldw bytes
// apart) into dst, and returns how many pairs it packed.
func packRowsPanelI8(src []byte, ldw, kp int, dst []byte) int {
	kp &^= 7
	switch impl {
	case implAVX512:
		packRowsI8AVX512(src, ldw, kp, dst)
	case implAVX2:
		packRowsI8AVX2(src, ldw, kp, dst)
	default:
		return 0
	}
	return kp
}

// gemvRows adds to the int32 of c the products of the int16 row x with
// the [K, N] rows of b: see gemvRowsGeneric. The cols path takes pairs on
// AVX2 without VNNI only (colsInQuads); tests that take pairs on an
// AVX-512 set run the AVX2 kernel.
func gemvRows(x, b []byte, ldb, kp int, c []byte) {
	if impl == implGeneric {
		gemvRowsGeneric(x, b, ldb, kp, c)
		return
	}
	gemvRowsAVX2(x, b, ldb, kp, c)
}

// gemvRowsQuad adds to the int32 of c the quad arithmetic's products of the
// int8 row x with the [K, N] rows of b, each quadCols columns' sums in the
// order of quadColumn: see gemvRowsQuadGeneric. Only where colsInQuads.
// cold says b comes from memory rather than the cache: AVX-512 without VNNI
// then prefetches more (see the kernels' generator).
func gemvRowsQuad(x, b []byte, ldb, kq int, c []byte, cold bool) {
	switch {
	case impl == implAVX512 && vnni:
		gemvRowsQuadVNNIAVX512(x, b, ldb, kq, c)
	case impl == implAVX512 && cold:
		// In blocks of coldCols columns: the cold form prefetches the next
		// pass's lines into the first-level cache as it goes, and for
		// 4096 columns they (32 KiB) and c (16 KiB) outgrow it. On a
		// 2-core Zen 5, one row by b 4096x4096, blocks of calls
		// alternated in one process: 0.94-1.01 of the time of whole rows,
		// 0.96 in the middle of six runs (1024 columns: 0.90-1.02).
		n := len(c) / 4
		for lo := 0; lo < n; lo += coldCols {
			w := min(coldCols, n-lo)
			gemvRowsQuadColdAVX512(x, b[lo:(4*kq-1)*ldb+lo+w], ldb, kq, c[4*lo:4*(lo+w)])
		}
	case impl == implAVX512:
		gemvRowsQuadAVX512(x, b, ldb, kq, c)
	default:
		gemvRowsQuadVNNIAVX2(x, b, ldb, kq, c)
	}
}

// coldCols is the columns of a block of gemvRowsQuad's cold form with
// AVX-512 alone: a multiple of 64, which keeps quadColumn's order.
const coldCols = 2048

// colsInQuads reports whether mm_int8's cols path multiplies quads of k
// (gemvRowsQuad): where quadPanels, and with AVX-512 without VNNI, whose
// kernel does VPDPBUSD's arithmetic with VPMADDUBSW, exactly (see
// quadProducts in the generator), faster than pairs of k. A variable, as
// quadPanels is, so that tests also run the pairs there.
var colsInQuads = func() bool { return quadPanels() || impl == implAVX512 }

// unquad is unquadGeneric by the kernel of the set, which adds one other
// accumulator: with more (more than two threads), Go first adds the rest
// of others into the first, in [lo, hi).
func unquad(total []byte, others [][]byte, lo, hi int, corr int32) {
	kernel := unquadAVX2
	switch impl {
	case implAVX512:
		kernel = unquadAVX512
	case implGeneric:
		unquadGeneric(total, others, lo, hi, corr)
		return
	}
	var other []byte
	if len(others) > 0 {
		other = others[0][lo:hi]
		for _, a := range others[1:] {
			addInt32s(other, a[lo:hi])
		}
	}
	kernel(total[lo:hi], other, corr)
}

// quadCols is the number of columns of a register of gemvRowsQuad's int8
// rows, whose sums it keeps out of order (see quadColumn).
func quadCols() int {
	if impl == implAVX512 {
		return 64
	}
	return 32
}

// quadPanels reports whether the panel paths (few and many rows) multiply
// quads of k with VPDPBUSD: where the kernel set has VNNI (AVX512-VNNI
// with AVX-512, AVX-VNNI with AVX2). VPDPBUSD multiplies unsigned bytes by
// signed ones, four to a lane, twice VPDPWSSD's multiply-adds per
// instruction at the same rate (a 2-core Zen 5: 1.6 and 0.8 TOPS from
// registers); the panels hold the weight plus 128 as unsigned bytes, and
// each row's sum times 128 comes off again (see product.corr). A variable
// so that tests also run the pair panels where the set would pack quads.
var quadPanels = func() bool { return vnni }

// The quad-panel tiles, by row count less one: over one panel for each
// kernel set, and over two for AVX-512.
var (
	gemmTilesQuad = [...][gemmRows]func(a []byte, lda int, b []byte, kq int, c []byte, ldc int, add bool, corr, pf []byte, pfStep int){
		implAVX2:   {gemmTile1QuadVNNIAVX2, gemmTile2QuadVNNIAVX2, gemmTile3QuadVNNIAVX2, gemmTile4QuadVNNIAVX2, gemmTile5QuadVNNIAVX2, gemmTile6QuadVNNIAVX2},
		implAVX512: {gemmTile1QuadVNNIAVX512, gemmTile2QuadVNNIAVX512, gemmTile3QuadVNNIAVX512, gemmTile4QuadVNNIAVX512, gemmTile5QuadVNNIAVX512, gemmTile6QuadVNNIAVX512},
	}
	gemmTilesQuadWide = [gemmRows]func(a []byte, lda int, b []byte, pstride, kq int, c []byte, ldc int, add bool, corr, pf []byte, pfStep int){
		gemmTileWide1QuadVNNIAVX512, gemmTileWide2QuadVNNIAVX512, gemmTileWide3QuadVNNIAVX512, gemmTileWide4QuadVNNIAVX512, gemmTileWide5QuadVNNIAVX512, gemmTileWide6QuadVNNIAVX512,
	}
)

// gemmTilesWideI8 are AVX-512's tiles over two int8 pair panels, by row
// count less one.
var gemmTilesWideI8 = [gemmRows]func(a []byte, lda int, b []byte, pstride, kp int, c []byte, ldc int, add bool){
	gemmTileWide1I8AVX512, gemmTileWide2I8AVX512, gemmTileWide3I8AVX512, gemmTileWide4I8AVX512, gemmTileWide5I8AVX512, gemmTileWide6I8AVX512,
}

// hasWideTiles reports whether the kernel set has tiles over two panels,
// quad and int8 pair ones: AVX-512, whose 32 registers hold their
// accumulators.
func hasWideTiles() bool { return impl == implAVX512 }

// gemmTileWideI8 computes a tile of mr rows (1 to gemmRows) over kp >= 1
// pairs of k of two int8 panels pstride bytes apart. Only where
// hasWideTiles.
func gemmTileWideI8(mr int, a []byte, lda int, b []byte, pstride, kp int, c []byte, ldc int, add bool) {
	gemmTilesWideI8[min(mr, gemmRows)-1](a, lda, b, pstride, kp, c, ldc, add)
}

// gemmTileQuad computes a tile of mr rows (1 to gemmRows) over kq >= 1
// quads of k of a quad panel, or with pstride > 0 (where hasWideTiles) of
// two panels pstride bytes apart, and prefetches pf as the kernels say.
// Only where quadPanels.
func gemmTileQuad(mr int, a []byte, lda int, b []byte, pstride, kq int, c []byte, ldc int, add bool, corr, pf []byte, pfStep int) {
	if pstride > 0 {
		gemmTilesQuadWide[min(mr, gemmRows)-1](a, lda, b, pstride, kq, c, ldc, add, corr, pf, pfStep)
		return
	}
	gemmTilesQuad[impl][min(mr, gemmRows)-1](a, lda, b, kq, c, ldc, add, corr, pf, pfStep)
}

// packQuadsPanel packs the first kq quads of k, rounded down to a
// multiple of 16 (AVX-512) or 4 (AVX2), of a whole quad panel (gemmCols
// rows of src, ldw bytes apart) into dst, and returns how many quads it
// packed.
func packQuadsPanel(src []byte, ldw, kq int, dst []byte) int {
	if impl == implAVX512 {
		kq &^= 15
		packQuadsVNNIAVX512(src, ldw, kq, dst)
	} else {
		kq &^= 3
		packQuadsVNNIAVX2(src, ldw, kq, dst)
	}
	return kq
}

// packColsQuadsPanels packs one quad of k of the whole pairs of quad
// panels from four rows of a [K, N] matrix (ldb bytes apart), the panels
// pstride bytes apart in dst, and returns how many panels it packed.
func packColsQuadsPanels(src []byte, ldb, panels int, dst []byte, pstride int) int {
	panels &^= 1
	if impl == implAVX512 {
		packColsQuadsVNNIAVX512(src, ldb, panels/2, dst, pstride)
	} else {
		packColsQuadsVNNIAVX2(src, ldb, panels/2, dst, pstride)
	}
	return panels
}

// packColsQuadsRun packs the columns of a pair of quad panels (2 ×
// gemmCols from src's start) for quads quads of k from a [K, N] matrix
// (rows ldb bytes apart, from the first row of the first quad), the two
// panels pstride bytes apart in dst.
func packColsQuadsRun(src []byte, ldb, quads int, dst []byte, pstride int) {
	if impl == implAVX512 {
		packColsQuadsRunVNNIAVX512(src, ldb, quads, dst, pstride)
	} else {
		packColsQuadsRunVNNIAVX2(src, ldb, quads, dst, pstride)
	}
}

// The input activation kernels of each assembly set, by kernelIndex.
var (
	geluKernels = [...][3]func(src, dst []byte){
		implAVX2:   {geluTanhBF16AVX2, geluTanhF16AVX2, geluTanhF32AVX2},
		implAVX512: {geluTanhBF16AVX512, geluTanhF16AVX512, geluTanhF32AVX512},
	}
	swiGLUKernels = [...][3]func(gate, up, dst []byte){
		implAVX2:   {swiGLUBF16AVX2, swiGLUF16AVX2, swiGLUF32AVX2},
		implAVX512: {swiGLUBF16AVX512, swiGLUF16AVX512, swiGLUF32AVX512},
	}
	// hasFMA: the kernels' exponential uses fused multiply-adds (FMA3,
	// which every AVX2 processor but a rare few has).
	hasFMA = cpuid.CPU.Has(cpuid.FMA3)
)

// activateBlocks runs the input activation act (see activate) on the
// whole blocks of the K elements of b (two registers of lanes), and
// returns how many elements it did: none with the Go kernels, or without
// FMA3.
func activateBlocks(dt dtype.DType, act string, row, b []byte) int {
	if impl == implGeneric || !hasFMA {
		return 0
	}
	size := dt.Size()
	k := len(b) / size
	n := k &^ (2*vectorBytes()/4 - 1)
	if n == 0 {
		return 0
	}
	if act == op.ActGeluTanh {
		geluKernels[impl][kernelIndex(dt)](row[:n*size], b[:n*size])
	} else {
		swiGLUKernels[impl][kernelIndex(dt)](row[:n*size], row[k*size:(k+n)*size], b[:n*size])
	}
	return n
}

// copyStream copies src to dst (as long) with non-temporal stores where
// the assembly can (the aligned whole blocks), ordinary ones elsewhere;
// parallelFor fences them.
func copyStream(dst, src []byte) {
	dst = dst[:len(src)]
	if impl == implGeneric {
		copy(dst, src)
		return
	}
	head := alignHead(dst, 1, vectorBytes())
	if head < 0 {
		copy(dst, src)
		return
	}
	copy(dst[:head], src)
	n := head + (len(src)-head)&^(2*vectorBytes()-1)
	if impl == implAVX512 {
		copyStreamAVX512(dst[head:n], src[head:n])
	} else {
		copyStreamAVX2(dst[head:n], src[head:n])
	}
	copy(dst[n:], src[n:])
}
