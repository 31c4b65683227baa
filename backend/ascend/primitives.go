package ascend

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/gokitchen/kitchen/backend/eager"
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/quant"
	"github.com/gokitchen/kitchen/tensor"
)

// The eager.Primitives of the NPU, each a short sequence of aclnn
// operators queued on the device's stream and waited for once, so that the
// eager backend runs on the NPU. Element-wise ones widen their inputs to
// float32 with aclnnCast (exact), compute in float32 and round once to the
// output type with aclnnCast, as the interface requires; nothing but Find's
// index leaves the device.
//
// Every array an operator sees starts at an address that aclrtMalloc
// returned (CANN's kernels expect 32-byte aligned data), so each temporary
// is an allocation of its own.

// AbsMaxRows returns float32 [Numel/rowLen]: the largest |x| of each row
// (aclnnAminmaxDim over each row, then aclnnAbs, aclnnMaximum and aclnnCast
// on one value per row), NaN for a row holding NaN. CANN does not say how
// its maximum treats NaN, so NaN rows are marked without it: aclnnIsFinite
// and aclnnAll find the rows holding NaN or an infinity, and those whose
// abs-max is nevertheless finite (so the maximum skipped a NaN) are set to
// NaN. A row holding both NaN and an infinity gives NaN where the maximum
// propagates NaN and +Inf where it skips it: not finite either way, which is
// what the eager backend checks.
func (d *Device) AbsMaxRows(x *tensor.Tensor, rowLen int) (*tensor.Tensor, error) {
	return do(d, func(s *session) (*tensor.Tensor, error) { return s.absMaxRows(x, rowLen) })
}

func (s *session) absMaxRows(x *tensor.Tensor, k int) (*tensor.Tensor, error) {
	n := x.Numel()
	if k <= 0 || n%k != 0 {
		return nil, fmt.Errorf("ascend: abs-max rows of %d over %v: %w", k, x, tensor.ErrShape)
	}
	rows := n / k
	out, o, err := s.result(dtype.Float32, []int{rows})
	if err != nil || n == 0 {
		return out, err
	}
	xa, err := s.of(x, rows, k)
	if err != nil {
		return nil, err
	}
	if err := s.absMax(xa, o); err != nil {
		return nil, err
	}
	return out, s.markNaNRows(xa, o)
}

// markNaNRows sets m[r], the abs-max of row r of the 2-D x, to NaN where the
// row holds a value that is not finite but m[r] is finite: the row holds a
// NaN that the maximum skipped (an infinity would have made m[r] infinite).
func (s *session) markNaNRows(x, m arr) error {
	rows := int(x.shape[0])
	var ok, bad, finite, mark arr
	if err := s.temporaries(aclBool, rows, &ok, &bad, &finite, &mark); err != nil {
		return err
	}
	nan, err := s.f32(float32(math.NaN()))
	if err != nil {
		return err
	}
	return first(
		func() error { return s.rowsFinite(x, ok) },
		func() error { return s.logicalNot(ok, bad) },
		func() error { return s.isFinite(m, finite) },
		func() error { return s.logicalAnd(bad, finite, mark) },
		func() error { return s.maskedFill(m, mark, nan) },
	)
}

// rowsFinite writes into the bool array ok (one element per row) whether
// each row of the 2-D float array x holds only finite values: aclnnIsFinite
// of every element, then aclnnAll along each row. Unlike a maximum, whose
// NaN handling CANN does not document, both are defined for NaN.
func (s *session) rowsFinite(x, ok arr) error {
	rows, k := int(x.shape[0]), int(x.shape[1])
	fin, err := s.temp(aclBool, rows*k)
	if err != nil {
		return err
	}
	return first(
		func() error { return s.isFinite(x, fin.as(rows, k)) },
		func() error { return s.all(fin.as(rows, k), ok.as(rows, 1), 1) },
	)
}

// firstBadRow returns the index of the first row of the 2-D float array x
// that holds NaN or an infinity, or -1: aclnnIsFinite of every element and
// aclnnAll over all of them, of which one byte is read back; only if it is
// false, aclnnAll along each row and firstFalse's index of the first row
// that fails.
func (s *session) firstBadRow(x arr) (int, error) {
	rows, k := int(x.shape[0]), int(x.shape[1])
	fin, err := s.temp(aclBool, rows*k)
	if err != nil {
		return 0, err
	}
	all, err := s.temp(aclBool, 1)
	if err != nil {
		return 0, err
	}
	if err := first(
		func() error { return s.isFinite(x, fin.as(rows, k)) },
		func() error { return s.all(fin, all, 0) },
	); err != nil {
		return 0, err
	}
	var b [1]byte
	if err := s.read(b[:], all.addr); err != nil || b[0] != 0 {
		return -1, err
	}
	ok, err := s.temp(aclBool, rows)
	if err != nil {
		return 0, err
	}
	if err := s.all(fin.as(rows, k), ok.as(rows, 1), 1); err != nil {
		return 0, err
	}
	return s.firstFalse(ok)
}

// absMax writes the largest |x| of each row of the 2-D x into the float32
// array out (one element per row). For a row holding NaN the result depends
// on how the NPU's minimum and maximum treat NaN, which CANN does not
// document: callers find such rows otherwise (rowsFinite) and use absMax
// only for the scales of finite rows.
func (s *session) absMax(x, out arr) error {
	rows := int(x.shape[0])
	var mx, mn, absMn, m arr
	bufs := []*arr{&mx, &mn, &absMn, &m}
	if x.dt == aclFloat {
		m = out.as(rows, 1) // the maximum is the result itself
		bufs = bufs[:3]
	}
	for _, b := range bufs {
		a, err := s.temp(x.dt, rows)
		if err != nil {
			return err
		}
		*b = a.as(rows, 1)
	}
	// max |x| = max(max x, |min x|).
	err := first(
		func() error { return s.aminmax(x, 1, mn, mx) },
		func() error { return s.abs(mn, absMn) },
		func() error { return s.maximum(mx, absMn, m) },
	)
	if err == nil && x.dt != aclFloat {
		err = s.cast(m, out.as(rows, 1))
	}
	return err
}

// first runs the steps in order and returns the first error.
func first(steps ...func() error) error {
	for _, f := range steps {
		if err := f(); err != nil {
			return err
		}
	}
	return nil
}

// Find returns the flat index of the first element of x that meets cond,
// or -1. The eager backend calls it for its NaN check. The index is
// computed on the device (aclnnIsFinite, aclnnGtScalar and aclnnLogicalAnd
// mark the elements that do not meet cond; firstFalse finds the first of
// them) and only the index is copied to the host, as firstFalse says.
func (d *Device) Find(x *tensor.Tensor, cond eager.Condition) (int, error) {
	return do(d, func(s *session) (int, error) { return s.find(x, cond) })
}

func (s *session) find(x *tensor.Tensor, cond eager.Condition) (int, error) {
	n := x.Numel()
	if n == 0 {
		return -1, nil
	}
	xa, err := s.of(x, n)
	if err != nil {
		return 0, err
	}
	return s.findIn(xa, cond)
}

// findIn is Find on the 1-D float array x.
func (s *session) findIn(x arr, cond eager.Condition) (int, error) {
	n := int(count(x))
	good, err := s.temp(aclBool, n)
	if err != nil {
		return 0, err
	}
	if err := s.isFinite(x, good); err != nil {
		return 0, err
	}
	if cond == eager.NotFinitePositive {
		pos, err := s.temp(aclBool, n)
		if err != nil {
			return 0, err
		}
		both, err := s.temp(aclBool, n)
		if err != nil {
			return 0, err
		}
		if err := first(
			func() error { return s.gtScalar(x, 0, pos) },
			func() error { return s.logicalAnd(good, pos, both) },
		); err != nil {
			return 0, err
		}
		good = both
	}
	return s.firstFalse(good)
}

// firstFalse returns the index of the first false element of the 1-D bool
// array good, or -1: an aclnnArange of indices has the true ones replaced
// by the length with aclnnInplaceMaskedFillScalar, aclnnAmin takes the
// smallest, and that int64, 8 bytes, is read back.
func (s *session) firstFalse(good arr) (int, error) {
	n := int(count(good))
	idx, err := s.temp(aclInt64, n)
	if err != nil {
		return 0, err
	}
	least, err := s.temp(aclInt64, 1)
	if err != nil {
		return 0, err
	}
	none, err := s.i64(int64(n))
	if err != nil {
		return 0, err
	}
	if err := first(
		func() error { return s.arange(idx) },
		func() error { return s.maskedFill(idx, good.as(n), none) },
		func() error { return s.amin(idx, 0, least) },
	); err != nil {
		return 0, err
	}
	var b [8]byte
	if err := s.read(b[:], least.addr); err != nil {
		return 0, err
	}
	if i := int64(binary.LittleEndian.Uint64(b[:])); i < int64(n) {
		return int(i), nil
	}
	return -1, nil
}

// elementwise allocates the result of an element-wise primitive of x, of
// type dt and x's shape, and returns it with its array and x's (widened to
// float32 if wide), both 1-D; it makes no arrays for an x without
// elements.
func (s *session) elementwise(x *tensor.Tensor, dt dtype.DType, wide bool) (out *tensor.Tensor, o, xa arr, err error) {
	n := x.Numel()
	if out, o, err = s.result(dt, x.Shape()); err != nil || n == 0 {
		return out, o, arr{}, err
	}
	if wide {
		xa, err = s.wideOf(x, n)
	} else {
		xa, err = s.of(x, n)
	}
	return out, o, xa, err
}

// wideOf returns t's array with the given shape (t's own if none) as
// float32: of, then widen.
func (s *session) wideOf(t *tensor.Tensor, shape ...int) (arr, error) {
	a, err := s.of(t, shape...)
	if err != nil {
		return arr{}, err
	}
	return s.widen(a)
}

// widen returns a as float32: a itself if it is float32, else a cast of it.
func (s *session) widen(a arr) (arr, error) {
	if a.dt == aclFloat {
		return a, nil
	}
	w, err := s.temp(aclFloat, int(count(a)))
	if err != nil {
		return arr{}, err
	}
	w.shape = a.shape
	return w, s.cast(a, w)
}

func count(a arr) int64 {
	n := int64(1)
	for _, d := range a.shape {
		n *= d
	}
	return n
}

// narrow computes f (which writes a float32 array of out's shape) and
// rounds its result into out, or lets f write out directly if out is
// float32.
func (s *session) narrow(out arr, f func(dst arr) error) error {
	if out.dt == aclFloat {
		return f(out)
	}
	tmp, err := s.temp(aclFloat, int(count(out)))
	if err != nil {
		return err
	}
	tmp.shape = out.shape
	if err := f(tmp); err != nil {
		return err
	}
	return s.cast(tmp, out)
}

// Binary computes op(a, b) in float32, rounded to out, with the shape of a.
// b has a's number of elements, one element, or one per row of a.
func (d *Device) Binary(op eager.BinaryOp, a, b *tensor.Tensor, out dtype.DType) (*tensor.Tensor, error) {
	return do(d, func(s *session) (*tensor.Tensor, error) { return s.binaryOp(op, a, b, out) })
}

func (s *session) binaryOp(op eager.BinaryOp, a, b *tensor.Tensor, outDT dtype.DType) (*tensor.Tensor, error) {
	out, o, err := s.result(outDT, a.Shape())
	if err != nil {
		return nil, err
	}
	return out, s.binaryInto(op, a, b, o)
}

// binaryInto is Binary into o, an array of a's number of elements.
func (s *session) binaryInto(op eager.BinaryOp, a, b *tensor.Tensor, o arr) error {
	n, m := a.Numel(), b.Numel()
	rows, k := 1, n
	if a.Rank() > 0 {
		k = a.Dim(-1)
		if k > 0 {
			rows = n / k
		}
	}
	var bShape []int
	switch {
	case m == n:
		bShape = []int{rows, k}
	case m == 1:
		bShape = []int{1, 1}
	case a.Rank() > 0 && k > 0 && m*k == n:
		bShape = []int{rows, 1}
	default:
		return fmt.Errorf("ascend: %v of %v and %v: %w: cannot broadcast", op, a, b, tensor.ErrShape)
	}
	if n == 0 {
		return nil
	}
	aa, err := s.wideOf(a, rows, k)
	if err != nil {
		return err
	}
	ba, err := s.wideOf(b, bShape...)
	if err != nil {
		return err
	}
	return s.narrow(o.as(rows, k), func(dst arr) error {
		switch op {
		case eager.Add:
			return s.add(aa, ba, dst)
		case eager.Mul:
			return s.mul(aa, ba, dst)
		case eager.Div:
			return s.div(aa, ba, dst)
		case eager.Max:
			return s.maximum(aa, ba, dst)
		}
		return fmt.Errorf("ascend: unknown operation %v", op)
	})
}

// BinaryScalar computes op(a, c) in float32, rounded to out (aclnnAdds,
// aclnnMuls, aclnnDivs, or aclnnClampMin for max).
func (d *Device) BinaryScalar(op eager.BinaryOp, a *tensor.Tensor, c float32, outDT dtype.DType) (*tensor.Tensor, error) {
	return do(d, func(s *session) (*tensor.Tensor, error) { return s.binaryScalar(op, a, c, outDT) })
}

func (s *session) binaryScalar(op eager.BinaryOp, a *tensor.Tensor, c float32, outDT dtype.DType) (*tensor.Tensor, error) {
	n := a.Numel()
	out, o, aa, err := s.elementwise(a, outDT, true)
	if err != nil || n == 0 {
		return out, err
	}
	return out, s.narrow(o, func(dst arr) error {
		switch op {
		case eager.Add:
			return s.adds(aa, c, dst)
		case eager.Mul:
			return s.muls(aa, c, dst)
		case eager.Div:
			return s.divs(aa, c, dst)
		case eager.Max:
			return s.clampMin(aa, c, dst) // max(a, c); a is never NaN where eager uses it
		}
		return fmt.Errorf("ascend: unknown operation %v", op)
	})
}

// Cast rounds each element of x to out (aclnnCast).
func (d *Device) Cast(x *tensor.Tensor, outDT dtype.DType) (*tensor.Tensor, error) {
	return do(d, func(s *session) (*tensor.Tensor, error) { return s.castTo(x, outDT) })
}

func (s *session) castTo(x *tensor.Tensor, outDT dtype.DType) (*tensor.Tensor, error) {
	n := x.Numel()
	out, o, xa, err := s.elementwise(x, outDT, false)
	if err != nil || n == 0 {
		return out, err
	}
	return out, s.cast(xa, o)
}

// ReplaceZero returns x with every zero, of either sign, replaced by v
// rounded to x's type (aclnnInplaceCopy, aclnnEqScalar,
// aclnnInplaceMaskedFillScalar).
func (d *Device) ReplaceZero(x *tensor.Tensor, v float32) (*tensor.Tensor, error) {
	return do(d, func(s *session) (*tensor.Tensor, error) { return s.replaceZero(x, v) })
}

func (s *session) replaceZero(x *tensor.Tensor, v float32) (*tensor.Tensor, error) {
	n := x.Numel()
	out, o, xa, err := s.elementwise(x, x.DType(), false)
	if err != nil || n == 0 {
		return out, err
	}
	return out, s.replaceZeroInto(xa, o, x.DType().Round(v))
}

// replaceZeroInto copies x into out with zeros replaced by v (exact in
// out's type).
func (s *session) replaceZeroInto(x, out arr, v float32) error {
	zero, err := s.temp(aclBool, int(count(x)))
	if err != nil {
		return err
	}
	c, err := s.f32(v)
	if err != nil {
		return err
	}
	return first(
		func() error { return s.copyTo(out, x) },
		func() error { return s.eqScalar(x, 0, zero) },
		func() error { return s.maskedFill(out, zero, c) },
	)
}

// Noise returns the stochastic-rounding noise of each element of a tensor
// of the given shape, rounded to out: quant.Noise of its flat index,
// computed on the device in exact int64 arithmetic (the PCG hash's uint32
// products fit in 62 bits; masking with 2^32-1 takes them modulo 2^32,
// floor division by powers of two shifts), then converted to float32.
func (d *Device) Noise(seed int64, shape []int, outDT dtype.DType) (*tensor.Tensor, error) {
	return do(d, func(s *session) (*tensor.Tensor, error) { return s.noise(seed, shape, outDT) })
}

func (s *session) noise(seed int64, shape []int, outDT dtype.DType) (*tensor.Tensor, error) {
	n := tensor.Numel(shape)
	out, o, err := s.result(outDT, shape)
	if err != nil || n == 0 {
		return out, err
	}
	const m32 = 1<<32 - 1
	var t [3]arr
	for i := range t {
		if t[i], err = s.temp(aclInt64, n); err != nil {
			return nil, err
		}
	}
	a, b, c := t[0], t[1], t[2]
	// k = uint64(i) + uint64(seed), as two 32-bit halves with a carry.
	seedLo, seedHi := int64(uint64(seed)&m32), int64(uint64(seed)>>32)
	err = first(
		func() error { return s.arange(a) },                 // a = i
		func() error { return s.copyTo(b, a) },              // b = i
		func() error { return s.andI(b, m32) },              //
		func() error { return s.addI(b, seedLo) },           // b = lo(i) + lo(seed)
		func() error { return s.floorDivI(a, 1<<32) },       // a = hi(i)
		func() error { return s.floorDivides(b, 1<<32, c) }, // c = carry
		func() error { return s.addT(a, c) },                //
		func() error { return s.addI(a, seedHi) },           //
		func() error { return s.andI(a, m32) },              // a = uint32(k >> 32)
		func() error { return s.andI(b, m32) },              // b = uint32(k)
		func() error { return s.xorT(b, a) },                // b = x
		func() error { return s.mulI(b, 747796405) },        //
		func() error { return s.addI(b, 2891336453) },       //
		func() error { return s.andI(b, m32) },              // b = state
		func() error { return s.floorDivides(b, 1<<28, c) }, //
		func() error { return s.addI(c, 4) },                // c = (state >> 28) + 4
		func() error { return s.pow2(c, a) },                // a = 2^c
		func() error { return s.floorDivide(b, a, c) },      // c = state >> ((state >> 28) + 4)
		func() error { return s.xorT(c, b) },                //
		func() error { return s.mulI(c, 277803737) },        //
		func() error { return s.andI(c, m32) },              // c = word
		func() error { return s.floorDivides(c, 1<<22, a) }, //
		func() error { return s.xorT(a, c) },                // a = h
		func() error { return s.floorDivI(a, 1<<8) },        // a = h >> 8
	)
	if err != nil {
		return nil, err
	}
	u, err := s.temp(aclFloat, n)
	if err != nil {
		return nil, err
	}
	return out, s.narrow(o, func(dst arr) error {
		return first(
			func() error { return s.cast(a, u) },            // exact: h >> 8 < 2^24
			func() error { return s.muls(u, 0x1p-24, dst) }, // exact: a power of two
		)
	})
}

// RoundToInt8 rounds each element to an integer in float32 and saturates
// it to int8 (aclnnClamp, then aclnnCast, exact). Floor is aclnnFloor.
// Half to even is float32 addition: adding and then subtracting 1.5 * 2^23
// leaves a value of magnitude at most 2^22 rounded to an integer, ties to
// even, by IEEE addition itself (the input is first clamped to ±256, which
// saturates the same way). aclnnRound also rounds half to even (its header,
// aclnnop/aclnn_round.h, says so), but it is not used: the CANN 8.1.RC1
// Round kernel (impl/dynamic/round.py) first casts float32 input to
// float16 on platforms whose vector round does not take float32, which
// would round values such as 0.50000006 wrongly, while two float32
// additions are exact on every chip.
func (d *Device) RoundToInt8(y *tensor.Tensor, mode eager.RoundMode) (*tensor.Tensor, error) {
	return do(d, func(s *session) (*tensor.Tensor, error) { return s.roundToInt8(y, mode) })
}

// roundingBias is 1.5 * 2^23: float32 values from 2^23 to 2^24 are the
// integers, so x + roundingBias - roundingBias rounds x half to even.
const roundingBias = 0x1.8p23

func (s *session) roundToInt8(y *tensor.Tensor, mode eager.RoundMode) (*tensor.Tensor, error) {
	n := y.Numel()
	out, o, ya, err := s.elementwise(y, dtype.Int8, true)
	if err != nil || n == 0 {
		return out, err
	}
	var t [3]arr
	for i := range t {
		if t[i], err = s.temp(aclFloat, n); err != nil {
			return nil, err
		}
	}
	steps := []func() error{
		func() error { return s.clamp(ya, -256, 256, t[0]) },
		func() error { return s.adds(t[0], roundingBias, t[1]) },
		func() error { return s.adds(t[1], -roundingBias, t[2]) },
	}
	if mode == eager.Floor {
		steps = []func() error{func() error { return s.floor(ya, t[2]) }}
	}
	return out, first(append(steps,
		func() error { return s.clamp(t[2], -128, 127, t[0]) },
		func() error { return s.cast(t[0], o) },
	)...)
}

// Fill returns a tensor of the given shape with every element v rounded to
// dt (aclnnInplaceFillScalar with the rounded value, so the operator does
// no rounding of its own).
func (d *Device) Fill(dt dtype.DType, shape []int, v float32) (*tensor.Tensor, error) {
	return do(d, func(s *session) (*tensor.Tensor, error) { return s.fillNew(dt, shape, v) })
}

func (s *session) fillNew(dt dtype.DType, shape []int, v float32) (*tensor.Tensor, error) {
	out, o, err := s.result(dt, shape)
	if err != nil || tensor.Numel(shape) == 0 {
		return out, err
	}
	return out, s.fill(o, dt.Round(v))
}

// scaleFromMax writes max(m / 127, 1e-30) into out, in float32.
func (s *session) scaleFromMax(m, out arr) error {
	d, err := s.temp(aclFloat, int(count(m)))
	if err != nil {
		return err
	}
	d.shape = m.shape
	return first(
		func() error { return s.divs(m, quant.QMax, d) },
		func() error { return s.clampMin(d, quant.MinScale, out) },
	)
}
