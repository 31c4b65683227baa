package kitchen_test

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/gokitchen/kitchen"
	"github.com/gokitchen/kitchen/backend"
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/internal/golden"
	"github.com/gokitchen/kitchen/tensor"
)

type goldenCase = golden.Case

func loadGolden(t *testing.T) []goldenCase {
	t.Helper()
	cases, err := golden.Load("testdata/golden/int8.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(cases) < 500 {
		t.Fatalf("only %d golden cases", len(cases))
	}
	return cases
}

// backendsFor lists the available backends of the default registry that
// implement op for host tensors (the tests here use host tensors; device
// backends test themselves), so every test of an operation runs on every
// backend that might be chosen for it.
func backendsFor(op backend.Op) []string {
	var names []string
	for _, b := range kitchen.ListBackends() {
		c, ok := b.Capabilities[op]
		if !ok || !b.Available || b.Disabled {
			continue
		}
		if devices := c[0]; devices == "devices: any" || slices.Contains(strings.Split(strings.TrimPrefix(devices, "devices: "), ", "), "cpu") {
			names = append(names, b.Name)
		}
	}
	return names
}

// run calls the case's operation on one backend. declined reports that the
// backend's constraints refused the call.
func runGolden(t *testing.T, c *goldenCase, name string) (got [][]byte, declined bool) {
	t.Helper()
	ctx := context.Background()
	opts := []kitchen.Option{kitchen.UsingBackend(name), kitchen.WithStochasticRounding(c.Seed)}
	var outs []*tensor.Tensor
	var err error
	switch c.Op {
	case backend.QuantizeRowwise, backend.QuantizeTensorwise:
		x := must(tensor.FromBytes(c.DType, c.X, c.Shape...))
		switch c.ScaleMode {
		case "value":
			opts = append(opts, kitchen.WithScale(c.ScaleValue))
		case "tensor":
			opts = append(opts, kitchen.WithScaleTensor(must(tensor.FromFloat32(dtype.Float32, []float32{c.ScaleValue}))))
		}
		var q, s *tensor.Tensor
		if c.Op == backend.QuantizeRowwise {
			q, s, err = kitchen.QuantizeInt8Rowwise(ctx, x, opts...)
		} else {
			q, s, err = kitchen.QuantizeInt8Tensorwise(ctx, x, opts...)
		}
		if err == nil {
			if !slices.Equal(s.Shape(), c.ScaleShape) || !slices.Equal(q.Shape(), c.Shape) {
				t.Errorf("%s on %s: shapes q %v scale %v, want %v and %v", c.Name, name, q.Shape(), s.Shape(), c.Shape, c.ScaleShape)
			}
			outs = []*tensor.Tensor{q, s}
		}
	default:
		q := must(tensor.FromBytes(dtype.Int8, c.Q, c.QShape...))
		s := must(tensor.FromBytes(c.ScaleDType, c.Scale, c.ScaleShape...))
		var out *tensor.Tensor
		if c.OutDType == dtype.Float32 && c.Seed == 0 {
			// The float32 cases also check the _simple entry point.
			out, err = kitchen.DequantizeInt8(ctx, q, s, kitchen.UsingBackend(name))
			if err == nil {
				outs = append(outs, out)
			}
		}
		if err == nil {
			out, err = kitchen.DequantizeInt8To(ctx, q, s, c.OutDType, kitchen.UsingBackend(name))
			outs = append(outs, out)
		}
	}
	var refused *backend.NoCapableBackendError
	if errors.As(err, &refused) {
		return nil, true
	}
	if err != nil {
		t.Fatalf("%s on %s: %v", c.Name, name, err)
	}
	for _, o := range outs {
		got = append(got, must(o.Bytes()))
	}
	return got, false
}

func TestGolden(t *testing.T) {
	cases := loadGolden(t)
	ran := map[string]int{}
	for i := range cases {
		c := &cases[i]
		want := [][]byte{c.Q, c.Scale}
		if c.Out != nil {
			want = [][]byte{c.Out}
		}
		for _, name := range backendsFor(c.Op) {
			got, declined := runGolden(t, c, name)
			if declined {
				continue
			}
			ran[name]++
			for j := range got {
				w := want[min(j, len(want)-1)]
				if !bytes.Equal(got[j], w) {
					t.Errorf("%s on %s: output %d differs at byte %d:\n got %x\nwant %x", c.Name, name, j, firstDiff(got[j], w), clip(got[j]), clip(w))
				}
			}
		}
	}
	// eager and cpu accept every host case; a backend that silently
	// declined everything would otherwise pass.
	for _, name := range []string{eagerName, "cpu"} {
		if ran[name] != len(cases) {
			t.Errorf("%s ran %d of %d golden cases", name, ran[name], len(cases))
		}
	}
	t.Logf("golden cases run per backend: %v", ran)
}

const eagerName = "eager"

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func clip(b []byte) []byte { return b[:min(len(b), 48)] }

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
