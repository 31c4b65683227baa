package ascend_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/gokitchen/kitchen"
	"github.com/gokitchen/kitchen/backend/ascend"
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/op"
	"github.com/gokitchen/kitchen/tensor"
)

// TestFusedKernelsWriteCallerOutputs gives each fused kernel outputs on the
// NPU (kitchen.Into): the call returns those very tensors, written by the
// kernel itself (no device-to-device copy into them afterwards), equal to
// eager's results or within the fused kernels' bound.
func TestFusedKernelsWriteCallerOutputs(t *testing.T) {
	e := newEnv(t)
	x := ramp(dtype.BFloat16, 4, 32)
	qv := make([]int8, 4*32)
	for i := range qv {
		qv[i] = int8(i*7 - 100)
	}
	q8 := must(tensor.FromInt8(qv, 4, 32))
	sc := scales(dtype.Float16, 4, 1)
	w := must(tensor.FromInt8(make([]int8, 5*32), 5, 32))
	ws := must(tensor.FromFloat32(dtype.Float32, []float32{0.5}))
	type call struct {
		name string
		outs []*tensor.Tensor // on the host: dtypes and shapes
		run  func(opts ...kitchen.Option) ([]*tensor.Tensor, error)
	}
	zeros := func(dt dtype.DType, shape ...int) *tensor.Tensor { return must(tensor.Zeros(dt, shape...)) }
	for _, c := range []call{
		{op.QuantizeRowwise.Name(), []*tensor.Tensor{zeros(dtype.Int8, 4, 32), zeros(dtype.Float32, 4, 1)}, func(o ...kitchen.Option) ([]*tensor.Tensor, error) {
			q, s, err := kitchen.QuantizeInt8Rowwise(e.ctx, e.up(x), o...)
			return []*tensor.Tensor{q, s}, err
		}},
		{op.QuantizeTensorwise.Name(), []*tensor.Tensor{zeros(dtype.Int8, 4, 32), zeros(dtype.Float32)}, func(o ...kitchen.Option) ([]*tensor.Tensor, error) {
			q, s, err := kitchen.QuantizeInt8Tensorwise(e.ctx, e.up(x), o...)
			return []*tensor.Tensor{q, s}, err
		}},
		{op.DequantizeDType.Name(), []*tensor.Tensor{zeros(dtype.BFloat16, 4, 32)}, func(o ...kitchen.Option) ([]*tensor.Tensor, error) {
			y, err := kitchen.DequantizeInt8To(e.ctx, e.up(q8), e.up(sc), dtype.BFloat16, o...)
			return []*tensor.Tensor{y}, err
		}},
		{op.MMInt8.Name(), []*tensor.Tensor{zeros(dtype.Int32, 4, 5)}, func(o ...kitchen.Option) ([]*tensor.Tensor, error) {
			y, err := kitchen.MMInt8(e.ctx, e.up(q8), e.up(must(w.Reshape(32, 5))), o...)
			return []*tensor.Tensor{y}, err
		}},
		{op.Int8Linear.Name(), []*tensor.Tensor{zeros(dtype.BFloat16, 4, 5)}, func(o ...kitchen.Option) ([]*tensor.Tensor, error) {
			y, err := kitchen.Int8Linear(e.ctx, e.up(x), e.up(w), e.up(ws), o...)
			return []*tensor.Tensor{y}, err
		}},
	} {
		want, err := c.run(e.opts(kitchenEager())...)
		if err != nil {
			t.Fatal(err)
		}
		given := make([]*tensor.Tensor, len(c.outs))
		for i, o := range c.outs {
			given[i] = e.up(o)
		}
		var before int64
		if e.sim != "" {
			before = e.stats().D2DCopies
		}
		var ran string
		got, err := c.run(e.opts(kitchen.Into(given...), kitchen.ReportBackend(&ran))...)
		if err != nil || ran != ascend.Name {
			t.Fatalf("%s: ran %q, %v", c.name, ran, err)
		}
		if e.sim != "" {
			if n := e.stats().D2DCopies - before; n != 0 {
				t.Errorf("%s: %d device-to-device copies: the kernel did not write the caller's outputs", c.name, n)
			}
		}
		for i := range got {
			if got[i] != given[i] {
				t.Fatalf("%s: output %d is not the caller's tensor", c.name, i)
			}
			g, w := must(got[i].To(tensor.CPU())), must(want[i].To(tensor.CPU()))
			gb, wb := must(g.Bytes()), must(w.Bytes())
			if bytes.Equal(gb, wb) {
				continue
			}
			if msg := fusedBound(c.name, i, g.DType(), gb, wb); msg != "" {
				t.Errorf("%s: output %d: %s", c.name, i, msg)
			}
		}
	}
}

// TestCopyDevice copies between NPU tensors on the device (tensor.Copy
// uses the NPU's Copier): one aclrtMemcpy device to device, nothing
// through the host, the bytes equal; and refuses tensors of another size.
func TestCopyDevice(t *testing.T) {
	e := newEnv(t)
	src := e.up(ramp(dtype.Float16, 3, 8))
	dst := e.up(must(tensor.Zeros(dtype.Float16, 24)))
	var before [3]int64
	if e.sim != "" {
		st := e.stats()
		before = [3]int64{st.D2DCopies, st.H2DCopies, st.D2HCopies}
	}
	if err := tensor.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if e.sim != "" {
		st := e.stats()
		if d := [3]int64{st.D2DCopies, st.H2DCopies, st.D2HCopies}; d != [3]int64{before[0] + 1, before[1], before[2]} {
			t.Errorf("copies device to device, to the device, to the host: %v, want one, none, none", [3]int64{d[0] - before[0], d[1] - before[1], d[2] - before[2]})
		}
	}
	got := must(must(dst.To(tensor.CPU())).Bytes())
	if want := must(ramp(dtype.Float16, 3, 8).Bytes()); !bytes.Equal(got, want) {
		t.Errorf("copied %x, want %x", got, want)
	}
	small := e.up(must(tensor.Zeros(dtype.Float16, 4)))
	if err := e.dev.CopyDevice(small, src); !errors.Is(err, tensor.ErrShape) {
		t.Errorf("copy of 24 elements into 4: %v, want a shape error", err)
	}
}
