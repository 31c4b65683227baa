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
// which would otherwise allocate and clear them again; lineBufs those of
// up to bigBuf/2 bytes, by power-of-two capacity as the pools below keep
// theirs, so that a call never takes another's smaller buffer, drops it
// and faults in a new one. (With one pool for all, mm_int8 of one row, in
// turn with other calls as `kitchen bench` makes them, kept taking smaller
// buffers for its sums: on a 2-core Zen 5 without VNNI, a median of 389 µs
// against 358-371 with these pools, which allocated nothing in 110
// rounds.)
var (
	bufs     sync.Pool
	lineBufs = pool[byte]{alloc: aligned}
)

// bigBuf is the size from which getBuf's buffers come from bufs.
const bigBuf = 1 << 20

// getBuf returns a buffer of n bytes, with any contents, starting on a
// 64-byte boundary (a cache line, which non-temporal stores need).
func getBuf(n int) []byte {
	if n > 0 && n <= bigBuf/2 {
		return lineBufs.get(n)
	}
	if b, ok := bufs.Get().(*[]byte); ok && cap(*b) >= n {
		return (*b)[:n]
	}
	return aligned(n, n)
}

// aligned returns n bytes, with room for size, on a 64-byte boundary.
func aligned(n, size int) []byte {
	b := make([]byte, size+63)
	off := -int(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) & 63
	return b[off : off+n : off+size]
}

// putBuf gives back a buffer that getBuf returned.
func putBuf(b []byte) {
	switch {
	case cap(b) == 0:
	case cap(b) <= bigBuf/2:
		lineBufs.put(b)
	default:
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
// serves it. alloc, if set, makes the arrays (n elements with room for
// size) in place of make.
type pool[T any] struct {
	sizes [48]sync.Pool
	alloc func(n, size int) []T
}

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
	if p.alloc != nil {
		return p.alloc(n, 1<<c)
	}
	return make([]T, n, 1<<c)
}

// put gives back an array that get returned.
func (p *pool[T]) put(b []T) {
	if c := bits.Len(uint(cap(b) - 1)); cap(b) > 0 && cap(b) == 1<<c {
		p.sizes[c].Put(&b)
	}
}
