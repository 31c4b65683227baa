// Package cpu is kitchen's fused host backend: the four INT8 operations on
// host tensors, each a single pass over memory where the contract allows,
// split over GOMAXPROCS workers, with AVX-512 or AVX2+F16C assembly on amd64
// and a pure-Go path elsewhere (or with the purego build tag).
//
// Results are bit-identical to the eager backend for every input, including
// stochastic rounding, whose noise depends only on the seed and the flat
// element index; thread count and chunking never change a result.
package cpu

import (
	"context"
	"encoding/binary"
	"math"
	"runtime"
	"sync"

	"github.com/gokitchen/kitchen/backend"
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/quant"
	"github.com/gokitchen/kitchen/tensor"
)

// Name is the backend's registered name.
const Name = "cpu"

func init() { backend.Register(New()) }

// New returns a cpu backend, with its own workers, for registering with a
// Registry other than the default.
func New() backend.Backend {
	b := &cpuBackend{}
	floats := []dtype.DType{dtype.Float32, dtype.Float16, dtype.BFloat16}
	host := []string{"cpu"}
	quantize := backend.Constraints{Devices: host, DTypes: map[string][]dtype.DType{backend.ParamX: floats, backend.ParamScale: floats}}
	deq := backend.Constraints{Devices: host, DTypes: map[string][]dtype.DType{
		backend.ParamQ: {dtype.Int8}, backend.ParamScale: floats, backend.ParamOutDType: floats,
	}}
	return backend.Backend{Name: Name, Kind: backend.Host, Ops: map[backend.Op]backend.Capability{
		backend.QuantizeRowwise:    {Constraints: quantize, Run: b.quantizeRowwise},
		backend.QuantizeTensorwise: {Constraints: quantize, Run: b.quantizeTensorwise},
		backend.Dequantize:         {Constraints: deq, Run: b.dequantize},
		backend.DequantizeDType:    {Constraints: deq, Run: b.dequantize},
	}}
}

type cpuBackend struct {
	once    sync.Once
	workers int       // goroutines serving tasks, besides the caller
	tasks   chan task // parts of jobs for the workers
	free    chan *job // reusable jobs, so a call allocates only its outputs
}

// task is one part of a job.
type task struct {
	j         *job
	p, lo, hi int
}

// start launches GOMAXPROCS-1 workers on first use (getJob calls it); the
// calling goroutine always takes a part too. The workers live as long as
// the process, idle on a channel between calls, like the runtime's own
// worker threads; concurrent calls share them.
func (b *cpuBackend) start() {
	b.once.Do(func() {
		b.workers = runtime.GOMAXPROCS(0) - 1
		b.tasks = make(chan task)
		b.free = make(chan *job, 16)
		for range b.workers {
			go func() {
				for t := range b.tasks {
					t.j.part(t.p, t.lo, t.hi)
					t.j.wg.Done()
				}
			}()
		}
	})
}

// grainBytes is the smallest number of bytes of input worth handing to a
// worker; below it the call runs on one goroutine. BenchmarkGrain measures
// the choice (see BENCHMARKS.md); tests may change it.
var grainBytes = 64 << 10

// job is one operation split into parts that run on separate goroutines.
type job struct {
	kind     jobKind
	dt       dtype.DType // input dtype (quantize) or output dtype (dequantize)
	src      []byte      // x, or q for dequantize
	dst      []byte      // q, or the dequantized output
	k        int         // row length
	scales   []byte      // rowwise: float32 scale per row (out); dequantize: the scale (in)
	sdt      dtype.DType // dequantize: the scale's dtype
	t        float32     // tensorwise: the divisor; dequantize: a single scale
	seed     int64
	partMax  []uint32 // per part: abs-max bits (absMax jobs)
	firstBad []int    // per part: first non-finite row (rowwise) or element (absMax), -1 if none
	wg       sync.WaitGroup
}

type jobKind uint8

const (
	rowwiseJob     jobKind = iota // abs-max, scale and quantize each row
	absMaxJob                     // abs-max of a flat range
	quantizeJob                   // quantize a flat range by t
	dequantRowJob                 // dequantize rows with a scale each
	dequantFlatJob                // dequantize a flat range by t, or by a full-shape scale
)

// run splits units (rows, or elements) into parts of at least minUnits and
// runs them on the workers, the caller's goroutine taking the last part.
// Parts are contiguous and equal: every unit costs about the same, and
// results never depend on how the work was split.
func (b *cpuBackend) run(j *job, units, minUnits int) {
	parts := min(b.workers+1, max(1, units/max(1, minUnits)))
	if cap(j.partMax) < parts {
		j.partMax = make([]uint32, parts)
		j.firstBad = make([]int, parts)
	}
	j.partMax, j.firstBad = j.partMax[:parts], j.firstBad[:parts]
	j.wg.Add(parts - 1)
	for p := range parts - 1 {
		b.tasks <- task{j, p, units * p / parts, units * (p + 1) / parts}
	}
	j.part(parts-1, units*(parts-1)/parts, units)
	j.wg.Wait()
}

func (j *job) part(p, lo, hi int) {
	j.partMax[p], j.firstBad[p] = 0, -1
	switch j.kind {
	case rowwiseJob:
		j.firstBad[p] = j.rows(lo, hi)
	case absMaxJob:
		size := j.dt.Size()
		m := absMaxBits(j.dt, j.src[lo*size:hi*size])
		j.partMax[p] = m
		if m >= infBits(j.dt) {
			j.firstBad[p] = lo + firstNonFinite(j.dt, j.src[lo*size:hi*size])
		}
	case quantizeJob:
		size := j.dt.Size()
		quantize(j.dt, j.src[lo*size:hi*size], j.dst[lo:hi], j.t, j.seed, uint64(lo))
	case dequantRowJob:
		size := j.dt.Size()
		for r := lo; r < hi; r++ {
			s := loadScale(j.sdt, j.scales, r)
			dequantize(j.dt, j.src[r*j.k:(r+1)*j.k], s, j.dst[r*j.k*size:(r+1)*j.k*size])
		}
	case dequantFlatJob:
		size := j.dt.Size()
		if j.scales == nil {
			dequantize(j.dt, j.src[lo:hi], j.t, j.dst[lo*size:hi*size])
		} else {
			ss := j.sdt.Size()
			dequantizeFullGeneric(j.dt, j.src[lo:hi], j.sdt, j.scales[lo*ss:hi*ss], j.dst[lo*size:hi*size])
		}
	}
}

// rows quantizes rows [lo, hi) and returns the first row holding NaN or an
// infinity, or -1.
func (j *job) rows(lo, hi int) int {
	size := j.dt.Size()
	for r := lo; r < hi; r++ {
		src := j.src[r*j.k*size : (r+1)*j.k*size]
		bits := absMaxBits(j.dt, src)
		if bits >= infBits(j.dt) {
			return r
		}
		s := scaleFor(widenBits(j.dt, bits))
		binary.LittleEndian.PutUint32(j.scales[4*r:], math.Float32bits(s))
		quantize(j.dt, src, j.dst[r*j.k:(r+1)*j.k], divisor(j.dt, s), j.seed, uint64(r*j.k))
	}
	return -1
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

func (b *cpuBackend) getJob(kind jobKind) *job {
	b.start()
	var j *job
	select {
	case j = <-b.free:
	default:
		j = &job{}
	}
	j.kind = kind
	return j
}

func (b *cpuBackend) putJob(j *job) {
	// Drop references so an idle job keeps no caller memory alive.
	*j = job{partMax: j.partMax, firstBad: j.firstBad}
	select {
	case b.free <- j:
	default:
	}
}

// firstBadAll returns the first part's non-negative result, or -1.
func (j *job) firstBadAll() int {
	for _, r := range j.firstBad {
		if r >= 0 {
			return r // parts are in order, so the first found is the first
		}
	}
	return -1
}

func (b *cpuBackend) quantizeRowwise(_ context.Context, c *backend.Call) (backend.Result, error) {
	x := c.X
	src, err := x.Bytes()
	if err != nil {
		return backend.Result{}, err
	}
	k := x.Dim(-1)
	rows := x.Numel() / k
	var dims [8]int
	shape := x.AppendShape(dims[:0])
	q, err := tensor.Zeros(dtype.Int8, shape...)
	if err != nil {
		return backend.Result{}, err
	}
	shape[len(shape)-1] = 1
	scale, err := tensor.Zeros(dtype.Float32, shape...)
	if err != nil {
		return backend.Result{}, err
	}
	j := b.getJob(rowwiseJob)
	defer b.putJob(j)
	j.dt, j.src, j.k, j.seed = x.DType(), src, k, c.Seed
	j.dst, _ = q.Bytes()
	j.scales, _ = scale.Bytes()
	b.run(j, rows, max(1, grainBytes/(k*j.dt.Size())))
	if r := j.firstBadAll(); r >= 0 {
		return backend.Result{}, backend.NonFinite(c.Op, r)
	}
	return backend.Result{Q: q, Scale: scale}, nil
}

func (b *cpuBackend) quantizeTensorwise(_ context.Context, c *backend.Call) (backend.Result, error) {
	x := c.X
	src, err := x.Bytes()
	if err != nil {
		return backend.Result{}, err
	}
	n := x.Numel()
	k := 1
	if x.Rank() > 0 {
		k = x.Dim(-1)
	}
	j := b.getJob(absMaxJob)
	defer b.putJob(j)
	j.dt, j.src, j.seed = x.DType(), src, c.Seed
	minElems := max(1, grainBytes/j.dt.Size())

	// Pass 1: abs-max, which also finds NaN and infinity (checked whatever
	// the scale's source).
	b.run(j, n, minElems)
	if i := j.firstBadAll(); i >= 0 {
		return backend.Result{}, backend.NonFinite(c.Op, i/k)
	}
	var s float32
	switch {
	case c.ScaleValue != nil:
		s = *c.ScaleValue
	case c.Scale != nil:
		sb, err := c.Scale.Bytes()
		if err != nil {
			return backend.Result{}, err
		}
		s = loadScale(c.Scale.DType(), sb, 0)
	default:
		var m uint32
		for _, pm := range j.partMax {
			m = max(m, pm)
		}
		s = scaleFor(widenBits(j.dt, m))
	}

	// Pass 2: quantize by t.
	var dims [8]int
	q, err := tensor.Zeros(dtype.Int8, x.AppendShape(dims[:0])...)
	if err != nil {
		return backend.Result{}, err
	}
	scale, err := tensor.FromFloat32(dtype.Float32, []float32{s}, []int{}...)
	if err != nil {
		return backend.Result{}, err
	}
	j.kind, j.t = quantizeJob, divisor(j.dt, s)
	j.dst, _ = q.Bytes()
	b.run(j, n, minElems)
	return backend.Result{Q: q, Scale: scale}, nil
}

func (b *cpuBackend) dequantize(_ context.Context, c *backend.Call) (backend.Result, error) {
	src, err := c.Q.Bytes()
	if err != nil {
		return backend.Result{}, err
	}
	sb, err := c.Scale.Bytes()
	if err != nil {
		return backend.Result{}, err
	}
	var dims [8]int
	out, err := tensor.Zeros(c.OutDType, c.Q.AppendShape(dims[:0])...)
	if err != nil {
		return backend.Result{}, err
	}
	n := c.Q.Numel()
	j := b.getJob(dequantFlatJob)
	defer b.putJob(j)
	j.dt, j.src, j.sdt = c.OutDType, src, c.Scale.DType()
	j.dst, _ = out.Bytes()
	switch m := c.Scale.Numel(); {
	case m == 1:
		j.t = loadScale(j.sdt, sb, 0)
		b.run(j, n, grainBytes)
	case m == n:
		j.scales = sb
		b.run(j, n, grainBytes)
	default: // one scale per row
		j.kind, j.scales, j.k = dequantRowJob, sb, n/m
		b.run(j, m, max(1, grainBytes/j.k))
	}
	return backend.Result{Out: out}, nil
}
