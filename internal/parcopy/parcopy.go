// Package parcopy copies memory on every thread at once: the reference
// that kitchen's benchmarks state memory-bound speeds against (see
// BENCHMARKS.md), and the read that clears the caches between their
// measurements.
package parcopy

import (
	"encoding/binary"
	"runtime"
	"sync"
)

// Copy copies src to dst in GOMAXPROCS contiguous parts, a goroutine
// each, the way the cpu backend splits its work, so that its speed is the
// machine's, not one core's. dst must be at least as long as src.
func Copy(dst, src []byte) {
	parts := runtime.GOMAXPROCS(0)
	var wg sync.WaitGroup
	for p := range parts {
		lo, hi := len(src)*p/parts, len(src)*(p+1)/parts
		wg.Go(func() { copy(dst[lo:hi], src[lo:hi]) })
	}
	wg.Wait()
}

// Read reads b's whole 8-byte words on every thread at once, in
// GOMAXPROCS contiguous parts, and returns their sum (so that the reads
// are kept): what a benchmark runs to push other data out of the caches
// without leaving dirty lines there, as a copy would, for the next
// measurement to write back.
func Read(b []byte) uint64 {
	parts := runtime.GOMAXPROCS(0)
	sums := make([]uint64, parts)
	var wg sync.WaitGroup
	for p := range parts {
		lo, hi := len(b)*p/parts&^7, len(b)*(p+1)/parts&^7
		wg.Go(func() {
			var s uint64
			for i := lo; i < hi; i += 8 {
				s += binary.LittleEndian.Uint64(b[i:])
			}
			sums[p] = s
		})
	}
	wg.Wait()
	var s uint64
	for _, v := range sums {
		s += v
	}
	return s
}
