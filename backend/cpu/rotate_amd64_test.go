//go:build amd64 && !purego

package cpu

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestHasNaN puts a NaN (of random sign and payload, signaling or quiet)
// at each position of rows of many lengths, and checks that hasNaN finds
// it, and that infinities and finite values are not taken for one. rotate
// relies on it to send rows with NaN to quant.Rotate.
func TestHasNaN(t *testing.T) { forEachKernelSet(t, true, testHasNaN) }

func testHasNaN(t *testing.T) {
	rng := rand.New(rand.NewPCG(19, 20))
	for n := range 300 {
		v := rotationRow(rng, "huge", n)
		for i := range v {
			if rng.IntN(8) == 0 {
				v[i] = float32(math.Inf(1 - 2*rng.IntN(2)))
			}
		}
		if hasNaN(v) {
			t.Fatalf("n=%d: a NaN found in %v", n, v)
		}
		for i := range v {
			f := v[i]
			v[i] = randomNaN(rng)
			if !hasNaN(v) {
				t.Fatalf("n=%d: the NaN %#08x at %d not found", n, math.Float32bits(v[i]), i)
			}
			v[i] = f
		}
	}
}
