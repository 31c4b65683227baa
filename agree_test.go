package kitchen_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gokitchen/kitchen"
	"github.com/gokitchen/kitchen/backend"
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/tensor"
)

// agreeCase is one call built from fuzz input, run on every backend and
// compared with eager byte for byte.
type agreeCase struct {
	op    backend.Op
	dt    dtype.DType // x's dtype, or the scale's for dequantize
	out   dtype.DType
	shape []int
	data  []byte // x, or q
	scale *tensor.Tensor
	value *float32
	seed  int64
}

// values builds n elements of dt from raw fuzz bytes, steering many of them
// to the cases that break kernels: exact ties after scaling, values at the
// ±127.5 boundary, zeros, subnormals, huge and tiny magnitudes.
func values(dt dtype.DType, n, k int, raw []byte) []byte {
	if len(raw) == 0 {
		raw = []byte{0}
	}
	at := func(i int) byte { return raw[i%len(raw)] }
	out := make([]byte, n*dt.Size())
	put := func(i int, f float32) {
		switch dt {
		case dtype.Float32:
			binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(f))
		case dtype.Float16:
			binary.LittleEndian.PutUint16(out[2*i:], dtype.Float16FromFloat32(f))
		default:
			binary.LittleEndian.PutUint16(out[2*i:], dtype.BFloat16FromFloat32(f))
		}
	}
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
	}
	return out
}

func buildCase(raw []byte, sel uint8, rows uint8, k uint16, seed int64) agreeCase {
	if len(raw) == 0 {
		raw = []byte{0}
	}
	dt := dtype.Floats()[int(sel)%3]
	c := agreeCase{dt: dt, shape: []int{1 + int(rows)%9, 1 + int(k)%300}, seed: max(seed, 0) % (1 << 45)}
	if sel&0x80 != 0 { // some 1-D and 3-D shapes
		c.shape = []int{c.shape[1]}
	} else if sel&0x40 != 0 {
		c.shape = []int{2, c.shape[0], c.shape[1]}
	}
	n := tensor.Numel(c.shape)
	switch (sel / 3) % 6 {
	case 0, 1:
		c.op = backend.QuantizeRowwise
	case 2:
		c.op = backend.QuantizeTensorwise
	case 3:
		c.op = backend.QuantizeTensorwise
		v := float32(math.Ldexp(1+float64(k%7), int(rows%40)-30))
		c.value = &v
	default:
		c.op = backend.DequantizeDType
		c.seed = 0
		c.out = dtype.Floats()[int(k/3)%3]
		c.data = make([]byte, n)
		for i := range c.data {
			c.data[i] = raw[i%len(raw)] + byte(i*37)
		}
		sshape := []int{1}
		switch rows % 3 {
		case 1:
			sshape = append(c.shape[:len(c.shape)-1:len(c.shape)-1], 1)
		case 2:
			sshape = c.shape
		}
		c.scale = must(tensor.FromBytes(dt, values(dt, tensor.Numel(sshape), 1, raw), sshape...))
		return c
	}
	c.data = values(dt, n, c.shape[len(c.shape)-1], raw)
	return c
}

func (c agreeCase) run(name string) ([][]byte, error) {
	ctx := context.Background()
	opts := []kitchen.Option{kitchen.UsingBackend(name), kitchen.WithStochasticRounding(c.seed)}
	if c.value != nil {
		opts = append(opts, kitchen.WithScale(*c.value))
	}
	var ts []*tensor.Tensor
	var err error
	switch c.op {
	case backend.QuantizeRowwise:
		var q, s *tensor.Tensor
		q, s, err = kitchen.QuantizeInt8Rowwise(ctx, must(tensor.FromBytes(c.dt, c.data, c.shape...)), opts...)
		ts = []*tensor.Tensor{q, s}
	case backend.QuantizeTensorwise:
		var q, s *tensor.Tensor
		q, s, err = kitchen.QuantizeInt8Tensorwise(ctx, must(tensor.FromBytes(c.dt, c.data, c.shape...)), opts...)
		ts = []*tensor.Tensor{q, s}
	default:
		var o *tensor.Tensor
		o, err = kitchen.DequantizeInt8To(ctx, must(tensor.FromBytes(dtype.Int8, c.data, c.shape...)), c.scale, c.out, kitchen.UsingBackend(name))
		ts = []*tensor.Tensor{o}
	}
	if err != nil {
		return nil, err
	}
	var out [][]byte
	for _, t := range ts {
		out = append(out, must(t.Bytes()))
	}
	return out, nil
}

// checkAgree runs c on every backend that accepts it and compares with
// eager. The cpu backend accepts every host case, so it must not decline.
func checkAgree(t *testing.T, c agreeCase) {
	t.Helper()
	want, werr := c.run("eager")
	for _, name := range backendsFor(c.op) {
		if name == "eager" {
			continue
		}
		got, err := c.run(name)
		var refused *backend.NoCapableBackendError
		if errors.As(err, &refused) {
			if name == "cpu" {
				t.Fatalf("cpu declined a host case: %v", err)
			}
			continue
		}
		var we, ge *backend.ArgError
		switch {
		case werr != nil || err != nil:
			if !errors.As(werr, &we) || !errors.As(err, &ge) || we.Row != ge.Row || !errors.Is(err, we.Err) {
				t.Fatalf("%s %v %v seed %d: eager error %v, %s error %v", c.op, c.dt, c.shape, c.seed, werr, name, err)
			}
		default:
			for i := range want {
				if !bytes.Equal(got[i], want[i]) {
					j := firstDiff(got[i], want[i])
					t.Fatalf("%s %v %v seed %d value %v: %s output %d differs from eager at byte %d: %x vs %x",
						c.op, c.dt, c.shape, c.seed, c.value, name, i, j, got[i][j:min(j+8, len(got[i]))], want[i][j:min(j+8, len(want[i]))])
				}
			}
		}
	}
}

// FuzzBackendsAgree feeds random shapes and values to every backend and
// checks that each produces eager's bytes, or the same error. Its seed
// corpus runs with every go test.
func FuzzBackendsAgree(f *testing.F) {
	for i := range 24 {
		f.Add([]byte{byte(i * 13), byte(i * 7), 3, 200, 17, byte(i)}, uint8(i), uint8(i*5), uint16(i*41), int64(i%4)*int64(i))
	}
	f.Add([]byte{2, 0, 0, 1, 1, 0, 1, 3, 0}, uint8(1), uint8(4), uint16(257), int64(0))
	f.Add([]byte{7, 0x7f, 0xc0, 7, 0xff, 0x80}, uint8(0), uint8(2), uint16(31), int64(0)) // NaN and -Inf bits
	f.Add([]byte{4, 255, 0}, uint8(2), uint8(8), uint16(63), int64(1<<40+7))
	f.Fuzz(func(t *testing.T, raw []byte, sel, rows uint8, k uint16, seed int64) {
		checkAgree(t, buildCase(raw, sel, rows, k, seed))
	})
}

// TestBackendsAgreeRandom runs a fixed stream of random cases, more than the
// fuzz corpus holds, on every go test.
func TestBackendsAgreeRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	n := 600
	if testing.Short() {
		n = 100
	}
	for range n {
		raw := make([]byte, 1+rng.IntN(600))
		for i := range raw {
			raw[i] = byte(rng.Uint32())
		}
		seed := int64(0)
		if rng.IntN(3) == 0 {
			seed = rng.Int64N(1 << 41)
		}
		checkAgree(t, buildCase(raw, uint8(rng.Uint32()), uint8(rng.Uint32()), uint16(rng.Uint32()), seed))
	}
}
