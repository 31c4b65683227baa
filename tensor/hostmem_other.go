//go:build !linux

package tensor

func makeHost(n int) []byte { return make([]byte, n) }
