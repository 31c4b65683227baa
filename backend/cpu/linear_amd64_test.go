//go:build amd64 && !purego

package cpu

import "testing"

// TestDotStep checks which dot tile a product's rows and k choose: the
// VNNI tile's 32 values of k a step from dotVNNIMinRows rows with k a
// multiple of 32, on AVX-512 with VNNI only; the AVX2 tile's 16 otherwise.
func TestDotStep(t *testing.T) {
	defer func(i int, v bool) { impl, vnni = i, v }(impl, vnni)
	for _, c := range []struct {
		set  int
		vnni bool
		m, k int
		want int
	}{
		{implAVX512, true, dotVNNIMinRows, 4096, 32}, {implAVX512, true, dotVNNIMinRows - 1, 4096, 16},
		{implAVX512, true, 48, 4112, 16}, {implAVX512, true, 48, 4128, 32},
		{implAVX512, false, 48, 4096, 16}, {implAVX2, false, 48, 4096, 16},
	} {
		impl, vnni = c.set, c.vnni
		if got := dotStep(c.m, c.k); got != c.want {
			t.Errorf("%s, vnni %v, %d rows of %d: step %d, want %d", kernelSetNames[c.set], c.vnni, c.m, c.k, got, c.want)
		}
	}
}
