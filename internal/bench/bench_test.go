package bench

import (
	"context"
	"testing"

	"github.com/gokitchen/kitchen/backend/cpu"
	"github.com/gokitchen/kitchen/dtype"
)

// TestProductsPeak runs the matrix products on a small shape: each entry
// has GOPS and, where the cpu kernels are assembly, the peak and the
// streaming speed measured in the same run and the ratios to them, for
// fresh and reused outputs.
func TestProductsPeak(t *testing.T) {
	res, err := Run(context.Background(), Config{Shape: []int{5, 64, 40}, DType: dtype.BFloat16, Warmup: 1, Runs: 2,
		Backends: []string{"cpu"}, Ops: []string{"mm_int8", "int8_linear"}})
	if err != nil {
		t.Fatal(err)
	}
	asm := cpu.PeakGOPS(1) > 0
	if len(res.Ops) != 4 {
		t.Fatalf("%d entries, want 4 (two operations, fresh and reused outputs): %+v", len(res.Ops), res.Ops)
	}
	for i, o := range res.Ops {
		if want := [2]string{"fresh", "reused"}[i%2]; o.Outputs != want {
			t.Errorf("entry %d (%s): outputs %q, want %q", i, o.Op, o.Outputs, want)
		}
		if (o.RatioToFreshFloor > 0) != (o.Outputs == "fresh") || o.RatioToFloor <= 0 {
			t.Errorf("%s, %s outputs: ratio to floor %v, to fresh floor %v", o.Op, o.Outputs, o.RatioToFloor, o.RatioToFreshFloor)
		}
		if o.GOPS <= 0 {
			t.Errorf("%s: GOPS %v", o.Op, o.GOPS)
		}
		if asm && (o.PeakGOPS <= 0 || o.RatioToPeak != o.GOPS/o.PeakGOPS || res.PeakGOPS != o.PeakGOPS) {
			t.Errorf("%s: peak %v, ratio %v (result's peak %v)", o.Op, o.PeakGOPS, o.RatioToPeak, res.PeakGOPS)
		}
		if !asm && (o.PeakGOPS != 0 || o.RatioToPeak != 0) {
			t.Errorf("%s: peak %v without assembly kernels", o.Op, o.PeakGOPS)
		}
		floor := float64(o.Bytes) / (o.StreamGBPerS * 1e9) * 1e3
		if asm && (o.StreamGBPerS <= 0 || o.StreamFloorMs != floor || o.RatioToStream != o.MedianMs/floor) {
			t.Errorf("%s: streaming %v GB/s, floor %v ms, ratio %v", o.Op, o.StreamGBPerS, o.StreamFloorMs, o.RatioToStream)
		}
		if !asm && (o.StreamGBPerS != 0 || o.RatioToStream != 0) {
			t.Errorf("%s: streaming %v GB/s without assembly kernels", o.Op, o.StreamGBPerS)
		}
	}
}
