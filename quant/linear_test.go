package quant

import (
	"math"
	"testing"
)

func TestActivations(t *testing.T) {
	for _, c := range []struct{ v, gelu, silu float64 }{
		{0, 0, 0},
		{1, 0.8411920, 0.7310586},
		{-1, -0.1588080, -0.2689414},
		{3, 2.9963627, 2.8577223},
		{-10, 0, -0.000454}, // GeluTanh(-10) is -0 to within 1e-6
	} {
		if g := float64(GeluTanh(float32(c.v))); math.Abs(g-c.gelu) > 1e-6 {
			t.Errorf("GeluTanh(%v) = %v, want %v", c.v, g, c.gelu)
		}
		if s := float64(Silu(float32(c.v))); math.Abs(s-c.silu) > 1e-6 {
			t.Errorf("Silu(%v) = %v, want %v", c.v, s, c.silu)
		}
	}
	if !math.IsNaN(float64(GeluTanh(float32(math.NaN())))) || Silu(float32(math.Inf(1))) != float32(math.Inf(1)) {
		t.Error("non-finite inputs")
	}
}

// TestLinearOutRoundsEachProduct checks the epilogue rounds xs·ws before
// multiplying by the accumulator: a fused or float64 computation differs
// on these values.
func TestLinearOutRoundsEachProduct(t *testing.T) {
	xs, ws := float32(1.0000001), float32(1.0000001)
	acc := int32(16777215)
	c := float32(xs * ws)
	want := float32(float32(acc) * c)
	if got := LinearOut(acc, xs, ws); got != want {
		t.Fatalf("LinearOut = %v, want %v", got, want)
	}
	if exact := float32(float64(acc) * float64(xs) * float64(ws)); exact == want {
		t.Log("the inputs do not tell the orders apart") // keep the test honest
	}
	// float32(acc) rounds half to even: 2^24+1 is a tie.
	if got := LinearOut(1<<24+1, 1, 1); got != 1<<24 {
		t.Errorf("LinearOut(2^24+1) = %v, want 2^24", got)
	}
}

// TestAccFloatWrapped checks that the one sum int32 wraps, 2^31 (a row of
// -128 times a column of -128 at K = 131,072), is read back as 2^31, and
// that every other int32 converts as Go converts it.
func TestAccFloatWrapped(t *testing.T) {
	sum, k := int32(0), 131072
	for range k {
		sum += -128 * -128 // wraps as int32 arithmetic does
	}
	wrapped := sum
	if wrapped != math.MinInt32 {
		t.Fatalf("the sum wrapped to %d", wrapped)
	}
	if got := LinearOut(wrapped, 1, 1); got != 1<<31 {
		t.Errorf("LinearOut(-2^31) = %v, want 2^31", got)
	}
	if got := LinearOut(wrapped, 0.5, 0.25); got != 1<<28 {
		t.Errorf("LinearOut(-2^31, 0.5, 0.25) = %v, want 2^28", got)
	}
	for _, v := range []int32{math.MinInt32 + 1, math.MaxInt32, -128 * 127 * 131072, 0, -1} {
		if got := AccFloat(v); got != float32(v) {
			t.Errorf("AccFloat(%d) = %v, want %v", v, got, float32(v))
		}
	}
}
