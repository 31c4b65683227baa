package eager

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/op"
	"github.com/gokitchen/kitchen/quant"
	"github.com/gokitchen/kitchen/tensor"
)

// host is the host's implementation of the primitives: plain loops over
// tensor.CPU() tensors, written for clarity; the cpu backend has the fast
// kernels.
type host struct{}

// hostArgs returns the host bytes of each tensor, failing for tensors that
// live elsewhere.
func hostArgs(ts ...*tensor.Tensor) ([][]byte, error) {
	out := make([][]byte, len(ts))
	for i, t := range ts {
		b, err := t.Bytes()
		if err != nil {
			return nil, err
		}
		out[i] = b
	}
	return out, nil
}

// mapTo allocates a host tensor of dt and shape and sets element i to f(i).
func mapTo(dt dtype.DType, shape []int, f func(i int) float32) (*tensor.Tensor, error) {
	out, err := tensor.Zeros(dt, shape...)
	if err != nil {
		return nil, err
	}
	b, _ := out.Bytes()
	for i := range out.Numel() {
		dtype.Store(b, dt, i, f(i))
	}
	return out, nil
}

func (host) AbsMaxRows(x *tensor.Tensor, rowLen int) (*tensor.Tensor, error) {
	bs, err := hostArgs(x)
	if err != nil {
		return nil, err
	}
	if rowLen <= 0 || x.Numel()%rowLen != 0 {
		return nil, fmt.Errorf("eager: host abs-max rows of %d over %v: %w", rowLen, x, tensor.ErrShape)
	}
	b := bs[0]
	return mapTo(dtype.Float32, []int{x.Numel() / rowLen}, func(r int) float32 {
		m := float32(0)
		for k := r * rowLen; k < (r+1)*rowLen; k++ {
			a := float32(math.Abs(float64(dtype.Load(b, x.DType(), k))))
			if a != a {
				return a
			}
			m = max(m, a)
		}
		return m
	})
}

func (host) Find(x *tensor.Tensor, cond Condition) (int, error) {
	bs, err := hostArgs(x)
	if err != nil {
		return 0, err
	}
	for i := range x.Numel() {
		v := float64(dtype.Load(bs[0], x.DType(), i))
		bad := math.IsNaN(v) || math.IsInf(v, 0)
		if cond == NotFinitePositive {
			bad = bad || v <= 0
		}
		if bad {
			return i, nil
		}
	}
	return -1, nil
}

func (host) Binary(op BinaryOp, a, b *tensor.Tensor, out dtype.DType) (*tensor.Tensor, error) {
	bs, err := hostArgs(a, b)
	if err != nil {
		return nil, err
	}
	n, m := a.Numel(), b.Numel()
	var index func(i int) int
	switch {
	case m == n:
		index = func(i int) int { return i }
	case m == 1:
		index = func(int) int { return 0 }
	case a.Rank() > 0 && a.Dim(-1) > 0 && m*a.Dim(-1) == n:
		k := a.Dim(-1)
		index = func(i int) int { return i / k }
	default:
		return nil, fmt.Errorf("eager: host %v of %v and %v: %w: cannot broadcast", op, a, b, tensor.ErrShape)
	}
	return mapTo(out, a.Shape(), func(i int) float32 {
		return op.Apply(dtype.Load(bs[0], a.DType(), i), dtype.Load(bs[1], b.DType(), index(i)))
	})
}

func (host) BinaryScalar(op BinaryOp, a *tensor.Tensor, c float32, out dtype.DType) (*tensor.Tensor, error) {
	bs, err := hostArgs(a)
	if err != nil {
		return nil, err
	}
	return mapTo(out, a.Shape(), func(i int) float32 { return op.Apply(dtype.Load(bs[0], a.DType(), i), c) })
}

func (host) Cast(x *tensor.Tensor, out dtype.DType) (*tensor.Tensor, error) {
	bs, err := hostArgs(x)
	if err != nil {
		return nil, err
	}
	return mapTo(out, x.Shape(), func(i int) float32 { return dtype.Load(bs[0], x.DType(), i) })
}

func (host) ReplaceZero(x *tensor.Tensor, v float32) (*tensor.Tensor, error) {
	bs, err := hostArgs(x)
	if err != nil {
		return nil, err
	}
	return mapTo(x.DType(), x.Shape(), func(i int) float32 {
		if e := dtype.Load(bs[0], x.DType(), i); e != 0 {
			return e
		}
		return v
	})
}

func (host) Noise(seed int64, shape []int, out dtype.DType) (*tensor.Tensor, error) {
	return mapTo(out, shape, func(i int) float32 { return quant.Noise(seed, uint64(i)) })
}

func (host) RoundToInt8(y *tensor.Tensor, mode RoundMode) (*tensor.Tensor, error) {
	bs, err := hostArgs(y)
	if err != nil {
		return nil, err
	}
	round := quant.RoundHalfEven
	if mode == Floor {
		round = quant.Floor
	}
	return mapTo(dtype.Int8, y.Shape(), func(i int) float32 { return float32(round(dtype.Load(bs[0], y.DType(), i))) })
}

func (host) Fill(dt dtype.DType, shape []int, v float32) (*tensor.Tensor, error) {
	return mapTo(dt, shape, func(int) float32 { return v })
}

func (host) Rotate(x *tensor.Tensor, g int, out dtype.DType) (*tensor.Tensor, error) {
	v, err := x.Float32s()
	if err != nil {
		return nil, err
	}
	if x.Rank() == 0 || x.Dim(-1)%g != 0 {
		return nil, fmt.Errorf("eager: host rotate of %v in groups of %d: %w", x, g, tensor.ErrShape)
	}
	quant.Rotate(v, g)
	return mapTo(out, x.Shape(), func(i int) float32 { return v[i] })
}

func (host) GatherRows(x, indices *tensor.Tensor) (*tensor.Tensor, error) {
	bs, err := hostArgs(x, indices)
	if err != nil {
		return nil, err
	}
	if x.Rank() != 2 {
		return nil, fmt.Errorf("eager: host gather from %v: %w", x, tensor.ErrShape)
	}
	rows, d, size := x.Dim(0), x.Dim(1), x.DType().Size()
	n := indices.Numel()
	out, err := tensor.Zeros(x.DType(), append(indices.Shape(), d)...)
	if err != nil {
		return nil, err
	}
	ob, _ := out.Bytes()
	for i := range n {
		r := dtype.LoadInt(bs[1], indices.DType(), i)
		if r < 0 || r >= int64(rows) {
			return nil, &IndexError{At: i, Index: r, Rows: rows}
		}
		copy(ob[i*d*size:(i+1)*d*size], bs[0][int(r)*d*size:])
	}
	return out, nil
}

func (host) Activate(x *tensor.Tensor, act string, out dtype.DType) (*tensor.Tensor, error) {
	v, err := x.Float32s()
	if err != nil {
		return nil, err
	}
	shape := x.Shape()
	switch act {
	case op.ActGeluTanh:
		return mapTo(out, shape, func(i int) float32 { return quant.GeluTanh(v[i]) })
	case op.ActSwiGLU:
		k := shape[len(shape)-1] / 2
		shape[len(shape)-1] = k
		return mapTo(out, shape, func(i int) float32 {
			r, j := i/k, i%k
			g := out.Round(quant.Silu(v[r*2*k+j]))
			return g * v[r*2*k+k+j]
		})
	}
	return nil, fmt.Errorf("eager: host activation %q", act)
}

func (host) MatMulInt8(a, b *tensor.Tensor, transB bool) (*tensor.Tensor, error) {
	bs, err := hostArgs(a, b)
	if err != nil {
		return nil, err
	}
	m, k := a.Dim(0), a.Dim(1)
	n := b.Dim(1)
	if transB {
		n = b.Dim(0)
	}
	out, err := tensor.Zeros(dtype.Int32, m, n)
	if err != nil {
		return nil, err
	}
	ob, _ := out.Bytes()
	for i := range m {
		for j := range n {
			var acc int32
			for p := range k {
				bv := bs[1][p*n+j]
				if transB {
					bv = bs[1][j*k+p]
				}
				acc += int32(int8(bs[0][i*k+p])) * int32(int8(bv))
			}
			binary.LittleEndian.PutUint32(ob[4*(i*n+j):], uint32(acc))
		}
	}
	return out, nil
}

// LinearEpilogue reads every sum through quant.LinearOut, which takes
// -2^31 as 2^31 whether or not a sum wraps (without wraps none is -2^31).
func (host) LinearEpilogue(acc, xs, ws, bias *tensor.Tensor, out dtype.DType, _ bool) (*tensor.Tensor, error) {
	ab, err := acc.Bytes()
	if err != nil {
		return nil, err
	}
	xv, err := xs.Float32s()
	if err != nil {
		return nil, err
	}
	wv, err := ws.Float32s()
	if err != nil {
		return nil, err
	}
	var bv []float32
	if bias != nil {
		if bv, err = bias.Float32s(); err != nil {
			return nil, err
		}
	}
	n := acc.Dim(1)
	return mapTo(out, acc.Shape(), func(i int) float32 {
		r, c := i/n, i%n
		w := wv[0]
		if len(wv) > 1 {
			w = wv[c]
		}
		y := out.Round(quant.LinearOut(int32(binary.LittleEndian.Uint32(ab[4*i:])), xv[r], w))
		if bv != nil {
			y += out.Round(bv[c])
		}
		return y
	})
}
