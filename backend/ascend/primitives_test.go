package ascend_test

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/gokitchen/kitchen/backend/ascend"
	"github.com/gokitchen/kitchen/backend/eager"
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/internal/ascendsim"
	"github.com/gokitchen/kitchen/op"
	"github.com/gokitchen/kitchen/quant"
	"github.com/gokitchen/kitchen/tensor"
)

// TestCastEveryHalfValue widens every float16 and bfloat16 bit pattern on
// the NPU and narrows every rounding boundary between them, against the
// dtype package.
func TestCastEveryHalfValue(t *testing.T) {
	e := newEnv(t)
	for _, dt := range []dtype.DType{dtype.Float16, dtype.BFloat16} {
		raw := make([]byte, 2<<16)
		for i := range 1 << 16 {
			binary.LittleEndian.PutUint16(raw[2*i:], uint16(i))
		}
		x := e.up(must(tensor.FromBytes(dt, raw)))
		wide := e.down(must(e.dev.Cast(x, dtype.Float32)))
		got := must(wide.Float32s())
		want := must(must(tensor.FromBytes(dt, raw)).Float32s())
		var mids []float32
		for i := range got {
			if g, w := got[i], want[i]; math.Float32bits(g) != math.Float32bits(w) && !(g != g && w != w) {
				t.Fatalf("%v %#04x widened to %g, want %g", dt, i, g, w)
			}
			// The midpoint of each pair of neighbours, and the float32
			// values either side of it.
			if i+1 < len(want) && !math.IsNaN(float64(want[i])) && !math.IsInf(float64(want[i]), 0) && !math.IsNaN(float64(want[i+1])) {
				m := float32((float64(want[i]) + float64(want[i+1])) / 2)
				mids = append(mids, m, math.Nextafter32(m, float32(math.Inf(1))), math.Nextafter32(m, float32(math.Inf(-1))))
			}
		}
		mids = append(mids, 65520, 65519.996, 3.4e38, float32(math.Inf(-1)), 1e-45, -1e-45)
		xs := e.up(must(tensor.FromFloat32(dtype.Float32, mids)))
		narrow := e.down(must(e.dev.Cast(xs, dt)))
		nb, wb := must(narrow.Bytes()), must(must(tensor.FromFloat32(dt, mids)).Bytes())
		for i := range mids {
			if g, w := binary.LittleEndian.Uint16(nb[2*i:]), binary.LittleEndian.Uint16(wb[2*i:]); g != w {
				t.Fatalf("%v: %g narrowed to %#04x, want %#04x", dt, mids[i], g, w)
			}
		}
	}
}

// TestRoundToInt8 checks both rounding modes on ties, values either side of
// them and the saturation limits, against the quant package.
func TestRoundToInt8(t *testing.T) {
	e := newEnv(t)
	var v []float32
	for i := -260; i <= 260; i++ {
		f := float32(i) / 2
		v = append(v, f, math.Nextafter32(f, 1000), math.Nextafter32(f, -1000))
	}
	v = append(v, 1e30, -1e30, float32(math.Inf(1)), float32(math.Inf(-1)), 0x1p22+0.5, -0x1p23, 1e-40)
	for _, dt := range dtype.Floats() {
		x := e.up(must(tensor.FromFloat32(dt, v)))
		vals := must(must(tensor.FromFloat32(dt, v)).Float32s())
		for _, mode := range []eager.RoundMode{eager.HalfEven, eager.Floor} {
			got := must(e.down(must(e.dev.RoundToInt8(x, mode))).Int8s())
			for i, y := range vals {
				want := quant.RoundHalfEven(y)
				if mode == eager.Floor {
					want = quant.Floor(y)
				}
				if got[i] != want {
					t.Fatalf("%v mode %d: %g rounded to %d, want %d", dt, mode, y, got[i], want)
				}
			}
		}
	}
}

// TestNoiseMatchesQuant computes the stochastic-rounding noise on the NPU
// for seeds that make the index's sum carry into the high 32 bits, and
// compares it with quant.Noise.
func TestNoiseMatchesQuant(t *testing.T) {
	e := newEnv(t)
	for _, seed := range []int64{1, 1<<32 - 5, 1<<40 + 3, math.MaxInt64} {
		for _, dt := range dtype.Floats() {
			got := must(e.down(must(e.dev.Noise(seed, []int{3, 7}, dt))).Float32s())
			for i, g := range got {
				if w := dt.Round(quant.Noise(seed, uint64(i))); g != w {
					t.Fatalf("seed %d %v: noise %d is %g, want %g", seed, dt, i, g, w)
				}
			}
		}
	}
}

// TestRowwiseFallsBackForTinyScales checks which operator quantizes a row:
// aclnnDynamicQuantV2, unless a row's scale is clamped to 1e-30 or rounds to
// a subnormal of x's type, when the contract's divisors go to aclnnQuantize.
func TestRowwiseFallsBackForTinyScales(t *testing.T) {
	e := newEnv(t)
	e.needSim()
	for _, c := range []struct {
		name  string
		dt    dtype.DType
		v     []float32
		fused bool
	}{
		{"float16 normal", dtype.Float16, []float32{1, -0.5, 2, 3, -4, 0.25}, true},
		{"float16 zero row", dtype.Float16, []float32{1, -0.5, 0, 0, 0, 0}, true},
		{"float16 small row", dtype.Float16, []float32{1, -0.5, 0.001, -0.0007, 0, 0}, false},
		{"bfloat16 small row", dtype.BFloat16, []float32{1, -0.5, 0.001, -0.0007, 0, 0}, true},
		{"bfloat16 subnormal row", dtype.BFloat16, []float32{1, -0.5, 1e-39, -3e-39, 0, 0}, false},
		{"bfloat16 clamped row", dtype.BFloat16, []float32{1, -0.5, 1e-29, 0, 0, 0}, false},
	} {
		x := must(tensor.FromFloat32(c.dt, c.v, 3, 2))
		dq, qz := ascendsim.OpCount(t, e.sim, "aclnnDynamicQuantV2"), ascendsim.OpCount(t, e.sim, "aclnnQuantize")
		call := call{name: c.name, op: op.QuantizeRowwise, x: x}
		got, ran, err := e.run(call, true)
		if err != nil || ran != ascend.Name {
			t.Fatalf("%s: ran %q, %v", c.name, ran, err)
		}
		dq, qz = ascendsim.OpCount(t, e.sim, "aclnnDynamicQuantV2")-dq, ascendsim.OpCount(t, e.sim, "aclnnQuantize")-qz
		if fused := dq == 1 && qz == 0; fused != c.fused || dq+qz != 1 {
			t.Errorf("%s: aclnnDynamicQuantV2 ran %d times, aclnnQuantize %d; want the fused op %v", c.name, dq, qz, c.fused)
		}
		want, _, err := e.run(call, false, kitchenEager())
		if err != nil {
			t.Fatal(err)
		}
		checkFused(t, c.name, op.QuantizeRowwise, x, got, want)
	}
}
