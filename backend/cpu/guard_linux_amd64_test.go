//go:build linux && amd64 && !purego

package cpu

import (
	"bytes"
	"math/rand/v2"
	"syscall"
	"testing"

	xcpu "golang.org/x/sys/cpu"
)

// guarded returns n bytes that end where an inaccessible page begins, so
// that a kernel reading or writing past them faults; free unmaps them.
func guarded(t *testing.T, n int) (b []byte, free func()) {
	t.Helper()
	page := syscall.Getpagesize()
	size := (n+page-1)/page*page + page
	m, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Skipf("mmap: %v", err)
	}
	if err := syscall.Mprotect(m[size-page:], syscall.PROT_NONE); err != nil {
		syscall.Munmap(m)
		t.Skipf("mprotect: %v", err)
	}
	return m[size-page-n : size-page], func() { syscall.Munmap(m) }
}

// TestDotTilesGuarded runs each AVX2 dot tile with its sums ending 16
// bytes past the start of its last row, an inaccessible page after them:
// a form that stored a row it does not multiply, or more than a row's 16
// bytes, would fault. The sums must also be right there.
func TestDotTilesGuarded(t *testing.T) {
	if !xcpu.X86.HasAVX2 || impl == implGeneric {
		t.Skip("no AVX2 kernels here")
	}
	rng := rand.New(rand.NewPCG(9, 10))
	const steps, k, lds = 3, 3 * dotStep, 4 * 5
	w := make([]byte, dotTileChannels*k)
	for i := range w {
		w[i] = byte(rng.IntN(256))
	}
	x := make([]byte, dotTileRows*2*k)
	for i := range x {
		x[i] = byte(rng.IntN(256))
	}
	for rows := 1; rows <= dotTileRows; rows++ {
		n := (rows-1)*lds + 16
		sums, free := guarded(t, n)
		clear(sums)
		want := make([]byte, n)
		dotTileGeneric(rows, x, w, k, steps, want, lds)
		dotTilesAVX2[rows-1](x, w, k, steps, sums, lds, x, 0)
		if !bytes.Equal(sums, want) {
			t.Errorf("%d rows: sums %v, want %v", rows, sums, want)
		}
		free()
	}
}

// TestPackColsAheadGuarded packs the last 4 rows of a b that ends where
// an inaccessible page begins, with the AVX2 kernel: its loads must stay
// in those rows (a load past them faults), and its prefetches of the rows
// packColsAhead on, which land on that page, must not fault (they never
// may); the panels are checked against Go's packing.
func TestPackColsAheadGuarded(t *testing.T) {
	if !xcpu.X86.HasAVX2 {
		t.Skip("no AVX2 here")
	}
	const nr, ldb, panels = 16, 64, 4 // the AVX2 panels' columns; b's row is whole panels
	src, free := guarded(t, 4*ldb)
	defer free()
	for i := range src {
		src[i] = byte(i * 7)
	}
	pstride := 2 * 2 * nr // two pairs of k a panel
	got := make([]byte, panels*pstride)
	packColsI8AVX2(src, ldb, panels, got, pstride, false)
	want := make([]byte, panels*pstride)
	for p := range panels {
		for q := range 2 {
			packColsPairGo(src, 4, ldb, p*nr, q, want[p*pstride+q*2*nr:p*pstride+(q+1)*2*nr])
		}
	}
	if i := diff(got, want); i >= 0 {
		t.Fatalf("byte %d (panel %d): %#x, want %#x", i, i/pstride, got[i], want[i])
	}
}
