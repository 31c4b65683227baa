//go:build !amd64 || purego

package cpu

import "github.com/gokitchen/kitchen/dtype"

// Without assembly every int8 product kernel is the portable one.

func gemmTileI8(mr int, a []byte, lda int, b []byte, kp int, c []byte, ldc int, add bool) {
	gemmTileI8Generic(16, mr, a, lda, b, kp, c, ldc, add)
}

func wideMinRowsFor() int { return 2048 }

var mixTiles = func() bool { return false }

func gemmTileMix(mr int, a []byte, lda int, b, b16 []byte, kp int, c, c16 []byte, ldc int, add bool) {
	gemmTileMixGeneric(mr, a, lda, b, b16, kp, c, c16, ldc, add)
}

func packRowsPanelI8([]byte, int, int, []byte) int { return 0 }

func dotTile(rows int, x []byte, w []byte, ldw, steps int, sums []byte, lds int, _ []byte, _ int) {
	dotTileGeneric(rows, x, w, ldw, steps, sums, lds)
}

func gemvRows(x, b []byte, ldb, kp int, c []byte) { gemvRowsGeneric(x, b, ldb, kp, c) }

// gemvRowsQuad is gemvRowsQuadGeneric for quadCols' order (the cols path
// takes quads only where colsInQuads, never here).
func gemvRowsQuad(x, b []byte, ldb, kq int, c []byte, cold bool) {
	gemvRowsQuadGeneric(quadCols(), x, b, ldb, kq, c)
}

func quadCols() int { return 64 }

func gemmCols() int { return 16 }

func gemmTile(mr int, a []byte, lda int, b []byte, kp int, c []byte, ldc int, add bool) {
	gemmTileGeneric(16, mr, a, lda, b, kp, c, ldc, add)
}

func widenInt8(q, dst []byte) { widenInt8Generic(q, dst) }

func linearOut(out dtype.DType, acc []byte, xs float32, ws, bias []float32, dst []byte) {
	linearOutGeneric(out, acc, xs, ws, bias, dst)
}

func peakLoop(int) int64 { return 0 }

func packRowsPanel([]byte, int, int, []byte) int { return 0 }

func packColsPair([]byte, int, int, []byte, int) int { return 0 }

func packColsQuad([]byte, int, int, []byte, int, bool) int { return 0 }

func gemvStep() int { return 16 }

func gemv(rows int, x []byte, ldx int, w []byte, ldw, k int, out []byte, lds int) {
	gemvGeneric(rows, x, ldx, w, ldw, k, out, lds)
}

var quadPanels = func() bool { return false }

// colsInQuads is false: see quadPanels.
var colsInQuads = func() bool { return false }

func hasWideTiles() bool { return false }

func gemmTileWideI8(int, []byte, int, []byte, int, int, []byte, int, bool) {
	panic("cpu: no wide tiles without assembly")
}

func gemmTileQuad(int, []byte, int, []byte, int, int, []byte, int, bool, []byte, []byte, int) {
	panic("cpu: no quad tiles without assembly")
}

func packQuadsPanel([]byte, int, int, []byte) int { return 0 }

func packColsQuadsPanels([]byte, int, int, []byte, int) int { return 0 }

func packColsQuadsRun([]byte, int, int, []byte, int) {
	panic("cpu: no quad panels without assembly")
}

// activateBlocks does none of the activation: Go does it all (activate).
func activateBlocks(dtype.DType, string, []byte, []byte) int { return 0 }

// copyStream is copy: the Go kernels have no non-temporal stores.
func copyStream(dst, src []byte) { copy(dst, src) }

func unquad(total []byte, others [][]byte, lo, hi int, corr int32) {
	unquadGeneric(total, others, lo, hi, corr)
}
