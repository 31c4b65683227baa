package cpu

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gokitchen/kitchen/backend"
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/op"
	"github.com/gokitchen/kitchen/quant"
	"github.com/gokitchen/kitchen/tensor"
)

// The ConvRot row kernels (rotate, widenRow, storeRow, scaleInt8, mulInt8)
// against quant.Rotate and the portable kernels, bit for bit, and the
// ConvRot operations against eager for every group size.

// allGroups are the ConvRot group sizes the tests run, up to a group much
// larger than any row buffer of the kernels.
var allGroups = []int{4, 16, 64, 256, 1024, 4096}

// rotationMixes name the kinds of rows rotationRow makes.
var rotationMixes = []string{"finite", "huge", "tiny", "cancelling", "special"}

// rotationRow returns n values of one mix:
//
//   - finite: random finite bit patterns (every exponent, subnormals and
//     ±0 included), normal values and small integers, so that sums round
//     at every scale and the order of the additions shows;
//   - huge: magnitudes up to the largest float32, where 2x and the sums
//     overflow to infinity (and infinities cancel to NaN);
//   - tiny: subnormals and the smallest normals, where the final product
//     by 2^-(log4 g) rounds;
//   - cancelling: x, -x plus a little, so that results are differences of
//     nearly equal values;
//   - special: finite values with NaNs of random payloads (signaling and
//     quiet, both signs) and infinities here and there.
func rotationRow(rng *rand.Rand, mix string, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		switch mix {
		case "finite":
			v[i] = finiteValue(rng)
		case "huge":
			v[i] = float32(math.Ldexp(rng.Float64()+0.5, 127-rng.IntN(4)))
			if rng.IntN(2) == 0 {
				v[i] = -v[i]
			}
			if rng.IntN(4) == 0 {
				v[i] = finiteValue(rng)
			}
		case "tiny":
			b := rng.Uint32() & 0x80ffffff // exponent 0 or 1: subnormal or the smallest normals
			v[i] = math.Float32frombits(b)
		case "cancelling":
			if i%2 == 0 {
				v[i] = float32(rng.NormFloat64() * math.Ldexp(1, rng.IntN(40)-20))
			} else {
				v[i] = -v[i-1] * (1 + float32(rng.NormFloat64())*0x1p-20)
			}
		case "special":
			switch rng.IntN(40) {
			case 0:
				v[i] = randomNaN(rng)
			case 1:
				v[i] = float32(math.Inf(1 - 2*rng.IntN(2)))
			default:
				v[i] = finiteValue(rng)
			}
		default:
			panic(mix)
		}
	}
	return v
}

// finiteValue is a random finite float32: mostly of magnitudes within a
// few powers of two of each other (so that every addend counts in the
// sums), else a small integer, a zero of either sign, or random bits.
func finiteValue(rng *rand.Rand) float32 {
	switch rng.IntN(16) {
	case 0:
		return float32(rng.IntN(512) - 256)
	case 1:
		return math.Float32frombits(uint32(rng.IntN(2)) << 31) // ±0
	case 2:
	default:
		return float32(rng.NormFloat64() * math.Ldexp(1, rng.IntN(8)))
	}
	for {
		f := math.Float32frombits(rng.Uint32())
		if !math.IsNaN(float64(f)) && !math.IsInf(float64(f), 0) {
			return f
		}
	}
}

// randomNaN is a NaN with a random sign and payload, signaling or quiet.
func randomNaN(rng *rand.Rand) float32 {
	for {
		b := 0x7f800000 | rng.Uint32()&0x807fffff
		if b&0x7fffff != 0 {
			return math.Float32frombits(b)
		}
	}
}

// rotationLengths are row lengths for group g: one to a few groups, and
// for small groups every number of groups up to past the kernels' unit of
// 64 values, so that both the vector body and the tail left to Go run.
func rotationLengths(g int) []int {
	var out []int
	switch {
	case g <= 16:
		for m := 1; m*g <= 64*3+g; m++ {
			out = append(out, m*g)
		}
	case g <= 256:
		out = []int{g, 2 * g, 3 * g, 5 * g, 8 * g}
	default:
		out = []int{g, 2 * g, 3 * g}
	}
	return out
}

// firstBitDiff returns the first index where got and want differ in their
// bits (NaN payloads included), or -1.
func firstBitDiff(got, want []float32) int {
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			return i
		}
	}
	return -1
}

// TestRotateMatchesQuant runs the rotation of each kernel set against
// quant.Rotate on every group size, many row lengths and every mix of
// values, comparing bits.
func TestRotateMatchesQuant(t *testing.T) { forEachImpl(t, testRotateMatchesQuant) }

func testRotateMatchesQuant(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	checked := 0
	for _, g := range allGroups {
		for _, n := range rotationLengths(g) {
			for _, mix := range rotationMixes {
				for rep := range 4 {
					in := rotationRow(rng, mix, n)
					want := append([]float32(nil), in...)
					quant.Rotate(want, g)
					got := append([]float32(nil), in...)
					rotate(got, g)
					if i := firstBitDiff(got, want); i >= 0 {
						grp := i / g * g
						t.Fatalf("g=%d n=%d %s #%d: value %d is %#08x (%v), quant.Rotate gives %#08x (%v); group input %v",
							g, n, mix, rep, i, math.Float32bits(got[i]), got[i], math.Float32bits(want[i]), want[i], in[grp:grp+min(g, 16)])
					}
					checked += n
				}
			}
		}
	}
	t.Logf("%d rotated values identical to quant.Rotate", checked)
}

// rotatePairwise is quant.Rotate with another summation order, s =
// (a+b)+(c+d): a rotation that is right in exact arithmetic but rounds
// differently.
func rotatePairwise(v []float32, g int) {
	scale := float32(1)
	for stride := 1; stride < g; stride *= 4 {
		scale /= 2
		for base := 0; base < len(v); base += 4 * stride {
			for j := base; j < base+stride; j++ {
				a, b, c, d := v[j], v[j+stride], v[j+2*stride], v[j+3*stride]
				s := (a + b) + (c + d)
				v[j] = s - float32(2*d)
				v[j+stride] = s - float32(2*c)
				v[j+2*stride] = s - float32(2*b)
				v[j+3*stride] = s - float32(2*a)
			}
		}
	}
	for i := range v {
		v[i] *= scale
	}
}

// TestRotationDataDiscriminates checks that the values of
// TestRotateMatchesQuant tell summation orders apart: another order gives
// different bits on them, so the bit-for-bit comparison means something.
func TestRotationDataDiscriminates(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, g := range allGroups {
		for _, mix := range []string{"finite", "cancelling"} {
			in := rotationRow(rng, mix, max(4*g, 4096))
			want := append([]float32(nil), in...)
			quant.Rotate(want, g)
			other := append([]float32(nil), in...)
			rotatePairwise(other, g)
			differ := 0
			for i := range want {
				if math.Float32bits(other[i]) != math.Float32bits(want[i]) {
					differ++
				}
			}
			if differ == 0 {
				t.Errorf("g=%d %s: the pairwise order gives the same bits on all %d values", g, mix, len(in))
			}
		}
	}
}

// TestRowKernelsMatchGeneric compares the widening, rounding and int8
// scaling row kernels with the portable ones on random bits (NaN payloads
// included) of many lengths.
func TestRowKernelsMatchGeneric(t *testing.T) { forEachImpl(t, testRowKernelsMatchGeneric) }

func testRowKernelsMatchGeneric(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	var lengths []int
	for n := range 70 {
		lengths = append(lengths, n)
	}
	lengths = append(lengths, 127, 128, 129, 1000, 3840, 4099)
	for _, n := range lengths {
		for _, dt := range dtype.Floats() {
			src := randomBits(rng, dt, n, false)
			got, want := make([]float32, n), make([]float32, n)
			widenRow(dt, src, got)
			widenBlock(dt, src, 0, want)
			if dt == dtype.Float16 {
				quietNaNs(want) // F16C quiets signaling NaNs (see widenRow)
			}
			if i := firstBitDiff(got, want); i >= 0 {
				t.Fatalf("widenRow %v n=%d: element %d is %#08x, widenBlock gives %#08x", dt, n, i, math.Float32bits(got[i]), math.Float32bits(want[i]))
			}

			v := make([]float32, n)
			for i := range v {
				v[i] = math.Float32frombits(rng.Uint32())
			}
			gb, wb := make([]byte, n*dt.Size()), make([]byte, n*dt.Size())
			storeRow(dt, gb, v)
			storeBlock(dt, wb, 0, v)
			if i := diff(gb, wb); i >= 0 {
				t.Fatalf("storeRow %v n=%d: element %d of %#08x differs", dt, n, i/dt.Size(), math.Float32bits(v[i/dt.Size()]))
			}
		}
		q := make([]byte, n)
		for i := range q {
			q[i] = byte(rng.Uint32())
		}
		s := make([]float32, n)
		for i := range s {
			s[i] = math.Float32frombits(rng.Uint32())
		}
		got, want := make([]float32, n), make([]float32, n)
		for _, one := range []float32{1, 0.1, -2.5, 7e-41, 3e38, float32(math.Inf(-1)), math.Float32frombits(0x7fa00001), math.Float32frombits(0xffc00123)} {
			scaleInt8(q, one, got)
			scaleInt8Generic(q, one, want)
			if i := firstBitDiff(got, want); i >= 0 {
				t.Fatalf("scaleInt8 n=%d s=%#08x: element %d differs", n, math.Float32bits(one), i)
			}
		}
		mulInt8(q, s, got)
		mulInt8Generic(q, s, want)
		if i := firstBitDiff(got, want); i >= 0 {
			t.Fatalf("mulInt8 n=%d: element %d (q %d, s %#08x) is %#08x, want %#08x", n, i, int8(q[i]), math.Float32bits(s[i]),
				math.Float32bits(got[i]), math.Float32bits(want[i]))
		}
	}
}

// quietNaNs sets the quiet bit of every NaN in v.
func quietNaNs(v []float32) {
	for i, f := range v {
		if f != f {
			v[i] = math.Float32frombits(math.Float32bits(f) | 0x400000)
		}
	}
}

// TestWidenRowExhaustive16 widens every float16 and bfloat16 value.
func TestWidenRowExhaustive16(t *testing.T) { forEachImpl(t, testWidenRowExhaustive16) }

func testWidenRowExhaustive16(t *testing.T) {
	src := make([]byte, 2<<16)
	for h := range 1 << 16 {
		binary.LittleEndian.PutUint16(src[2*h:], uint16(h))
	}
	for _, dt := range []dtype.DType{dtype.Float16, dtype.BFloat16} {
		got, want := make([]float32, 1<<16), make([]float32, 1<<16)
		widenRow(dt, src, got)
		widenBlock(dt, src, 0, want)
		if dt == dtype.Float16 {
			quietNaNs(want)
		}
		if i := firstBitDiff(got, want); i >= 0 {
			t.Fatalf("widenRow %v of %#04x: %#08x, widenBlock gives %#08x", dt, i, math.Float32bits(got[i]), math.Float32bits(want[i]))
		}
	}
}

// TestStoreRowTies rounds, for every float16 and bfloat16 value h, the
// float32 values exactly halfway to the next one and one float32 step
// either side of that, which random bits rarely reach.
func TestStoreRowTies(t *testing.T) { forEachImpl(t, testStoreRowTies) }

func testStoreRowTies(t *testing.T) {
	for _, dt := range []dtype.DType{dtype.Float16, dtype.BFloat16} {
		var v []float32
		for h := range 1 << 16 {
			lo := widenBits(dt, uint32(h))
			hi := widenBits(dt, uint32(h+1))
			if h&0x7fff == 0x7fff || math.IsNaN(float64(lo)) || math.IsInf(float64(lo), 0) {
				continue
			}
			mid := float32((float64(lo) + float64(hi)) / 2) // exact: 11 or 8 bits of significand and one more
			m := math.Float32bits(mid)
			v = append(v, mid, math.Float32frombits(m-1), math.Float32frombits(m+1), lo)
		}
		got, want := make([]byte, len(v)*2), make([]byte, len(v)*2)
		storeRow(dt, got, v)
		storeBlock(dt, want, 0, v)
		if i := diff(got, want); i >= 0 {
			t.Fatalf("storeRow %v of %v (%#08x) differs", dt, v[i/2], math.Float32bits(v[i/2]))
		}
	}
}

// TestConvRotMatchesEager runs the cpu ConvRot operations, with every
// kernel set, against eager on every group size, every float dtype and
// values that overflow, underflow and carry NaN: outputs bit for bit, and
// the same errors.
func TestConvRotMatchesEager(t *testing.T) {
	reg := newRegistry(t)
	forEachKernelSet(t, true, func(t *testing.T) {
		var tl runTally
		defer func() { t.Logf("%d calls gave the same outputs, %d the same error", tl.outputs, tl.errors) }()
		rng := rand.New(rand.NewPCG(15, 16))
		for _, g := range allGroups {
			for _, k := range []int{g, 3 * g} {
				rows := max(2, 1024/k)
				for _, dt := range dtype.Floats() {
					for _, mix := range rotationMixes {
						x := convRotTensor(t, rng, dt, mix, rows, k)
						seeds := []int64{0}
						if mix == "finite" || mix == "cancelling" {
							seeds = append(seeds, 7) // stochastic rounding
						}
						for _, seed := range seeds {
							name := fmt.Sprintf("quantize g=%d %v[%d %d] %s seed %d", g, dt, rows, k, mix, seed)
							a := &op.ConvRotWeightArgs{Weight: x, Group: g, Seed: seed}
							sameRun(t, &tl, name, op.QuantizeConvRotWeight, reg, a)
							sameRun(t, &tl, name+" (rowwise)", op.QuantizeAndRotateRowwise, reg, &op.RotateRowwiseArgs{X: x, Group: g, Seed: seed})
						}
					}
					q := must(tensor.FromInt8(randomInt8(rng, rows*k), rows, k))
					for _, shape := range [][]int{{}, {rows, 1}, {rows, k}} {
						n := 1
						for _, d := range shape {
							n *= d
						}
						for _, mix := range []string{"finite", "special", "tiny", "huge"} {
							// Scales must be finite numbers > 0: the special
							// mix checks the errors, the others are made
							// positive (a zero left here and there is an error).
							scale := convRotTensor(t, rng, dt, mix, n, 1)
							if mix != "special" {
								scale = positive(scale)
							}
							scale = must(scale.Reshape(shape...))
							for _, out := range dtype.Floats() {
								name := fmt.Sprintf("dequantize g=%d q[%d %d] scale %v%v %s -> %v", g, rows, k, dt, shape, mix, out)
								a := &op.ConvRotDequantizeDTypeArgs{ConvRotDequantizeArgs: op.ConvRotDequantizeArgs{DequantizeArgs: op.DequantizeArgs{Q: q, Scale: scale}, Group: g}, OutDType: out}
								sameRun(t, &tl, name, op.DequantizeConvRotWeightDType, reg, a)
								if len(shape) < 2 || shape[1] == 1 {
									idx := must(tensor.FromBytes(dtype.Int32, indexBytes(rng, 2*rows+1, rows), 2*rows+1))
									e := &op.EmbeddingArgs{Q: q, Scale: scale, Indices: idx, Group: g, OutDType: out}
									sameRun(t, &tl, "embedding "+name, op.DequantizeEmbedding, reg, e)
								}
							}
							sameRun(t, &tl, fmt.Sprintf("dequantize float32 g=%d scale %v%v %s", g, dt, shape, mix), op.DequantizeConvRotWeight, reg,
								&op.ConvRotDequantizeArgs{DequantizeArgs: op.DequantizeArgs{Q: q, Scale: scale}, Group: g})
						}
					}
				}
			}
		}
	})
}

// convRotTensor is a [rows, k] tensor of dt holding a mix of
// rotationRow's, rounded to dt. Rounding quiets NaNs, so the special mix
// then gets NaNs of dt with random bits, signaling ones included.
func convRotTensor(t *testing.T, rng *rand.Rand, dt dtype.DType, mix string, rows, k int) *tensor.Tensor {
	t.Helper()
	v := rotationRow(rng, mix, rows*k)
	b := make([]byte, len(v)*dt.Size())
	storeBlock(dt, b, 0, v)
	if mix == "special" {
		for i, f := range v {
			if f != f {
				putNaN(rng, dt, b, i)
			}
		}
	}
	return must(tensor.FromBytes(dt, b, rows, k))
}

// positive returns x with every sign bit cleared and every zero made the
// smallest subnormal.
func positive(x *tensor.Tensor) *tensor.Tensor {
	b := append([]byte(nil), must(x.Bytes())...)
	size := x.DType().Size()
	for i := 0; i < len(b); i += size {
		e := b[i : i+size]
		e[size-1] &= 0x7f
		if !slices.ContainsFunc(e, func(c byte) bool { return c != 0 }) {
			e[0] = 1
		}
	}
	return must(tensor.FromBytes(x.DType(), b, x.Shape()...))
}

// putNaN stores a NaN of dt with a random sign and payload, signaling or
// quiet, as element i of b.
func putNaN(rng *rand.Rand, dt dtype.DType, b []byte, i int) {
	if dt == dtype.Float32 {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(randomNaN(rng)))
		return
	}
	inf := uint16(infBits(dt))
	for {
		h := inf | uint16(rng.Uint32())&^inf
		if h&^0x8000 != inf {
			binary.LittleEndian.PutUint16(b[2*i:], h)
			return
		}
	}
}

func randomInt8(rng *rand.Rand, n int) []int8 {
	q := make([]int8, n)
	for i := range q {
		q[i] = int8(rng.Uint32())
	}
	return q
}

// indexBytes returns n int32 indices below rows.
func indexBytes(rng *rand.Rand, n, rows int) []byte {
	b := make([]byte, 4*n)
	for i := range n {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(rng.IntN(rows)))
	}
	return b
}

// runTally counts the calls sameRun compared.
type runTally struct{ outputs, errors int }

// sameRun runs o with args on cpu and on eager and fails unless both give
// the same bytes, or both fail with the same argument error (operation,
// parameter, row and sentinel).
func sameRun[A backend.Args, R backend.Result](t *testing.T, tl *runTally, name string, o *backend.Op[A, R], reg *backend.Registry, args A) {
	t.Helper()
	got, _, gerr := o.Run(context.Background(), reg, args, Name)
	want, _, werr := o.Run(context.Background(), reg, args, "eager")
	if gerr != nil || werr != nil {
		var g, w *backend.ArgError
		if !errors.As(gerr, &g) || !errors.As(werr, &w) || g.Op != w.Op || g.Param != w.Param || g.Row != w.Row || !errors.Is(gerr, w.Err) {
			t.Fatalf("%s: cpu error %v, eager error %v", name, gerr, werr)
		}
		tl.errors++
		return
	}
	tl.outputs++
	g, w := got.Outputs(), want.Outputs()
	for i := range w {
		gb, wb := must(g[i].Bytes()), must(w[i].Bytes())
		if j := diff(gb, wb); j >= 0 {
			t.Fatalf("%s: output %d differs first at element %d", name, i, j/w[i].DType().Size())
		}
		g[i].Release()
		w[i].Release()
	}
}

// BenchmarkRotate rotates a row of 4096 float32 in place with each group
// size, on the kernel set in use.
func BenchmarkRotate(b *testing.B) {
	rng := rand.New(rand.NewPCG(17, 18))
	v := make([]float32, 4096)
	for i := range v {
		v[i] = float32(rng.NormFloat64()) // like weights; the rotation keeps the norm
	}
	for _, g := range allGroups {
		b.Run(fmt.Sprintf("g=%d", g), func(b *testing.B) {
			b.SetBytes(int64(4 * len(v)))
			for b.Loop() {
				rotate(v, g)
			}
		})
	}
}
