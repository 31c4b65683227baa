package ascend_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gokitchen/kitchen/backend/ascend"
	"github.com/gokitchen/kitchen/backend/eager"
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/internal/backendtest"
	"github.com/gokitchen/kitchen/op"
	"github.com/gokitchen/kitchen/quant"
	"github.com/gokitchen/kitchen/tensor"
)

// The NPU's eager.RotatePrimitives and eager.LinearPrimitives against the
// quant package's scalar rules, computed here on the host.

// firstDiff returns the first element, of size bytes, where got and want
// differ in their bytes (NaN payloads included), or -1.
func firstDiff(got, want []byte, size int) int {
	for i := 0; i+size <= len(got); i += size {
		if !bytes.Equal(got[i:i+size], want[i:i+size]) {
			return i / size
		}
	}
	return -1
}

// TestRotateMatchesQuant rotates random rows, rows of values that cancel,
// overflow or are subnormal, in every group size up to 256 and from and to
// every float dtype, and compares with quant.Rotate rounded to the output.
func TestRotateMatchesQuant(t *testing.T) {
	e := newEnv(t)
	rng := rand.New(rand.NewPCG(4, 16))
	const k = 256
	v := make([]float32, 3*k)
	for i := range v {
		switch r := i / k; r {
		case 0:
			v[i] = float32(rng.NormFloat64() * math.Ldexp(1, rng.IntN(20)-10))
		case 1: // nearly cancelling sums, and a subnormal
			v[i] = float32(1+rng.IntN(3)) * float32([]float64{1, -1}[i%2]) * (1 + 0x1p-20*float32(rng.IntN(8)))
			if i%37 == 0 {
				v[i] = 1e-39
			}
		case 2: // large values, whose sums overflow float16 and bfloat16
			v[i] = float32(rng.NormFloat64() * 3e4)
			if i%5 == 0 {
				v[i] = 3e38
			}
		}
	}
	for _, in := range dtype.Floats() {
		x := must(tensor.FromFloat32(in, v, 3, k))
		xv := must(x.Float32s())
		xn := e.up(x)
		for _, g := range []int{4, 16, 64, 256} {
			want := append([]float32(nil), xv...)
			quant.Rotate(want, g)
			for _, out := range dtype.Floats() {
				got := e.down(must(e.dev.Rotate(xn, g, out)))
				wb := must(must(tensor.FromFloat32(out, want, 3, k)).Bytes())
				if i := firstDiff(must(got.Bytes()), wb, out.Size()); i >= 0 {
					t.Fatalf("%v in groups of %d to %v: element %d is %g, want %g", in, g, out, i, must(got.Float32s())[i], out.Round(want[i]))
				}
			}
		}
	}
	if _, err := e.dev.Rotate(e.up(must(tensor.Zeros(dtype.Float32, 2, 8))), 16, dtype.Float32); !errors.Is(err, tensor.ErrShape) {
		t.Errorf("rows of 8 in groups of 16: %v, want a shape error", err)
	}
}

// TestGatherRows gathers rows of an int8 table and of a float scale column
// by int32 and int64 indices of two dimensions, against indexing on the
// host, and checks that an index out of range is an *eager.IndexError
// naming its position and value, found with a few bytes read back.
func TestGatherRows(t *testing.T) {
	e := newEnv(t)
	const rows, d = 7, 5
	qv := make([]int8, rows*d)
	for i := range qv {
		qv[i] = int8(i*37 - 100)
	}
	q := e.up(must(tensor.FromInt8(qv, rows, d)))
	sv := []float32{0.5, 0.25, 3, 1e-3, 7, 0.125, 2}
	sc := e.up(must(tensor.FromFloat32(dtype.BFloat16, sv, rows, 1)))
	idx := []int64{6, 0, 3, 3, 1, 6}
	for _, it := range []dtype.DType{dtype.Int32, dtype.Int64} {
		ix := e.up(backendtest.IndexTensor(it, idx, 2, 3))
		got := e.down(must(e.dev.GatherRows(q, ix)))
		if s := got.Shape(); len(s) != 3 || s[0] != 2 || s[1] != 3 || s[2] != d {
			t.Fatalf("%v indices: shape %v, want [2 3 %d]", it, s, d)
		}
		gv := must(got.Int8s())
		for i, r := range idx {
			if !slicesEqual(gv[i*d:(i+1)*d], qv[int(r)*d:int(r+1)*d]) {
				t.Fatalf("%v indices: row %d is %v, want row %d, %v", it, i, gv[i*d:(i+1)*d], r, qv[int(r)*d:int(r+1)*d])
			}
		}
		gs := must(e.down(must(e.dev.GatherRows(sc, ix))).Float32s())
		for i, r := range idx {
			if w := dtype.BFloat16.Round(sv[r]); gs[i] != w {
				t.Fatalf("%v indices: scale %d is %g, want %g", it, i, gs[i], w)
			}
		}
	}
	for _, c := range []struct {
		dt  dtype.DType
		idx []int64
		at  int
	}{
		{dtype.Int64, []int64{0, 1, rows, -1}, 2},
		{dtype.Int32, []int64{0, -1, rows}, 1},
		{dtype.Int64, []int64{3, 1 << 40}, 1},
		{dtype.Int32, []int64{math.MinInt32}, 0},
	} {
		ix := e.up(backendtest.IndexTensor(c.dt, c.idx, len(c.idx)))
		var before int64
		if e.sim != "" {
			before = e.stats().D2HBytes
		}
		_, err := e.dev.GatherRows(q, ix)
		var ie *eager.IndexError
		if !errors.As(err, &ie) || ie.At != c.at || ie.Index != c.idx[c.at] || ie.Rows != rows {
			t.Errorf("%v %v: %v, want index %d at %d out of range", c.dt, c.idx, err, c.idx[c.at], c.at)
		}
		if e.sim != "" {
			if n := e.stats().D2HBytes - before; n != 8+int64(c.dt.Size()) {
				t.Errorf("%v %v: read %d bytes back, want 8 for the position and %d for the index", c.dt, c.idx, n, c.dt.Size())
			}
		}
	}
}

// int32s reads an int32 tensor on the host.
func int32s(t *tensor.Tensor) []int32 {
	b := must(t.Bytes())
	v := make([]int32, len(b)/4)
	for i := range v {
		v[i] = int32(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

func slicesEqual[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestActivateEveryHalfValue applies gelu_tanh to every float16 and
// bfloat16 value and swiglu to every pair of a gate value and an up value
// (the gate every value, the up drawn at random), and both to float32
// values, against quant.GeluTanh and quant.Silu.
func TestActivateEveryHalfValue(t *testing.T) {
	e := newEnv(t)
	rng := rand.New(rand.NewPCG(5, 25))
	for _, dt := range dtype.Floats() {
		var v []float32
		if dt == dtype.Float32 {
			for range 1 << 14 {
				v = append(v, float32(rng.NormFloat64()*math.Ldexp(1, rng.IntN(12)-4)))
			}
			v = append(v, 0, float32(math.Copysign(0, -1)), -30, 30, 1e-30, float32(math.Inf(1)), float32(math.Inf(-1)))
		} else {
			raw := make([]byte, 2<<16)
			for i := range 1 << 16 {
				binary.LittleEndian.PutUint16(raw[2*i:], uint16(i))
			}
			v = must(must(tensor.FromBytes(dt, raw)).Float32s())
		}
		n := len(v)
		x := must(tensor.FromFloat32(dt, v, n))
		gelu := must(e.down(must(e.dev.Activate(e.up(x), op.ActGeluTanh, dt))).Bytes())
		want := make([]float32, n)
		for i, y := range v {
			want[i] = quant.GeluTanh(y)
		}
		if i := firstDiff(gelu, must(must(tensor.FromFloat32(dt, want, n)).Bytes()), dt.Size()); i >= 0 {
			t.Fatalf("%v: gelu_tanh(%g) differs from quant.GeluTanh's %g", dt, v[i], dt.Round(want[i]))
		}
		// swiglu on rows [gate | up]: one row per value, of 2 elements.
		xv := make([]float32, 2*n)
		for i, y := range v {
			xv[2*i], xv[2*i+1] = y, float32(rng.NormFloat64()*4)
		}
		x2 := must(tensor.FromFloat32(dt, xv, n, 2))
		xr := must(x2.Float32s())
		sw := must(e.down(must(e.dev.Activate(e.up(x2), op.ActSwiGLU, dt))).Bytes())
		for i := range n {
			want[i] = dt.Round(quant.Silu(xr[2*i])) * xr[2*i+1]
		}
		if i := firstDiff(sw, must(must(tensor.FromFloat32(dt, want, n, 1)).Bytes()), dt.Size()); i >= 0 {
			t.Fatalf("%v: swiglu(%g, %g) differs from %g", dt, xr[2*i], xr[2*i+1], dt.Round(want[i]))
		}
	}
}

// TestMatMulInt8Chunks multiplies beyond aclnnQuantMatmulV4's limits, K up
// to op.MaxK (in chunks) and N beyond 65,535 (b transposed on the device),
// against the int32 product on the host, including the one sum the
// contract lets wrap: K = 131,072 products of -128 · -128.
func TestMatMulInt8Chunks(t *testing.T) {
	e := newEnv(t)
	rng := rand.New(rand.NewPCG(6, 36))
	random := func(n int) []int8 {
		v := make([]int8, n)
		for i := range v {
			v[i] = int8(rng.IntN(256) - 128)
		}
		return v
	}
	fill := func(n int, x int8) []int8 {
		v := make([]int8, n)
		for i := range v {
			v[i] = x
		}
		return v
	}
	for _, c := range []struct {
		name    string
		m, k, n int
		a, b    []int8
		transB  bool
	}{
		{"K = 70,001, b [N, K]", 3, 70001, 2, random(3 * 70001), random(70001 * 2), true},
		{"K = 70,001, b [K, N]", 2, 70001, 3, random(2 * 70001), random(70001 * 3), false},
		{"N = 65,600", 2, 3, 65600, random(2 * 3), random(3 * 65600), false},
		{"K = 131,072 of -128", 1, op.MaxK, 2, fill(op.MaxK, -128), fill(2*op.MaxK, -128), true},
	} {
		bshape := []int{c.k, c.n}
		if c.transB {
			bshape = []int{c.n, c.k}
		}
		a, b := e.up(must(tensor.FromInt8(c.a, c.m, c.k))), e.up(must(tensor.FromInt8(c.b, bshape...)))
		got := int32s(e.down(must(e.dev.MatMulInt8(a, b, c.transB))))
		for i := range c.m {
			for j := range c.n {
				var want int32 // int32 arithmetic: the extreme case wraps
				for p := range c.k {
					bv := c.b[p*c.n+j]
					if c.transB {
						bv = c.b[j*c.k+p]
					}
					want += int32(c.a[i*c.k+p]) * int32(bv)
				}
				if g := got[i*c.n+j]; g != want {
					t.Fatalf("%s: [%d, %d] = %d, want %d", c.name, i, j, g, want)
				}
			}
		}
	}
}

// TestDeclinedLinearRunsEagerOnNPU runs the int8_linear calls the fused
// kernel declines (activations, ConvRot, also with a float32 output), with
// their tensors on the NPU: eager runs them there, the output stays on the
// NPU, bit for bit eager's on the host, and nothing but the registry's read
// of the weight scales and the NaN checks' few bytes is copied.
func TestDeclinedLinearRunsEagerOnNPU(t *testing.T) {
	e := newEnv(t)
	rng := rand.New(rand.NewPCG(7, 49))
	for _, c := range []struct {
		name string
		l    layer
	}{
		{"gelu_tanh", with(randomLayer(rng, dtype.BFloat16, []int{5, 64}, 6, dtype.BFloat16, true), func(l *layer) { l.act = op.ActGeluTanh })},
		// swiglu halves x's last dimension: the weight's K is half of it.
		{"swiglu", with(randomLayer(rng, dtype.BFloat16, []int{2, 3, 64}, 6, dtype.BFloat16, false), func(l *layer) {
			l.act, l.x = op.ActSwiGLU, randomLayer(rng, dtype.BFloat16, []int{2, 3, 128}, 1, dtype.BFloat16, false).x
		})},
		{"ConvRot, float32 out", with(randomLayer(rng, dtype.BFloat16, []int{4, 64}, 5, dtype.Float32, true), func(l *layer) { l.group = 16 })},
		{"ConvRot and swiglu", with(randomLayer(rng, dtype.Float32, []int{3, 64}, 4, dtype.BFloat16, true), func(l *layer) {
			l.group, l.act = 64, op.ActSwiGLU
			l.x = randomLayer(rng, dtype.Float32, []int{3, 128}, 1, dtype.BFloat16, false).x
		})},
	} {
		var before int64
		if e.sim != "" {
			before = e.stats().H2DCopies
		}
		got, ran, err := e.linear(c.l, true)
		if err != nil || ran != "eager" {
			t.Fatalf("%s: ran %q, %v; want eager on the NPU", c.name, ran, err)
		}
		if e.sim != "" {
			// e.linear copies x, w, ws and the bias up before the call.
			up := int64(3)
			if c.l.bias != nil {
				up++
			}
			if n := e.stats().H2DCopies - before; n != up {
				t.Errorf("%s: %d copies to the device, want the %d of the inputs", c.name, n, up)
			}
		}
		want, _, err := e.linear(c.l, false, kitchenEager())
		if err != nil {
			t.Fatal(err)
		}
		if i := firstDiff(must(got.Bytes()), must(want.Bytes()), c.l.out.Size()); i >= 0 {
			t.Errorf("%s: element %d is %g, want %g", c.name, i, must(got.Float32s())[i], must(want.Float32s())[i])
		}
	}
	// The fused kernel still runs what it takes.
	l := randomLayer(rng, dtype.BFloat16, []int{4, 64}, 5, dtype.Float32, true)
	if _, ran, err := e.linear(l, true); err != nil || ran != ascend.Name {
		t.Errorf("a plain layer: ran %q, %v; want ascend", ran, err)
	}
}

// TestLinearWrapOnNPU runs int8_linear at K = op.MaxK, which the fused
// kernel declines, with eager on the NPU: a row of bfloat16 -85, whose
// scale rounds down to bfloat16 by nearly half a step, quantizes to -128,
// so that against a channel of -128 its sum is 2^31, which int32 wraps to
// -2^31 and the epilogue must read back as 2^31; the other row and channel
// are random, sums that do not wrap. One step short of op.MaxK nothing
// wraps, and the epilogue launches fewer operators: it does not look for
// wrapped sums there. Each output is eager's on the host, bit for bit.
func TestLinearWrapOnNPU(t *testing.T) {
	e := newEnv(t)
	rng := rand.New(rand.NewPCG(8, 64))
	launches := map[int]int64{}
	for _, k := range []int{op.MaxK, op.MaxK - 1} {
		xv, wv := make([]float32, 2*k), make([]int8, 2*k)
		for i := range k {
			xv[i], xv[k+i] = -85, float32(rng.NormFloat64())
			wv[i], wv[k+i] = -128, int8(rng.IntN(256)-128)
		}
		l := layer{
			x:   must(tensor.FromFloat32(dtype.BFloat16, xv, 2, k)),
			w:   must(tensor.FromInt8(wv, 2, k)),
			ws:  must(tensor.FromFloat32(dtype.Float32, []float32{1})),
			out: dtype.Float32,
		}
		before := e.stats().Launches
		got, ran, err := e.linear(l, true)
		if err != nil || ran != "eager" {
			t.Fatalf("K = %d: ran %q, %v; want eager on the NPU", k, ran, err)
		}
		launches[k] = e.stats().Launches - before
		want, _, err := e.linear(l, false, kitchenEager())
		if err != nil {
			t.Fatal(err)
		}
		a, sum := float32(85), float32(128*128*k) // both exact
		if w, scale := must(want.Float32s())[0], a/127; w != sum*scale {
			t.Fatalf("K = %d: eager on the host gives %g for the row of -85, want %g, 128·128·K times its scale", k, w, sum*scale)
		}
		if i := firstDiff(must(got.Bytes()), must(want.Bytes()), 4); i >= 0 {
			t.Errorf("K = %d: element %d is %g, want %g", k, i, must(got.Float32s())[i], must(want.Float32s())[i])
		}
	}
	if launches[op.MaxK-1] >= launches[op.MaxK] {
		t.Errorf("eager on the NPU launched %d operators at K = %d and %d at op.MaxK: want fewer where no sum can wrap",
			launches[op.MaxK-1], op.MaxK-1, launches[op.MaxK])
	}
}
