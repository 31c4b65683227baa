package cpu

import (
	"context"
	"encoding/binary"
	"math"
	"sync"

	"github.com/gokitchen/kitchen/backend"
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/op"
	"github.com/gokitchen/kitchen/tensor"
)

// The ConvRot operations and int8 embeddings: each row is widened (and
// scaled) into a float32 buffer, rotated there (rotate: quant.Rotate's
// summation order, the contract's one, with assembly on amd64), then
// quantized or stored, in one pass per row over memory (rotateRow,
// rotateQRow). Where fusedRotation, the widening and rounding are done by
// the rotation's first and last passes; with AVX-512 and groups of 16 to
// 256, one kernel does all of it in registers, so the row never goes
// through memory as float32.

// rowBufs are per-part scratch rows: two float32 rows and a row of the
// input dtype.
type rowBufs struct {
	f, f2 []float32
	b     []byte
}

var rowBufPool = sync.Pool{New: func() any { return new(rowBufs) }}

func getRowBufs(k, size int) *rowBufs {
	r := rowBufPool.Get().(*rowBufs)
	if cap(r.f) < k {
		r.f, r.f2 = make([]float32, k), make([]float32, k)
	}
	if cap(r.b) < k*size {
		r.b = make([]byte, k*size)
	}
	r.f, r.f2, r.b = r.f[:k], r.f2[:k], r.b[:k*size]
	return r
}

func quantizeConvRotWeight(ctx context.Context, a *op.ConvRotWeightArgs) (op.Quantized, error) {
	res, err := a.Result()
	if err != nil {
		return res, err
	}
	return res, rotateQuantize(ctx, op.QuantizeConvRotWeight.Name(), "weight", a.Weight, a.Group, a.Seed, res.Q, res.Scale)
}

func quantizeAndRotateRowwise(ctx context.Context, a *op.RotateRowwiseArgs) (op.Quantized, error) {
	res, err := a.Result()
	if err != nil {
		return res, err
	}
	return res, rotateQuantize(ctx, op.QuantizeAndRotateRowwise.Name(), "x", a.X, a.Group, a.Seed, res.Q, res.Scale)
}

// rotateQuantize rotates each row of x in groups of g, rounds it to x's
// dtype and quantizes it row-wise into q and scale.
func rotateQuantize(ctx context.Context, name, param string, x *tensor.Tensor, g int, seed int64, q, scale *tensor.Tensor) error {
	src, err := x.Bytes()
	if err != nil {
		return err
	}
	k := x.Dim(-1)
	w := &rotateQuantizeBody{dt: x.DType(), src: src, k: k, g: g, seed: seed}
	w.dst, _ = q.Bytes()
	w.scales, _ = scale.Bytes()
	w.bad.reset()
	if err := parallelFor(ctx, w, x.Numel()/k, max(1, grainBytes/(k*w.dt.Size()))); err != nil {
		return err
	}
	if r := w.bad.get(); r >= 0 {
		return backend.NonFiniteIn(name, param, r)
	}
	return nil
}

type rotateQuantizeBody struct {
	dt       dtype.DType
	src, dst []byte
	scales   []byte
	k, g     int
	seed     int64
	bad      firstIndex
}

func (w *rotateQuantizeBody) run(lo, hi int) {
	size := w.dt.Size()
	buf := getRowBufs(w.k, size)
	defer rowBufPool.Put(buf)
	for r := lo; r < hi; r++ {
		// rT(rotate(x)), as the row to quantize, and its largest magnitude.
		bits := rotateRow(w.dt, w.src[r*w.k*size:(r+1)*w.k*size], buf.b, w.g, buf.f)
		if quantizeRow(w.dt, buf.b, bits, w.dst[r*w.k:(r+1)*w.k], w.scales[4*r:], w.seed, uint64(r*w.k)) {
			w.bad.report(r)
			return
		}
	}
}

// rotateRow sets dst to rT(rotate(x, g)) for the row x of dt at src (dst
// may be src), through v, a float32 row at least as long, and returns
// absMaxBits(dt, dst): where fusedRotation with the conversions fused into
// the rotation's passes (rotateRowFused), else widenRow, rotate and
// storeRow in turn. The payload of a NaN in x may differ from rotate's
// (see there): a row that holds one is an error, whatever its bits.
func rotateRow(dt dtype.DType, src, dst []byte, g int, v []float32) uint32 {
	k := len(dst) / dt.Size()
	if fusedRotation(k, g) {
		return rotateRowFused(dt, src, dst, g, v)
	}
	v = v[:k]
	widenRow(dt, src, v)
	rotate(v, g)
	storeRow(dt, dst, v)
	return absMaxBits(dt, dst)
}

// rotateQRow sets dst to rOut(rotate(float32(int8(q[i])) * s, g)), s
// finite, through v, a float32 row at least as long as q: where
// fusedRotation fused (rotateQRowFused, which prefetches next, the row to
// come, as long as q, as it reads q), else scaleInt8, rotate and storeRow
// in turn.
func rotateQRow(out dtype.DType, q []byte, s float32, dst []byte, g int, v []float32, next []byte) {
	if fusedRotation(len(q), g) {
		rotateQRowFused(out, q, s, dst, g, v, next)
		return
	}
	v = v[:len(q)]
	scaleInt8(q, s, v)
	rotate(v, g)
	storeRow(out, dst, v)
}

// quantizeRow quantizes one row of dt whose largest sign-cleared bits are
// bits (absMaxBits) into dst, writing its float32 scale to scale[:4]; it
// reports whether the row holds NaN or an infinity.
func quantizeRow(dt dtype.DType, row []byte, bits uint32, dst, scale []byte, seed int64, base uint64) (bad bool) {
	if bits >= infBits(dt) {
		return true
	}
	s := scaleFor(widenBits(dt, bits))
	binary.LittleEndian.PutUint32(scale, math.Float32bits(s))
	// A scale computed from the row bounds every quotient (hints.bounded).
	quantizeHinted(dt, row, dst, divisor(dt, s), seed, base, hints{bounded: true})
	return false
}

func dequantizeConvRotWeight(ctx context.Context, a *op.ConvRotDequantizeArgs) (op.Dequantized, error) {
	res, err := a.Result()
	if err != nil {
		return res, err
	}
	return res, dequantizeRotate(ctx, op.DequantizeConvRotWeight.Name(), a, res.Out)
}

func dequantizeConvRotWeightDType(ctx context.Context, a *op.ConvRotDequantizeDTypeArgs) (op.Dequantized, error) {
	res, err := a.Result()
	if err != nil {
		return res, err
	}
	return res, dequantizeRotate(ctx, op.DequantizeConvRotWeightDType.Name(), &a.ConvRotDequantizeArgs, res.Out)
}

// dequantizeRotate computes rotate(f32(q) * f32(scale), g) row by row in
// float32 and rounds it once to out. A scale that is not a finite number
// > 0 is an error naming the first such element: a single or row-wise
// scale is checked before the rows, a full-shape one row by row.
func dequantizeRotate(ctx context.Context, name string, a *op.ConvRotDequantizeArgs, o *tensor.Tensor) error {
	out := o.DType()
	src, err := a.Q.Bytes()
	if err != nil {
		return err
	}
	sb, err := a.Scale.Bytes()
	if err != nil {
		return err
	}
	full := a.Scale.Numel() == a.Q.Numel()
	if !full {
		if i := firstBadScale(a.Scale.DType(), sb, a.Scale.Numel()); i >= 0 {
			return op.BadScale(name, i)
		}
	}
	k := a.Q.Dim(-1)
	w := &rotatedRows{out: out, q: src, scales: sb, sdt: a.Scale.DType(), perRow: a.Scale.Numel() == a.Q.Numel()/k,
		full: full, k: k, g: a.Group}
	w.dst, _ = o.Bytes()
	w.badScale.reset()
	if err := parallelFor(ctx, w, a.Q.Numel()/k, max(1, grainBytes/k)); err != nil {
		return err
	}
	if i := w.badScale.get(); i >= 0 {
		return op.BadScale(name, i)
	}
	return nil
}

// firstBadScale returns the index of the first of the n scales of sdt in b
// that is not a finite number > 0, or -1.
func firstBadScale(sdt dtype.DType, b []byte, n int) int {
	for i := range n {
		if !goodScale(loadScale(sdt, b, i)) {
			return i
		}
	}
	return -1
}

// rotatedRows writes rows of rOut(rotate(f32(q) * f32(scale), g)): output
// row r from table row index(r) (r itself without indices). g = 0 leaves
// out the rotation.
type rotatedRows struct {
	out          dtype.DType
	q, dst       []byte
	scales       []byte
	sdt          dtype.DType
	perRow, full bool // one scale per row, or one per element; else a single one
	k, g         int
	indices      []byte
	idt          dtype.DType
	bad          firstIndex // the first index out of range (embeddings)
	badScale     firstIndex // the first full-shape scale element that is not a finite number > 0
}

func (w *rotatedRows) run(lo, hi int) {
	buf := getRowBufs(w.k, 1)
	defer rowBufPool.Put(buf)
	v, sf := buf.f, buf.f2 // sf holds a full-shape scale row, widened
	size := w.out.Size()
	for r := lo; r < hi; r++ {
		src, ok := w.source(r)
		if !ok {
			w.bad.report(r)
			return
		}
		q := w.q[src*w.k : (src+1)*w.k]
		if !w.full && w.g > 0 {
			si := 0
			if w.perRow {
				si = src
			}
			next := q // the row to prefetch as this one is read
			if r+1 < hi {
				if n, ok := w.source(r + 1); ok {
					next = w.q[n*w.k : (n+1)*w.k]
				}
			}
			rotateQRow(w.out, q, loadScale(w.sdt, w.scales, si), w.dst[r*w.k*size:(r+1)*w.k*size], w.g, v, next)
			continue
		}
		switch {
		case w.full:
			ss := w.sdt.Size()
			widenRow(w.sdt, w.scales[src*w.k*ss:(src+1)*w.k*ss], sf)
			for j, s := range sf {
				if !goodScale(s) {
					w.badScale.report(src*w.k + j)
					return
				}
			}
			mulInt8(q, sf, v)
		default:
			si := 0
			if w.perRow {
				si = src
			}
			scaleInt8(q, loadScale(w.sdt, w.scales, si), v)
		}
		if w.g > 0 {
			rotate(v, w.g)
		}
		storeRow(w.out, w.dst[r*w.k*size:(r+1)*w.k*size], v)
	}
}

// source returns the table row of output row r, and false if it is out
// of range (an embedding's index).
func (w *rotatedRows) source(r int) (int, bool) {
	if w.indices == nil {
		return r, true
	}
	i := dtype.LoadInt(w.indices, w.idt, r)
	return int(i), i >= 0 && i < int64(len(w.q)/w.k)
}

func dequantizeEmbedding(ctx context.Context, a *op.EmbeddingArgs) (op.Dequantized, error) {
	q, err := a.Q.Bytes()
	if err != nil {
		return op.Dequantized{}, err
	}
	sb, err := a.Scale.Bytes()
	if err != nil {
		return op.Dequantized{}, err
	}
	ib, err := a.Indices.Bytes()
	if err != nil {
		return op.Dequantized{}, err
	}
	// The whole table's scales are checked first, as eager does.
	if i := firstBadScale(a.Scale.DType(), sb, a.Scale.Numel()); i >= 0 {
		return op.Dequantized{}, op.BadScale(op.DequantizeEmbedding.Name(), i)
	}
	d := a.Q.Dim(1)
	res, err := a.Result()
	if err != nil {
		return res, err
	}
	o := res.Out
	w := &rotatedRows{out: a.OutDType, q: q, scales: sb, sdt: a.Scale.DType(), perRow: a.Scale.Numel() != 1,
		k: d, g: a.Group, indices: ib, idt: a.Indices.DType()}
	w.dst, _ = o.Bytes()
	w.bad.reset()
	n := a.Indices.Numel()
	if err := parallelFor(ctx, w, n, max(1, grainBytes/d)); err != nil {
		return res, err
	}
	if i := w.bad.get(); i >= 0 {
		return res, op.BadIndex(i, dtype.LoadInt(ib, a.Indices.DType(), i), a.Q.Dim(0))
	}
	return res, nil
}

// scaleInt8Generic sets dst[i] = float32(int8(q[i])) * s for the len(dst)
// elements of q.
func scaleInt8Generic(q []byte, s float32, dst []float32) {
	q = q[:len(dst)]
	for j := range dst {
		dst[j] = float32(int8(q[j])) * s
	}
}

// mulInt8Generic sets dst[i] = float32(int8(q[i])) * s[i] for the len(dst)
// elements of q and s.
func mulInt8Generic(q []byte, s, dst []float32) {
	q, s = q[:len(dst)], s[:len(dst)]
	for j := range dst {
		dst[j] = float32(int8(q[j])) * s[j]
	}
}
