package parcopy

import (
	"bytes"
	"encoding/binary"
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

// TestRead checks the sum of the whole words against one taken in order,
// on lengths with and without a partial word at the end.
func TestRead(t *testing.T) {
	for _, n := range []int{0, 7, 8, 9, 1000, 1 << 20, 1<<20 + 5} {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(i*31 + 7)
		}
		var want uint64
		for i := 0; i+8 <= n; i += 8 {
			want += binary.LittleEndian.Uint64(b[i:])
		}
		if got := Read(b); got != want {
			t.Errorf("Read of %d bytes: %#x, want %#x", n, got, want)
		}
	}
}
