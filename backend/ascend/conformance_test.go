package ascend_test

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/internal/backendtest"
	"github.com/gokitchen/kitchen/op"
)

// TestConformance runs the conformance suite on the ascend backend with
// tensors on the NPU (the simulator's, or a real one on hardware). What its
// constraints decline (float32 x and stochastic rounding to quantize;
// activations, ConvRot and K beyond 65,535 in the linear operations) is
// counted and skipped; eager on the NPU, which runs them, is checked by
// TestEagerConformance.
func TestConformance(t *testing.T) {
	e := newEnv(t)
	backendtest.Run(t, e.reg, "ascend", e.dev, backendtest.WithinBound(fusedBound))
}

// TestEagerConformance runs the suite on eager with tensors on the NPU:
// every operation, the ConvRot and linear families included (the NPU
// implements eager.RotatePrimitives and eager.LinearPrimitives), bit-exact
// to eager on the host, through the NPU's primitives.
func TestEagerConformance(t *testing.T) {
	e := newEnv(t)
	backendtest.Run(t, e.reg, "eager", e.dev, backendtest.AcceptsAll(), backendtest.RandomCases(8))
}

// fusedBound is the fused kernels' stated bound against the contract: for
// quantize, the scales exact and q within one step (numerics_test.go states
// exactly where); for int8_linear, a float16 or bfloat16 output within one
// unit in the last place (linear_test.go states where it must be exact).
// Dequantization has no bound: it must be exact.
func fusedBound(o string, i int, dt dtype.DType, got, want []byte) string {
	if o == op.Int8Linear.Name() && (dt == dtype.Float16 || dt == dtype.BFloat16) {
		return withinOneULP(got, want)
	}
	if !strings.HasPrefix(o, "quantize_") || i != 0 || dt != dtype.Int8 {
		return "must be exact"
	}
	for j := range got {
		if d := int(int8(got[j])) - int(int8(want[j])); d < -1 || d > 1 {
			return fmt.Sprintf("q[%d] = %d, want %d ± 1", j, int8(got[j]), int8(want[j]))
		}
	}
	return ""
}

// withinOneULP checks float16 or bfloat16 values, little-endian: each got
// equals want or is its neighbour, of the same sign (the two patterns,
// read as sign and magnitude, differ by at most one in the magnitude; the
// neighbour of the largest finite value is the infinity).
func withinOneULP(got, want []byte) string {
	for j := 0; j+1 < len(got); j += 2 {
		g, w := binary.LittleEndian.Uint16(got[j:]), binary.LittleEndian.Uint16(want[j:])
		if d := int(g&0x7fff) - int(w&0x7fff); g>>15 != w>>15 || d < -1 || d > 1 {
			return fmt.Sprintf("element %d: %#04x, want %#04x or a neighbour", j/2, g, w)
		}
	}
	return ""
}
