package ascend_test

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gokitchen/kitchen"
	"github.com/gokitchen/kitchen/backend"
	"github.com/gokitchen/kitchen/backend/ascend"
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/internal/golden"
	"github.com/gokitchen/kitchen/op"
	"github.com/gokitchen/kitchen/tensor"
)

// The fused quantize kernels and the contract.
//
// The contract quantizes x of type T (float16 or bfloat16 here) with the
// float32 scale s as
//
//	t = rT(s), or T's smallest normal if that is 0;  y = rT(f32(x) / t);  q = sat(rne(y))
//
// The scales the fused kernels return are the contract's, bit for bit (both
// compute the abs-max on the device, exactly, and s = max(a / 127, 1e-30)
// in float32). q differs in how the quotient is formed:
//
//   - tensor-wise, aclnnQuantize is given t itself and computes
//     q = sat(rne(f32(x) / t)) (saturated by a clamp of the quotient
//     before it where the quotient can leave the int8 range, see
//     quantizeSaturating): only the final rounding of the quotient to T
//     is missing. So q equals the contract's wherever that rounding is
//     exact, rT(f32(x)/t) == f32(x)/t, and is within one step everywhere
//     (two values less than one apart round to integers at most one apart).
//
//   - row-wise, aclnnDynamicQuantV2 computes the row's abs-max a itself and
//     q = sat(rne(f32(x) * (127 / a))), all in float32. That matches the
//     contract, bit for bit, wherever the contract's roundings are exact
//     (t == s and rT(y) == y) and y is not within 2^-20 |y| of a
//     half-integer (the reciprocal differs from 1/s in the last bits of
//     float32, which can only move values that close to a tie). It is
//     within one step wherever rT(s) is a normal number of T, which it
//     always is for bfloat16; for float16 rows whose scale is below 2^-14
//     (abs-max below about 0.0078) the contract divides by a subnormal, or
//     by 2^-14 when the scale rounds to zero, and q can differ by more: the
//     fused q is then the more accurate one for the returned scale.
//
// checkFused checks got (q and scale from the NPU, on the host) against want
// (eager's, on the host) by those rules and returns how many elements the
// exactness rule covered.
func checkFused(t *testing.T, name string, o backend.Operation, x *tensor.Tensor, got, want []*tensor.Tensor) (exact, total int) {
	t.Helper()
	if !bytes.Equal(must(got[1].Bytes()), must(want[1].Bytes())) {
		t.Errorf("%s: scales %v differ from the contract's %v", name, must(got[1].Float32s()), must(want[1].Float32s()))
	}
	T := x.DType()
	xs, qn, qc := must(x.Float32s()), must(got[0].Int8s()), must(want[0].Int8s())
	scales := must(want[1].Float32s())
	k := 1
	if x.Rank() > 0 {
		k = x.Dim(-1)
	}
	bad := 0
	for i, v := range xs {
		s := scales[0]
		if o == op.QuantizeRowwise {
			s = scales[i/k]
		}
		rs := T.Round(s)
		div := rs
		if div == 0 {
			div = T.TinyNormal()
		}
		y := v / div
		isExact := T.Round(y) == y
		bounded := true
		if o == op.QuantizeRowwise {
			isExact = isExact && rs == s && !nearTie(y)
			bounded = rs >= T.TinyNormal() && !math.IsInf(float64(rs), 0)
		}
		d := int(qn[i]) - int(qc[i])
		if (isExact && d != 0) || (bounded && (d > 1 || d < -1)) {
			if bad++; bad <= 5 {
				t.Errorf("%s: element %d: x %g, scale %g: q %d, contract %d (exact %v)", name, i, v, s, qn[i], qc[i], isExact)
			}
		}
		if isExact {
			exact++
		}
	}
	return exact, len(xs)
}

// nearTie reports whether y is within 2^-20 |y| of a half-integer.
func nearTie(y float32) bool {
	f := float64(y)
	return math.Abs(f-math.Floor(f)-0.5) <= math.Ldexp(math.Max(1, math.Abs(f)), -20)
}

// fusedCase builds a tensor of dt whose rows exercise the quantizer: rows
// scaled by powers of two across dt's range, exact ties after scaling,
// integers, zeros, subnormals and mixed magnitudes.
func fusedCase(rng *rand.Rand, dt dtype.DType, shape []int) *tensor.Tensor {
	n := tensor.Numel(shape)
	k := shape[len(shape)-1]
	lo, hi := -133, 119 // bfloat16: from subnormals to about 2^127
	if dt == dtype.Float16 {
		lo, hi = -24, 8
	}
	v := make([]float32, n)
	for r := 0; r < n/k; r++ {
		row := v[r*k : (r+1)*k]
		e := rng.IntN(hi-lo+1) + lo
		unit := float32(math.Ldexp(1, e))
		switch mode := rng.IntN(7); mode {
		case 0: // normal values
			for i := range row {
				row[i] = float32(rng.NormFloat64()) * unit
			}
		case 1: // ties: the scale is unit, values (n + 0.5) * unit
			for i := range row {
				row[i] = (float32(rng.IntN(255)-127) + 0.5) * unit
			}
			row[0] = 127 * unit
		case 2: // integers of the scale
			for i := range row {
				row[i] = float32(rng.IntN(255)-127) * unit
			}
			row[rng.IntN(k)] = -127 * unit
		case 3: // zeros
		case 4: // smallest magnitudes of dt
			for i := range row {
				row[i] = float32(rng.IntN(64)-32) * dt.TinyNormal() / 64
			}
		default: // values near ±127.5 steps and a wide range
			for i := range row {
				row[i] = float32(1-2*rng.IntN(2)) * (126 + float32(rng.IntN(16))/8) * unit * float32(math.Ldexp(1, -rng.IntN(12)))
			}
		}
	}
	return must(tensor.FromFloat32(dt, v, shape...))
}

// TestFusedQuantizeAgainstContract runs the fused kernels on random and
// adversarial input and checks them against eager on the host.
func TestFusedQuantizeAgainstContract(t *testing.T) {
	e := newEnv(t)
	rng := rand.New(rand.NewPCG(7, 11))
	shapes := [][]int{{1, 1}, {3}, {4, 7}, {9, 33}, {2, 3, 64}, {16, 257}}
	for _, dt := range []dtype.DType{dtype.Float16, dtype.BFloat16} {
		for _, o := range []backend.Operation{op.QuantizeRowwise, op.QuantizeTensorwise} {
			exact, total := 0, 0
			for i := range 60 {
				x := fusedCase(rng, dt, shapes[i%len(shapes)])
				c := call{name: o.Name(), op: o, x: x}
				want, _, err := e.run(c, false, kitchen.UsingBackend("eager"))
				if err != nil {
					t.Fatal(err)
				}
				got, ran, err := e.run(c, true)
				if err != nil || ran != ascend.Name {
					t.Fatalf("ran %q: %v", ran, err)
				}
				ex, n := checkFused(t, dt.String()+" "+o.Name(), o, x, got, want)
				exact, total = exact+ex, total+n
			}
			t.Logf("%v %s: %d of %d elements in the exact class", dt, o.Name(), exact, total)
			if exact < total/10 {
				t.Errorf("%v %s: only %d of %d elements checked for equality", dt, o.Name(), exact, total)
			}
		}
	}
}

// TestGolden runs the project's golden vectors with their tensors on the
// NPU: eager must reproduce every byte; the fused kernels, where they take
// the call, must meet checkFused's rules against the vectors.
func TestGolden(t *testing.T) {
	e := newEnv(t)
	cases, err := golden.Load("../../testdata/golden/int8.json")
	if err != nil {
		t.Fatal(err)
	}
	ran := map[string]int{}
	for _, g := range cases {
		c := call{name: g.Name, op: operation(t, g.Op), out: g.OutDType}
		if g.Seed > 0 {
			c.opts = []kitchen.Option{kitchen.WithStochasticRounding(g.Seed)}
		}
		want := []*tensor.Tensor{must(tensor.FromBytes(dtype.Int8, g.Q, g.QShape...)), nil}
		switch c.op {
		case op.QuantizeRowwise, op.QuantizeTensorwise:
			c.x = must(tensor.FromBytes(g.DType, g.X, g.Shape...))
			want[1] = must(tensor.FromBytes(dtype.Float32, g.Scale, g.ScaleShape...))
			switch g.ScaleMode {
			case "value":
				c.opts = append(c.opts, kitchen.WithScale(g.ScaleValue))
			case "tensor":
				c.s = must(tensor.FromFloat32(dtype.Float32, []float32{g.ScaleValue}))
			}
		default:
			c.opts = nil
			c.x = want[0]
			c.s = must(tensor.FromBytes(g.ScaleDType, g.Scale, g.ScaleShape...))
			want = []*tensor.Tensor{must(tensor.FromBytes(g.OutDType, g.Out, g.QShape...))}
		}
		if c.s != nil && g.Out != nil && slices.ContainsFunc(must(c.s.Float32s()), func(v float32) bool { return !(v > 0) }) {
			// A scale of zero (a float16 scale that underflowed): PyTorch
			// multiplies by it, kitchen refuses it, on every backend.
			for _, name := range []string{"eager", ascend.Name} {
				if _, _, err := e.run(c, true, kitchen.UsingBackend(name)); !errors.Is(err, backend.ErrScale) {
					t.Errorf("%s on %s: %v, want %v", g.Name, name, err, backend.ErrScale)
				}
				ran[name]++
			}
			continue
		}
		got, _, err := e.run(c, true, kitchen.UsingBackend("eager"))
		if err != nil {
			t.Fatalf("%s on eager: %v", g.Name, err)
		}
		for i := range got {
			if !bytes.Equal(must(got[i].Bytes()), must(want[i].Bytes())) {
				t.Errorf("%s: eager on the NPU, output %d:\n got %x\nwant %x", g.Name, i, must(got[i].Bytes()), must(want[i].Bytes()))
			}
		}
		ran["eager"]++
		got, _, err = e.run(c, true, kitchen.UsingBackend(ascend.Name))
		var nc *backend.NoCapableBackendError
		if errors.As(err, &nc) {
			continue
		}
		if err != nil {
			t.Fatalf("%s on ascend: %v", g.Name, err)
		}
		ran["ascend"]++
		if g.Out != nil {
			if !bytes.Equal(must(got[0].Bytes()), must(want[0].Bytes())) {
				t.Errorf("%s: ascend dequantize differs", g.Name)
			}
			continue
		}
		checkFused(t, g.Name, c.op, c.x, got, want)
	}
	t.Logf("golden cases run with their tensors on the NPU: %v of %d", ran, len(cases))
	if ran["eager"] != len(cases) || ran["ascend"] == 0 {
		t.Errorf("ran %v of %d cases", ran, len(cases))
	}
}

// operation returns the declared operation of that name.
func operation(t *testing.T, name string) backend.Operation {
	t.Helper()
	for _, o := range backend.Ops() {
		if o.Name() == name {
			return o
		}
	}
	t.Fatalf("no operation %q is declared", name)
	return nil
}
