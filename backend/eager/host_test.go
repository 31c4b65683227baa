package eager

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/op"
	"github.com/gokitchen/kitchen/tensor"
)

// TestPrimitives checks the host primitives on small hand-worked inputs.
func TestPrimitives(t *testing.T) {
	dev := host{}
	x, _ := tensor.FromFloat32(dtype.Float16, []float32{1, -3, 2, 0, 0, 0}, 2, 3)
	m, err := dev.AbsMaxRows(x, 3)
	if v, _ := m.Float32s(); err != nil || !slices.Equal(v, []float32{3, 0}) {
		t.Errorf("AbsMaxRows = %v, %v", v, err)
	}
	if i, _ := dev.Find(m, NotFinitePositive); i != 1 {
		t.Errorf("Find(not finite positive) = %d, want 1", i)
	}
	if i, _ := dev.Find(m, NotFinite); i != -1 {
		t.Errorf("Find(not finite) = %d, want -1", i)
	}
	rows, _ := tensor.FromFloat32(dtype.Float32, []float32{2, 4})
	d, err := dev.Binary(Div, x, rows, dtype.Float16)
	if v, _ := d.Float32s(); err != nil || !slices.Equal(v, []float32{0.5, -1.5, 1, 0, 0, 0}) {
		t.Errorf("row-broadcast Div = %v, %v", v, err)
	}
	three, _ := tensor.FromFloat32(dtype.Float32, []float32{1, 2, 3, 4})
	if _, err := dev.Binary(Add, x, three, dtype.Float32); !errors.Is(err, tensor.ErrShape) {
		t.Errorf("bad broadcast: %v", err)
	}
}

// TestLinearConstraints checks that only int8_linear, which can rotate,
// names the rotation primitives among its constraints: mm_int8 has no
// ConvRot to need them for.
func TestLinearConstraints(t *testing.T) {
	for _, c := range New().Caps {
		var convrot bool
		for _, line := range c.Constraints.Describe() {
			convrot = convrot || strings.Contains(line, "RotatePrimitives")
		}
		switch c.Op {
		case "mm_int8":
			if convrot {
				t.Errorf("mm_int8's constraints name the rotation primitives: %q", c.Constraints.Describe())
			}
		case "int8_linear":
			if !convrot {
				t.Errorf("int8_linear's constraints do not name the rotation primitives: %q", c.Constraints.Describe())
			}
		}
	}
}

// TestLinearCancelled: the linear kernels report a context that ended
// (here before the call, which the registry would have caught; the
// kernels check it between steps and after the product) with no result.
func TestLinearCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	q, _ := tensor.FromInt8([]int8{1, 2, 3, 4}, 2, 2)
	x, _ := tensor.FromFloat32(dtype.BFloat16, []float32{1, 2, 3, 4}, 2, 2)
	ws, _ := tensor.FromFloat32(dtype.Float32, []float32{1})
	if res, err := mmInt8(ctx, &op.MMInt8Args{A: q, B: q}); !errors.Is(err, context.Canceled) || res.Out != nil {
		t.Errorf("mm_int8: %v, %v", res.Out, err)
	}
	if res, err := int8Linear(ctx, &op.LinearArgs{X: x, Weight: q, WeightScale: ws, OutDType: dtype.BFloat16}); !errors.Is(err, context.Canceled) || res.Out != nil {
		t.Errorf("int8_linear: %v, %v", res.Out, err)
	}
}
