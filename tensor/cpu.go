package tensor

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/quant"
)

// CPU returns the host device. Its tensors are Go byte slices, and its
// primitives are plain loops written for clarity; the cpu backend has the
// fast kernels. Every call returns the same (comparable) value.
func CPU() Device { return cpuDevice{} }

type cpuDevice struct{}

func (cpuDevice) Type() string   { return "cpu" }
func (cpuDevice) String() string { return "cpu" }

func (cpuDevice) Alloc(dt dtype.DType, shape []int) (*Tensor, error) { return Zeros(dt, shape...) }

func (cpuDevice) Release(*Tensor) {}

func (cpuDevice) CopyFromHost(dst *Tensor, src []byte) error {
	b, err := dst.Bytes()
	if err != nil {
		return err
	}
	if len(b) != len(src) {
		return fmt.Errorf("cpu: copy of %d bytes into %v: %w", len(src), dst, ErrShape)
	}
	copy(b, src)
	return nil
}

func (cpuDevice) CopyToHost(dst []byte, src *Tensor) error {
	b, err := src.Bytes()
	if err != nil {
		return err
	}
	if len(b) != len(dst) {
		return fmt.Errorf("cpu: copy of %v into %d bytes: %w", src, len(dst), ErrShape)
	}
	copy(dst, b)
	return nil
}

// load widens element i exactly to float32.
func load(b []byte, dt dtype.DType, i int) float32 {
	switch dt {
	case dtype.Float32:
		return math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	case dtype.Float16:
		return dtype.Float16ToFloat32(binary.LittleEndian.Uint16(b[2*i:]))
	case dtype.BFloat16:
		return dtype.BFloat16ToFloat32(binary.LittleEndian.Uint16(b[2*i:]))
	case dtype.Int8:
		return float32(int8(b[i]))
	case dtype.Uint8:
		return float32(b[i])
	case dtype.Int32:
		return float32(int32(binary.LittleEndian.Uint32(b[4*i:])))
	}
	panic("tensor: load of " + dt.String())
}

// store rounds v to dt and writes it as element i.
func store(b []byte, dt dtype.DType, i int, v float32) {
	switch dt {
	case dtype.Float32:
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	case dtype.Float16:
		binary.LittleEndian.PutUint16(b[2*i:], dtype.Float16FromFloat32(v))
	case dtype.BFloat16:
		binary.LittleEndian.PutUint16(b[2*i:], dtype.BFloat16FromFloat32(v))
	case dtype.Int8:
		b[i] = byte(int8(v))
	case dtype.Uint8:
		b[i] = byte(v)
	case dtype.Int32:
		binary.LittleEndian.PutUint32(b[4*i:], uint32(int32(v)))
	default:
		panic("tensor: store of " + dt.String())
	}
}

// hostArgs returns the host bytes of each tensor, failing for tensors that
// live elsewhere.
func hostArgs(ts ...*Tensor) ([][]byte, error) {
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
func mapTo(dt dtype.DType, shape []int, f func(i int) float32) (*Tensor, error) {
	out, err := Zeros(dt, shape...)
	if err != nil {
		return nil, err
	}
	b := out.host
	for i := range out.Numel() {
		store(b, dt, i, f(i))
	}
	return out, nil
}

func (cpuDevice) AbsMaxRows(x *Tensor, rowLen int) (*Tensor, error) {
	bs, err := hostArgs(x)
	if err != nil {
		return nil, err
	}
	if rowLen <= 0 || x.Numel()%rowLen != 0 {
		return nil, fmt.Errorf("cpu: abs-max rows of %d over %v: %w", rowLen, x, ErrShape)
	}
	b := bs[0]
	return mapTo(dtype.Float32, []int{x.Numel() / rowLen}, func(r int) float32 {
		m := float32(0)
		for k := r * rowLen; k < (r+1)*rowLen; k++ {
			a := float32(math.Abs(float64(load(b, x.dtype, k))))
			if a != a {
				return a
			}
			m = max(m, a)
		}
		return m
	})
}

func (cpuDevice) Find(x *Tensor, cond Condition) (int, error) {
	bs, err := hostArgs(x)
	if err != nil {
		return 0, err
	}
	for i := range x.Numel() {
		v := float64(load(bs[0], x.dtype, i))
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

func (cpuDevice) Binary(op BinaryOp, a, b *Tensor, out dtype.DType) (*Tensor, error) {
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
		return nil, fmt.Errorf("cpu: %v of %v and %v: %w: cannot broadcast", op, a, b, ErrShape)
	}
	return mapTo(out, a.shape, func(i int) float32 {
		return op.Apply(load(bs[0], a.dtype, i), load(bs[1], b.dtype, index(i)))
	})
}

func (cpuDevice) BinaryScalar(op BinaryOp, a *Tensor, c float32, out dtype.DType) (*Tensor, error) {
	bs, err := hostArgs(a)
	if err != nil {
		return nil, err
	}
	return mapTo(out, a.shape, func(i int) float32 { return op.Apply(load(bs[0], a.dtype, i), c) })
}

func (cpuDevice) Cast(x *Tensor, out dtype.DType) (*Tensor, error) {
	bs, err := hostArgs(x)
	if err != nil {
		return nil, err
	}
	return mapTo(out, x.shape, func(i int) float32 { return load(bs[0], x.dtype, i) })
}

func (cpuDevice) ReplaceZero(x *Tensor, v float32) (*Tensor, error) {
	bs, err := hostArgs(x)
	if err != nil {
		return nil, err
	}
	return mapTo(x.dtype, x.shape, func(i int) float32 {
		if e := load(bs[0], x.dtype, i); e != 0 {
			return e
		}
		return v
	})
}

func (cpuDevice) Noise(seed int64, shape []int, out dtype.DType) (*Tensor, error) {
	return mapTo(out, shape, func(i int) float32 { return quant.Noise(seed, uint64(i)) })
}

func (cpuDevice) RoundToInt8(y *Tensor, mode RoundMode) (*Tensor, error) {
	bs, err := hostArgs(y)
	if err != nil {
		return nil, err
	}
	round := quant.RoundHalfEven
	if mode == Floor {
		round = quant.Floor
	}
	return mapTo(dtype.Int8, y.shape, func(i int) float32 { return float32(round(load(bs[0], y.dtype, i))) })
}

func (cpuDevice) Fill(dt dtype.DType, shape []int, v float32) (*Tensor, error) {
	return mapTo(dt, shape, func(int) float32 { return v })
}
