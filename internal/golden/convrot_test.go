package golden

import (
	"math"
	"testing"

	"github.com/gokitchen/kitchen/dtype"
)

// mantissa is the number of fraction bits of a float dtype.
func mantissa(dt dtype.DType) int {
	switch dt {
	case dtype.Float16:
		return 10
	case dtype.BFloat16:
		return 7
	}
	return 23
}

// ulp is the spacing of dt's values at magnitude m (> 0).
func ulp(dt dtype.DType, m float64) float64 {
	_, e := math.Frexp(m)
	return math.Ldexp(1, e-1-mantissa(dt))
}

// TestConvRotWithinContract checks the golden ConvRot vectors themselves:
// the results in kitchen's summation order (the butterfly fields, which
// backends must give exactly) are within the contract's bound of PyTorch's
// matrix-product results: q within one step; scales and outputs within 16
// float32 ulps of the row's largest magnitude for float32, one ulp of it
// for float16 and bfloat16.
func TestConvRotWithinContract(t *testing.T) {
	cases, err := Load("../../testdata/golden/convrot.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(cases) < 100 {
		t.Fatalf("only %d cases", len(cases))
	}
	var qDiff, outDiff int
	for _, c := range cases {
		k := func(dt dtype.DType) float64 {
			if dt == dtype.Float32 {
				return 16
			}
			return 1
		}
		if len(c.QButterfly) > 0 { // a quantize case
			if len(c.QButterfly) != len(c.Q) || len(c.ScaleButterfly) != len(c.Scale) {
				t.Fatalf("%s: field lengths differ", c.Name)
			}
			for i := range c.Q {
				if d := int(int8(c.QButterfly[i])) - int(int8(c.Q[i])); d != 0 {
					qDiff++
					if d < -1 || d > 1 {
						t.Errorf("%s: q[%d] %d vs PyTorch %d: more than one step", c.Name, i, int8(c.QButterfly[i]), int8(c.Q[i]))
					}
				}
			}
			for r := range len(c.Scale) / 4 {
				b := float64(dtype.Load(c.ScaleButterfly, dtype.Float32, r))
				m := float64(dtype.Load(c.Scale, dtype.Float32, r))
				// The scale is the row's abs-max (in x's dtype) / 127.
				if tol := k(c.DType) * ulp(c.DType, m*127) / 127 * 1.0001; math.Abs(b-m) > tol {
					t.Errorf("%s: scale[%d] %v vs PyTorch %v: beyond %v", c.Name, r, b, m, tol)
				}
			}
			continue
		}
		if len(c.OutButterfly) != len(c.Out) {
			t.Fatalf("%s: field lengths differ", c.Name)
		}
		n := len(c.Out) / c.OutDType.Size()
		d := c.OutShape[len(c.OutShape)-1]
		for r := 0; r < n/d; r++ {
			var rowMax float64
			for j := r * d; j < (r+1)*d; j++ {
				rowMax = max(rowMax, math.Abs(float64(dtype.Load(c.Out, c.OutDType, j))))
			}
			for j := r * d; j < (r+1)*d; j++ {
				b := float64(dtype.Load(c.OutButterfly, c.OutDType, j))
				m := float64(dtype.Load(c.Out, c.OutDType, j))
				if b == m || math.IsNaN(b) && math.IsNaN(m) {
					continue
				}
				outDiff++
				if tol := k(c.OutDType) * ulp(c.OutDType, rowMax); math.Abs(b-m) > tol {
					t.Errorf("%s: out[%d] %v vs PyTorch %v: beyond %v (row max %v)", c.Name, j, b, m, tol, rowMax)
				}
			}
		}
	}
	t.Logf("%d cases: %d q and %d outputs differ from PyTorch's, all within the bound", len(cases), qDiff, outDiff)
}
