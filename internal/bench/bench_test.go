package bench

import (
	"context"
	"testing"

	"github.com/gokitchen/kitchen/backend/cpu"
	"github.com/gokitchen/kitchen/dtype"
)

// TestProductsPeak runs the matrix products on a small shape: each entry
// has GOPS and, where the cpu kernels are assembly, the peak measured in
// the same run and the ratio to it.
func TestProductsPeak(t *testing.T) {
	res, err := Run(context.Background(), Config{Shape: []int{5, 64, 40}, DType: dtype.BFloat16, Warmup: 1, Runs: 2,
		Backends: []string{"cpu"}, Ops: []string{"mm_int8", "int8_linear"}})
	if err != nil {
		t.Fatal(err)
	}
	asm := cpu.PeakGOPS(1) > 0
	if len(res.Ops) != 2 {
		t.Fatalf("%d entries, want 2: %+v", len(res.Ops), res.Ops)
	}
	for _, o := range res.Ops {
		if o.GOPS <= 0 {
			t.Errorf("%s: GOPS %v", o.Op, o.GOPS)
		}
		if asm && (o.PeakGOPS <= 0 || o.RatioToPeak != o.GOPS/o.PeakGOPS || res.PeakGOPS != o.PeakGOPS) {
			t.Errorf("%s: peak %v, ratio %v (result's peak %v)", o.Op, o.PeakGOPS, o.RatioToPeak, res.PeakGOPS)
		}
		if !asm && (o.PeakGOPS != 0 || o.RatioToPeak != 0) {
			t.Errorf("%s: peak %v without assembly kernels", o.Op, o.PeakGOPS)
		}
	}
}
