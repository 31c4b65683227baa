package eager_test

import (
	"testing"

	"github.com/gokitchen/kitchen/backend"
	"github.com/gokitchen/kitchen/backend/eager"
	"github.com/gokitchen/kitchen/internal/backendtest"
	"github.com/gokitchen/kitchen/tensor"
)

// TestConformance runs the conformance suite on eager over host tensors,
// in a registry of its own. eager is the reference the suite compares
// other backends with, so here the golden vectors, the bad inputs and the
// relations between calls (a scale of any dtype acts as its float32
// value) do the checking.
func TestConformance(t *testing.T) {
	reg := backend.NewRegistry(nil)
	if err := reg.Register(eager.New()); err != nil {
		t.Fatal(err)
	}
	backendtest.Run(t, reg, eager.Name, tensor.CPU(), backendtest.AcceptsAll())
}
