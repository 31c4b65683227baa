package parcopy

import (
	"bytes"
	"testing"
)

// TestCopy checks every length up to a few parts per thread, so that the
// parts' edges fall everywhere.
func TestCopy(t *testing.T) {
	for n := range 100 {
		src, dst := make([]byte, n), make([]byte, n+1)
		for i := range src {
			src[i] = byte(i + 1)
		}
		Copy(dst, src)
		if !bytes.Equal(dst[:n], src) || dst[n] != 0 {
			t.Fatalf("n=%d: %v", n, dst)
		}
	}
}
