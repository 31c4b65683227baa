// Package parcopy copies memory on every thread at once: the reference
// that kitchen's benchmarks state memory-bound speeds against (see
// BENCHMARKS.md).
package parcopy

import (
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
