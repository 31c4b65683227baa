//go:build amd64 && !purego

package cpu

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gokitchen/kitchen/dtype"
)

// TestHasNaN puts a NaN (of random sign and payload, signaling or quiet)
// at each position of rows of many lengths, and checks that hasNaN finds
// it, and that infinities and finite values are not taken for one. rotate
// relies on it to send rows with NaN to quant.Rotate.
func TestHasNaN(t *testing.T) { forEachKernelSet(t, true, testHasNaN) }

func testHasNaN(t *testing.T) {
	rng := rand.New(rand.NewPCG(19, 20))
	for n := range 300 {
		v := rotationRow(rng, "huge", n)
		for i := range v {
			if rng.IntN(8) == 0 {
				v[i] = float32(math.Inf(1 - 2*rng.IntN(2)))
			}
		}
		if hasNaN(v) {
			t.Fatalf("n=%d: a NaN found in %v", n, v)
		}
		for i := range v {
			f := v[i]
			v[i] = randomNaN(rng)
			if !hasNaN(v) {
				t.Fatalf("n=%d: the NaN %#08x at %d not found", n, math.Float32bits(v[i]), i)
			}
			v[i] = f
		}
	}
}

// TestRotateRowMatchesPasses checks the fused row kernels (rotateRowFused,
// rotateQRowFused) against the passes they stand for (widenRow or scaleInt8,
// rotate, storeRow, absMaxBits), bit for bit, on every group size and
// dtype they serve and every mix of values: overflow to infinity and NaN,
// subnormal results, ties in the rounding to bfloat16 and float16. A row
// that holds a NaN (an error for the quantization, whose bits do not
// matter then) must only be reported as holding a non-finite value.
func TestRotateRowMatchesPasses(t *testing.T) { forEachImpl(t, testRotateRowMatchesPasses) }

func testRotateRowMatchesPasses(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	rows := 0
	for _, g := range allGroups {
		unit := max(64, g)
		for _, n := range []int{unit, 2 * unit, 3 * unit, 5 * unit} {
			if !fusedRotation(n, g) || n > 8192 {
				continue
			}
			for _, dt := range dtype.Floats() {
				size := dt.Size()
				for _, mix := range rotationMixes {
					for rep := range 3 {
						src := make([]byte, n*size)
						for i, v := range rotationRow(rng, mix, n) {
							dtype.Store(src, dt, i, v)
						}
						f := make([]float32, n)
						widenRow(dt, src, f)
						nan := hasNaN(f)
						rotate(f, g)
						want := make([]byte, n*size)
						storeRow(dt, want, f)
						wantBits := absMaxBits(dt, want)
						got := make([]byte, n*size)
						gotBits := rotateRowFused(dt, src, got, g, make([]float32, n))
						name := fmt.Sprintf("g=%d n=%d %s %s #%d", g, n, dt, mix, rep)
						switch {
						case nan:
							if gotBits < infBits(dt) {
								t.Fatalf("%s: a row with NaN has largest bits %#x", name, gotBits)
							}
						case !bytes.Equal(got, want) || gotBits != wantBits:
							i := 0
							for got[i] == want[i] {
								i++
							}
							t.Fatalf("%s: byte %d differs (element %d); largest bits %#x, want %#x", name, i, i/size, gotBits, wantBits)
						}
						rows++
					}
				}
				// Dequantization: every int8 value, scales from
				// subnormal products to overflow.
				for _, s := range []float32{1.0 / 127, 0.37, 1e-41, 3e-39, 1e30, 3e36} {
					q := make([]byte, n)
					for i := range q {
						q[i] = byte(rng.Uint32())
					}
					q[0], q[n-1] = 0x80, 0x7f
					f := make([]float32, n)
					scaleInt8(q, s, f)
					rotate(f, g)
					want := make([]byte, n*size)
					storeRow(dt, want, f)
					got := make([]byte, n*size)
					rotateQRowFused(dt, q, s, got, g, make([]float32, n), q)
					if !bytes.Equal(got, want) {
						t.Fatalf("dequantize g=%d n=%d %s scale %g: rows differ", g, n, dt, s)
					}
					rows++
				}
			}
		}
	}
	if rows == 0 {
		t.Skipf("no fused rotation with %s", KernelSet())
	}
	t.Logf("%d rows identical to the passes", rows)
}
