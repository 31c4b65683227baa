package cpu

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	xcpu "golang.org/x/sys/cpu"

	"github.com/gokitchen/kitchen/dtype"
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

// kernelSetNames names the kernel sets by their impl value.
var kernelSetNames = []string{"generic", "avx2", "avx512"}

// forEachKernelSet runs f as a subtest once with each kernel set this
// build and CPU run (the generic one too when generic is set), lowering
// impl, and logs which sets ran and why the others did not.
func forEachKernelSet(t *testing.T, generic bool, f func(t *testing.T)) {
	t.Helper()
	defer func(saved int) { impl = saved }(impl)
	sets := impls()
	if !generic {
		sets = sets[1:]
	}
	var ran []string
	for _, i := range sets {
		impl = i
		ran = append(ran, kernelSetNames[i])
		t.Run(kernelSetNames[i], f)
	}
	x := xcpu.X86
	hardware := []bool{true, x.HasAVX2 && x.HasF16C, x.HasAVX2 && x.HasF16C && x.HasAVX512F && x.HasAVX512BW}
	for i := len(impls()); i < len(kernelSetNames); i++ {
		why := "this CPU lacks it"
		if hardware[i] {
			why = "not in this build (purego, or not amd64)"
		}
		t.Logf("kernel set %s skipped: %s", kernelSetNames[i], why)
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
			nan := math.Float32frombits(0x7fc12345)
			for _, s := range []float32{1, 0.1, 1e-3, 7e-41, 1e37, 3e38, float32(math.Inf(1)), nan, -2.5} {
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

// TestQuantizeExhaustive16 runs every finite float16 and bfloat16 value
// through the dispatched and the portable quantize kernels for a spread of
// divisors. Exact rounding ties after the division are rare in random data,
// so only the exhaustive sweep reaches them reliably.
func TestQuantizeExhaustive16(t *testing.T) { forEachImpl(t, testQuantizeExhaustive16) }

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
		n := len(src) / 2
		got, want := make([]byte, n), make([]byte, n)
		for _, d := range divisors {
			td := divisor(dt, d)
			quantize(dt, src, got, td, 0, 0)
			quantizeGeneric(dt, src, want, td, 0, 0)
			if i := diff(got, want); i >= 0 {
				t.Fatalf("%v t=%v: quantize of %#04x differs: %d vs %d", dt, td, binary.LittleEndian.Uint16(src[2*i:]), int8(got[i]), int8(want[i]))
			}
		}
	}
}

// TestDequantizeExhaustive runs all 256 int8 values against many scales,
// including ones whose products round at every output type's ties.
func TestDequantizeExhaustive(t *testing.T) { forEachImpl(t, testDequantizeExhaustive) }

func testDequantizeExhaustive(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	q := make([]byte, 256*4)
	for i := range q {
		q[i] = byte(i)
	}
	// Scales whose products with small q land exactly halfway between two
	// bfloat16 or float16 values, both on even and on odd neighbours, then
	// random bit patterns (NaN and infinity included).
	scales := []float32{1 + 0x1p-8, 1 + 3*0x1p-8, 1 + 0x1p-11, 1 + 3*0x1p-11, -(1 + 0x1p-8), 0.5 + 0x1p-9}
	for range 2000 {
		scales = append(scales, math.Float32frombits(rng.Uint32()))
	}
	for _, s := range scales {
		for _, dt := range dtype.Floats() {
			got, want := make([]byte, len(q)*dt.Size()), make([]byte, len(q)*dt.Size())
			dequantize(dt, q, s, got)
			dequantizeGeneric(dt, q, s, want)
			if i := diff(got, want); i >= 0 {
				t.Fatalf("%v s=%v (%#08x): dequantize of %d differs", dt, s, math.Float32bits(s), int8(q[i/dt.Size()]))
			}
		}
	}
}
