// Package cpu is kitchen's fused host backend: the INT8 operations on host
// tensors, each a single pass over memory where the contract allows, split
// over GOMAXPROCS threads by one small parallel-for (parallel.go), with
// AVX-512 or AVX2+F16C assembly on amd64 and a pure-Go path elsewhere (or
// with the purego build tag).
//
// Each operation is a kernel function over byte slices and a small body
// that runs it over a range of rows or elements; the kernels dispatch to
// the best kernel set this CPU runs (kernels_amd64.go, linear_amd64.go),
// and generic.go and linear_generic.go have the portable ones they are
// tested against (tables.go the lookup tables the portable Q/DQ kernels
// use for long runs).
//
// Results are bit-identical to the eager backend for every input, including
// stochastic rounding, whose noise depends only on the seed and the flat
// element index; thread count and chunking never change a result.
//
// Beside the operations it exports a few host helpers that are not
// operations: KernelSet, the measurements PeakGOPS and StreamGBPerS for
// kitchen bench, and SquaredError and QuantizedSquaredError, the
// converter's weight-error sums.
package cpu

import (
	"context"
	"encoding/binary"
	"math"
	"sync"

	"github.com/gokitchen/kitchen/backend"
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/op"
	"github.com/gokitchen/kitchen/quant"
	"github.com/gokitchen/kitchen/tensor"
)

// Name is the backend's registered name.
const Name = "cpu"

func init() { backend.Register(New()) }

// New returns the cpu backend, for registering with a Registry other than
// the default. Every cpu backend shares the process's worker goroutines.
func New() backend.Backend {
	floats := dtype.Floats()
	host := []string{"cpu"}
	quantize := backend.Constraints{Devices: host, DTypes: []backend.DTypeRule{{Param: "x", DTypes: floats}, {Param: "scale", DTypes: floats}}}
	deq := backend.Constraints{Devices: host, DTypes: []backend.DTypeRule{
		{Param: "q", DTypes: []dtype.DType{dtype.Int8}}, {Param: "scale", DTypes: floats}, {Param: "out_dtype", DTypes: floats},
	}}
	rotQuantize := func(param string) backend.Constraints {
		return backend.Constraints{Devices: host, DTypes: []backend.DTypeRule{{Param: param, DTypes: floats}}}
	}
	embedding := backend.Constraints{Devices: host, DTypes: []backend.DTypeRule{
		{Param: "q", DTypes: []dtype.DType{dtype.Int8}}, {Param: "scale", DTypes: floats},
		{Param: "indices", DTypes: []dtype.DType{dtype.Int32, dtype.Int64}}, {Param: "out_dtype", DTypes: floats},
	}}
	return backend.Backend{Name: Name, Kind: backend.Host, Caps: []backend.Capability{
		op.QuantizeRowwise.Implement(quantize, quantizeRowwise),
		op.QuantizeTensorwise.Implement(quantize, quantizeTensorwise),
		op.Dequantize.Implement(deq, dequantizeSimple),
		op.DequantizeDType.Implement(deq, dequantizeDType),
		op.QuantizeConvRotWeight.Implement(rotQuantize("weight"), quantizeConvRotWeight),
		op.QuantizeAndRotateRowwise.Implement(rotQuantize("x"), quantizeAndRotateRowwise),
		op.DequantizeConvRotWeight.Implement(deq, dequantizeConvRotWeight),
		op.DequantizeConvRotWeightDType.Implement(deq, dequantizeConvRotWeightDType),
		op.DequantizeEmbedding.Implement(embedding, dequantizeEmbedding),
		op.MMInt8.Implement(backend.Constraints{Devices: host}, mmInt8),
		op.Int8Linear.Implement(backend.Constraints{Devices: host}, int8Linear),
	}}
}

// quantizeRowwise: abs-max, scale and quantize each row, rows in parallel.
func quantizeRowwise(ctx context.Context, a *op.RowwiseArgs) (op.Quantized, error) {
	x := a.X
	src, err := x.Bytes()
	if err != nil {
		return op.Quantized{}, err
	}
	k := x.Dim(-1)
	res, err := a.Result()
	if err != nil {
		return res, err
	}
	q, scale := res.Q, res.Scale
	w := rowwisePool.Get().(*rowwiseBody)
	defer func() { *w = rowwiseBody{}; rowwisePool.Put(w) }()
	w.dt, w.src, w.k, w.seed = x.DType(), src, k, a.Seed
	w.dst, _ = q.Bytes()
	w.scales, _ = scale.Bytes()
	w.bad.reset()
	if err := parallelFor(ctx, w, x.Numel()/k, max(1, grainBytes/(k*w.dt.Size()))); err != nil {
		return res, err
	}
	if r := w.bad.get(); r >= 0 {
		return res, backend.NonFinite(op.QuantizeRowwise.Name(), r)
	}
	return res, nil
}

type rowwiseBody struct {
	dt       dtype.DType
	src, dst []byte
	scales   []byte // float32 per row, written
	k        int
	seed     int64
	bad      firstIndex // first row holding NaN or an infinity
}

var rowwisePool = sync.Pool{New: func() any { return new(rowwiseBody) }}

func (w *rowwiseBody) run(lo, hi int) {
	if r := quantizeRows(w.dt, w.src, w.dst, w.scales, w.k, w.seed, lo, hi); r >= 0 {
		w.bad.report(r)
	}
}

// quantizeTensorwise: the abs-max of x in parallel, then quantization by
// one divisor in parallel; with a supplied scale only the second pass,
// which checks each chunk's abs-max just before it quantizes the chunk.
func quantizeTensorwise(ctx context.Context, a *op.TensorwiseArgs) (op.Quantized, error) {
	x := a.X
	src, err := x.Bytes()
	if err != nil {
		return op.Quantized{}, err
	}
	n := x.Numel()
	k := 1
	if x.Rank() > 0 {
		k = x.Dim(-1)
	}
	w := flatPool.Get().(*flatBody)
	defer func() { *w = flatBody{}; flatPool.Put(w) }()
	w.dt, w.src, w.seed = x.DType(), src, a.Seed
	minElems := max(1, grainBytes/w.dt.Size())

	var s float32
	switch {
	case a.ScaleValue != nil:
		s, w.checked = *a.ScaleValue, true
	case a.Scale != nil:
		sb, err := a.Scale.Bytes()
		if err != nil {
			return op.Quantized{}, err
		}
		s, w.checked = loadScale(a.Scale.DType(), sb, 0), true
	default:
		// Pass 1: abs-max, which also finds NaN and infinity.
		w.bad.reset()
		if err := parallelFor(ctx, w, n, minElems); err != nil {
			return op.Quantized{}, err
		}
		if i := w.bad.get(); i >= 0 {
			return op.Quantized{}, backend.NonFinite(op.QuantizeTensorwise.Name(), i/k)
		}
		s = scaleFor(widenBits(w.dt, w.max.v.Load()))
	}

	// Pass 2: quantize by t. With a supplied scale, NaN or infinity is
	// found here, and leaves the outputs unspecified, as kitchen.Into
	// allows.
	res, err := a.Result()
	if err != nil {
		return res, err
	}
	sb, _ := res.Scale.Bytes()
	binary.LittleEndian.PutUint32(sb, math.Float32bits(s))
	w.quantize, w.t = true, divisor(w.dt, s)
	// A computed scale's abs-max bounds every quotient (by about 127: the
	// scale is rounded to x's dtype); a supplied one's chunks are bounded
	// one by one.
	w.bounded = !w.checked && widenBits(w.dt, w.max.v.Load())/w.t < 1<<15
	w.dst, _ = res.Q.Bytes()
	w.bad.reset()
	if err := parallelFor(ctx, w, n, minElems); err != nil {
		return res, err
	}
	if i := w.bad.get(); i >= 0 {
		return res, backend.NonFinite(op.QuantizeTensorwise.Name(), i/k)
	}
	return res, nil
}

// flatBody is a tensor-wise pass over a flat range of elements: the abs-max
// pass, or (quantize set) the quantization by t, checking each chunk's
// abs-max first if checked (a supplied scale).
type flatBody struct {
	dt       dtype.DType
	src, dst []byte
	quantize bool
	checked  bool
	t        float32
	bounded  bool // every |x / t| is below 2^15 (hints.bounded)
	seed     int64
	max      maxBits    // abs-max bits over x
	bad      firstIndex // first element that is NaN or an infinity
}

var flatPool = sync.Pool{New: func() any { return new(flatBody) }}

// checkedChunk is how many bytes of input a quantization by a supplied scale
// reads for their abs-max before it quantizes them, from the first-level
// cache: a page, as far as the quantize kernels prefetch (flatAhead; they also
// fetch a line of the page after next, see primePage in _asm), so they bring
// in the next chunk. Same-process A/B, [8352, 3840], against the two passes it
// replaced: 0.62-0.63 of the time for float32, 0.72-0.81 for float16 and
// bfloat16 (16 KiB chunks: 0.66-0.92).
const checkedChunk = 4 << 10

func (w *flatBody) run(lo, hi int) {
	size := w.dt.Size()
	src := w.src[lo*size : hi*size]
	if !w.quantize {
		m := absMaxBits(w.dt, src)
		w.max.report(m)
		if m >= infBits(w.dt) {
			w.bad.report(lo + firstNonFinite(w.dt, src))
		}
		return
	}
	h := hints{ahead: flatAhead, nt: quantStreaming(len(w.src), len(w.dst), w.seed > 0), bounded: w.bounded}
	if !w.checked {
		quantizeHinted(w.dt, src, w.dst[lo:hi], w.t, w.seed, uint64(lo), h)
		return
	}
	for c := lo; c < hi; c += checkedChunk / size {
		e := min(hi, c+checkedChunk/size)
		part := w.src[c*size : e*size]
		m := absMaxBits(w.dt, part)
		if m >= infBits(w.dt) {
			// The call fails: nothing later in this part comes first.
			w.bad.report(c + firstNonFinite(w.dt, part))
			return
		}
		h.bounded = widenBits(w.dt, m)/w.t < 1<<15
		quantizeHinted(w.dt, part, w.dst[c:e], w.t, w.seed, uint64(c), h)
	}
}

func dequantizeSimple(ctx context.Context, a *op.DequantizeArgs) (op.Dequantized, error) {
	res, err := a.Result()
	if err != nil {
		return res, err
	}
	return res, dequantizeTo(ctx, op.Dequantize.Name(), a, res.Out)
}

func dequantizeDType(ctx context.Context, a *op.DequantizeDTypeArgs) (op.Dequantized, error) {
	res, err := a.Result()
	if err != nil {
		return res, err
	}
	return res, dequantizeTo(ctx, op.DequantizeDType.Name(), &a.DequantizeArgs, res.Out)
}

// dequantizeTo computes out = rOut(f32(q) * f32(scale)) in parallel: by rows for
// a row-wise scale, by elements otherwise. Each scale is checked to be a
// finite number > 0 where it is read: one scale before the parallel pass,
// a row's scale as the row is done, a full-shape scale block by block.
func dequantizeTo(ctx context.Context, name string, a *op.DequantizeArgs, out *tensor.Tensor) error {
	outDType := out.DType()
	src, err := a.Q.Bytes()
	if err != nil {
		return err
	}
	sb, err := a.Scale.Bytes()
	if err != nil {
		return err
	}
	n, m := a.Q.Numel(), a.Scale.Numel()
	if m == 1 && !goodScale(loadScale(a.Scale.DType(), sb, 0)) {
		return op.BadScale(name, 0)
	}
	w := dequantPool.Get().(*dequantBody)
	defer func() { *w = dequantBody{}; dequantPool.Put(w) }()
	w.dt, w.src, w.sdt = outDType, src, a.Scale.DType()
	w.dst, _ = out.Bytes()
	w.bad.reset()
	switch {
	case m == 1:
		w.t = loadScale(w.sdt, sb, 0)
		err = parallelFor(ctx, w, n, grainBytes)
	case m == n:
		w.scales = sb
		err = parallelFor(ctx, w, n, grainBytes)
	default: // one scale per row
		w.scales, w.k = sb, n/m
		err = parallelFor(ctx, w, m, max(1, grainBytes/w.k))
	}
	if err != nil {
		return err
	}
	if i := w.bad.get(); i >= 0 {
		return op.BadScale(name, i)
	}
	return nil
}

// goodScale reports whether a dequantize scale is a finite number > 0.
func goodScale(s float32) bool { return s > 0 && s <= math.MaxFloat32 }

// dequantBody dequantizes a range of elements by one scale (t) or by a
// scale of q's shape, or (k > 0) a range of rows of k elements with a scale
// each, and reports the first scale it reads that is not a finite number
// > 0 (its flat index) to bad.
type dequantBody struct {
	dt       dtype.DType // the output's
	src, dst []byte
	scales   []byte
	sdt      dtype.DType
	t        float32
	k        int
	bad      firstIndex
}

var dequantPool = sync.Pool{New: func() any { return new(dequantBody) }}

func (w *dequantBody) run(lo, hi int) {
	size := w.dt.Size()
	nt := dequantStreaming(len(w.dst))
	switch {
	case w.k > 0:
		for r := lo; r < hi; r++ {
			s := loadScale(w.sdt, w.scales, r)
			if !goodScale(s) {
				w.bad.report(r)
				return
			}
			dequantizeHinted(w.dt, w.src[r*w.k:(r+1)*w.k], s, w.dst[r*w.k*size:(r+1)*w.k*size], nt)
		}
	case w.scales == nil:
		dequantizeHinted(w.dt, w.src[lo:hi], w.t, w.dst[lo*size:hi*size], nt)
	default:
		ss := w.sdt.Size()
		if i := dequantizeFullGeneric(w.dt, w.src[lo:hi], w.sdt, w.scales[lo*ss:hi*ss], w.dst[lo*size:hi*size]); i >= 0 {
			w.bad.report(lo + i)
		}
	}
}

// quantizeRows quantizes rows [lo, hi) of k elements of dt from src into
// dst, writing each row's float32 scale to scales, and returns the first
// row holding NaN or an infinity, or -1. A row's abs-max must be known
// before the row can be quantized, so with the AVX2 kernels each row is
// quantized while the next one is read for its abs-max (quantizeRowNext):
// memory streams the next row while the current one, read last time, is
// computed from the cache. The AVX-512 kernels, and stochastic rounding
// on any set, prefetch the next row as they quantize instead, so that its
// abs-max reads cache; the Go kernels read row after row.
func quantizeRows(dt dtype.DType, src, dst, scales []byte, k int, seed int64, lo, hi int) int {
	size := dt.Size()
	stochastic := seed > 0
	h := hints{ahead: flatAhead, nt: rowsStreaming(dt, len(src), len(dst), stochastic), bounded: true} // a computed scale
	if stochastic {
		h.ahead = k * size
	}
	row := func(r int) []byte { return src[r*k*size : (r+1)*k*size] }
	bits := absMaxBits(dt, row(lo))
	for r := lo; r < hi; r++ {
		if bits >= infBits(dt) {
			return r
		}
		s := scaleFor(widenBits(dt, bits))
		binary.LittleEndian.PutUint32(scales[4*r:], math.Float32bits(s))
		q := dst[r*k : (r+1)*k]
		if r+1 < hi && !stochastic {
			bits = quantizeRowNext(dt, row(r), q, divisor(dt, s), row(r+1), h)
			continue
		}
		quantizeHinted(dt, row(r), q, divisor(dt, s), seed, uint64(r*k), h)
		if r+1 < hi {
			bits = absMaxBits(dt, row(r+1))
		}
	}
	return -1
}

// quantStreaming is streaming for a quantize pass that reads in bytes and
// writes out: as for every output larger than the last-level cache, and,
// rounding half to even, also when input and output together are (the
// output's lines are evicted by the input before anyone reads them).
// Measured on a 2-core Zen 3 (AVX2), [8352, 3840], alternating in one
// process: non-temporal stores took 0.84-0.91 of the time for row-wise
// bfloat16 and float16 (0.91-0.93 calling twice without the copy
// between), 0.92-0.95 for float32, and 0.88-0.94, 0.89-0.95 and 0.92-1.00
// for the tensor-wise pass, once the kernels no longer fenced each call
// (1.03-1.07 for row-wise 16-bit while they did, once per row). On a
// 2-core Zen 4 with the AVX-512 kernels, `kitchen bench` alternated three
// times, reused outputs: row-wise bfloat16 3.03-3.93 ms without, 2.41-3.14
// with, float32 6.45-6.76 and 5.52-6.03, tensor-wise bfloat16 4.25-5.04
// and 3.73-4.18 (float16 within the noise).
func quantStreaming(in, out int, stochastic bool) bool {
	return streaming(out) || !stochastic && streaming(in+out)
}

// rowsStreaming is quantStreaming for the row-wise pass, except that on a
// Zen 5 the AVX-512 kernels quantizing 16-bit input stream only an output
// larger than the cache: there the non-temporal stores cost more than
// they saved. `kitchen bench --op quantize_int8_rowwise` on a 2-core Zen
// 5, [8352, 3840], reused outputs, builds alternated three times: bfloat16
// 2.17-2.38 ms with them, 1.96-2.06 without, float16 2.11-2.39 and
// 2.04-2.16 (the copy floor 1.55-1.6 ms), while float32 took 3.52-3.77 ms
// with them and 4.18-4.24 without, as on the Zen 4 every type gained.
//
// The same Zen 5 stores dequantized outputs ordinarily whatever their
// size (dequantStreaming): [8352, 3840] to bfloat16, reused outputs, two
// alternations, 2.41-2.44 ms with non-temporal stores, 1.81-2.05 without;
// to float16 2.29-2.48 and 1.89-1.99; to float32 3.08-3.85 and 3.39-3.70
// (within the noise).
func rowsStreaming(dt dtype.DType, in, out int, stochastic bool) bool {
	if zen5 && impl == implAVX512 && dt.Size() == 2 && !streaming(out) {
		return false
	}
	return quantStreaming(in, out, stochastic)
}

// dequantStreaming is whether a dequantize pass writing out bytes uses
// non-temporal stores: where the output is larger than the cache, except
// with the AVX-512 kernels on a Zen 5 (see rowsStreaming).
func dequantStreaming(out int) bool {
	return streaming(out) && !(zen5 && impl == implAVX512)
}

// scaleFor is the contract's s = max(a / 127, 1e-30) in float32.
func scaleFor(a float32) float32 { return max(a/quant.QMax, quant.MinScale) }

// divisor is t = rT(s), with zero replaced by T's smallest normal.
func divisor(dt dtype.DType, s float32) float32 {
	if t := dt.Round(s); t != 0 {
		return t
	}
	return dt.TinyNormal()
}

func loadScale(dt dtype.DType, b []byte, i int) float32 {
	var v [1]float32
	widenBlock(dt, b, i, v[:])
	return v[0]
}

// firstNonFinite returns the index of the first NaN or infinity in src.
func firstNonFinite(dt dtype.DType, src []byte) int {
	inf := infBits(dt)
	size := dt.Size()
	for i := 0; i < len(src)/size; i++ {
		if absMaxBitsGeneric(dt, src[i*size:(i+1)*size]) >= inf {
			return i
		}
	}
	return -1
}
