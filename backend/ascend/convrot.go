package ascend

import (
	"encoding/binary"
	"fmt"

	"github.com/gokitchen/kitchen/backend"
	"github.com/gokitchen/kitchen/backend/eager"
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/quant"
	"github.com/gokitchen/kitchen/tensor"
)

// The eager.RotatePrimitives of the NPU, so that eager runs the ConvRot
// operations and int8 embeddings on it: the rotation as element-wise aclnn
// operators on strided views, in quant.Rotate's order, and row gathers with
// aclnnIndexSelect.

var _ eager.RotatePrimitives = (*Device)(nil)

// Rotate multiplies each group of g consecutive elements of x by the
// normalized Hadamard matrix H_g in float32, in quant.Rotate's summation
// order, and rounds each result once to out: bit for bit the host's
// rotation (rotate says how). Nothing is copied between host and device.
func (d *Device) Rotate(x *tensor.Tensor, g int, out dtype.DType) (*tensor.Tensor, error) {
	return do(d, func(s *session) (*tensor.Tensor, error) { return s.rotateTo(x, g, out) })
}

func (s *session) rotateTo(x *tensor.Tensor, g int, outDT dtype.DType) (*tensor.Tensor, error) {
	if !quant.ValidGroup(g) || x.Rank() == 0 || x.Dim(-1)%g != 0 {
		return nil, fmt.Errorf("ascend: rotate %v in groups of %d: %w", x, g, tensor.ErrShape)
	}
	out, o, xa, err := s.elementwise(x, outDT, false)
	if err != nil || x.Numel() == 0 {
		return out, err
	}
	return out, s.rotate(xa, g, o)
}

// rotate writes quant.Rotate of the 1-D x (widened to float32 by aclnnCast,
// exactly), rounded to out's type, into out. Each stage reads one float32
// buffer and writes the other. The stage of stride st sees a buffer as
// [n/(4st), 4, st], so its butterflies' inputs a, b, c, d are four strided
// [n/(4st), st] views, and computes, in quant.Rotate's order:
//
//	t = 2·src                    aclnnMuls, exact (or ±Inf, as in Go)
//	s = ((a + b) + c) + d        three aclnnAdd
//	y[i] = s - t[3-i]            aclnnAdd with alpha -1, i = 0..3
//	dst[i] = y[i]                aclnnInplaceCopy
//
// The products by 2 are a separate operator, not aclnnAdd's alpha of -2,
// whose product the NPU may fuse with the sum (exact but for overflow,
// where Go's product is infinite). Every operator writes a contiguous
// array, and only aclnnInplaceCopy writes the strided views (its header
// says its selfRef may be non-contiguous; aclnnAdd's says so of its inputs
// only). After the last stage, the product by 2^-stages (aclnnMuls; exact but for
// subnormals, as in quant.Rotate) and the one rounding to out (aclnnCast).
// Every operation is one IEEE float32 operation, as in Go, so the results
// are the host's bit for bit.
func (s *session) rotate(x arr, g int, out arr) error {
	n := int(count(x))
	var src, dst, twice, ab, abc, sum arr
	var y [4]arr
	if err := first(
		func() error { return s.temporaries(aclFloat, n, &src, &dst, &twice) },
		func() error { return s.temporaries(aclFloat, n/4, &ab, &abc, &sum, &y[0], &y[1], &y[2], &y[3]) },
		func() error { return s.cast(x, src) },
	); err != nil {
		return err
	}
	scale := float32(1)
	for st := 1; st < g; st *= 4 {
		scale /= 2
		rows := n / (4 * st)
		shape, strides := []int64{int64(rows), int64(st)}, []int64{int64(4 * st), 1}
		part := func(a arr, i int) arr { return a.view(int64(i*st), shape, strides) }
		steps := []func() error{
			func() error { return s.muls(src, 2, twice) },
			func() error { return s.add(part(src, 0), part(src, 1), ab.as(rows, st)) },
			func() error { return s.add(ab.as(rows, st), part(src, 2), abc.as(rows, st)) },
			func() error { return s.add(abc.as(rows, st), part(src, 3), sum.as(rows, st)) },
		}
		for i := range 4 {
			steps = append(steps,
				func() error { return s.sub(sum.as(rows, st), part(twice, 3-i), y[i].as(rows, st)) },
				func() error { return s.copyTo(part(dst, i), y[i].as(rows, st)) })
		}
		if err := first(steps...); err != nil {
			return err
		}
		src, dst = dst, src
	}
	return s.narrow(out, func(o arr) error { return s.muls(src, scale, o) })
}

// GatherRows returns the rows of the table x [V, D] named by indices (int32
// or int64, any shape), of shape [indices..., D], with aclnnIndexSelect. The
// operator does not check its indices, so they are checked first, on the
// device (inRange); that reads firstFalse's 8 bytes back, and, if an index
// is out of range, that index (4 or 8 bytes) for the *eager.IndexError.
func (d *Device) GatherRows(x, indices *tensor.Tensor) (*tensor.Tensor, error) {
	return do(d, func(s *session) (*tensor.Tensor, error) { return s.gatherRows(x, indices) })
}

func (s *session) gatherRows(x, indices *tensor.Tensor) (*tensor.Tensor, error) {
	if x.Rank() != 2 {
		return nil, fmt.Errorf("ascend: gather rows of %v: %w: want a table [V, D]", x, tensor.ErrShape)
	}
	if dt := indices.DType(); dt != dtype.Int32 && dt != dtype.Int64 {
		return nil, fmt.Errorf("ascend: gather rows by %v: %w: want int32 or int64 indices", indices, backend.ErrDType)
	}
	rows, d, n := x.Dim(0), x.Dim(1), indices.Numel()
	out, o, err := s.result(x.DType(), append(indices.Shape(), d))
	if err != nil || n == 0 {
		return out, err
	}
	ix, err := s.of(indices, n)
	if err != nil {
		return nil, err
	}
	at, err := s.inRange(ix, rows)
	if err != nil {
		return nil, err
	}
	if at >= 0 {
		size := aclSize(ix.dt)
		b := make([]byte, 8)
		if err := s.read(b[:size], ix.addr+uintptr(at*size)); err != nil {
			return nil, err
		}
		v := int64(binary.LittleEndian.Uint64(b))
		if size == 4 {
			v = int64(int32(binary.LittleEndian.Uint32(b)))
		}
		return nil, &eager.IndexError{At: at, Index: v, Rows: rows}
	}
	if d == 0 {
		return out, nil
	}
	xa, err := s.of(x)
	if err != nil {
		return nil, err
	}
	return out, s.indexSelect(xa, 0, ix, o.as(n, d))
}

// inRange returns the position of the first index of the 1-D integer array
// ix outside [0, rows), or -1: aclnnGtScalar with int64 scalars (exact for
// every index) marks the indices above -1 and those above rows-1,
// aclnnLogicalNot and aclnnLogicalAnd combine them, and firstFalse finds
// the first index that fails.
func (s *session) inRange(ix arr, rows int) (int, error) {
	n := int(count(ix))
	var nonNeg, over, below, ok arr
	if err := first(
		func() error { return s.temporaries(aclBool, n, &nonNeg, &over, &below, &ok) },
		func() error { return s.gtScalarI(ix, -1, nonNeg) },
		func() error { return s.gtScalarI(ix, int64(rows)-1, over) },
		func() error { return s.logicalNot(over, below) },
		func() error { return s.logicalAnd(nonNeg, below, ok) },
	); err != nil {
		return 0, err
	}
	return s.firstFalse(ok)
}
