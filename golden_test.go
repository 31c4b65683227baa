package kitchen_test

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/gokitchen/kitchen"
	"github.com/gokitchen/kitchen/backend"
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/internal/golden"
	"github.com/gokitchen/kitchen/op"
	"github.com/gokitchen/kitchen/tensor"
)

// TestGoldenPublicAPI runs the golden vectors through the public functions
// with the backend chosen automatically from the default registry: it
// checks the layer that turns options into an operation's arguments (the
// seed, a scale value or tensor, the output dtype, _simple as the float32
// case). The conformance suite (internal/backendtest) checks each backend
// on the same vectors through the operations themselves.
func TestGoldenPublicAPI(t *testing.T) {
	cases, err := golden.Load("testdata/golden/int8.json")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ran := map[string]int{}
	for i := range cases {
		c := &cases[i]
		var name string
		opts := []kitchen.Option{kitchen.ReportBackend(&name)}
		if c.Seed > 0 {
			opts = append(opts, kitchen.WithStochasticRounding(c.Seed))
		}
		var got, want []*tensor.Tensor
		switch c.Op {
		case op.QuantizeRowwise.Name(), op.QuantizeTensorwise.Name():
			x := must(tensor.FromBytes(c.DType, c.X, c.Shape...))
			var q, s *tensor.Tensor
			if c.Op == op.QuantizeRowwise.Name() {
				q, s, err = kitchen.QuantizeInt8Rowwise(ctx, x, opts...)
			} else {
				switch c.ScaleMode {
				case "value":
					opts = append(opts, kitchen.WithScale(c.ScaleValue))
				case "tensor":
					opts = append(opts, kitchen.WithScaleTensor(must(tensor.FromFloat32(dtype.Float32, []float32{c.ScaleValue}))))
				}
				q, s, err = kitchen.QuantizeInt8Tensorwise(ctx, x, opts...)
			}
			got = []*tensor.Tensor{q, s}
			want = []*tensor.Tensor{must(tensor.FromBytes(dtype.Int8, c.Q, c.Shape...)), must(tensor.FromBytes(dtype.Float32, c.Scale, c.ScaleShape...))}
		default:
			q := must(tensor.FromBytes(dtype.Int8, c.Q, c.QShape...))
			s := must(tensor.FromBytes(c.ScaleDType, c.Scale, c.ScaleShape...))
			if slices.ContainsFunc(must(s.Float32s()), func(v float32) bool { return !(v > 0) }) {
				// A scale of zero (a float16 scale that underflowed):
				// PyTorch multiplies by it, kitchen refuses it.
				if _, err := kitchen.DequantizeInt8To(ctx, q, s, c.OutDType, opts...); !errors.Is(err, backend.ErrScale) {
					t.Errorf("%s: %v, want %v", c.Name, err, backend.ErrScale)
				}
				ran[name]++
				continue
			}
			var out *tensor.Tensor
			out, err = kitchen.DequantizeInt8To(ctx, q, s, c.OutDType, opts...)
			got = []*tensor.Tensor{out}
			if c.OutDType == dtype.Float32 && err == nil {
				out, err = kitchen.DequantizeInt8(ctx, q, s, opts...)
				got = append(got, out)
			}
			for range got {
				want = append(want, must(tensor.FromBytes(c.OutDType, c.Out, c.QShape...)))
			}
		}
		if err != nil {
			t.Errorf("%s: %v", c.Name, err)
			continue
		}
		ran[name]++
		for j := range got {
			g, w := got[j], want[j]
			if g.DType() != w.DType() || !slices.Equal(g.Shape(), w.Shape()) || !bytes.Equal(must(g.Bytes()), must(w.Bytes())) {
				t.Errorf("%s on %s: output %d is %v %x, want %v %x", c.Name, name, j, g, clip(must(g.Bytes())), w, clip(must(w.Bytes())))
			}
		}
	}
	// cpu takes every host call before eager is tried.
	if ran["cpu"] != len(cases) {
		t.Errorf("the automatic choice ran %v of %d cases", ran, len(cases))
	}
}

func clip(b []byte) []byte { return b[:min(len(b), 48)] }

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
