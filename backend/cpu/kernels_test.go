package cpu

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	xcpu "golang.org/x/sys/cpu"

	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/quant"
)

// randomBits returns n elements of dt with random bits, filtered to finite
// values when finite is set, with a share of the values steered to small
// magnitudes so that many land near integer boundaries after scaling.
func randomBits(rng *rand.Rand, dt dtype.DType, n int, finite bool) []byte {
	b := make([]byte, n*dt.Size())
	for i := range n {
		for {
			var f float32
			switch rng.IntN(4) {
			case 0:
				f = float32(rng.NormFloat64())
			case 1:
				f = float32(rng.IntN(512)-256) * 0.5 // many exact ties
			default:
				f = math.Float32frombits(rng.Uint32())
			}
			var raw []byte
			switch dt {
			case dtype.Float32:
				raw = binary.LittleEndian.AppendUint32(nil, math.Float32bits(f))
			case dtype.Float16:
				raw = binary.LittleEndian.AppendUint16(nil, dtype.Float16FromFloat32(f))
			default:
				raw = binary.LittleEndian.AppendUint16(nil, dtype.BFloat16FromFloat32(f))
			}
			if v := loadScale(dt, raw, 0); !finite || !(math.IsNaN(float64(v)) || math.IsInf(float64(v), 0)) {
				copy(b[i*dt.Size():], raw)
				break
			}
		}
	}
	return b
}

// TestKernelsMatchGeneric compares the kernels this build dispatches to
// (assembly where the CPU has it) with the portable ones on long random
// inputs of odd lengths, so both the vector body and the tail run.
func TestKernelsMatchGeneric(t *testing.T) { forEachImpl(t, testKernelsMatchGeneric) }

// forEachImpl runs a test once with each assembly kernel set this CPU
// supports, comparing it with the Go kernels. (The Go kernels themselves
// are compared with eager by the conformance suite.)
func forEachImpl(t *testing.T, f func(t *testing.T)) { forEachKernelSet(t, false, f) }

// forEachKernelSet runs f as a subtest once with each kernel set this
// build and CPU run (the generic one too when generic is set), lowering
// impl, and logs which sets ran and why the others did not. The sets'
// VNNI forms are left out: only the int8 products use them (see
// forEachProductSet).
func forEachKernelSet(t *testing.T, generic bool, f func(t *testing.T)) {
	t.Helper()
	kernelSets(t, generic, false, f)
}

// forEachProductSet is forEachKernelSet with each set's VNNI form too,
// where the CPU has it: for tests of the int8 products.
func forEachProductSet(t *testing.T, generic bool, f func(t *testing.T)) {
	t.Helper()
	kernelSets(t, generic, true, f)
}

// forEachProductImpl is forEachImpl with each set's VNNI form too.
func forEachProductImpl(t *testing.T, f func(t *testing.T)) { forEachProductSet(t, false, f) }

func kernelSets(t *testing.T, generic, withVNNI bool, f func(t *testing.T)) {
	t.Helper()
	defer func(savedImpl int, savedVNNI bool) { impl, vnni = savedImpl, savedVNNI }(impl, vnni)
	sets := impls()
	if !generic {
		sets = sets[1:]
	}
	x := xcpu.X86
	var ran []string
	for _, i := range sets {
		impl, vnni = i, false
		ran = append(ran, KernelSet())
		t.Run(KernelSet(), f)
		if withVNNI && hasVNNI(i) {
			vnni = true
			ran = append(ran, KernelSet())
			t.Run(KernelSet(), f)
		}
	}
	hardware := []bool{true, x.HasAVX2 && x.HasF16C, x.HasAVX2 && x.HasF16C && x.HasAVX512F && x.HasAVX512BW}
	for i := len(impls()); i < len(kernelSetNames); i++ {
		why := "this CPU lacks it"
		if hardware[i] {
			why = "not in this build (purego, or not amd64)"
		}
		t.Logf("kernel set %s skipped: %s", kernelSetNames[i], why)
	}
	for _, i := range sets {
		if withVNNI && i != implGeneric && !hasVNNI(i) {
			t.Logf("kernel set %s+vnni skipped: this CPU lacks its VNNI (AVX-VNNI for avx2, AVX512-VNNI for avx512)", kernelSetNames[i])
		}
	}
	if len(ran) == 0 {
		t.Skip("no assembly kernels in this build or on this CPU")
	}
	t.Logf("kernel sets run: %s", strings.Join(ran, ", "))
}

func testKernelsMatchGeneric(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, dt := range dtype.Floats() {
		for _, n := range []int{1, 31, 32, 33, 63, 64, 65, 100, 127, 128, 1000, 4099} {
			src := randomBits(rng, dt, n, false)
			if got, want := absMaxBits(dt, src), absMaxBitsGeneric(dt, src); got != want {
				t.Fatalf("%v n=%d: absMaxBits %#x, generic %#x", dt, n, got, want)
			}
			fin := randomBits(rng, dt, n, true)
			for _, tv := range []float32{1, 0.0078125, 3e-3, 1e-30, 6.1e-5, 5.9e-8, 1e4, 3e38} {
				td := divisor(dt, tv)
				got, want := make([]byte, n), make([]byte, n)
				quantize(dt, fin, got, td, 0, 0)
				quantizeGeneric(dt, fin, want, td, 0, 0)
				if i := diff(got, want); i >= 0 {
					t.Fatalf("%v n=%d t=%v: quantize differs at %d: %d vs %d (x=%v)", dt, n, td, i, int8(got[i]), int8(want[i]), loadScale(dt, fin, i))
				}
			}
			q := make([]byte, n)
			for i := range q {
				q[i] = byte(rng.Uint32())
			}
			// Finite scales only: the kernels' precondition (the
			// operations refuse the others before any kernel runs).
			for _, s := range []float32{1, 0.1, 1e-3, 7e-41, 1e37, 3e38, -2.5} {
				got, want := make([]byte, n*dt.Size()), make([]byte, n*dt.Size())
				dequantize(dt, q, s, got)
				dequantizeGeneric(dt, q, s, want)
				if i := diff(got, want); i >= 0 {
					t.Fatalf("%v n=%d s=%v: dequantize differs at byte %d", dt, n, s, i)
				}
			}
		}
	}
}

func diff(a, b []byte) int {
	if bytes.Equal(a, b) {
		return -1
	}
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return len(a)
}

// quantizeRef is the contract's quantization of one element x (already
// widened) by the divisor t, from quant's scalar rules alone: y = rT(x/t),
// then round half to even, or (seed > 0) the floor of rT(y + rT(u)) with
// the noise of flat index i; both saturate to int8.
func quantizeRef(dt dtype.DType, x, t float32, seed int64, i uint64) int8 {
	y := dt.Round(x / t)
	if seed <= 0 {
		return quant.RoundHalfEven(y)
	}
	return quant.Floor(dt.Round(y + dt.Round(quant.Noise(seed, i))))
}

// quantizeModes are the ways the tests call quantizeHinted: round half to
// even or stochastically (with a seed and base whose sum crosses 2^32
// within a long input, so the dispatch's split at the wrap of the noise
// index's low half runs, at a multiple of the vector size or not: a run
// after the wrap must align its non-temporal stores again), ordinary or
// non-temporal stores (into an output misaligned by off bytes, so the head
// before the aligned part runs).
var quantizeModes = []struct {
	seed int64
	base uint64
	nt   bool
	off  int
}{
	{0, 0, false, 0}, {0, 0, true, 0}, {0, 5, true, 3},
	{7, 0, false, 0}, {12345, 1<<32 - 12345 - 40000, true, 0}, {12345, 1<<32 - 12345 - 40003, true, 0},
	{5, 1<<32 - 5 - 1001, true, 3}, {1 << 40, 1<<32 - 3, false, 1}, {99, 17, true, 7},
}

// checkQuantize quantizes the n elements of dt in src by t in every mode
// with the kernels in use, and fails at the first element that differs
// from quantizeRef.
func checkQuantize(t *testing.T, dt dtype.DType, src []byte, td float32) {
	t.Helper()
	// The bounded kernels too, on the inputs that meet their precondition
	// (every quotient below 2^15 in magnitude).
	var within []byte
	size := dt.Size()
	for i := range len(src) / size {
		if math.Abs(float64(loadScale(dt, src, i))/float64(td)) < 1<<15 {
			within = append(within, src[i*size:(i+1)*size]...)
		}
	}
	for _, c := range []struct {
		src     []byte
		bounded bool
	}{{src, false}, {within, true}} {
		n := len(c.src) / size
		want := make([]int8, n)
		for _, m := range quantizeModes {
			for i := range n {
				want[i] = quantizeRef(dt, loadScale(dt, c.src, i), td, m.seed, m.base+uint64(i))
			}
			buf := make([]byte, n+64)
			got := buf[m.off : m.off+n]
			quantizeHinted(dt, c.src, got, td, m.seed, m.base, hints{ahead: 4096, nt: m.nt, bounded: c.bounded})
			check := func(how string) {
				t.Helper()
				for i := range n {
					if int8(got[i]) != want[i] {
						t.Fatalf("%v t=%v seed=%d nt=%v bounded=%v%s: element %d (%v) quantizes to %d, want %d",
							dt, td, m.seed, m.nt, c.bounded, how, i, loadScale(dt, c.src, i), int8(got[i]), want[i])
					}
				}
			}
			check("")
			if c.bounded && m.seed == 0 {
				// The row-wise form, reading a next row as it goes: the
				// same bytes, reversed, so its abs-max is known.
				next := slices.Clone(c.src)
				slices.Reverse(next)
				clear(got)
				bits := quantizeRowNext(dt, c.src, got, td, next, hints{ahead: 4096, nt: m.nt})
				check(" (quantizeRowNext)")
				if wantBits := absMaxBitsGeneric(dt, next); bits != wantBits {
					t.Fatalf("%v t=%v nt=%v: quantizeRowNext's abs-max of the next row %#x, want %#x", dt, td, m.nt, bits, wantBits)
				}
			}
		}
	}
}

// TestVeltkamp proves the lean kernels' rounding to T (splitRound, which
// _asm's veltkamp follows: g = y·c, y' = g + (y - g), each rounded to
// float32, c = 2^(24-p) + 1 for T's p significant bits) against dtype's
// rounding: equal for every
// float32 y of three binades, which proves every binade in which y, y·c
// and the result stay normal and finite, since scaling by a power of two
// commutes with every step: all 2^-14 <= |y| < 2^15 for float16, 2^-126
// <= |y| < 2^15 for bfloat16 (the kernels' quotients are below 2^15).
// Below those the two may differ, but both round to the integer 0, which
// the test checks on every 7th float32 of the binades below (float16's
// two highest, and float32's subnormals). The steps are symmetric in
// sign. (Under the race detector, which finds nothing in a scalar loop,
// every 61st significand.)
func TestVeltkamp(t *testing.T) {
	step := uint32(1)
	if raceOn {
		step = 61
	}
	// float is the float32 of biased exponent e+127 (0: subnormal) and
	// significand bits m.
	float := func(e int, m uint32) float32 { return math.Float32frombits(uint32(e+127)<<23 | m) }
	for _, tc := range []struct {
		dt    dtype.DType
		c     float32
		low   int   // the least exponent of T's normal range
		below []int // exponents below it to sample
	}{{dtype.BFloat16, splitBF16, -126, []int{-127}}, {dtype.Float16, splitF16, -14, []int{-15, -16, -127}}} {
		// The Go kernels' split (quantizeBounded), which the assembly's
		// follows step for step.
		split := func(y float32) float32 { return splitRound(y, tc.c) }
		for _, e := range []int{tc.low, 0, 14} {
			for m := uint32(0); m < 1<<23; m += step {
				y := float(e, m)
				if got, want := split(y), tc.dt.Round(y); got != want {
					t.Fatalf("%v: the split of %v is %v, rT %v", tc.dt, y, got, want)
				}
			}
		}
		for _, e := range tc.below {
			for m := uint32(0); m < 1<<23; m += 7 * step {
				y := float(e, m)
				if got, want := math.RoundToEven(float64(split(y))), math.RoundToEven(float64(tc.dt.Round(y))); got != 0 || want != 0 {
					t.Fatalf("%v: %v rounds to %v split, %v by rT", tc.dt, y, got, want)
				}
			}
		}
	}
}

// TestQuantizeRowNextAbsMax checks the abs-max that quantizeRowNext
// returns for the next row, with one element raised above the rest at
// each position in turn (every lane of every register of the kernel's
// block, and the Go head and tail), ordinary and non-temporal.
func TestQuantizeRowNextAbsMax(t *testing.T) { forEachKernelSet(t, true, testQuantizeRowNextAbsMax) }

func testQuantizeRowNextAbsMax(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	for _, dt := range dtype.Floats() {
		size := dt.Size()
		for _, n := range []int{1, 31, 64, 133} {
			row := make([]byte, n*size)
			for i := range n {
				dtype.Store(row, dt, i, float32(rng.NormFloat64()))
			}
			for _, nt := range []bool{false, true} {
				for i := range n {
					next := make([]byte, n*size)
					for j := range n {
						dtype.Store(next, dt, j, float32(rng.Float64()-0.5))
					}
					dtype.Store(next, dt, i, float32(-3-rng.Float64()))
					buf := make([]byte, n+64)
					got := quantizeRowNext(dt, row, buf[3:3+n], divisor(dt, 0.25), next, hints{ahead: 4096, nt: nt})
					if want := absMaxBitsGeneric(dt, next); got != want {
						t.Fatalf("%v n=%d nt=%v, raised element %d: abs-max %#x, want %#x", dt, n, nt, i, got, want)
					}
				}
			}
		}
	}
}

// TestQuantizeExhaustive16 runs every finite float16 and bfloat16 value
// through every kernel set this build and CPU run (the Go one too), in
// every mode, for a spread of divisors, against quant's scalar rules.
// Exact rounding ties after the division are rare in random data, so only
// the exhaustive sweep reaches them reliably.
func TestQuantizeExhaustive16(t *testing.T) { forEachKernelSet(t, true, testQuantizeExhaustive16) }

func testQuantizeExhaustive16(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	divisors := []float32{1, 0.5, 3, 0.0123, 1e-3, 7.7e-6, 1e-30, 65504, 6.1e-5}
	for range 12 {
		divisors = append(divisors, float32(math.Ldexp(1+rng.Float64(), rng.IntN(40)-30)))
	}
	for _, dt := range []dtype.DType{dtype.Float16, dtype.BFloat16} {
		var src []byte
		for h := range 1 << 16 {
			if uint32(h)&0x7fff < infBits(dt) {
				src = binary.LittleEndian.AppendUint16(src, uint16(h))
			}
		}
		for _, d := range divisors {
			checkQuantize(t, dt, src, divisor(dt, d))
		}
	}
}

// TestQuantizeEdges32 runs float32's edge cases (zeros, subnormals, the
// extremes, exact ties around every integer the result can take and just
// beside them) and random values through every kernel set in every mode,
// against quant's scalar rules, with divisors that make some quotients
// overflow to infinity.
func TestQuantizeEdges32(t *testing.T) { forEachKernelSet(t, true, testQuantizeEdges32) }

func testQuantizeEdges32(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	vals := []float32{0, 1e-45, 1.17549435e-38, 1.1754942e-38, 3.4028235e38, 1, 0.5, 1.5, 2.5}
	for i := -130; i <= 130; i++ {
		tie := float32(i) + 0.5
		vals = append(vals, tie, math.Nextafter32(tie, 0), math.Nextafter32(tie, 1e9), float32(i))
	}
	for range 3000 {
		vals = append(vals, math.Float32frombits(rng.Uint32()&0x7f7fffff), float32(rng.NormFloat64()*100))
	}
	var src []byte
	for _, v := range vals {
		src = binary.LittleEndian.AppendUint32(src, math.Float32bits(v))
		src = binary.LittleEndian.AppendUint32(src, math.Float32bits(-v))
	}
	for _, d := range []float32{1, 0.5, 0.25, 3, 1.0 / 3, 1e-30, 1.17549435e-38, 1e30, 3.4028235e38, 0.0078125} {
		checkQuantize(t, dtype.Float32, src, d)
	}
}

// TestDequantizeExhaustive runs all 256 int8 values against many scales,
// including ones whose products round at every output type's ties,
// through every kernel set, with ordinary and non-temporal stores (into
// aligned and misaligned outputs), against the scalar rule
// rOut(float32(q) * s).
func TestDequantizeExhaustive(t *testing.T) { forEachKernelSet(t, true, testDequantizeExhaustive) }

func testDequantizeExhaustive(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	q := make([]byte, 256*4+13)
	for i := range q {
		q[i] = byte(i)
	}
	// Scales whose products with small q land exactly halfway between two
	// bfloat16 or float16 values, both on even and on odd neighbours, the
	// extremes (products overflow to infinity), then random finite bit
	// patterns (the operations refuse the others before any kernel runs).
	scales := []float32{1 + 0x1p-8, 1 + 3*0x1p-8, 1 + 0x1p-11, 1 + 3*0x1p-11, -(1 + 0x1p-8), 0.5 + 0x1p-9,
		1e-45, 3.4028235e38, 65504, 65520 / 127.0}
	for len(scales) < 2000 {
		if s := math.Float32frombits(rng.Uint32()); !math.IsNaN(float64(s)) && !math.IsInf(float64(s), 0) {
			scales = append(scales, s)
		}
	}
	for k, s := range scales {
		// The whole run, and (every other scale) a run too short for the
		// Go kernel's table of products.
		q := q
		if k%2 == 1 {
			q = q[:dequantTableMin-1]
		}
		for _, dt := range dtype.Floats() {
			size := dt.Size()
			want := make([]byte, len(q)*size)
			for i, b := range q {
				dtype.Store(want, dt, i, float32(int8(b))*s)
			}
			for _, m := range []struct {
				nt  bool
				off int
			}{{false, 0}, {true, 0}, {true, 2 * size}, {true, 1}} {
				buf := make([]byte, len(want)+64)
				got := buf[m.off : m.off+len(want)]
				dequantizeHinted(dt, q, s, got, m.nt)
				if i := diff(got, want); i >= 0 {
					t.Fatalf("%v s=%v (%#08x) nt=%v off=%d: dequantize of %d differs", dt, s, math.Float32bits(s), m.nt, m.off, int8(q[i/size]))
				}
			}
		}
	}
}

// TestQuantizeLookup compares the Go kernels' table of quotients with the
// element-by-element loop it is built from, on every 16-bit pattern (NaN
// and infinities too) for a spread of divisors, alternating the dtypes so
// that a table kept from one call meets a call with the other dtype and
// the same divisor's bits. testQuantizeExhaustive16 checks the loop
// against quant's rules.
func TestQuantizeLookup(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	divisors := []float32{1, 0.5, 3, 0.0123, 1e-3, 7.7e-6, 1e-30, 65504, 6.1e-5, 3e38}
	for range 12 {
		divisors = append(divisors, float32(math.Ldexp(1+rng.Float64(), rng.IntN(40)-30)))
	}
	src := patterns16()
	src = append(slices.Clone(src), src[:2*77]...) // a tail past the last whole step
	n := len(src) / 2
	for _, d := range divisors {
		for _, dt := range []dtype.DType{dtype.Float16, dtype.BFloat16} {
			td := divisor(dt, d)
			got, want := make([]byte, n), make([]byte, n)
			quantizeGeneric(dt, src, got, td, 0, 0)
			quantizeDirect(dt, src, want, td)
			if i := diff(got, want); i >= 0 {
				t.Fatalf("%v t=%v: pattern %#04x quantizes to %d through the table, %d directly",
					dt, td, binary.LittleEndian.Uint16(src[2*i:]), int8(got[i]), int8(want[i]))
			}
		}
	}
}

// TestWidenF16 compares widenF16 with dtype.Float16ToFloat32 on every
// pattern.
func TestWidenF16(t *testing.T) {
	for h := range 1 << 16 {
		if got, want := math.Float32bits(widenF16(uint16(h))), math.Float32bits(dtype.Float16ToFloat32(uint16(h))); got != want {
			t.Fatalf("widenF16(%#04x) = %#08x, want %#08x", h, got, want)
		}
	}
}

// TestMaxLanes compares the Go abs-max's lane-wise maximum with one lane
// at a time, for 16- and 32-bit lanes drawn from their edges (0, 1, the
// middle, the largest) and at random, so that every lane meets equal,
// smaller and larger values and its neighbours all three too.
func TestMaxLanes(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	for _, w := range []struct {
		bits      uint
		mask, top uint64
		edges     []uint64
	}{
		{16, 0x7fff7fff7fff7fff, 0x8000800080008000, []uint64{0, 1, 2, 0x3fff, 0x4000, 0x7ffe, 0x7fff}},
		{32, 0x7fffffff7fffffff, 0x8000000080000000, []uint64{0, 1, 2, 0x3fffffff, 0x40000000, 0x7ffffffe, 0x7fffffff}},
	} {
		lane := func() uint64 {
			if rng.IntN(2) == 0 {
				return w.edges[rng.IntN(len(w.edges))]
			}
			return rng.Uint64() & (1<<(w.bits-1) - 1)
		}
		for range 200000 {
			var m, v uint64
			for l := uint(0); l < 64; l += w.bits {
				a, b := lane(), lane()
				if rng.IntN(4) == 0 {
					b = a
				}
				m, v = m|a<<l, v|b<<l
			}
			got := maxLanes(m, v, w.top, w.bits-1)
			for l := uint(0); l < 64; l += w.bits {
				a, b := m>>l&(1<<w.bits-1), v>>l&(1<<w.bits-1)
				if g := got >> l & (1<<w.bits - 1); g != max(a, b) {
					t.Fatalf("%d-bit lanes %#x and %#x: lane %d is %#x, want %#x", w.bits, m, v, l/w.bits, g, max(a, b))
				}
			}
		}
	}
}

// TestAbsMaxBits compares absMaxBits on every kernel set with the largest
// sign-cleared element found one element at a time, on lengths around
// every unrolling and vector block, raising each element in turn to a
// large value.
func TestAbsMaxBits(t *testing.T) { forEachKernelSet(t, true, testAbsMaxBits) }

func testAbsMaxBits(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, dt := range dtype.Floats() {
		size := dt.Size()
		for n := range 140 {
			src := randomBits(rng, dt, n, false)
			for i := range n {
				// Raise element i (its sign kept).
				b := src[i*size : (i+1)*size]
				if size == 2 {
					binary.LittleEndian.PutUint16(b, binary.LittleEndian.Uint16(b)|0x7ff0)
				} else {
					binary.LittleEndian.PutUint32(b, binary.LittleEndian.Uint32(b)|0x7ff00000)
				}
				var want uint32
				for j := range n {
					if size == 2 {
						want = max(want, uint32(binary.LittleEndian.Uint16(src[2*j:]))&0x7fff)
					} else {
						want = max(want, binary.LittleEndian.Uint32(src[4*j:])&0x7fffffff)
					}
				}
				if got := absMaxBits(dt, src); got != want {
					t.Fatalf("%v n=%d, raised up to %d: absMaxBits %#x, want %#x", dt, n, i, got, want)
				}
			}
		}
	}
}

// TestRoundBits proves the Go kernels' roundings on the bits, roundBF16,
// roundF16Normal and float16Bits, against dtype's conversions: the rounding of a
// float32 depends only on its bits above the kept ones and on whether the
// dropped bits are below, at or above half, so every pattern of the kept
// bits (sign, exponent and mantissa) with dropped bits at each side of
// and at the halfway point covers every case. roundF16Normal must equal
// rT where y is a normal float16 and rT(y) finite, and quantize to the
// same integer everywhere.
func TestRoundBits(t *testing.T) {
	for _, c := range []struct {
		dt    dtype.DType
		round func(float32) float32
		drop  uint
	}{{dtype.BFloat16, roundBF16, 16}, {dtype.Float16, roundF16Normal, 13}} {
		half := uint32(1) << (c.drop - 1)
		lows := []uint32{0, 1, half - 1, half, half + 1, 2*half - 1}
		for hi := uint32(0); hi < 1<<(32-c.drop); hi++ {
			for _, lo := range lows {
				y := math.Float32frombits(hi<<c.drop | lo)
				if c.dt == dtype.Float16 {
					if got, want := float16Bits(y), dtype.Float16FromFloat32(y); got != want {
						t.Fatalf("float16Bits(%#08x) = %#04x, want %#04x", math.Float32bits(y), got, want)
					}
				}
				if math.IsNaN(float64(y)) {
					continue
				}
				got, want := c.round(y), c.dt.Round(y)
				normal := math.Abs(float64(y)) >= float64(c.dt.TinyNormal()) && !math.IsInf(float64(want), 0)
				if (c.dt == dtype.BFloat16 || normal) && math.Float32bits(got) != math.Float32bits(want) {
					t.Fatalf("%v: %#08x rounds to %v, want %v", c.dt, math.Float32bits(y), got, want)
				}
				if roundClamped(got) != quant.RoundHalfEven(want) {
					t.Fatalf("%v: %#08x quantizes to %d, want %d", c.dt, math.Float32bits(y), roundClamped(got), quant.RoundHalfEven(want))
				}
			}
		}
	}
}

// TestReciprocalQuotients checks what lets the bfloat16 and float16
// kernels multiply by r = 1/t (rounded to float32) instead of dividing by
// t, t a value of T as divisor returns: roundHalfEven(rT(x·r)) equals
// roundHalfEven(rT(x/t)) for every pair of T's significands, x's at
// exponents that put the quotient anywhere from below 1/2 (an integer of
// 0 either way) to past 128 (clamped either way). Exponents only scale
// both the quotient and the product exactly, so these pairs are all
// there is to check: float16 has 2^10 significands, bfloat16 2^7. (Under
// the race detector every third exponent; CI's purego run tries them all.)
func TestReciprocalQuotients(t *testing.T) {
	for _, dt := range []dtype.DType{dtype.Float16, dtype.BFloat16} {
		frac := map[dtype.DType]int{dtype.Float16: 10, dtype.BFloat16: 7}[dt]
		sig := func(m int) float32 { return float32(1 + math.Ldexp(float64(m), -frac)) }
		checked := 0
		stride := 1 // every exponent of the quotient; under the race detector every third
		if raceOn {
			stride = 3
		}
		for mt := range 1 << frac {
			tv := sig(mt)
			r := 1 / tv
			for mx := range 1 << frac {
				for e := -3; e <= 8; e += stride {
					for _, x := range []float32{float32(math.Ldexp(float64(sig(mx)), e)), -float32(math.Ldexp(float64(sig(mx)), e))} {
						div, mul := quant.RoundHalfEven(dt.Round(x/tv)), quant.RoundHalfEven(dt.Round(x*r))
						if div != mul {
							t.Fatalf("%v: %v / %v gives %d, %v · %v gives %d", dt, x, tv, div, x, r, mul)
						}
						checked++
					}
				}
			}
		}
		t.Logf("%v: %d quotients, the same integers", dt, checked)
	}
}
