//go:build !linux

package tensor

// makeHost allocates n bytes, zeroed or of unspecified contents.
func makeHost(n int, zeroed bool) []byte {
	if zeroed {
		return make([]byte, n)
	}
	return makeUninit(n)
}
