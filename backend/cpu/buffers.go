package cpu

import (
	"math/bits"
	"sync"
	"unsafe"
)

// The scratch memory of the products, kept from call to call. Large
// buffers (the rows of A, a call's packed panels) come from getBuf;
// smaller arrays (per-call scales, each part's sums and panels) from the
// pools by size, smallBufs and floats.

// bufs keeps the large buffers (megabytes per call) for the next call,
// which would otherwise allocate and clear them again.
var bufs sync.Pool

// getBuf returns a buffer of n bytes, with any contents, starting on a
// 64-byte boundary (a cache line, which non-temporal stores need).
func getBuf(n int) []byte {
	if b, ok := bufs.Get().(*[]byte); ok && cap(*b) >= n {
		return (*b)[:n]
	}
	b := make([]byte, n+63)
	off := -int(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) & 63
	return b[off : off+n]
}

func putBuf(b []byte) {
	if cap(b) > 0 {
		bufs.Put(&b)
	}
}

// A pool keeps the smaller arrays of calls and of their parts (kilobytes
// to a few hundred: the epilogue's per-channel scales and bias, the row
// scales, each part's sums and panels) for the next ones. Freshly
// allocated, such arrays are often memory new to the process or given back
// to the system since, and their first touch takes page faults, which the
// virtual machines here take slowly: about 50 µs for a 16 KiB array, in
// all a quarter of a one-row product of 4096x4096 (BENCHMARKS.md). Arrays
// are kept by power-of-two capacity, so that any array kept for a size
// serves it.
type pool[T any] struct{ sizes [48]sync.Pool }

var (
	floats    pool[float32]
	smallBufs pool[byte]
)

// get returns n elements with any contents.
func (p *pool[T]) get(n int) []T {
	if n <= 0 {
		return nil
	}
	c := bits.Len(uint(n - 1))
	if b, ok := p.sizes[c].Get().(*[]T); ok {
		return (*b)[:n]
	}
	return make([]T, n, 1<<c)
}

// put gives back an array that get returned.
func (p *pool[T]) put(b []T) {
	if c := bits.Len(uint(cap(b) - 1)); cap(b) > 0 && cap(b) == 1<<c {
		p.sizes[c].Put(&b)
	}
}
