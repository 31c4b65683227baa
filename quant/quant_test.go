package quant

import (
	"math"
	"testing"
)

func TestRounding(t *testing.T) {
	cases := []struct {
		y            float32
		even, floors int8
	}{
		{0.5, 0, 0}, {1.5, 2, 1}, {2.5, 2, 2}, {-0.5, 0, -1}, {-2.5, -2, -3},
		{126.5, 126, 126}, {127.5, 127, 127}, {-127.5, -128, -128}, {-128.5, -128, -128},
		{1e9, 127, 127}, {-1e9, -128, -128}, {float32(math.Inf(1)), 127, 127}, {0.49999997, 0, 0},
	}
	for _, c := range cases {
		if got := RoundHalfEven(c.y); got != c.even {
			t.Errorf("RoundHalfEven(%v) = %d, want %d", c.y, got, c.even)
		}
		if got := Floor(c.y); got != c.floors {
			t.Errorf("Floor(%v) = %d, want %d", c.y, got, c.floors)
		}
	}
}

// TestNoise checks the hash against values computed with Python's
// arbitrary-precision integers from the contract's formula, including a seed
// whose sum with the index wraps around 2^64.
func TestNoise(t *testing.T) {
	cases := []struct {
		seed int64
		i    uint64
		h24  uint32
	}{
		{1, 0, 11058922},
		{42, 7, 15493878},
		{1<<40 + 7, 123456, 3852388},
		{1<<32 - 1, 1, 11058922}, // k = 2^32: hashes the same word as k = 1
		{math.MaxInt64, 1<<63 + 5, 2652168},
	}
	for _, c := range cases {
		if got, want := Noise(c.seed, c.i), float32(c.h24)*0x1p-24; got != want {
			t.Errorf("Noise(%d, %d) = %v, want %v", c.seed, c.i, got, want)
		}
	}
	for i := range uint64(1 << 16) {
		if u := Noise(3, i); u < 0 || u >= 1 {
			t.Fatalf("Noise(3, %d) = %v outside [0, 1)", i, u)
		}
	}
}
