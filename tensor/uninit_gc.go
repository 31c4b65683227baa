//go:build gc

package tensor

import "unsafe"

// Go clears every allocation, and for a large one the clearing runs on the
// allocating goroutine before the caller gets the memory: about 4 ms for a
// 32 MB output on the machines BENCHMARKS.md describes, as long as a
// row-wise quantization of it on two cores, for bytes that the kernels then
// overwrite whole. The runtime's allocator can skip it (needzero false);
// it is reached by linkname, as database and serialization libraries such
// as CockroachDB's Pebble do, and the runtime keeps its signature for them
// (go.dev/issue/67401). Only for pointer-free memory (typ nil: the garbage
// collector never scans it) that its user overwrites whole before reading
// it: outputs (Empty). Memory new from the operating system is zero
// anyway; what this skips is clearing memory the collector freed.

//go:linkname mallocgc runtime.mallocgc
func mallocgc(size uintptr, typ unsafe.Pointer, needzero bool) unsafe.Pointer

// makeUninit returns n bytes of pointer-free Go memory whose contents are
// unspecified.
func makeUninit(n int) []byte {
	if n == 0 {
		return []byte{}
	}
	return unsafe.Slice((*byte)(mallocgc(uintptr(n), nil, false)), n)
}
