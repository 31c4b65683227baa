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
		x[i] = byte(rng.IntN(256)) >> 1 // int16 values from 0 to 0x7f7f: no overflow in 48 pairs
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

// TestPackColsAheadGuarded packs the last rows of a b that ends where an
// inaccessible page begins: the AVX2 kernel's prefetches of the rows
// packColsAhead on land on that page and past it, which a prefetch may do
// (it never faults); the packing itself is checked against Go's.
func TestPackColsAheadGuarded(t *testing.T) {
	if !xcpu.X86.HasAVX2 || impl != implAVX2 {
		t.Skip("the AVX2 packing kernel runs with the AVX2 set only")
	}
	const ldb, panels = 64, 4
	nr := gemmCols()
	src, free := guarded(t, 4*ldb)
	defer free()
	for i := range src {
		src[i] = byte(i * 7)
	}
	pstride := 2 * 2 * nr
	got := make([]byte, panels*pstride)
	if packColsQuad(src, ldb, panels, got, pstride, false) != panels {
		t.Fatal("packColsQuad packed nothing")
	}
	for p := range panels {
		for c := range nr {
			for pair := range 2 {
				for j := range 2 {
					r := 2*pair + j
					at := p*pstride + pair*2*nr + 2*c + j
					if want := src[r*ldb+p*nr+c]; got[at] != want {
						t.Fatalf("panel %d, column %d, row %d: %#x, want %#x", p, c, r, got[at], want)
					}
				}
			}
		}
	}
}
