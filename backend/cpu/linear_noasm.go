//go:build !amd64 || purego

package cpu

// Without assembly the prepared-weight and mm_int8 row kernels are the
// portable ones.

func gemmTileI8(mr int, a []byte, lda int, b []byte, kp int, c []byte, ldc int, add bool) {
	gemmTileI8Generic(16, mr, a, lda, b, kp, c, ldc, add)
}

func hasWideTiles() bool { return false }

func gemmTileWide(bool, int, []byte, int, []byte, int, int, []byte, int, bool) {
	panic("cpu: no wide tiles without assembly")
}

func packRowsPanelI8([]byte, int, int, []byte) int { return 0 }

func gemvRows(x, b []byte, ldb, kp int, c []byte) { gemvRowsGeneric(x, b, ldb, kp, c) }
