//go:build amd64 && !purego

package cpu

// The dispatch of the int8 product kernels that read a prepared (int8)
// weight and mm_int8's b as it is (see _asm/linear.go); the others are in
// kernels_amd64.go.

// gemmTilesI8 are the tile kernels on int8 panels of each kernel set, by
// row count - 1.
var gemmTilesI8 = [...][gemmRows]func(a []byte, lda int, b []byte, kp int, c []byte, ldc int, add bool){
	implAVX2:   {gemmTile1I8AVX2, gemmTile2I8AVX2, gemmTile3I8AVX2, gemmTile4I8AVX2, gemmTile5I8AVX2, gemmTile6I8AVX2},
	implAVX512: {gemmTile1I8AVX512, gemmTile2I8AVX512, gemmTile3I8AVX512, gemmTile4I8AVX512, gemmTile5I8AVX512, gemmTile6I8AVX512},
}

// gemmTilesI8VNNI are the AVX-512 int8-panel tiles in their VNNI form.
var gemmTilesI8VNNI = [gemmRows]func(a []byte, lda int, b []byte, kp int, c []byte, ldc int, add bool){
	gemmTile1I8VNNIAVX512, gemmTile2I8VNNIAVX512, gemmTile3I8VNNIAVX512, gemmTile4I8VNNIAVX512, gemmTile5I8VNNIAVX512, gemmTile6I8VNNIAVX512,
}

// gemmTileI8 computes a tile of mr rows (1 to gemmRows) of an int8
// product from an int8 panel: see gemmTileI8Generic.
func gemmTileI8(mr int, a []byte, lda int, b []byte, kp int, c []byte, ldc int, add bool) {
	if impl == implGeneric {
		gemmTileI8Generic(16, mr, a, lda, b, kp, c, ldc, add)
		return
	}
	if impl == implAVX512 && vnni && mr >= vnniMinRows {
		gemmTilesI8VNNI[min(mr, gemmRows)-1](a, lda, b, kp, c, ldc, add)
		return
	}
	gemmTilesI8[impl][min(mr, gemmRows)-1](a, lda, b, kp, c, ldc, add)
}

// gemmTilesWide are the AVX-512 VNNI tiles over two panels, by row count
// less one: int16 panels, then int8 ones.
var gemmTilesWide = [2][gemmRows]func(a []byte, lda int, b []byte, pstride, kp int, c []byte, ldc int, add bool){
	{gemmTileWide1VNNIAVX512, gemmTileWide2VNNIAVX512, gemmTileWide3VNNIAVX512, gemmTileWide4VNNIAVX512, gemmTileWide5VNNIAVX512, gemmTileWide6VNNIAVX512},
	{gemmTileWide1I8VNNIAVX512, gemmTileWide2I8VNNIAVX512, gemmTileWide3I8VNNIAVX512, gemmTileWide4I8VNNIAVX512, gemmTileWide5I8VNNIAVX512, gemmTileWide6I8VNNIAVX512},
}

// hasWideTiles reports whether the kernel set has tiles over two panels
// at once (gemmTileWide): AVX-512 with VNNI.
func hasWideTiles() bool { return impl == implAVX512 && vnni }

// gemmTileWide computes a tile of mr rows (1 to gemmRows) by two adjacent
// panels, the second pstride bytes after the first in b (int8 pairs if
// i8), into 2·gemmCols int32 a row of c, over kp >= 1 pairs of k; only
// where hasWideTiles.
func gemmTileWide(i8 bool, mr int, a []byte, lda int, b []byte, pstride, kp int, c []byte, ldc int, add bool) {
	k := 0
	if i8 {
		k = 1
	}
	gemmTilesWide[k][min(mr, gemmRows)-1](a, lda, b, pstride, kp, c, ldc, add)
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
// the [K, N] rows of b: see gemvRowsGeneric. The kernel is AVX2 on either
// set: it waits for memory, not arithmetic.
func gemvRows(x, b []byte, ldb, kp int, c []byte) {
	if impl == implGeneric {
		gemvRowsGeneric(x, b, ldb, kp, c)
		return
	}
	gemvRowsAVX2(x, b, ldb, kp, c)
}
