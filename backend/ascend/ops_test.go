package ascend_test

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/gokitchen/kitchen"
	"github.com/gokitchen/kitchen/backend"
	"github.com/gokitchen/kitchen/backend/ascend"
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/internal/ascendsim"
	"github.com/gokitchen/kitchen/internal/backendtest"
	"github.com/gokitchen/kitchen/op"
	"github.com/gokitchen/kitchen/tensor"
)

// call is one operation with its options, run on the host or the NPU.
type call struct {
	name string
	op   backend.Operation // one of op's four
	x    *tensor.Tensor    // x, or q for dequantize (on the host)
	s    *tensor.Tensor    // the dequantize scale, or a supplied scale tensor (on the host)
	out  dtype.DType
	opts []kitchen.Option
}

// run runs c through e's registry on the host (npu false) or with its
// tensors on the NPU, and returns the outputs on the host, the backend that
// ran it and the error.
func (e *env) run(c call, npu bool, more ...kitchen.Option) (outs []*tensor.Tensor, ran string, err error) {
	e.t.Helper()
	x, s := c.x, c.s
	if npu {
		x = e.up(x)
		if s != nil {
			s = e.up(s)
		}
	}
	opts := e.opts(append(append(slices.Clone(c.opts), more...), kitchen.ReportBackend(&ran))...)
	var a, b *tensor.Tensor
	switch c.op {
	case op.QuantizeRowwise:
		a, b, err = kitchen.QuantizeInt8Rowwise(e.ctx, x, opts...)
	case op.QuantizeTensorwise:
		if s != nil {
			opts = append(opts, kitchen.WithScaleTensor(s))
		}
		a, b, err = kitchen.QuantizeInt8Tensorwise(e.ctx, x, opts...)
	case op.Dequantize:
		a, err = kitchen.DequantizeInt8(e.ctx, x, s, opts...)
	default:
		a, err = kitchen.DequantizeInt8To(e.ctx, x, s, c.out, opts...)
	}
	if err != nil {
		if a != nil || b != nil {
			e.t.Errorf("%s: partial result with error %v", c.name, err)
		}
		return nil, ran, err
	}
	for _, o := range []*tensor.Tensor{a, b} {
		if o == nil {
			continue
		}
		if npu {
			if o.Device() != tensor.Device(e.dev) {
				e.t.Errorf("%s: output %v is not on the NPU", c.name, o)
			}
			o = e.down(o)
		}
		outs = append(outs, o)
	}
	return outs, ran, nil
}

func ramp(dt dtype.DType, shape ...int) *tensor.Tensor {
	v := make([]float32, tensor.Numel(shape))
	for i := range v {
		v[i] = float32(i%23)*0.37 - 4
	}
	return must(tensor.FromFloat32(dt, v, shape...))
}

// scales are dequantize scales, finite and > 0 as they must be.
func scales(dt dtype.DType, shape ...int) *tensor.Tensor {
	v := make([]float32, tensor.Numel(shape))
	for i := range v {
		v[i] = float32(i%23)*0.37 + 0.01
	}
	return must(tensor.FromFloat32(dt, v, shape...))
}

func TestAutomaticSelection(t *testing.T) {
	e := newEnv(t)
	q := must(tensor.FromInt8([]int8{1, -2, 3, -4, 5, -6}, 2, 3))
	for _, dt := range []dtype.DType{dtype.Float16, dtype.BFloat16} {
		x := ramp(dt, 4, 8)
		for _, c := range []call{
			{name: "rowwise", op: op.QuantizeRowwise, x: x},
			{name: "tensorwise", op: op.QuantizeTensorwise, x: x},
			{name: "dequantize", op: op.Dequantize, x: q, s: scales(dt, 2, 1)},
			{name: "dequantize to", op: op.DequantizeDType, x: q, s: scales(dtype.Float32, 1), out: dt},
		} {
			if _, ran, err := e.run(c, true); err != nil || ran != ascend.Name {
				t.Errorf("%v %s on npu: ran %q, %v; want ascend", dt, c.name, ran, err)
			}
			if _, ran, err := e.run(c, false); err != nil || ran != "cpu" {
				t.Errorf("%v %s on the host: ran %q, %v; want cpu", dt, c.name, ran, err)
			}
		}
	}
}

func TestExplicitBackend(t *testing.T) {
	e := newEnv(t)
	x := ramp(dtype.BFloat16, 3, 5)
	c := call{name: "rowwise", op: op.QuantizeRowwise, x: x}
	if _, ran, err := e.run(c, true, kitchen.UsingBackend(ascend.Name)); err != nil || ran != ascend.Name {
		t.Fatalf("ran %q, %v", ran, err)
	}
	if _, _, err := e.run(c, true, kitchen.UsingBackend("cpu")); err == nil {
		t.Error("cpu ran a tensor on the NPU")
	}
	_, _, err := e.run(c, false, kitchen.UsingBackend(ascend.Name))
	var nc *backend.NoCapableBackendError
	if !errors.As(err, &nc) || nc.Declines[0].Param != "device" {
		t.Errorf("ascend on a host tensor: %v, want a device decline", err)
	}
}

// The copies from the NPU to the host that a call makes: all the others
// stay on the device. The tests below count them (copies and bytes) in the
// simulator.
const (
	// findRead is eager's NaN check on the NPU, Device.Find: firstFalse's
	// int64 index.
	findRead = 8
	// rowwiseRead is ascend's row-wise NaN check: the smallest row scale,
	// a float32 (quantizeRowwise).
	rowwiseRead = 4
	// tensorwiseRead is ascend's tensor-wise NaN check: aclnnAll's bool
	// (firstBadRow).
	tensorwiseRead = 1
	// dequantizeRead is ascend's check that dequantize's scales are finite
	// and > 0: firstFalse's int64 index (dequantizeTo).
	dequantizeRead = 8
)

// scaleRead is the registry's check of a supplied scale tensor:
// op.TensorwiseArgs.Validate copies its one element to the host, in the
// tensor's own dtype (4 bytes for float32, 2 for float16 and bfloat16).
// Before the typed operations it ran Find on the device and read 8 bytes.
func scaleRead(s *tensor.Tensor) int64 { return int64(s.DType().Size()) }

// sum returns the number of reads and their bytes.
func sum(reads []int64) (n, bytes int64) {
	for _, r := range reads {
		bytes += r
	}
	return int64(len(reads)), bytes
}

// TestDeclinedRunsEagerOnNPU checks float32 input and stochastic rounding:
// ascend's constraints decline them, eager runs them on the NPU with no
// host-to-device copy and, device to host, only Find's index (and the
// registry's read of a supplied scale tensor), and the result is eager's
// on the host, bit for bit.
func TestDeclinedRunsEagerOnNPU(t *testing.T) {
	e := newEnv(t)
	bf16Scale := must(tensor.FromFloat32(dtype.BFloat16, []float32{0.03125}))
	f32Scale := must(tensor.FromFloat32(dtype.Float32, []float32{0.0371}, 1))
	for _, c := range []struct {
		call
		param string
		reads []int64 // the copies to the host, in bytes
	}{
		{call{name: "float32 rowwise", op: op.QuantizeRowwise, x: ramp(dtype.Float32, 5, 7)}, "x", []int64{findRead}},
		{call{name: "float32 tensorwise", op: op.QuantizeTensorwise, x: ramp(dtype.Float32, 5, 7)}, "x", []int64{findRead}},
		{call{name: "float32 tensorwise, bfloat16 scale tensor", op: op.QuantizeTensorwise, x: ramp(dtype.Float32, 5, 7),
			s: bf16Scale}, "x", []int64{scaleRead(bf16Scale), findRead}},
		{call{name: "float32 tensorwise, float32 scale tensor", op: op.QuantizeTensorwise, x: ramp(dtype.Float32, 5, 7),
			s: f32Scale}, "x", []int64{scaleRead(f32Scale), findRead}},
		{call{name: "stochastic bf16 rowwise", op: op.QuantizeRowwise, x: ramp(dtype.BFloat16, 4, 33),
			opts: []kitchen.Option{kitchen.WithStochasticRounding(1<<40 + 7)}}, "stochastic_rounding", []int64{findRead}},
		{call{name: "stochastic f16 tensorwise", op: op.QuantizeTensorwise, x: ramp(dtype.Float16, 2, 3, 9),
			opts: []kitchen.Option{kitchen.WithStochasticRounding(3), kitchen.WithScale(0.0625)}}, "stochastic_rounding", []int64{findRead}},
		{call{name: "stochastic f32 1-D", op: op.QuantizeRowwise, x: ramp(dtype.Float32, 40),
			opts: []kitchen.Option{kitchen.WithStochasticRounding(math.MaxInt64)}}, "x", []int64{findRead}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := e.run(c.call, true, kitchen.UsingBackend(ascend.Name))
			var nc *backend.NoCapableBackendError
			if !errors.As(err, &nc) || nc.Declines[0].Param != c.param {
				t.Fatalf("ascend: %v, want a decline on %s", err, c.param)
			}
			want, _, err := e.run(c.call, false, kitchen.UsingBackend("eager"))
			if err != nil {
				t.Fatal(err)
			}
			x := e.up(c.x)
			var s *tensor.Tensor
			if c.s != nil {
				s = e.up(c.s)
			}
			var before ascendsim.Stats
			if e.sim != "" {
				before = e.stats()
			}
			var ran string
			opts := e.opts(append(slices.Clone(c.opts), kitchen.ReportBackend(&ran))...)
			var q, scale *tensor.Tensor
			if c.op == op.QuantizeRowwise {
				q, scale, err = kitchen.QuantizeInt8Rowwise(e.ctx, x, opts...)
			} else {
				if s != nil {
					opts = append(opts, kitchen.WithScaleTensor(s))
				}
				q, scale, err = kitchen.QuantizeInt8Tensorwise(e.ctx, x, opts...)
			}
			if err != nil || ran != "eager" {
				t.Fatalf("ran %q: %v; want eager", ran, err)
			}
			if e.sim != "" {
				d := e.stats().Sub(before)
				n, b := sum(c.reads)
				if d.H2DCopies != 0 || d.D2HBytes != b || d.D2HCopies != n || d.D2DCopies != 0 {
					t.Errorf("during the operation: %d host-to-device copies, %d device-to-host copies of %d bytes, %d device-to-device; want 0, %d of %d %v, 0",
						d.H2DCopies, d.D2HCopies, d.D2HBytes, d.D2DCopies, n, b, c.reads)
				}
			}
			got := []*tensor.Tensor{e.down(q), e.down(scale)}
			for i := range got {
				if !bytes.Equal(must(got[i].Bytes()), must(want[i].Bytes())) {
					t.Errorf("output %d on the NPU differs from eager on the host:\n got %v\nwant %v", i, got[i], want[i])
				}
			}
		})
	}
}

// TestFusedTransfers counts the copies of the fused kernels: none host to
// device; device to host, one copy per quantize for the NaN check
// (rowwiseRead, tensorwiseRead), one per dequantize for the check of its
// scales (dequantizeRead) and, for a supplied scale tensor, the registry's
// check of it (scaleRead).
func TestFusedTransfers(t *testing.T) {
	e := newEnv(t)
	e.needSim()
	x := e.up(ramp(dtype.BFloat16, 6, 64))
	st := e.up(must(tensor.FromFloat32(dtype.Float32, []float32{0.04})))
	st16 := e.up(must(tensor.FromFloat32(dtype.Float16, []float32{0.04}, 1, 1)))
	q := e.up(must(tensor.FromInt8(make([]int8, 6*64), 6, 64)))
	rowScale := e.up(scales(dtype.Float32, 6, 1))
	tensorwise := func(opts ...kitchen.Option) func() ([]*tensor.Tensor, error) {
		return func() ([]*tensor.Tensor, error) {
			a, b, err := kitchen.QuantizeInt8Tensorwise(e.ctx, x, e.opts(opts...)...)
			return []*tensor.Tensor{a, b}, err
		}
	}
	for _, c := range []struct {
		name  string
		reads []int64 // the copies to the host, in bytes
		op    string
		f     func() ([]*tensor.Tensor, error)
	}{
		{"rowwise", []int64{rowwiseRead}, "aclnnDynamicQuantV2", func() ([]*tensor.Tensor, error) {
			a, b, err := kitchen.QuantizeInt8Rowwise(e.ctx, x, e.opts()...)
			return []*tensor.Tensor{a, b}, err
		}},
		{"tensorwise", []int64{tensorwiseRead}, "aclnnQuantize", tensorwise()},
		{"tensorwise, scale value", []int64{tensorwiseRead}, "aclnnQuantize", tensorwise(kitchen.WithScale(0.04))},
		{"tensorwise, float32 scale tensor", []int64{scaleRead(st), tensorwiseRead}, "aclnnQuantize",
			tensorwise(kitchen.WithScaleTensor(st))},
		{"tensorwise, float16 scale tensor", []int64{scaleRead(st16), tensorwiseRead}, "aclnnQuantize",
			tensorwise(kitchen.WithScaleTensor(st16))},
		{"dequantize", []int64{dequantizeRead}, "aclnnMul", func() ([]*tensor.Tensor, error) {
			a, err := kitchen.DequantizeInt8To(e.ctx, q, rowScale, dtype.BFloat16, e.opts()...)
			return []*tensor.Tensor{a}, err
		}},
	} {
		before, ops := e.stats(), ascendsim.OpCount(t, e.sim, c.op)
		outs, err := c.f()
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		d := e.stats().Sub(before)
		if n, b := sum(c.reads); d.H2DCopies != 0 || d.D2HBytes != b || d.D2HCopies != n || d.D2DCopies != 0 {
			t.Errorf("%s: copies host to device %d, device to host %d of %d bytes, device to device %d; want 0, %d of %d %v, 0",
				c.name, d.H2DCopies, d.D2HCopies, d.D2HBytes, d.D2DCopies, n, b, c.reads)
		}
		if n := ascendsim.OpCount(t, e.sim, c.op) - ops; n != 1 {
			t.Errorf("%s: %s ran %d times, want once", c.name, c.op, n)
		}
		t.Logf("%s: %d operators, %d synchronizations, %d bytes to the host", c.name, d.Launches, d.Syncs, d.D2HBytes)
		for _, o := range outs {
			o.Release()
		}
	}
}

// TestScaleTensorChecked checks the registry's check of a supplied scale
// tensor on the NPU (op.TensorwiseArgs.Validate): it copies the one element
// to the host (scaleRead) and refuses a scale that is not a finite number
// > 0 before any backend runs, so no operator is launched; a scale tensor
// of more than one element, or on another device than x, is refused
// without a copy.
func TestScaleTensorChecked(t *testing.T) {
	e := newEnv(t)
	x := e.up(ramp(dtype.BFloat16, 3, 4))
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	quantize := func(st *tensor.Tensor) error {
		q, s, err := kitchen.QuantizeInt8Tensorwise(e.ctx, x, e.opts(kitchen.WithScaleTensor(st))...)
		if err == nil {
			q.Release()
			s.Release()
		}
		return err
	}
	// counted runs f and checks the copies it made and that it launched
	// nothing and left nothing on the device.
	counted := func(what string, reads []int64, f func()) {
		t.Helper()
		if e.sim == "" {
			f()
			return
		}
		before := e.stats()
		f()
		d := e.stats().Sub(before)
		if n, b := sum(reads); d.H2DCopies != 0 || d.D2HCopies != n || d.D2HBytes != b || d.Launches != 0 || !d.SameLive(ascendsim.Stats{}) {
			t.Errorf("%s: %d copies to the device, %d to the host of %d bytes, %d operators, %s; want 0, %d of %d, 0 and nothing live",
				what, d.H2DCopies, d.D2HCopies, d.D2HBytes, d.Launches, d.Live(), n, b)
		}
	}
	for _, sdt := range dtype.Floats() {
		for _, v := range []float32{0, float32(math.Copysign(0, -1)), -0.5, nan, inf, -inf} {
			st := e.up(must(tensor.FromFloat32(sdt, []float32{v}, 1)))
			what := fmt.Sprintf("%v scale %g", sdt, v)
			counted(what, []int64{scaleRead(st)}, func() {
				var ae *backend.ArgError
				if err := quantize(st); !errors.As(err, &ae) || !errors.Is(err, backend.ErrScale) || ae.Param != "scale" {
					t.Errorf("%s: %v, want ErrScale", what, err)
				}
			})
		}
	}
	two := e.up(must(tensor.FromFloat32(dtype.Float32, []float32{0.1, 0.2})))
	counted("two-element scale", nil, func() {
		if err := quantize(two); !errors.Is(err, tensor.ErrShape) {
			t.Errorf("a two-element scale tensor: %v, want ErrShape", err)
		}
	})
	host := must(tensor.FromFloat32(dtype.Float32, []float32{0.1}))
	counted("host scale", nil, func() {
		if err := quantize(host); !errors.Is(err, backend.ErrDevice) {
			t.Errorf("a host scale tensor for an NPU x: %v, want ErrDevice", err)
		}
	})
}

// TestZeroRows quantizes all-zero rows, for which aclnnDynamicQuantV2
// computes 0 * (127 / 0), NaN, before converting to int8, which CANN does
// not define: the simulator converts NaN to 0 by default and, as a
// reviewer's experiment did, to -128 in the second run.
func TestZeroRows(t *testing.T) {
	e := newEnv(t)
	t.Run("NaN to 0", func(t *testing.T) { checkZeroRows(t, e) })
	t.Run("NaN to -128", func(t *testing.T) {
		e.needSim()
		t.Setenv(ascendsim.EnvNaNToInt, "-128")
		checkZeroRows(t, e)
	})
}

func checkZeroRows(t *testing.T, e *env) {
	for _, dt := range []dtype.DType{dtype.Float16, dtype.BFloat16} {
		x := must(tensor.FromFloat32(dt, []float32{0, 0, 0, 0, 1, -2, 3, -127, 0, 0, 0, 0}, 3, 4))
		outs, ran, err := e.run(call{name: "rowwise", op: op.QuantizeRowwise, x: x}, true)
		if err != nil || ran != ascend.Name {
			t.Fatalf("%v: ran %q, %v", dt, ran, err)
		}
		q, s := must(outs[0].Int8s()), must(outs[1].Float32s())
		if !slices.Equal(s, []float32{1e-30, 1, 1e-30}) || !slices.Equal(q, []int8{0, 0, 0, 0, 1, -2, 3, -127, 0, 0, 0, 0}) {
			t.Errorf("%v: q %v, scales %v", dt, q, s)
		}
		outs, _, err = e.run(call{name: "tensorwise", op: op.QuantizeTensorwise, x: must(tensor.Zeros(dt, 2, 5))}, true)
		if err != nil {
			t.Fatal(err)
		}
		if q, s := must(outs[0].Int8s()), must(outs[1].Float32s()); s[0] != 1e-30 || slices.ContainsFunc(q, func(v int8) bool { return v != 0 }) {
			t.Errorf("%v tensorwise of zeros: q %v, scale %v", dt, q, s)
		}
	}
}

// TestSuppliedAndRecalculatedScales runs tensor-wise quantization with
// every kind of scale, against eager on the host.
func TestSuppliedAndRecalculatedScales(t *testing.T) {
	e := newEnv(t)
	for _, dt := range []dtype.DType{dtype.Float16, dtype.BFloat16} {
		x := ramp(dt, 3, 2, 11)
		cases := []call{{name: "recalculated", op: op.QuantizeTensorwise, x: x}}
		// Scales whose float16 rounding is exact, inexact, subnormal, zero
		// (the contract then divides by 2^-14) and infinite.
		for _, v := range []float32{0.03125, 0.0371, 1e-3, 3e-6, 1e-9, 7e4, 1e30} {
			cases = append(cases, call{name: "value", op: op.QuantizeTensorwise, x: x,
				opts: []kitchen.Option{kitchen.WithScale(v)}})
		}
		for _, sdt := range dtype.Floats() {
			cases = append(cases, call{name: "tensor " + sdt.String(), op: op.QuantizeTensorwise, x: x,
				s: must(tensor.FromFloat32(sdt, []float32{0.0371}, 1, 1))})
		}
		for _, c := range cases {
			want, _, err := e.run(c, false, kitchen.UsingBackend("eager"))
			if err != nil {
				t.Fatal(err)
			}
			got, ran, err := e.run(c, true)
			if err != nil || ran != ascend.Name {
				t.Fatalf("%v %s: ran %q, %v", dt, c.name, ran, err)
			}
			checkFused(t, dt.String()+" "+c.name, op.QuantizeTensorwise, x, got, want)
		}
	}
}

// TestDequantize checks every output dtype, scale dtype and scale shape
// against eager on the host, bit for bit.
func TestDequantize(t *testing.T) {
	e := newEnv(t)
	rng := rand.New(rand.NewPCG(1, 2))
	qv := make([]int8, 4*3*5)
	for i := range qv {
		qv[i] = int8(rng.IntN(256) - 128)
	}
	q := must(tensor.FromInt8(qv, 4, 3, 5))
	for _, sdt := range dtype.Floats() {
		for _, shape := range [][]int{{}, {1}, {1, 1, 1}, {4, 3, 1}, {4, 3, 5}} {
			sv := make([]float32, tensor.Numel(shape))
			for i := range sv {
				sv[i] = float32(math.Ldexp(1+rng.Float64(), rng.IntN(28)-14)) // float16 normals
			}
			s := must(tensor.FromFloat32(sdt, sv, shape...))
			for _, out := range dtype.Floats() {
				for _, o := range []backend.Operation{op.Dequantize, op.DequantizeDType} {
					if o == op.Dequantize && out != dtype.Float32 {
						continue
					}
					c := call{name: o.Name(), op: o, x: q, s: s, out: out}
					want, _, err := e.run(c, false, kitchen.UsingBackend("eager"))
					if err != nil {
						t.Fatal(err)
					}
					got, ran, err := e.run(c, true)
					if err != nil || ran != ascend.Name {
						t.Fatalf("ran %q, %v", ran, err)
					}
					if got[0].DType() != out || !slices.Equal(got[0].Shape(), q.Shape()) ||
						!bytes.Equal(must(got[0].Bytes()), must(want[0].Bytes())) {
						t.Errorf("%s, scale %v%v, out %v: got %v, want eager's %v", o.Name(), sdt, shape, out, got[0], want[0])
					}
				}
			}
		}
	}
}

// TestNonFiniteNamesRow checks that every quantize path names the first
// row holding NaN or an infinity. CANN does not document how its minimum
// and maximum treat NaN, and the check must not depend on it: the second
// run makes the simulator's reductions and aclnnMaximum skip NaN.
func TestNonFiniteNamesRow(t *testing.T) {
	e := newEnv(t)
	t.Run("min and max propagate NaN", func(t *testing.T) { checkNonFiniteNamesRow(t, e) })
	t.Run("min and max skip NaN", func(t *testing.T) {
		e.needSim()
		t.Setenv(ascendsim.EnvMinMaxNaN, "ignore")
		checkNonFiniteNamesRow(t, e)
	})
}

func checkNonFiniteNamesRow(t *testing.T, e *env) {
	for _, dt := range dtype.Floats() {
		for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))} {
			v := make([]float32, 2*3*4)
			for i := range v {
				v[i] = float32(i%5) - 2 // zero and non-zero rows alike
			}
			v[1*12+2*4+1] = bad // row 5 of 6
			v[1*12+2*4+3] = 3
			x := must(tensor.FromFloat32(dt, v, 2, 3, 4))
			for _, c := range []call{
				{name: "rowwise", op: op.QuantizeRowwise, x: x},
				{name: "tensorwise", op: op.QuantizeTensorwise, x: x},
				{name: "tensorwise supplied", op: op.QuantizeTensorwise, x: x, opts: []kitchen.Option{kitchen.WithScale(1)}},
				{name: "stochastic", op: op.QuantizeRowwise, x: x, opts: []kitchen.Option{kitchen.WithStochasticRounding(2)}},
			} {
				_, ran, err := e.run(c, true)
				var ae *backend.ArgError
				if !errors.As(err, &ae) || !errors.Is(err, backend.ErrNonFinite) || ae.Row != 5 {
					t.Errorf("%v %v %s on %s: %v, want NaN or infinity in row 5", dt, bad, c.name, ran, err)
				}
			}
		}
	}
	// A NaN in the middle of a 1-D tensor, and rows of one element.
	for _, shape := range [][]int{{7}, {7, 1}} {
		v := []float32{1, 2, 3, 0, float32(math.NaN()), 5, 6}
		x := must(tensor.FromFloat32(dtype.BFloat16, v, shape...))
		want := 0
		if len(shape) == 2 {
			want = 4
		}
		for _, o := range []backend.Operation{op.QuantizeRowwise, op.QuantizeTensorwise} {
			_, ran, err := e.run(call{name: o.Name(), op: o, x: x}, true)
			var ae *backend.ArgError
			if !errors.As(err, &ae) || !errors.Is(err, backend.ErrNonFinite) || ae.Row != want {
				t.Errorf("%v %s on %s: %v, want NaN or infinity in row %d", shape, o.Name(), ran, err, want)
			}
		}
	}
}

// TestAbsMaxRowsNaN checks the primitive the eager backend finds NaN with:
// a row holding NaN gives NaN and one holding an infinity +Inf, whether the
// NPU's minimum and maximum propagate NaN or skip it; a row holding both is
// not finite either way.
func TestAbsMaxRowsNaN(t *testing.T) {
	e := newEnv(t)
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	v := []float32{
		1, -3, 2, 0, // 3
		0, nan, -5, 1, // NaN
		nan, nan, nan, nan, // NaN
		1, -inf, 2, 0, // +Inf
		nan, -7, inf, 0, // NaN or +Inf
		0, 0, 0, 0, // 0
	}
	check := func(t *testing.T) {
		for _, dt := range dtype.Floats() {
			x := e.up(must(tensor.FromFloat32(dt, v, 6, 4)))
			got := must(e.down(must(e.dev.AbsMaxRows(x, 4))).Float32s())
			ok := len(got) == 6 && got[0] == 3 && got[1] != got[1] && got[2] != got[2] && math.IsInf(float64(got[3]), 1) &&
				(got[4] != got[4] || math.IsInf(float64(got[4]), 1)) && got[5] == 0
			if !ok {
				t.Errorf("%v: AbsMaxRows = %v, want [3 NaN NaN +Inf NaN-or-+Inf 0]", dt, got)
			}
		}
	}
	t.Run("min and max propagate NaN", check)
	t.Run("min and max skip NaN", func(t *testing.T) {
		e.needSim()
		t.Setenv(ascendsim.EnvMinMaxNaN, "ignore")
		check(t)
	})
}

func TestCopies(t *testing.T) {
	e := newEnv(t)
	x := ramp(dtype.BFloat16, 7, 3)
	var before ascendsim.Stats
	if e.sim != "" {
		before = e.stats()
	}
	y := must(x.To(e.dev))
	if y.Device() != tensor.Device(e.dev) || y.String() != "bfloat16[7 3] on npu:0" {
		t.Errorf("uploaded %v", y)
	}
	if _, err := y.Bytes(); !errors.Is(err, tensor.ErrNotHost) {
		t.Errorf("Bytes of an NPU tensor: %v", err)
	}
	r := must(y.Reshape(21))
	z := must(r.To(tensor.CPU()))
	if !bytes.Equal(must(z.Bytes()), must(x.Bytes())) {
		t.Error("round trip changed the data")
	}
	if e.sim != "" {
		d := e.stats().Sub(before)
		if d.H2DCopies != 1 || d.H2DBytes != 42 || d.D2HCopies != 1 || d.D2HBytes != 42 || d.LiveAllocs != 1 {
			t.Errorf("stats %+v: want one copy each way of 42 bytes and one allocation", d)
		}
	}
	y.Release()
	r.Release() // shares y's memory: released once
	if _, err := r.To(tensor.CPU()); !errors.Is(err, tensor.ErrReleased) {
		t.Errorf("copy of a released tensor: %v, want tensor.ErrReleased", err)
	}
	if e.sim != "" && !e.stats().SameLive(before) {
		t.Errorf("after release: %s", e.stats().Sub(before).Live())
	}
	if _, err := e.dev.Alloc(dtype.Float32, []int{-1}); err == nil {
		t.Error("negative shape allocated")
	}
	empty := must(e.dev.Alloc(dtype.Float16, []int{0, 4}))
	if b := must(empty.To(tensor.CPU())); b.Numel() != 0 {
		t.Error("empty tensor has elements")
	}
	empty.Release()
}

// TestGarbageCollectedTensorsAreFreed drops NPU tensors without releasing
// them and waits for the collector to free their memory.
func TestGarbageCollectedTensorsAreFreed(t *testing.T) {
	e := newEnv(t)
	e.needSim()
	before := e.settle()
	for range 3 {
		must(e.dev.Alloc(dtype.Float32, []int{256}))
	}
	if n := e.stats().Sub(before).LiveAllocs; n != 3 {
		t.Fatalf("%d live allocations, want 3", n)
	}
	if after := e.settle(); !after.SameLive(before) {
		t.Fatalf("still live after GC: %s", after.Sub(before).Live())
	}
}

// TestNoLeaks runs every operation, fused and eager, and checks that once
// the results are released nothing is left on the device.
func TestNoLeaks(t *testing.T) {
	e := newEnv(t)
	e.needSim()
	before := e.settle()
	func() {
		x := e.up(ramp(dtype.BFloat16, 5, 9))
		x32 := e.up(ramp(dtype.Float32, 5, 9))
		st := e.up(must(tensor.FromFloat32(dtype.Float16, []float32{0.05})))
		var outs []*tensor.Tensor
		keep := func(ts ...*tensor.Tensor) { outs = append(outs, ts...) }
		for _, xx := range []*tensor.Tensor{x, x32} {
			q, s, err := kitchen.QuantizeInt8Rowwise(e.ctx, xx, e.opts()...)
			if err != nil {
				t.Fatal(err)
			}
			keep(q, s)
			w, err := kitchen.DequantizeInt8To(e.ctx, q, s, dtype.BFloat16, e.opts()...)
			if err != nil {
				t.Fatal(err)
			}
			keep(w)
			for _, o := range [][]kitchen.Option{nil, {kitchen.WithScale(0.1)}, {kitchen.WithScaleTensor(st)}, {kitchen.WithStochasticRounding(5)}} {
				q, s, err := kitchen.QuantizeInt8Tensorwise(e.ctx, xx, e.opts(o...)...)
				if err != nil {
					t.Fatal(err)
				}
				keep(q, s)
			}
		}
		w := e.up(must(tensor.FromInt8(make([]int8, 4*9), 4, 9)))
		for _, ws := range []*tensor.Tensor{e.up(scales(dtype.Float32, 1)), e.up(scales(dtype.BFloat16, 4, 1))} {
			for _, out := range dtype.Floats() {
				for _, bias := range []*tensor.Tensor{nil, e.up(scales(dtype.Float16, 4))} {
					opts := []kitchen.Option{kitchen.WithOutDType(out)}
					if bias != nil {
						opts = append(opts, kitchen.WithBias(bias))
					}
					y, err := kitchen.Int8Linear(e.ctx, x, w, ws, e.opts(opts...)...)
					if err != nil {
						t.Fatal(err)
					}
					keep(y)
					if bias != nil {
						bias.Release()
					}
				}
			}
			ws.Release()
		}
		w.Release()
		for _, o := range outs {
			o.Release()
		}
		x.Release()
		x32.Release()
		st.Release()
	}()
	// Every backend, eager included, releases its intermediate tensors
	// itself: no garbage collection is needed before comparing.
	if after := e.stats(); !after.SameLive(before) {
		t.Errorf("left on the device: %s", after.Sub(before).Live())
	}
}

// TestErrorPropagation makes one CANN call at a time fail and checks that
// the operation returns an *ascend.Error with the call, the code and the
// runtime's message, and leaves nothing on the device.
func TestErrorPropagation(t *testing.T) {
	e := newEnv(t)
	e.needSim()
	e.settle() // what earlier tests dropped is freed now, not during the checks below
	x := e.up(ramp(dtype.BFloat16, 4, 6))
	x32 := e.up(ramp(dtype.Float32, 4, 6))
	q := e.up(must(tensor.FromInt8(make([]int8, 24), 4, 6)))
	s := e.up(scales(dtype.Float16, 4, 1))
	st := e.up(must(tensor.FromFloat32(dtype.BFloat16, []float32{0.05})))
	w := e.up(must(tensor.FromInt8([]int8{1, -2, 3, -128, 5, 127, -7, 8, 9, -10, 11, 12, 13, 14, 15, 16, 17, 18}, 3, 6)))
	ws1 := e.up(must(tensor.FromFloat32(dtype.Float32, []float32{0.25})))
	wsn := e.up(scales(dtype.BFloat16, 3))
	// Rows of 8 for the rotations in groups of 4.
	idx := e.up(backendtest.IndexTensor(dtype.Int64, []int64{3, 0, 3}, 3))
	q8 := e.up(must(tensor.FromInt8([]int8{1, -2, 3, -128, 5, 127, -7, 8, 9, -10, 11, 12, 13, 14, 15, 16, 17, 18, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13}, 4, 8)))
	x8 := e.up(ramp(dtype.BFloat16, 2, 8))
	bias := e.up(scales(dtype.Float16, 3))
	var release func(ts ...*tensor.Tensor)
	linear := func(ws, bias *tensor.Tensor, out dtype.DType) func() error {
		return func() error {
			opts := []kitchen.Option{kitchen.WithOutDType(out)}
			if bias != nil {
				opts = append(opts, kitchen.WithBias(bias))
			}
			y, err := kitchen.Int8Linear(e.ctx, x, w, ws, e.opts(opts...)...)
			release(y)
			return err
		}
	}
	release = func(ts ...*tensor.Tensor) {
		for _, o := range ts {
			o.Release()
		}
	}
	type operation struct {
		run func() error
	}
	ops := map[string]operation{
		"rowwise": {func() error {
			q, s, err := kitchen.QuantizeInt8Rowwise(e.ctx, x, e.opts()...)
			release(q, s)
			return err
		}},
		"tensorwise": {func() error {
			q, s, err := kitchen.QuantizeInt8Tensorwise(e.ctx, x, e.opts()...)
			release(q, s)
			return err
		}},
		"tensorwise, scale tensor": {func() error {
			q, s, err := kitchen.QuantizeInt8Tensorwise(e.ctx, x, e.opts(kitchen.WithScaleTensor(st))...)
			release(q, s)
			return err
		}},
		"eager stochastic": {func() error {
			q, s, err := kitchen.QuantizeInt8Rowwise(e.ctx, x32, e.opts(kitchen.WithStochasticRounding(9))...)
			release(q, s)
			return err
		}},
		"dequantize": {func() error {
			w, err := kitchen.DequantizeInt8To(e.ctx, q, s, dtype.BFloat16, e.opts()...)
			release(w)
			return err
		}},
		"mm_int8": {func() error {
			y, err := kitchen.MMInt8(e.ctx, q, must(w.Reshape(6, 3)), e.opts()...)
			release(y)
			return err
		}},
		// Eager on the NPU, with its rotation, gather and linear primitives.
		"embedding": {func() error {
			y, err := kitchen.DequantizeInt8Embedding(e.ctx, q8, s, idx, dtype.BFloat16, e.opts(kitchen.WithConvRotGroup(4))...)
			release(y)
			return err
		}},
		"linear, gelu_tanh, ConvRot": {func() error {
			y, err := kitchen.Int8Linear(e.ctx, x8, q8, ws1, e.opts(kitchen.WithInputAct("gelu_tanh"), kitchen.WithConvRot(4))...)
			release(y)
			return err
		}},
		// The three routes of the fused int8_linear.
		"linear, one weight scale, bias": {linear(ws1, bias, dtype.BFloat16)},
		"linear, per channel":            {linear(wsn, nil, dtype.Float16)},
		"linear, per channel, bias":      {linear(wsn, bias, dtype.BFloat16)},
	}
	// baseline and check bracket one operation, eager's included: every
	// backend releases what it made before it returns, so no garbage
	// collection comes between them.
	baseline := func(o operation) ascendsim.Stats { return e.stats() }
	check := func(o operation, before ascendsim.Stats, what string) {
		t.Helper()
		if after := e.stats(); !after.SameLive(before) {
			t.Errorf("%s: left on the device: %s", what, after.Sub(before).Live())
		}
	}
	for _, c := range []struct {
		op, call string
		code     int32
	}{
		{"rowwise", "aclnnDynamicQuantV2GetWorkspaceSize", 161002},
		{"rowwise", "aclnnDynamicQuantV2", 561103},
		{"rowwise", "aclnnAminmaxDimGetWorkspaceSize", 161002},
		{"rowwise", "aclnnAmin", 361001},
		{"rowwise", "aclnnIsFinite", 361001},
		{"rowwise", "aclnnAllGetWorkspaceSize", 161002},
		{"rowwise", "aclnnLogicalNot", 561103},
		{"rowwise", "aclnnInplaceMaskedFillScalar", 361001},
		{"rowwise", "aclrtMemcpy", 507899},
		{"rowwise", "aclrtSynchronizeStream", 507035},
		{"rowwise", "aclrtMalloc", 207001},
		{"rowwise", "aclCreateTensor", 0},
		{"rowwise", "aclCreateScalar", 0},
		{"rowwise", "aclCreateIntArray", 0},
		{"tensorwise", "aclnnQuantizeGetWorkspaceSize", 161002},
		{"tensorwise", "aclnnQuantize", 561103},
		{"tensorwise", "aclnnInplaceMaskedFillScalar", 361001},
		{"tensorwise", "aclnnAll", 361001},
		{"tensorwise", "aclrtMemcpy", 507899},
		// The first copy is op.TensorwiseArgs.Validate's read of the scale.
		{"tensorwise, scale tensor", "aclrtMemcpy", 507899},
		{"tensorwise, scale tensor", "aclnnCastGetWorkspaceSize", 161002},
		{"eager stochastic", "aclnnPowScalarTensorGetWorkspaceSize", 161002},
		{"eager stochastic", "aclnnInplaceBitwiseXorTensor", 361001},
		{"eager stochastic", "aclnnFloor", 361001},
		{"dequantize", "aclnnIsFinite", 361001},
		{"dequantize", "aclnnGtScalar", 361001},
		{"dequantize", "aclrtMemcpy", 507899}, // the scale check's index
		{"dequantize", "aclnnMulGetWorkspaceSize", 161002},
		{"dequantize", "aclnnCast", 561103},
		{"dequantize", "aclrtSynchronizeStream", 507035},
		{"mm_int8", "aclnnQuantMatmulV4GetWorkspaceSize", 161002},
		{"mm_int8", "aclnnQuantMatmulV4", 561103},
		{"mm_int8", "aclrtSynchronizeStream", 507035},
		// The first copy is op.LinearArgs.Validate's read of the weight scales.
		{"linear, one weight scale, bias", "aclrtMemcpy", 507899},
		{"linear, one weight scale, bias", "aclnnQuantMatmulV4GetWorkspaceSize", 161002},
		{"linear, one weight scale, bias", "aclnnQuantMatmulV4", 561103},
		{"linear, one weight scale, bias", "aclnnAdd", 361001},
		{"linear, one weight scale, bias", "aclnnQuantize", 361001},
		{"linear, per channel", "aclnnQuantMatmulV4", 361001},
		{"linear, per channel", "aclnnDivGetWorkspaceSize", 161002},
		{"linear, per channel", "aclnnAll", 361001},
		{"linear, per channel", "aclrtSynchronizeStream", 507035},
		{"linear, per channel, bias", "aclnnQuantMatmulV4GetWorkspaceSize", 161002},
		{"linear, per channel, bias", "aclnnMul", 361001},
		{"linear, per channel, bias", "aclnnCastGetWorkspaceSize", 161002},
		{"embedding", "aclnnIndexSelectGetWorkspaceSize", 161002},
		{"embedding", "aclnnIndexSelect", 561103},
		{"embedding", "aclnnGtScalar", 361001},
		{"embedding", "aclnnAdd", 361001},
		{"linear, gelu_tanh, ConvRot", "aclnnExpGetWorkspaceSize", 161002},
		{"linear, gelu_tanh, ConvRot", "aclnnExp", 361001},
		{"linear, gelu_tanh, ConvRot", "aclnnAdd", 561103},
	} {
		msg := "sim: " + c.call + " broke for the test"
		t.Run(c.op+"/"+c.call, func(t *testing.T) {
			o := ops[c.op]
			before := baseline(o)
			t.Setenv(ascendsim.EnvFail, c.call+":"+itoa(c.code)+":"+msg)
			err := o.run()
			t.Setenv(ascendsim.EnvFail, "")
			var ae *ascend.Error
			if !errors.As(err, &ae) || ae.Call != c.call || ae.Code != c.code || ae.Message != msg {
				t.Fatalf("got %v, want %s failing with %d: %q", err, c.call, c.code, msg)
			}
			contains(t, "error", err.Error(), c.call, msg)
			check(o, before, c.call+" failing")
		})
	}
	// Every allocation of each operation in turn fails: the operation
	// reports aclrtMalloc and releases what it had made (executors whose
	// workspace could not be allocated included).
	for name, o := range ops {
		for n := 1; ; n++ {
			before := baseline(o)
			t.Setenv(ascendsim.EnvFailAlloc, itoa(int32(n)))
			err := o.run()
			t.Setenv(ascendsim.EnvFailAlloc, "")
			check(o, before, name+", allocation "+itoa(int32(n))+" failing")
			var ae *ascend.Error
			if err == nil {
				t.Logf("%s: %d allocations", name, n-1)
				break
			}
			if !errors.As(err, &ae) || ae.Call != "aclrtMalloc" || ae.Code != 207001 || !strings.Contains(ae.Message, "out of device memory") {
				t.Fatalf("%s, allocation %d failing: %v", name, n, err)
			}
		}
	}
}

// TestConcurrentCalls runs operations from several goroutines (and so OS
// threads, each of which must make the device's context current).
func TestConcurrentCalls(t *testing.T) {
	e := newEnv(t)
	x := ramp(dtype.BFloat16, 8, 16)
	want, _, err := e.run(call{name: "rowwise", op: op.QuantizeRowwise, x: x}, false, kitchen.UsingBackend("eager"))
	if err != nil {
		t.Fatal(err)
	}
	xd := e.up(x)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 5 {
				q, s, err := kitchen.QuantizeInt8Rowwise(e.ctx, xd, e.opts()...)
				if err != nil {
					t.Error(err)
					return
				}
				if sb := must(must(s.To(tensor.CPU())).Bytes()); !bytes.Equal(sb, must(want[1].Bytes())) {
					t.Error("scales differ")
				}
				q.Release()
				s.Release()
			}
		})
	}
	wg.Wait()
}

func TestClosedRuntime(t *testing.T) {
	opts, _ := options(t)
	rt, err := ascend.Load(opts)
	if err != nil {
		t.Fatal(err)
	}
	x := must(ramp(dtype.BFloat16, 2, 2).To(rt.Device()))
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Device().AbsMaxRows(x, 2); !errors.Is(err, ascend.ErrClosed) {
		t.Errorf("after Close: %v", err)
	}
	x.Release() // still allowed
	if err := rt.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}

	// A runtime whose NPU was never opened closes without touching it.
	rt, err = ascend.Load(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}
	if err := rt.Device().Open(); !errors.Is(err, ascend.ErrClosed) {
		t.Errorf("Open after Close: %v", err)
	}
}

// TestCloseFails makes Close fail: the device stays open and usable, and a
// later Close succeeds.
func TestCloseFails(t *testing.T) {
	opts, _ := simOptions(t)
	rt, err := ascend.Load(opts)
	if err != nil {
		t.Fatal(err)
	}
	x := must(ramp(dtype.BFloat16, 2, 2).To(rt.Device()))
	for _, call := range []string{"aclrtSynchronizeStream", "aclrtDestroyStream"} {
		t.Setenv(ascendsim.EnvFail, call+":507899:sim: "+call+" broke")
		err := rt.Close()
		t.Setenv(ascendsim.EnvFail, "")
		var ae *ascend.Error
		if !errors.As(err, &ae) || ae.Call != call {
			t.Fatalf("Close with %s failing: %v", call, err)
		}
		if _, err := rt.Device().AbsMaxRows(x, 2); err != nil {
			t.Errorf("after Close failed in %s: %v", call, err)
		}
	}
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}
	x.Release()
}
