package ascend_test

import (
	"context"
	"strings"
	"testing"

	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/internal/bench"
)

// TestBenchDeclined: a bench of NPU tensors on a backend that declines
// them times nothing, and says so, backend by backend, rather than print
// an empty table.
func TestBenchDeclined(t *testing.T) {
	e := newEnv(t)
	_, err := bench.Run(context.Background(), bench.Config{Shape: []int{4, 8}, DType: dtype.BFloat16, Runs: 1, Device: e.dev, Backends: []string{"cpu"},
		Ops: []string{"quantize_int8_rowwise"}})
	if err == nil || !strings.Contains(err.Error(), "no backend ran") || !strings.Contains(err.Error(), "quantize_int8_rowwise on cpu") {
		t.Errorf("got %v, want the operation cpu declined, named", err)
	}
}
