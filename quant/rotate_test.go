package quant

import (
	"math"
	"math/rand/v2"
	"testing"
)

// hadamard returns H_g (unnormalized) as kron(..., H_4), the contract's
// definition.
func hadamard(g int) [][]float64 {
	h4 := [][]float64{{1, 1, 1, -1}, {1, 1, -1, 1}, {1, -1, 1, 1}, {-1, 1, 1, 1}}
	h := [][]float64{{1}}
	for len(h) < g {
		n := len(h)
		k := make([][]float64, 4*n)
		for i := range k {
			k[i] = make([]float64, 4*n)
			for j := range k[i] {
				k[i][j] = h[i/4][j/4] * h4[i%4][j%4]
			}
		}
		h = k
	}
	return h
}

func TestValidGroup(t *testing.T) {
	for g := -4; g <= 5000; g++ {
		want := g == 4 || g == 16 || g == 64 || g == 256 || g == 1024 || g == 4096
		if ValidGroup(g) != want {
			t.Errorf("ValidGroup(%d) = %v", g, !want)
		}
	}
}

// TestRotateMatchesMatrix checks the fast transform against the matrix
// product in float64 (where both are exact up to float32's rounding of the
// fast transform's sums), and that rotating twice is the identity on
// values whose sums are exact.
func TestRotateMatchesMatrix(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, g := range []int{4, 16, 64, 256} {
		h := hadamard(g)
		norm := math.Sqrt(float64(g))
		for range 20 {
			v := make([]float32, 2*g)
			for i := range v {
				v[i] = float32(rng.IntN(201) - 100) // small integers: every sum is exact
			}
			got := append([]float32(nil), v...)
			Rotate(got, g)
			for grp := 0; grp < len(v); grp += g {
				for k := range g {
					var want float64
					for i := range g {
						want += float64(v[grp+i]) * h[i][k]
					}
					if w := float32(want / norm); got[grp+k] != w {
						t.Fatalf("g=%d: out[%d] = %v, want %v", g, grp+k, got[grp+k], w)
					}
				}
			}
			Rotate(got, g)
			for i := range v {
				if got[i] != v[i] {
					t.Fatalf("g=%d: rotating twice gave %v at %d, want %v", g, got[i], i, v[i])
				}
			}
		}
	}
}
