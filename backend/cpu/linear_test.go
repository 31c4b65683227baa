package cpu

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/gokitchen/kitchen/backend"
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/op"
	"github.com/gokitchen/kitchen/quant"
	"github.com/gokitchen/kitchen/tensor"
)

// dotInt8 is the reference: the int32 dot product of two int8 vectors of
// the same length, wrapping as int32 does (which only the contract's
// extreme, K = 131,072 of -128·-128, reaches).
func dotInt8(a, b []byte) int32 {
	b = b[:len(a)]
	var acc int32
	for i, x := range a {
		acc += int32(int8(x)) * int32(int8(b[i]))
	}
	return acc
}

// variant is a way through the product's driver: a path, with the weight
// as [N, K] rows, as mm_int8's [K, N] (cols), or prepared in int8 panels,
// and for the many-row path with tiles over one panel or two (wide: the
// kernel set's wide tiles where it has them, else two one-panel tiles);
// stream packs as if the weight were larger than the last-level cache;
// int16 packs int16 panels where the kernel set would pack int8 ones;
// mix turns the tiles over a panel and a half off or on (on where the
// panels are int8 ones of 16 columns: a prepared weight's everywhere);
// pairs packs pairs of k where the kernel set would pack quads (int16
// does too).
type variant struct {
	name     string
	path     int
	cols     bool
	prepared bool
	wide     bool
	stream   bool
	int16    bool
	pairs    bool
	whole    bool // few rows, cols: b packed whole first (packColsLate off)
	mix      int  // many rows: gemmTileMix off (-1) or on (1) where the kernel set would not choose so
	group    int  // few rows, cols: pairs of panels a unit, if not colsGroup's
}

// variants are every way through the driver. Every path takes any
// number of rows.
var variants = []variant{
	{name: "many", path: manyRows},
	{name: "many,cols", path: manyRows, cols: true},
	{name: "few", path: fewRows},
	{name: "one", path: oneRow},
	{name: "one,pairs", path: oneRow, pairs: true},
	{name: "cols", path: colsRows, cols: true},
	{name: "cols,pairs", path: colsRows, cols: true, pairs: true},
	{name: "dot", path: dotRows},
	{name: "many,prepared", path: manyRows, prepared: true},
	{name: "many,six", path: manyRows, mix: -1},
	{name: "many,cols,six", path: manyRows, cols: true, mix: -1},
	{name: "many,prepared,mix", path: manyRows, prepared: true, mix: 1},
	{name: "few,prepared", path: fewRows, prepared: true},
	{name: "many,wide", path: manyRows, wide: true},
	{name: "many,cols,wide", path: manyRows, cols: true, wide: true},
	{name: "many,prepared,wide", path: manyRows, prepared: true, wide: true},
	{name: "many,cols,stream", path: manyRows, cols: true, stream: true},
	{name: "few,cols", path: fewRows, cols: true},
	{name: "few,cols,stream", path: fewRows, cols: true, stream: true},
	{name: "few,cols,whole", path: fewRows, cols: true, whole: true},
	{name: "few,cols,group3", path: fewRows, cols: true, group: 3},
	{name: "few,cols,group16", path: fewRows, cols: true, group: 16},
	{name: "many,int16", path: manyRows, int16: true},
	{name: "many,cols,int16", path: manyRows, cols: true, int16: true},
	{name: "many,pairs", path: manyRows, pairs: true},
	{name: "many,wide,pairs", path: manyRows, wide: true, pairs: true},
	{name: "many,cols,pairs", path: manyRows, cols: true, pairs: true},
	{name: "few,pairs", path: fewRows, pairs: true},
	{name: "few,prepared,pairs", path: fewRows, prepared: true, pairs: true},
	{name: "few,cols,pairs", path: fewRows, cols: true, pairs: true},
	{name: "few,cols,pairs,whole", path: fewRows, cols: true, pairs: true, whole: true},
	{name: "few,cols,pairs,group3", path: fewRows, cols: true, pairs: true, group: 3},
}

// multiply runs the product of a [m, k] and w [n, k] (or, v.cols, of w
// [k, n]) through the driver as v says, and returns the int32 sums.
func multiply(t testing.TB, a, w []byte, m, k, n int, v variant) []int32 {
	t.Helper()
	if v.pairs || v.int16 {
		defer func(f, g func() bool) { quadPanels, colsInQuads = f, g }(quadPanels, colsInQuads)
		quadPanels, colsInQuads = func() bool { return false }, func() bool { return false }
	}
	p := newProduct(m, k, n, v.path)
	p.wide = v.wide
	for r := range m {
		p.setRow(r, a[r*k:(r+1)*k])
	}
	ctx := context.Background()
	if v.prepared {
		l, err := packPrepared(ctx, w, k, n)
		if err != nil {
			t.Fatal(err)
		}
		p.wp, p.i8, p.shared = l.panels, !p.quads, true
	}
	if v.stream {
		defer func(llc func() int) { lastLevelCache = llc }(lastLevelCache)
		lastLevelCache = func() int { return 0 }
	}
	if v.int16 {
		defer func(f func() bool) { int8Panels = f }(int8Panels)
		int8Panels = func() bool { return false }
	}
	if v.whole {
		defer func(late bool) { packColsLate = late }(packColsLate)
		packColsLate = false
	}
	if v.mix != 0 {
		defer func(f func() bool) { mixTiles = f }(mixTiles)
		mixTiles = func() bool { return v.mix > 0 }
	}
	if v.group > 0 {
		defer func(f func(int, int) int) { colsGroupFor = f }(colsGroupFor)
		colsGroupFor = func(int, int) int { return v.group }
	}
	if err := p.setWeight(ctx, w, v.cols); err != nil {
		t.Fatal(err)
	}
	if v.stream && len(p.wp) > 0 && uintptr(unsafe.Pointer(&p.wp[0]))%64 != 0 {
		t.Fatal("panels not aligned to 64 bytes: non-temporal packing would be skipped")
	}
	dst := make([]byte, 4*m*n)
	p.fin = &mmFinish{dst: dst, n: n}
	if err := p.run(ctx); err != nil {
		t.Fatal(err)
	}
	out := make([]int32, m*n)
	for i := range out {
		out[i] = int32(binary.LittleEndian.Uint32(dst[4*i:]))
	}
	return out
}

// transpose returns the [c, r] transpose of the [r, c] bytes b.
func transpose(b []byte, r, c int) []byte {
	t := make([]byte, len(b))
	for i := range r {
		for j := range c {
			t[j*r+i] = b[i*c+j]
		}
	}
	return t
}

// paths runs f for each variant of the product.
func paths(t *testing.T, f func(t *testing.T, v variant)) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) { f(t, v) })
	}
}

// TestProductPairsExhaustive multiplies every int8 value by every int8
// value, K times over, on every path: row a of A (a = 0 to 255) is all the
// byte a, channel b of W all the byte b, so sum (a, b) is K·int8(a)·int8(b),
// wrapped to int32. The assembly kernel sets run it at K = 4096 and at
// K = 131,072, the largest K, where only -128·-128 reaches 2^31 and wraps to
// -2^31; the Go kernels, whose arithmetic is Go's int32 (and slow under
// -race), at K = 256. A second pass puts the pairs in every position of k
// and of the registers: row a holds a+k and channel b holds b+3k (mod 256),
// so each sum mixes all 256 values of each side, checked against dotInt8.
func TestProductPairsExhaustive(t *testing.T) {
	// The inputs, their transposes and the mixed reference, made once for
	// every kernel set (under -race each costs seconds).
	plain, mixed := map[int]*pairInputs{}, map[int]*pairInputs{}
	forEachProductSet(t, true, func(t *testing.T) {
		ks := []int{4096, 131072}
		switch {
		case impl == implGeneric:
			ks = []int{256}
		case testing.Short():
			ks = ks[:1]
		}
		for _, k := range ks {
			if plain[k] == nil {
				plain[k] = newPairInputs(k, false)
			}
			t.Run(fmt.Sprintf("K=%d", k), func(t *testing.T) { testPairs(t, plain[k]) })
		}
		k := ks[0]
		if mixed[k] == nil {
			mixed[k] = newPairInputs(k, true)
		}
		t.Run(fmt.Sprintf("mixed,K=%d", k), func(t *testing.T) { testPairsMixed(t, mixed[k]) })
	})
}

// pairInputs are 256 rows of A and 256 channels of W, k long: row a all
// the byte a and channel b all the byte b, or (mixed) row a holding a+k
// and channel b holding b+3k (mod 256), with the mixed sums' reference.
type pairInputs struct {
	k    int
	a, w []byte
	cols func() []byte // w transposed, for the cols paths, made once
	want []int32       // mixed only
}

func newPairInputs(k int, mixed bool) *pairInputs {
	a, w := make([]byte, 256*k), make([]byte, 256*k)
	for v := range 256 {
		for p := range k {
			if mixed {
				a[v*k+p], w[v*k+p] = byte(v+p), byte(v+3*p)
			} else {
				a[v*k+p], w[v*k+p] = byte(v), byte(v)
			}
		}
	}
	in := &pairInputs{k: k, a: a, w: w, cols: sync.OnceValue(func() []byte { return transpose(w, 256, k) })}
	if mixed {
		in.want = make([]int32, 256*256)
		for i := range 256 {
			for j := range 256 {
				in.want[i*256+j] = dotInt8(a[i*k:(i+1)*k], w[j*k:(j+1)*k])
			}
		}
	}
	return in
}

// testPairs checks every pair of values, each repeated k times.
func testPairs(t *testing.T, in *pairInputs) {
	k := in.k
	paths(t, func(t *testing.T, v variant) {
		wt := in.w
		if v.cols {
			wt = in.cols()
		}
		got := multiply(t, in.a, wt, 256, k, 256, v)
		for i := range 256 {
			for j := range 256 {
				want := int32(int64(k) * int64(int8(i)) * int64(int8(j)))
				if g := got[i*256+j]; g != want {
					t.Fatalf("%d·%d summed to %d, want %d", int8(i), int8(j), g, want)
				}
			}
		}
		if k == 131072 && got[128*256+128] != math.MinInt32 {
			t.Fatalf("-128·-128 at K=131072: %d, want -2^31", got[128*256+128])
		}
	})
}

// testPairsMixed checks sums that mix all 256 values on each side.
func testPairsMixed(t *testing.T, in *pairInputs) {
	paths(t, func(t *testing.T, v variant) {
		wt := in.w
		if v.cols {
			wt = in.cols()
		}
		got := multiply(t, in.a, wt, 256, in.k, 256, v)
		for i, g := range got {
			if g != in.want[i] {
				t.Fatalf("row %d, channel %d: %d, want %d", i/256, i%256, g, in.want[i])
			}
		}
	})
}

// TestProductRagged checks the product on every path against dotInt8 for
// ragged shapes: M, K and N that are not multiples of the tiles, the
// registers, the blocks or the passes of k; each path starts with the
// scratch pools poisoned (poisonPools).
func TestProductRagged(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	type shape struct{ m, k, n int }
	var shapes []shape
	for _, m := range []int{1, 2, 3, 4, 5, 7, 17} {
		for _, k := range []int{1, 2, 3, 7, 15, 16, 17, 31, 33, 63, 65, 255, 256, 257} {
			for _, n := range []int{1, 3, 5, 17, 63} {
				shapes = append(shapes, shape{m, k, n})
			}
		}
	}
	shapes = append(shapes, shape{63, 513, 65}, shape{65, 1030, 257}, shape{97, 1025, 300}, shape{200, 600, 33},
		shape{16, 4099, 100}, shape{3, 8193, 50})
	// Inputs and their reference once, for every kernel set and path
	// (under -race the reference costs seconds).
	type input struct {
		a, w, wt []byte
		want     []int32
	}
	inputs := make([]input, len(shapes))
	for n, s := range shapes {
		a, w := make([]byte, s.m*s.k), make([]byte, s.n*s.k)
		for i := range a {
			a[i] = byte(rng.Uint32())
		}
		for i := range w {
			w[i] = byte(rng.Uint32())
		}
		if s.k > 2 {
			a[s.k-1], w[0] = 0x80, 0x80 // -128 at both ends of k
		}
		want := make([]int32, s.m*s.n)
		for i := range s.m {
			for j := range s.n {
				want[i*s.n+j] = dotInt8(a[i*s.k:(i+1)*s.k], w[j*s.k:(j+1)*s.k])
			}
		}
		inputs[n] = input{a, w, transpose(w, s.n, s.k), want}
	}
	forEachProductSet(t, true, func(t *testing.T) {
		paths(t, func(t *testing.T, v variant) {
			poisonPools()
			for n, s := range shapes {
				in := inputs[n]
				wt := in.w
				if v.cols {
					wt = in.wt
				}
				got := multiply(t, in.a, wt, s.m, s.k, s.n, v)
				for i, g := range got {
					if g != in.want[i] {
						t.Fatalf("%dx%dx%d: [%d, %d] = %d, want %d", s.m, s.k, s.n, i/s.n, i%s.n, g, in.want[i])
					}
				}
			}
		})
	})
}

// poisonPools fills the pools of scratch arrays with arrays of every size
// up to 2 MiB holding 0xa5 bytes (NaN floats), so that a product that
// relied on a fresh, zeroed array from them would go wrong.
func poisonPools() {
	for c := 0; c <= 21; c++ {
		b, f := make([]byte, 1<<c), make([]float32, 1<<c)
		for i := range b {
			b[i] = 0xa5
		}
		for i := range f {
			f[i] = float32(math.NaN())
		}
		smallBufs.put(b)
		floats.put(f)
	}
}

// TestLinearOutMatchesGeneric runs the epilogue kernels against the Go
// one on sums and scales chosen for their edges: sums beyond 2^24 (which
// round when converted), the int32 extremes, zero; products that round to
// infinity or to subnormals, 0·infinity (NaN), and biases that are NaN,
// infinite, -0 or subnormal; every length to 70 so the tails run too.
func TestLinearOutMatchesGeneric(t *testing.T) { forEachProductImpl(t, testLinearOutMatchesGeneric) }

func testLinearOutMatchesGeneric(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	// Not -2^31: only a sum at K = op.MaxK can be that, which the Go
	// epilogue reads as 2^31 (quant.AccFloat) and the kernels never see
	// (linearFinish.wraps).
	sums := []int32{0, 1, -1, 127, -128, 1 << 24, 1<<24 + 1, -(1<<24 + 3), 1<<30 + 12345, math.MaxInt32, math.MinInt32 + 1, 16129, -16256}
	nan := math.Float32frombits(0x7fc01234)
	biases := []float32{0, float32(math.Copysign(0, -1)), 1, -2.5, 1e-40, 6e-8, 65504, 70000, 3e38, nan, float32(math.NaN()),
		float32(math.Inf(1)), float32(math.Inf(-1)), 0x1p-126, 1 + 0x1p-8, 1 + 0x1p-11}
	scales := []float32{1, 0.5, 1e-3, 3e-5, 7e-39, 1e-45, 1e20, 3e38, 1 + 0x1p-23, 0.1}
	for _, out := range dtype.Floats() {
		for n := 1; n <= 70; n++ {
			for range 20 {
				acc := make([]byte, 4*n)
				ws, bias := make([]float32, n), make([]float32, n)
				for i := range n {
					v := int32(rng.Uint32())
					switch rng.IntN(3) {
					case 0:
						v = sums[rng.IntN(len(sums))]
					case 1:
						v >>= rng.IntN(31)
					}
					binary.LittleEndian.PutUint32(acc[4*i:], uint32(v))
					ws[i] = scales[rng.IntN(len(scales))] * float32(1+rng.IntN(9))
					if rng.IntN(2) == 0 {
						bias[i] = biases[rng.IntN(len(biases))]
					} else {
						bias[i] = float32(rng.NormFloat64() * math.Ldexp(1, rng.IntN(60)-30))
					}
					bias[i] = out.Round(bias[i])
				}
				xs := scales[rng.IntN(len(scales))]
				for _, b := range [][]float32{nil, bias} {
					got, want := make([]byte, n*out.Size()), make([]byte, n*out.Size())
					linearOut(out, acc, xs, ws, b, got)
					linearOutGeneric(out, acc, xs, ws, b, want)
					for e := range n {
						g, w := got[e*out.Size():(e+1)*out.Size()], want[e*out.Size():(e+1)*out.Size()]
						if diff(g, w) < 0 {
							continue
						}
						a := int32(binary.LittleEndian.Uint32(acc[4*e:]))
						// A NaN plus a NaN: Go does not fix which payload
						// the sum keeps (it differs under -race), so any
						// NaN passes. y is NaN only for 0·infinity.
						y := quant.LinearOut(a, xs, ws[e])
						if b != nil && isNaN(y) && isNaN(b[e]) && isNaN(dtype.Load(g, out, 0)) {
							continue
						}
						t.Fatalf("%v n=%d bias=%v: element %d differs: %x, want %x (acc %d, xs %v, ws %v, bias %v)",
							out, n, b != nil, e, g, w, a, xs, ws[e], bias[e])
					}
				}
			}
		}
	}
}

func isNaN(f float32) bool { return f != f }

// TestLinearOutGenericFormula checks the Go epilogue against the
// contract's formula, element by element, as the reference implementation
// writes it.
func TestLinearOutGenericFormula(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	for _, out := range dtype.Floats() {
		for range 1000 {
			acc := int32(rng.Uint32()) >> rng.IntN(31)
			xs, ws := float32(rng.Float64()*1e-2), float32(rng.Float64()*1e-3)
			b := float32(rng.NormFloat64())
			y := out.Round(quant.LinearOut(acc, xs, ws))
			y = out.Round(y + out.Round(b))
			want := make([]byte, out.Size())
			dtype.Store(want, out, 0, y)
			got := make([]byte, 4)
			binary.LittleEndian.PutUint32(got, uint32(acc))
			dst := make([]byte, out.Size())
			linearOutGeneric(out, got, xs, []float32{ws}, []float32{out.Round(b)}, dst)
			if diff(dst, want) >= 0 {
				t.Fatalf("%v: acc %d xs %v ws %v bias %v: got %x, want %x", out, acc, xs, ws, b, dst, want)
			}
		}
	}
}

// TestInt8HelpersMatchGeneric checks widenInt8 against the Go kernel at
// every length to 100.
func TestInt8HelpersMatchGeneric(t *testing.T) {
	forEachProductImpl(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(17, 18))
		for n := range 100 {
			q := make([]byte, n)
			for i := range q {
				q[i] = byte(rng.Uint32())
			}
			got, want := make([]byte, 2*n), make([]byte, 2*n)
			widenInt8(q, got)
			widenInt8Generic(q, want)
			if i := diff(got, want); i >= 0 {
				t.Fatalf("widenInt8 n=%d: byte %d differs", n, i)
			}
		}
	})
}

// TestPeakGOPS runs the measurement loop of each kernel set briefly.
func TestPeakGOPS(t *testing.T) {
	forEachProductSet(t, true, func(t *testing.T) {
		g := PeakGOPS(20 * time.Millisecond)
		if impl != implGeneric && g <= 0 {
			t.Fatalf("PeakGOPS = %v with kernel set %s", g, KernelSet())
		}
		t.Logf("peak of the product's arithmetic: %.1f GOPS (%s)", g, KernelSet())
	})
}

// TestLinearPath checks int8_linear's choice of layout by rows, k and
// kernel set: the dot path only with AVX2 without quad panels.
func TestLinearPath(t *testing.T) {
	defer func(i int, v bool, d int) { impl, vnni, dotMin = i, v, d }(impl, vnni, dotMin)
	vnni = false // quad panels (AVX512-VNNI, assembly only) change the path: TestLinearPathQuads
	dotMin = 2   // as on a Zen 3
	for _, c := range []struct{ m, k, set, want int }{
		{1, 4096, implAVX2, oneRow}, {2, 4096, implAVX2, dotRows}, {8, 4096, implAVX2, dotRows},
		{8, 4100, implAVX2, oneRow}, {3, 4096, implAVX512, oneRow},
	} {
		impl = c.set
		if got := linearPath(c.m, c.k, false); got != c.want {
			t.Errorf("dotMin 2: %d rows of %d, kernel set %s: path %d, want %d", c.m, c.k, kernelSetNames[c.set], got, c.want)
		}
	}
	dotMin = gemvMax + 1
	for _, c := range []struct{ m, k, set, want int }{
		{1, 4096, implAVX2, oneRow}, {2, 4096, implAVX2, oneRow}, {8, 4096, implAVX2, oneRow},
		{9, 4096, implAVX2, dotRows}, {16, 4096, implAVX2, dotRows}, {48, 4096, implAVX2, dotRows},
		{49, 4096, implAVX2, fewRows}, {97, 4096, implAVX2, fewRows}, {fewMaxPlain, 4100, implAVX2, fewRows},
		{fewMaxPlain + 1, 4096, implAVX2, manyRows}, {97, 4096, implAVX512, manyRows},
		{16, 4100, implAVX2, fewRows}, {8, 4100, implAVX2, oneRow},
		{16, 4096, implAVX512, fewRows}, {2, 4096, implAVX512, oneRow}, {16, 4096, implGeneric, fewRows},
	} {
		impl = c.set
		if got := linearPath(c.m, c.k, false); got != c.want {
			t.Errorf("%d rows of %d, kernel set %s: path %d, want %d", c.m, c.k, kernelSetNames[c.set], got, c.want)
		}
	}
	// A prepared weight leaves the dot path for its panels sooner.
	impl = implAVX2
	for _, c := range []struct{ m, want int }{
		{8, oneRow}, {9, dotRows}, {dotMaxPrepared, dotRows}, {dotMaxPrepared + 1, fewRows}, {48, fewRows}, {fewMax, fewRows}, {fewMax + 1, manyRows},
	} {
		if got := linearPath(c.m, 4096, true); got != c.want {
			t.Errorf("%d rows of 4096, prepared: path %d, want %d", c.m, got, c.want)
		}
	}
}

// TestStreamGBPerS reads a buffer with each kernel set: a speed with the
// assembly ones, 0 with the Go one; lengths that are not a multiple of the
// parts' alignment included.
func TestStreamGBPerS(t *testing.T) {
	forEachProductSet(t, true, func(t *testing.T) {
		for _, n := range []int{0, 1, 127, 128, 1000, 1 << 20} {
			g := StreamGBPerS(make([]byte, n))
			if (impl != implGeneric && n >= 128) != (g > 0) {
				t.Fatalf("StreamGBPerS of %d bytes = %v with kernel set %s", n, g, KernelSet())
			}
		}
	})
}

// BenchmarkInt8Linear runs int8_linear and mm_int8 through the registry on
// the shapes, bfloat16 x, reporting GOPS.
func BenchmarkInt8Linear(b *testing.B) {
	reg := newRegistry(b)
	ctx := context.Background()
	for _, s := range [][]int{{4096, 3072, 3072}, {512, 4096, 4096}, {16, 4096, 4096}, {1, 4096, 4096}} {
		for _, o := range []backend.Operation{op.Int8Linear, op.MMInt8} {
			b.Run(fmt.Sprintf("%s/%dx%dx%d", o.Name(), s[0], s[1], s[2]), func(b *testing.B) {
				w, err := o.Workload(ctx, reg, &backend.Spec{Shape: s, DType: dtype.BFloat16})
				if err != nil {
					b.Fatal(err)
				}
				b.ResetTimer()
				for range b.N {
					if err := w.Run(ctx, reg, Name); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(w.Ops)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GOPS")
			})
		}
	}
}

// TestQuadTiles compares each quad tile kernel (where the kernel set has
// them: VNNI), over one panel and (AVX-512) over two, with the sums it must
// compute, on random bytes, for every tile height, several lengths of k,
// with and without adding to c (without, each row's corr is added), and
// checks that it writes nothing past the tile.
func TestQuadTiles(t *testing.T) {
	forEachProductImpl(t, func(t *testing.T) {
		if !quadPanels() {
			t.Skipf("kernel set %s has no quad tiles", KernelSet())
		}
		rng := rand.New(rand.NewPCG(21, 22))
		nr := gemmCols()
		qb := 4 * nr // a quad of a panel's bytes
		const guard = 256
		for _, panels := range []int{1, 2} {
			if panels == 2 && !hasWideTiles() {
				continue
			}
			for mr := 1; mr <= gemmRows; mr++ {
				for _, kq := range []int{1, 2, 7, 64, 257} {
					lda, ldc := 4*kq+64, 4*panels*nr+64
					pstride := 0
					if panels == 2 {
						pstride = kq*qb + 128
					}
					a := make([]byte, (mr-1)*lda+4*kq)
					b := make([]byte, pstride+kq*qb+guard)
					corr := make([]byte, 4*mr+guard)
					for _, buf := range [][]byte{a, b, corr} {
						for i := range buf {
							buf[i] = byte(rng.Uint32())
						}
					}
					for _, add := range []bool{false, true} {
						c := make([]byte, (mr-1)*ldc+4*panels*nr+guard)
						for i := range c {
							c[i] = byte(rng.Uint32())
						}
						want := append([]byte(nil), c...)
						for i := range mr {
							for h := range panels {
								for j := range nr {
									s := int32(binary.LittleEndian.Uint32(corr[4*i:]))
									at := i*ldc + 4*(h*nr+j)
									if add {
										s = int32(binary.LittleEndian.Uint32(c[at:]))
									}
									for q := range kq {
										for e := range 4 {
											s += int32(int8(a[i*lda+4*q+e])) * int32(b[h*pstride+q*qb+4*j+e])
										}
									}
									binary.LittleEndian.PutUint32(want[at:], uint32(s))
								}
							}
						}
						n := (mr-1)*ldc + 4*panels*nr
						gemmTileQuad(mr, a, lda, b[:pstride+kq*qb], pstride, kq, c[:n], ldc, add, corr[:4*mr], b, 8)
						// Between and past the rows, c is as it was.
						if i := diff(c, want); i >= 0 {
							t.Fatalf("panels=%d mr=%d kq=%d add=%v: row %d byte %d: %#x, want %#x", panels, mr, kq, add, i/ldc, i%ldc, c[i], want[i])
						}
					}
				}
			}
		}
	})
}

// TestSumInt8 compares sumInt8 with a plain loop: every length to 2100
// (past two of its 1024-byte rounds) of random bytes, and long runs of
// the extremes, where its 16-bit lanes come closest to overflowing.
func TestSumInt8(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	q := make([]byte, 3*1024+13)
	check := func(q []byte) {
		t.Helper()
		var want int32
		for _, v := range q {
			want += int32(int8(v))
		}
		if got := sumInt8(q); got != want {
			t.Fatalf("%d bytes: %d, want %d", len(q), got, want)
		}
	}
	for n := range 2100 {
		for i := range q[:n] {
			q[i] = byte(rng.Uint32())
		}
		check(q[:n])
	}
	for _, v := range []byte{0x7f, 0x80, 0xff, 0} {
		for i := range q {
			q[i] = v
		}
		check(q)
	}
}

// cancelAfter is a context that is done from the nth call of Err on.
type cancelAfter struct {
	context.Context
	n, calls atomic.Int64
}

func (c *cancelAfter) Err() error {
	if c.calls.Add(1) >= c.n.Load() {
		return context.Canceled
	}
	return nil
}

// TestProductCancelled cancels mm_int8's kernel (the dispatch checks the
// context before it: this calls the kernel itself) at every check it
// makes, on every path: each call returns context.Canceled or the whole,
// right product, never partial sums or a panic.
func TestProductCancelled(t *testing.T) {
	const k, n = 1024, 4096
	rng := rand.New(rand.NewPCG(7, 8))
	bv := make([]byte, k*n)
	for i := range bv {
		bv[i] = byte(rng.Uint32())
	}
	b := must(tensor.FromBytes(dtype.Int8, bv, k, n))
	for _, m := range []int{1, 3, 16, 200} {
		av := make([]byte, m*k)
		for i := range av {
			av[i] = byte(rng.Uint32())
		}
		a := must(tensor.FromBytes(dtype.Int8, av, m, k))
		want, err := mmInt8(context.Background(), &op.MMInt8Args{A: a, B: b})
		if err != nil {
			t.Fatal(err)
		}
		wb, _ := want.Out.Bytes()
		cancelled := false
	checks:
		for at := int64(1); ; at++ {
			ctx := &cancelAfter{Context: context.Background()}
			ctx.n.Store(at)
			got, err := mmInt8(ctx, &op.MMInt8Args{A: a, B: b})
			switch {
			case errors.Is(err, context.Canceled):
				cancelled = true
			case err != nil:
				t.Fatalf("%d rows, cancelled at check %d: %v", m, at, err)
			default:
				gb, _ := got.Out.Bytes()
				if string(gb) != string(wb) {
					t.Errorf("%d rows, cancelled at check %d: a result that is not the product", m, at)
				}
				got.Out.Release()
				if ctx.calls.Load() < at {
					break checks // it ran to the end before check at
				}
			}
		}
		if !cancelled {
			t.Errorf("%d rows: no call was cancelled", m)
		}
		want.Out.Release()
	}
}
