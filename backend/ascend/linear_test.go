package ascend_test

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/gokitchen/kitchen"
	"github.com/gokitchen/kitchen/backend"
	"github.com/gokitchen/kitchen/backend/ascend"
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/internal/ascendsim"
	"github.com/gokitchen/kitchen/op"
	"github.com/gokitchen/kitchen/tensor"
)

// The fused int8_linear against the contract (linear.go in the package
// states the arithmetic). x's quantization is the contract's and the int8
// product exact, so the output is eager's, bit for bit, except for a
// float16 or bfloat16 output with one weight scale per channel and no bias:
// the operator multiplies by the channel's scale and the row's scale one
// after the other, and the output is then within one ulp of eager's
// (withinOneULP).

// layer is one int8_linear call, its tensors on the host.
type layer struct {
	x, w, ws, bias *tensor.Tensor
	out            dtype.DType
	group          int
	act            string
}

func (l layer) String() string {
	return fmt.Sprintf("%v by %v, scale %v, bias %v, to %v", l.x, l.w, l.ws, l.bias, l.out)
}

// exact reports whether ascend must give eager's bytes for l.
func (l layer) exact() bool {
	return l.out == dtype.Float32 || l.ws.Numel() == 1 || l.bias != nil
}

// options returns l's options of Int8Linear, with its tensors on the NPU
// if npu is set.
func (e *env) linearOpts(l layer, bias *tensor.Tensor, more ...kitchen.Option) []kitchen.Option {
	o := []kitchen.Option{kitchen.WithOutDType(l.out)}
	if bias != nil {
		o = append(o, kitchen.WithBias(bias))
	}
	if l.group > 0 {
		o = append(o, kitchen.WithConvRot(l.group))
	}
	if l.act != "" {
		o = append(o, kitchen.WithInputAct(l.act))
	}
	return e.opts(append(o, more...)...)
}

// linear runs l on the host (npu false) or with its tensors on the NPU and
// returns the output on the host and the backend that ran it.
func (e *env) linear(l layer, npu bool, more ...kitchen.Option) (*tensor.Tensor, string, error) {
	e.t.Helper()
	x, w, ws, bias := l.x, l.w, l.ws, l.bias
	if npu {
		x, w, ws = e.up(x), e.up(w), e.up(ws)
		if bias != nil {
			bias = e.up(bias)
		}
	}
	var ran string
	y, err := kitchen.Int8Linear(e.ctx, x, w, ws, e.linearOpts(l, bias, append(more, kitchen.ReportBackend(&ran))...)...)
	if err != nil {
		return nil, ran, err
	}
	if npu {
		if y.Device() != tensor.Device(e.dev) {
			e.t.Errorf("%v: output %v is not on the NPU", l, y)
		}
		y = e.down(y)
	}
	return y, ran, nil
}

// randomLayer draws a layer: x of dt with n rows of k, every int8 weight
// (-128 included), the weight scale in one of its four forms and three
// dtypes, an optional bias, the output dtype out. Rows are scaled by
// powers of two and some hold exact ties or a single large value.
func randomLayer(rng *rand.Rand, dt dtype.DType, shape []int, n int, out dtype.DType, bias bool) layer {
	k := shape[len(shape)-1]
	xv := make([]float32, tensor.Numel(shape))
	for r := 0; r < len(xv)/k; r++ {
		unit := float32(math.Ldexp(1, rng.IntN(16)-8))
		row := xv[r*k : (r+1)*k]
		for i := range row {
			row[i] = float32(rng.NormFloat64()) * unit
		}
		switch rng.IntN(4) {
		case 0: // ties: integers and halves of a power-of-two scale
			for i := range row {
				row[i] = float32(rng.IntN(255)-127) / 2 * unit
			}
		case 1: // one outlier
			row[rng.IntN(k)] = 40 * unit
		}
	}
	wv := make([]int8, n*k)
	for i := range wv {
		wv[i] = int8(rng.IntN(256) - 128)
	}
	sshape := [][]int{{}, {1}, {n}, {n, 1}}[rng.IntN(4)]
	sv := make([]float32, tensor.Numel(sshape))
	for i := range sv {
		sv[i] = float32(math.Ldexp(1+rng.Float64(), -rng.IntN(14)))
	}
	l := layer{
		x:   must(tensor.FromFloat32(dt, xv, shape...)),
		w:   must(tensor.FromInt8(wv, n, k)),
		ws:  must(tensor.FromFloat32(dtype.Floats()[rng.IntN(3)], sv, sshape...)),
		out: out,
	}
	if bias {
		bv := make([]float32, n)
		for i := range bv {
			bv[i] = float32(rng.NormFloat64() * 4)
		}
		l.bias = must(tensor.FromFloat32(dtype.Floats()[rng.IntN(3)], bv, n))
	}
	return l
}

// TestFusedLinearAgainstEager runs random layers of every input dtype,
// output dtype, scale form and bias on the NPU and compares them with eager
// on the host: bytes where the fused path is exact, withinOneULP where it
// is not. It counts the elements of the inexact case that differ, which
// the simulator (multiplying in the operator's order) must produce.
func TestFusedLinearAgainstEager(t *testing.T) {
	e := newEnv(t)
	rng := rand.New(rand.NewPCG(3, 5))
	shapes := [][]int{{7}, {1, 256}, {3, 33}, {2, 5, 64}, {17, 300}}
	var inexact, differ, total int
	for _, dt := range dtype.Floats() {
		for _, out := range dtype.Floats() {
			for i := range 24 {
				l := randomLayer(rng, dt, shapes[i%len(shapes)], 1+rng.IntN(40), out, i%3 == 0)
				want, _, err := e.linear(l, false, kitchen.UsingBackend("eager"))
				if err != nil {
					t.Fatal(err)
				}
				got, ran, err := e.linear(l, true)
				if err != nil || ran != ascend.Name {
					t.Fatalf("%v: ran %q, %v", l, ran, err)
				}
				if got.DType() != out || !slices.Equal(got.Shape(), want.Shape()) {
					t.Fatalf("%v: got %v, want %v", l, got, want)
				}
				gb, wb := must(got.Bytes()), must(want.Bytes())
				if l.exact() {
					if !bytes.Equal(gb, wb) {
						t.Errorf("%v: differs from eager:\n got %v\nwant %v", l, must(got.Float32s()), must(want.Float32s()))
					}
					continue
				}
				if msg := withinOneULP(gb, wb); msg != "" {
					t.Errorf("%v: %s", l, msg)
				}
				inexact++
				total += got.Numel()
				for j := 0; j < len(gb); j += 2 {
					if gb[j] != wb[j] || gb[j+1] != wb[j+1] {
						differ++
					}
				}
			}
		}
	}
	t.Logf("one weight scale per channel, no bias, 16-bit out: %d layers, %d of %d elements one ulp from eager's", inexact, differ, total)
}

// TestFusedLinearProductOrder runs a layer where the operator's order of
// products, f32(f32(f32(acc) * ws[n]) * xs[m]), rounds to another float16
// than the contract's f32(f32(acc) * f32(xs * ws[n])): found by search on
// the host, one row of one element (x float32, so that q and xs follow
// from x directly). The simulator, which multiplies in the operator's
// order, must give that other value, one ulp from eager's; with a bias the
// same layer must be exact.
func TestFusedLinearProductOrder(t *testing.T) {
	e := newEnv(t)
	rng := rand.New(rand.NewPCG(11, 13))
	for range 1 << 20 {
		v := float32(math.Ldexp(1+rng.Float64(), rng.IntN(20)-10))
		wv := int8(rng.IntN(256) - 128)
		ws := float32(math.Ldexp(1+rng.Float64(), -rng.IntN(10)))
		xs := max(v/127, 1e-30)
		q := float32(math.RoundToEven(float64(min(v/xs, 127))))
		acc := q * float32(wv)
		contract := dtype.Float16.Round(acc * (xs * ws))
		kernel := dtype.Float16.Round((acc * ws) * xs)
		if contract == kernel || math.IsInf(float64(contract), 0) {
			continue
		}
		l := layer{
			x:   must(tensor.FromFloat32(dtype.Float32, []float32{v}, 1, 1)),
			w:   must(tensor.FromInt8([]int8{wv, wv}, 2, 1)),
			ws:  must(tensor.FromFloat32(dtype.Float32, []float32{ws, ws}, 2)),
			out: dtype.Float16,
		}
		want, _, err := e.linear(l, false, kitchen.UsingBackend("eager"))
		if err != nil {
			t.Fatal(err)
		}
		if w := must(want.Float32s()); w[0] != contract {
			t.Fatalf("x %g, w %d, ws %g: eager gives %g, the search's contract %g", v, wv, ws, w[0], contract)
		}
		got, _, err := e.linear(l, true, kitchen.UsingBackend(ascend.Name))
		if err != nil {
			t.Fatal(err)
		}
		if msg := withinOneULP(must(got.Bytes()), must(want.Bytes())); msg != "" {
			t.Errorf("x %g, w %d, ws %g: %s", v, wv, ws, msg)
		}
		if g := must(got.Float32s()); e.sim != "" && g[0] != kernel {
			t.Errorf("x %g, w %d, ws %g: the simulator gives %g, want the operator's order's %g", v, wv, ws, g[0], kernel)
		}
		t.Logf("x %g, w %d, ws %g: contract %g, operator's order %g", v, wv, ws, contract, kernel)
		l.bias = must(tensor.FromFloat32(dtype.Float16, []float32{0.5, -0.25}, 2))
		want, _, err = e.linear(l, false, kitchen.UsingBackend("eager"))
		if err != nil {
			t.Fatal(err)
		}
		got, _, err = e.linear(l, true, kitchen.UsingBackend(ascend.Name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(must(got.Bytes()), must(want.Bytes())) {
			t.Errorf("with a bias: got %v, want %v", must(got.Float32s()), must(want.Float32s()))
		}
		return
	}
	t.Fatal("the search found no layer whose two orders of products round apart")
}

// TestFusedLinearLargeSums checks the epilogue where float32(acc) rounds
// (|acc| above 2^24: K = 4096 products of up to 128 * 127) and outputs
// that overflow float16: exact for one weight scale and with a bias,
// within one ulp otherwise (the infinity is the neighbour of 65504).
func TestFusedLinearLargeSums(t *testing.T) {
	e := newEnv(t)
	const m, n, k = 3, 6, 4096
	xv := make([]float32, m*k)
	for i := range xv {
		xv[i] = float32(127 - i%5) // row abs-max 127: q = x
	}
	xv[k+7] = -127.5 // a tie: q = -128 after the division by t = 1
	wv := make([]int8, n*k)
	for i := range wv {
		wv[i] = int8(127 - 2*(i%3)) // sums of about 4096 * 127 * 125, beyond 2^24
		if i/k == 2 {
			wv[i] = -128
		}
	}
	x := must(tensor.FromFloat32(dtype.BFloat16, xv, m, k))
	w := must(tensor.FromInt8(wv, n, k))
	for _, ws := range []*tensor.Tensor{
		must(tensor.FromFloat32(dtype.Float32, []float32{1.0 / 3})),
		must(tensor.FromFloat32(dtype.Float32, []float32{3e-5, 1.0 / 3, 7e-3, 1, 1.0 / 7, 0.011}, n)),
	} {
		for _, out := range dtype.Floats() {
			for _, bias := range []*tensor.Tensor{nil, must(tensor.FromFloat32(dtype.BFloat16, []float32{1, -2, 3, -4, 5, -6e6}, n))} {
				l := layer{x: x, w: w, ws: ws, bias: bias, out: out}
				want, _, err := e.linear(l, false, kitchen.UsingBackend("eager"))
				if err != nil {
					t.Fatal(err)
				}
				got, _, err := e.linear(l, true, kitchen.UsingBackend(ascend.Name))
				if err != nil {
					t.Fatal(err)
				}
				gb, wb := must(got.Bytes()), must(want.Bytes())
				if l.exact() && !bytes.Equal(gb, wb) {
					t.Errorf("%v: got %v, want %v", l, must(got.Float32s()), must(want.Float32s()))
				} else if msg := withinOneULP(gb, wb); !l.exact() && msg != "" {
					t.Errorf("%v: %s", l, msg)
				}
			}
		}
	}
}

// TestLinearConstraints checks what the fused int8_linear declines, with
// the parameter and the reason, and that the registry then runs the call
// with eager on the NPU, bit for bit eager's on the host; and that float32
// input and output, which it computes exactly, are accepted.
func TestLinearConstraints(t *testing.T) {
	e := newEnv(t)
	rng := rand.New(rand.NewPCG(9, 9))
	base := randomLayer(rng, dtype.BFloat16, []int{4, 64}, 8, dtype.BFloat16, true)
	swiglu := base
	swiglu.x = must(tensor.FromFloat32(dtype.BFloat16, must(ramp(dtype.Float32, 4, 128).Float32s()), 4, 128))
	wide := base
	wide.x = must(tensor.Zeros(dtype.BFloat16, 1, 65536))
	wide.w = must(tensor.Zeros(dtype.Int8, 2, 65536))
	wide.ws, wide.bias = must(tensor.FromFloat32(dtype.Float32, []float32{0.5})), nil
	for _, c := range []struct {
		name   string
		l      layer
		param  string
		reason string
	}{
		{"gelu_tanh", with(base, func(l *layer) { l.act = op.ActGeluTanh }), "input_act", "no input activation"},
		{"swiglu", with(swiglu, func(l *layer) { l.act = op.ActSwiGLU }), "input_act", "no input activation"},
		{"ConvRot", with(base, func(l *layer) { l.group = 16 }), "convrot", "no ConvRot rotation"},
		{"K = 65,536", wide, "weight", "K (dim 1) <= 65535"},
	} {
		_, _, err := e.linear(c.l, true, kitchen.UsingBackend(ascend.Name))
		var nc *backend.NoCapableBackendError
		if !errors.As(err, &nc) || len(nc.Declines) != 1 || nc.Declines[0].Param != c.param || !strings.Contains(nc.Declines[0].Reason, c.reason) {
			t.Errorf("%s: %v, want a decline on %s: %s", c.name, err, c.param, c.reason)
		}
		got, ran, err := e.linear(c.l, true)
		if err != nil || ran != "eager" {
			t.Errorf("%s, the registry choosing: ran %q, %v; want eager on the NPU", c.name, ran, err)
			continue
		}
		want, _, err := e.linear(c.l, false, kitchenEager())
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(must(got.Bytes()), must(want.Bytes())) {
			t.Errorf("%s: eager on the NPU differs from eager on the host", c.name)
		}
	}
	for _, c := range []struct {
		name string
		l    layer
	}{
		{"float32 x", randomLayer(rng, dtype.Float32, []int{3, 40}, 5, dtype.BFloat16, false)},
		{"float32 out", randomLayer(rng, dtype.Float16, []int{3, 40}, 5, dtype.Float32, false)},
		{"K = 65,535", with(wide, func(l *layer) {
			l.x, l.w = must(tensor.Zeros(dtype.BFloat16, 1, 65535)), must(tensor.Zeros(dtype.Int8, 2, 65535))
		})},
	} {
		if _, ran, err := e.linear(c.l, true); err != nil || ran != ascend.Name {
			t.Errorf("%s: ran %q, %v; want ascend", c.name, ran, err)
		}
	}
}

func with(l layer, f func(*layer)) layer {
	f(&l)
	return l
}

// weightScaleRead is the registry's check of int8_linear's weight scales
// (op.LinearArgs.Validate), which copies them to the host: all of them, in
// their dtype.
func weightScaleRead(ws *tensor.Tensor) int64 { return int64(ws.Nbytes()) }

// linearRead is the fused int8_linear's own copy to the host: firstBadRow's
// bool (1 byte), when x holds no NaN or infinity.
const linearRead = 1

// TestLinearTransfers counts the copies of a fused int8_linear, on each of
// its three routes: none to the device; to the host, the registry's read
// of the weight scales and firstBadRow's byte; none device to device; one
// aclnnQuantMatmulV4, and nothing left on the device.
func TestLinearTransfers(t *testing.T) {
	e := newEnv(t)
	e.needSim()
	rng := rand.New(rand.NewPCG(4, 4))
	for _, c := range []struct {
		name string
		ws   []int
		bias bool
		out  dtype.DType
	}{
		{"one weight scale", nil, false, dtype.BFloat16},
		{"one weight scale, bias", []int{1}, true, dtype.Float16},
		{"per channel", []int{16}, false, dtype.BFloat16},
		{"per channel, bias", []int{16, 1}, true, dtype.BFloat16},
		{"float32 out", []int{16}, false, dtype.Float32},
	} {
		l := randomLayer(rng, dtype.BFloat16, []int{2, 5, 48}, 16, c.out, c.bias)
		sv := make([]float32, tensor.Numel(c.ws))
		for i := range sv {
			sv[i] = 0.01 * float32(i+1)
		}
		l.ws = must(tensor.FromFloat32(dtype.Float16, sv, c.ws...))
		x, w, ws := e.up(l.x), e.up(l.w), e.up(l.ws)
		var bias *tensor.Tensor
		if l.bias != nil {
			bias = e.up(l.bias)
		}
		before, ops := e.stats(), ascendsim.OpCount(t, e.sim, "aclnnQuantMatmulV4")
		y, err := kitchen.Int8Linear(e.ctx, x, w, ws, e.linearOpts(l, bias)...)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		y.Release()
		d := e.stats().Sub(before)
		reads := []int64{weightScaleRead(l.ws), linearRead}
		if n, b := sum(reads); d.H2DCopies != 0 || d.D2HCopies != n || d.D2HBytes != b || d.D2DCopies != 0 {
			t.Errorf("%s: copies host to device %d, device to host %d of %d bytes, device to device %d; want 0, %d of %d %v, 0",
				c.name, d.H2DCopies, d.D2HCopies, d.D2HBytes, d.D2DCopies, n, b, reads)
		}
		if n := ascendsim.OpCount(t, e.sim, "aclnnQuantMatmulV4") - ops; n != 1 {
			t.Errorf("%s: aclnnQuantMatmulV4 ran %d times, want once", c.name, n)
		}
		if !d.SameLive(ascendsim.Stats{}) {
			t.Errorf("%s: left on the device: %s", c.name, d.Live())
		}
		t.Logf("%s: %d operators, %d synchronizations, %d bytes to the host", c.name, d.Launches, d.Syncs, d.D2HBytes)
	}
}

// TestLinearNonFinite checks that NaN or an infinity in x is an error
// naming x's row, for every x dtype, whether the NPU's minimum and maximum
// propagate NaN or skip it.
func TestLinearNonFinite(t *testing.T) {
	e := newEnv(t)
	check := func(t *testing.T) {
		for _, dt := range dtype.Floats() {
			for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(-1))} {
				l := randomLayer(rand.New(rand.NewPCG(1, 1)), dt, []int{2, 3, 8}, 4, dtype.BFloat16, false)
				v := must(l.x.Float32s())
				v[4*8+3] = bad
				l.x = must(tensor.FromFloat32(dt, v, 2, 3, 8))
				_, ran, err := e.linear(l, true)
				var ae *backend.ArgError
				if !errors.As(err, &ae) || !errors.Is(err, backend.ErrNonFinite) || ae.Param != "x" || ae.Row != 4 || ae.Op != op.Int8Linear.Name() {
					t.Errorf("%v %v on %s: %v, want NaN or infinity in row 4 of x", dt, bad, ran, err)
				}
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

// TestMMInt8 checks mm_int8 on the NPU against eager on the host, bit for
// bit, up to the largest K the operator takes with every product
// -128 * -128; that it copies nothing either way; and that it declines K
// or N beyond 65,535, which eager on the NPU then runs.
func TestMMInt8(t *testing.T) {
	e := newEnv(t)
	rng := rand.New(rand.NewPCG(2, 8))
	ints := func(n int, v func(i int) int8) []int8 {
		s := make([]int8, n)
		for i := range s {
			s[i] = v(i)
		}
		return s
	}
	random := func(int) int8 { return int8(rng.IntN(256) - 128) }
	const kmax = 65535
	for _, c := range []struct{ a, b *tensor.Tensor }{
		{must(tensor.FromInt8(ints(3*7, random), 3, 7)), must(tensor.FromInt8(ints(7*5, random), 7, 5))},
		{must(tensor.FromInt8(ints(1*300, random), 1, 300)), must(tensor.FromInt8(ints(300*1, random), 300, 1))},
		{must(tensor.FromInt8(ints(2*kmax, func(i int) int8 { return []int8{-128, 127}[i/kmax] }), 2, kmax)),
			must(tensor.FromInt8(ints(kmax*2, func(i int) int8 { return []int8{-128, -128, -128, 127}[i%2+2*(i/2%2)] }), kmax, 2))},
	} {
		want, err := kitchen.MMInt8(e.ctx, c.a, c.b, e.opts(kitchen.UsingBackend("eager"))...)
		if err != nil {
			t.Fatal(err)
		}
		a, b := e.up(c.a), e.up(c.b)
		var before ascendsim.Stats
		if e.sim != "" {
			before = e.stats()
		}
		var ran string
		got, err := kitchen.MMInt8(e.ctx, a, b, e.opts(kitchen.ReportBackend(&ran))...)
		if err != nil || ran != ascend.Name {
			t.Fatalf("%v by %v: ran %q, %v", c.a, c.b, ran, err)
		}
		if e.sim != "" {
			if d := e.stats().Sub(before); d.H2DCopies != 0 || d.D2HCopies != 0 || d.D2DCopies != 0 {
				t.Errorf("%v by %v: %d copies to the device, %d to the host, %d on it; want none", c.a, c.b, d.H2DCopies, d.D2HCopies, d.D2DCopies)
			}
		}
		if g := e.down(got); !bytes.Equal(must(g.Bytes()), must(want.Bytes())) {
			t.Errorf("%v by %v: got %x, want %x", c.a, c.b, must(g.Bytes()), must(want.Bytes()))
		}
	}
	for _, c := range []struct {
		a, b  *tensor.Tensor
		param string
	}{
		{must(tensor.Zeros(dtype.Int8, 1, kmax+1)), must(tensor.Zeros(dtype.Int8, kmax+1, 1)), "a"},
		{must(tensor.Zeros(dtype.Int8, 1, 1)), must(tensor.Zeros(dtype.Int8, 1, kmax+1)), "b"},
	} {
		a, b := e.up(c.a), e.up(c.b)
		_, err := kitchen.MMInt8(e.ctx, a, b, e.opts(kitchen.UsingBackend(ascend.Name))...)
		var nc *backend.NoCapableBackendError
		if !errors.As(err, &nc) || nc.Declines[0].Param != c.param || !strings.Contains(nc.Declines[0].Reason, "<= 65535") {
			t.Errorf("%v by %v: %v, want a decline on %s", c.a, c.b, err, c.param)
		}
		// The registry runs it with eager on the NPU instead.
		var ran string
		got, err := kitchen.MMInt8(e.ctx, a, b, e.opts(kitchen.ReportBackend(&ran))...)
		if err != nil || ran != "eager" {
			t.Fatalf("%v by %v: ran %q, %v; want eager on the NPU", c.a, c.b, ran, err)
		}
		if g := e.down(got); !bytes.Equal(must(g.Bytes()), make([]byte, g.Nbytes())) {
			t.Errorf("%v by %v: the product of zeros is not zero", c.a, c.b)
		}
	}
}
