//go:build !gc

package tensor

// makeUninit returns n bytes: cleared, as every allocation is, where the
// gc toolchain's allocator cannot be asked to skip it.
func makeUninit(n int) []byte { return make([]byte, n) }
