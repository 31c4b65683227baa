package ascend_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/internal/backendtest"
	"github.com/gokitchen/kitchen/op"
)

// TestConformance runs the conformance suite on the ascend backend with
// tensors on the NPU (the simulator's, or a real one on hardware). What its
// constraints decline (float32 x, stochastic rounding) is counted and
// skipped; eager on the NPU is checked by TestEagerConformance.
func TestConformance(t *testing.T) {
	e := newEnv(t)
	backendtest.Run(t, e.reg, "ascend", e.dev, backendtest.WithinBound(fusedBound))
}

// TestEagerConformance runs the suite on eager with tensors on the NPU:
// bit-exact to eager on the host, through the NPU's primitives. The NPU
// does not implement eager.RotatePrimitives or eager.LinearPrimitives yet,
// so eager declines the ConvRot and linear operations there, saying so.
func TestEagerConformance(t *testing.T) {
	e := newEnv(t)
	backendtest.Run(t, e.reg, "eager", e.dev, backendtest.AcceptsAll(), backendtest.RandomCases(8),
		backendtest.Declined(op.QuantizeConvRotWeight.Name(), op.QuantizeAndRotateRowwise.Name(),
			op.DequantizeConvRotWeight.Name(), op.DequantizeConvRotWeightDType.Name(), op.DequantizeEmbedding.Name(),
			op.MMInt8.Name(), op.Int8Linear.Name()))
}

// fusedBound is the fused quantize kernels' stated bound against the
// contract: the scales exact, q within one step (numerics_test.go states
// exactly where). Dequantization has no bound: it must be exact.
func fusedBound(op string, i int, dt dtype.DType, got, want []byte) string {
	if !strings.HasPrefix(op, "quantize_") || i != 0 || dt != dtype.Int8 {
		return "must be exact"
	}
	for j := range got {
		if d := int(int8(got[j])) - int(int8(want[j])); d < -1 || d > 1 {
			return fmt.Sprintf("q[%d] = %d, want %d ± 1", j, int8(got[j]), int8(want[j]))
		}
	}
	return ""
}
