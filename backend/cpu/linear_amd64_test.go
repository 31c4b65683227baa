//go:build amd64 && !purego

package cpu

import "testing"

// TestDotStep checks which dot tile a product's k chooses: the VNNI
// tile's 32 values of k a step (over 6 channels) with k a multiple of 32,
// on AVX-512 with VNNI only; the AVX2 tile's 16 (over 3) otherwise.
func TestDotStep(t *testing.T) {
	defer func(i int, v bool) { impl, vnni = i, v }(impl, vnni)
	for _, c := range []struct {
		set  int
		vnni bool
		m, k int
		want int
	}{
		{implAVX512, true, 3, 4096, 32}, {implAVX512, true, 48, 4096, 32},
		{implAVX512, true, 48, 4112, 16}, {implAVX512, true, 48, 4128, 32},
		{implAVX512, false, 48, 4096, 16}, {implAVX2, false, 48, 4096, 16},
	} {
		impl, vnni = c.set, c.vnni
		if got := dotStep(c.k); got != c.want {
			t.Errorf("%s, vnni %v, %d rows of %d: step %d, want %d", kernelSetNames[c.set], c.vnni, c.m, c.k, got, c.want)
		}
		if got, want := dotTileChannels(c.want), map[int]int{16: 3, 32: 6}[c.want]; got != want {
			t.Errorf("a step of %d: %d channels a tile, want %d", c.want, got, want)
		}
	}
}
