package backendtest

import (
	"encoding/binary"
	"math"
	"math/rand/v2"

	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/tensor"
)

// gen holds the inputs of one random case, from which an operation's
// random function builds a call: bytes that values turns into elements,
// the float dtype under test (x's, or the scale's), a shape, a seed
// (0: round half to even) and further choices (pick).
type gen struct {
	raw   []byte
	dt    dtype.DType
	shape []int
	seed  int64
	sel   uint64
	group int // a ConvRot group size, set by the cases that need one
	// large asks the matrix products for shapes that reach the cpu
	// backend's few-row and many-row paths (FuzzCall sets it; the suite's
	// random cases stay small, for CI's time).
	large bool
}

// pick returns a choice in [0, n), taken from the case's choices.
func (g *gen) pick(n int) int {
	v := int(g.sel % uint64(n))
	g.sel /= uint64(n)
	return v
}

// size is how many times the usual rows, depth and width the matrix
// products' shapes may take: 6 where large is set, else 1.
func (g *gen) size() int {
	if g.large {
		return 6
	}
	return 1
}

// k is the length of the shape's rows.
func (g *gen) k() int { return g.shape[len(g.shape)-1] }

// randomGen draws a case: up to 9 rows of up to 300 elements, some 1-D and
// some 3-D.
func randomGen(rng *rand.Rand, dt dtype.DType, stochastic bool) *gen {
	g := &gen{raw: make([]byte, 1+rng.IntN(600)), dt: dt, sel: rng.Uint64()}
	for i := range g.raw {
		g.raw[i] = byte(rng.Uint32())
	}
	rows, k := 1+rng.IntN(9), 1+rng.IntN(300)
	switch rng.IntN(4) {
	case 0:
		g.shape = []int{k}
	case 1:
		g.shape = []int{2, rows, k}
	default:
		g.shape = []int{rows, k}
	}
	if stochastic {
		g.seed = 1 + rng.Int64N(1<<41)
	}
	return g
}

// FuzzCall builds a call of one of the suite's operations from fuzz input:
// sel chooses the float dtype, the operation and the rank, rows and k the
// shape (up to 9 rows of up to 300; rows of 128 or more also make the
// matrix products' shapes up to six times their usual rows, depth and
// width), seed > 0 stochastic rounding, and raw the values (see values).
// The operation is an index into the sorted names, so a new operation
// moves the saved inputs of testdata/fuzz onto others: they stay valid
// cases, of different operations.
func FuzzCall(raw []byte, sel, rows uint8, k uint16, seed int64) Call {
	g := &gen{raw: raw, dt: dtype.Floats()[int(sel)%3], shape: []int{1 + int(rows)%9, 1 + int(k)%300}}
	if sel&0x80 != 0 {
		g.shape = g.shape[1:]
	} else if sel&0x40 != 0 {
		g.shape = []int{2, g.shape[0], g.shape[1]}
	}
	g.seed = max(seed, 0) % (1 << 45)
	g.large = rows >= 128
	// The further choices: a mix of every input, so that each is varied by
	// the fuzzer independently of the shape.
	g.sel = uint64(rows)<<40 | uint64(k)<<24 | uint64(sel)<<16 | uint64(len(raw))
	g.sel ^= g.sel >> 29
	g.sel *= 0xbf58476d1ce4e5b9
	g.sel ^= g.sel >> 32
	ops := opNames()
	return suite[ops[int(sel/3)%len(ops)]].random(g)
}

// values builds n elements of dt from the case's bytes, steering many of
// them to the inputs that break kernels: exact ties after scaling, values
// at the ±127.5 boundary, zeros, subnormals, huge and tiny magnitudes, and
// (unless finite is set) raw bit patterns, NaN and infinities included. k
// is the row length: each row is scaled by its own power of two.
func (g *gen) values(dt dtype.DType, n, k int, finite bool) []byte {
	raw := g.raw
	if len(raw) == 0 {
		raw = []byte{0}
	}
	at := func(i int) byte { return raw[i%len(raw)] }
	out := make([]byte, n*dt.Size())
	put := func(i int, f float32) { dtype.Store(out, dt, i, f) }
	for i := range n {
		b0, b1, b2 := at(3*i), at(3*i+1), at(3*i+2)
		// Each row is scaled by its own power of two, so that case 2 sets
		// the row's abs-max to 127 * unit and cases 1 and 3 then land on
		// exact ties and step boundaries after the division.
		e := int(at(7*(i/k))%24) - 12
		unit := float32(math.Ldexp(1, e))
		switch b0 % 10 {
		case 0:
			put(i, 0)
		case 1: // a tie once divided by the row's scale (when case 2 set it)
			put(i, (float32(int(b1)-128)+0.5)*unit)
		case 2: // makes the row's abs-max 127 * 2^e
			put(i, float32(1-2*int(b1%2))*127*unit)
		case 3: // just inside and outside ±127.5 steps
			put(i, float32(1-2*int(b1%2))*(127+float32(b1%8)*0.125)*unit)
		case 4: // subnormal in dt
			put(i, float32(b1)*dt.TinyNormal()/256)
		case 5: // huge
			put(i, float32(1-2*int(b1%2))*[]float32{65504, 3e38, 1e30, 6e4}[b2%4])
		case 6: // tiny
			put(i, float32(1-2*int(b1%2))*[]float32{1e-30, 1e-38, 6e-5, 1e-7}[b2%4])
		case 7: // raw bits
			if dt.Size() == 2 {
				binary.LittleEndian.PutUint16(out[2*i:], uint16(b1)<<8|uint16(b2))
			} else {
				binary.LittleEndian.PutUint32(out[4*i:], uint32(b1)<<24|uint32(b2)<<16|uint32(b0)<<8|uint32(b1))
			}
		default:
			put(i, (float32(b1)-128)/16*unit)
		}
		if v := dtype.Load(out, dt, i); finite && (math.IsNaN(float64(v)) || math.IsInf(float64(v), 0)) {
			put(i, 0) // huge values overflow float16
		}
	}
	return out
}

// x is a float tensor of the case's dtype and shape holding its values.
func (g *gen) x() *tensor.Tensor {
	return hostTensor(g.dt, g.values(g.dt, tensor.Numel(g.shape), g.k(), false), g.shape...)
}

// int8s returns n int8 values made from the case's bytes, every value
// from -128 to 127 among them when n is large enough.
func (g *gen) int8s(n int) []byte {
	raw := g.raw
	if len(raw) == 0 {
		raw = []byte{0}
	}
	q := make([]byte, n)
	for i := range q {
		q[i] = raw[i%len(raw)] + byte(i*37)
	}
	return q
}

// hostTensor wraps generated bytes in a host tensor.
func hostTensor(dt dtype.DType, b []byte, shape ...int) *tensor.Tensor {
	return must(tensor.FromBytes(dt, b, shape...))
}

// floats makes a host tensor of dt holding v, each value rounded to dt.
func floats(dt dtype.DType, v []float32, shape ...int) *tensor.Tensor {
	return must(tensor.FromFloat32(dt, v, shape...))
}

// ramp returns n small values, -5 to 5.
func ramp(n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(i%11) - 5
	}
	return v
}

// splitShape is the shape of the inputs of the split paths: 262,144
// elements, 256 KiB of int8, 512 KiB of 16-bit floats and 1 MiB of
// float32, several times the cpu backend's grain of 64 KiB (the least it
// hands to one worker), so that it splits each call into parts. Its
// rows are short enough that every part holds many rows. backend/cpu's
// tests check that the calls of these sizes are split.
var splitShape = []int{1024, 256}

// SplitShape returns the shape of the inputs that the suite's split paths
// use, for a backend's own tests to check that it does split them.
func SplitShape() []int { return append([]int(nil), splitShape...) }

// splitGen is a case of splitShape with bytes drawn from seed.
func splitGen(seed uint64, dt dtype.DType) *gen {
	rng := rand.New(rand.NewPCG(seed, 2))
	g := &gen{raw: make([]byte, 4099), dt: dt, shape: SplitShape()}
	for i := range g.raw {
		g.raw[i] = byte(rng.Uint32())
	}
	return g
}
