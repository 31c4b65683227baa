// Package eval measures how well a quantized checkpoint reproduces its
// original: every int8 linear layer of the quantized file runs through
// int8_linear (with its ConvRot rotation, as ComfyUI runs it) on seeded
// random activations, and its output is compared with the original layer's
// computed in float64. Activations come plain (normal) and with a few
// large outlier channels, as diffusion transformers' activations have, since
// outliers are what separates per-tensor, per-channel and ConvRot scales.
// An embedding table, which is looked up rather than multiplied, is
// measured by its weight: its rows dequantized against the original's.
package eval

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"regexp"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/gokitchen/kitchen"
	"github.com/gokitchen/kitchen/backend"
	"github.com/gokitchen/kitchen/comfyquant"
	"github.com/gokitchen/kitchen/convert"
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/op"
	"github.com/gokitchen/kitchen/safetensors"
	"github.com/gokitchen/kitchen/tensor"
)

// Options say how to evaluate.
type Options struct {
	// Tokens is the number of activation rows per layer (default 64, at
	// most MaxTokens).
	Tokens int
	// Seed makes the activations (default 1).
	Seed uint64
	// Outliers is the number of outlier channels (default 4), each scaled
	// by OutlierScale (default 50).
	Outliers     int
	OutlierScale float64
	// Backend, if set, names the backend the layers run on: int8_linear,
	// and dequantize_int8_convrot_weight for ConvRot embedding tables.
	Backend string
	// Include, if set, limits the evaluation to the layers whose names
	// (without ".weight") it matches.
	Include *regexp.Regexp
	// Progress, if set, is called after each layer, in the converter's
	// terms: Tensor is the layer's name, the tensor counts count layers
	// and the bytes are their int8 weights' (the work goes as N·K).
	Progress func(convert.Progress)
}

// MaxTokens is the most activation rows Options.Tokens may ask for: each
// layer holds tokens × K activations twice (float32), so 65536 rows of a
// 3072-wide layer already take 1.5 GiB, and its float64 reference
// computes tokens × N × K products (scalar Go).
const MaxTokens = 1 << 16

// ErrOptions is the error for Options out of their range.
var ErrOptions = errors.New("eval: invalid options")

// check reports options no default can stand for.
func (o *Options) check() error {
	switch {
	case o.Tokens < 0 || o.Tokens > MaxTokens:
		return fmt.Errorf("%w: Tokens is %d, want 1 to %d (0: the default)", ErrOptions, o.Tokens, MaxTokens)
	case o.Outliers < 0:
		return fmt.Errorf("%w: Outliers is %d, want 0 (the default) or more", ErrOptions, o.Outliers)
	case o.OutlierScale < 0 || math.IsNaN(o.OutlierScale) || math.IsInf(o.OutlierScale, 0):
		return fmt.Errorf("%w: OutlierScale is %v, want a finite 0 (the default) or more", ErrOptions, o.OutlierScale)
	}
	return nil
}

func (o *Options) defaults() {
	if o.Tokens == 0 {
		o.Tokens = 64
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	if o.Outliers == 0 {
		o.Outliers = 4
	}
	if o.OutlierScale == 0 {
		o.OutlierScale = 50
	}
}

// Layer is one quantized layer's result.
type Layer struct {
	Name string `json:"name"`
	// N and K are the weight's shape.
	N int `json:"n"`
	K int `json:"k"`
	// Scales is "tensor" or "channel"; ConvRot the rotation's group (0:
	// none).
	Scales  string `json:"scales"`
	ConvRot int    `json:"convrot_group,omitempty"`
	// PlainError and OutlierError are a linear layer's relative output
	// errors ||y_int8 - y_orig|| / ||y_orig|| on plain activations and on
	// activations with outlier channels, or both an embedding table's
	// relative weight error (Embedding): +Inf where the int8 layer's
	// output or weight overflows float32, which JSON writes as null.
	PlainError   float64 `json:"plain_rel_error"`
	OutlierError float64 `json:"outlier_rel_error"`
	// Embedding marks an embedding table (convert.IsEmbeddingTable),
	// which looks rows up rather than multiplying activations: both
	// errors are then its dequantized rows' ||w' - w|| / ||w||
	// (convert.WeightErrorSums).
	Embedding bool `json:"embedding,omitempty"`
	// Note says where ComfyUI may read the layer otherwise than kitchen
	// does, and so run it otherwise than measured here
	// (convert.LayerReport.Note).
	Note string `json:"note,omitempty"`
}

// MarshalJSON writes the layer with an error that is not finite as null,
// since JSON has no infinity.
func (l Layer) MarshalJSON() ([]byte, error) {
	type fields Layer // without this method
	orNull := func(v float64) *float64 {
		if math.IsInf(v, 0) || math.IsNaN(v) {
			return nil
		}
		return &v
	}
	return json.Marshal(struct {
		fields
		PlainError   *float64 `json:"plain_rel_error"`
		OutlierError *float64 `json:"outlier_rel_error"`
	}{fields(l), orNull(l.PlainError), orNull(l.OutlierError)})
}

// Worst is the larger of the layer's two errors, NaN if either is.
func (l Layer) Worst() float64 { return max(l.PlainError, l.OutlierError) }

// Report is an evaluation, layers worst first.
type Report struct {
	Original  string `json:"original"`
	Quantized string `json:"quantized"`
	// The activations, as Options made them (defaults filled in), so
	// that a report says how to reproduce it.
	Tokens       int     `json:"tokens"`
	Seed         uint64  `json:"seed"`
	Outliers     int     `json:"outliers"`
	OutlierScale float64 `json:"outlier_scale"`
	Layers       []Layer `json:"layers"`
}

// Run evaluates every int8 layer of the quantized checkpoint quant against
// the same layer of orig: a linear layer's output, an embedding table's
// weight. Either may be a .safetensors file, a sharded checkpoint's index
// (*.safetensors.index.json) or a directory of shards (see
// convert.OpenCheckpoint). The original's tensors are found by name
// in whichever shard holds them; a quantized layer's weight, scale and
// marker must share a shard, as kitchen dequantize reads them. The layers
// and their configs are read as
// convert.Inspect reads them (comfy_quant markers or
// _quantization_metadata, as ComfyUI does); a layer kitchen dequantize
// would refuse is an error, not a figure for a layer ComfyUI would run
// otherwise.
func Run(ctx context.Context, orig, quant string, opts Options) (*Report, error) {
	if ctx == nil {
		return nil, errors.New("eval: nil context")
	}
	if err := opts.check(); err != nil {
		return nil, err
	}
	opts.defaults()
	if opts.Backend != "" {
		// Every layer runs on the host: a backend that cannot run
		// int8_linear there is refused before anything is read, one that
		// cannot run what the layers need (hostOps) before any layer runs.
		if err := hostOps(ctx, opts.Backend, nil); err != nil {
			return nil, err
		}
	}
	co, err := convert.OpenCheckpoint(ctx, orig)
	if err != nil {
		return nil, err
	}
	defer co.Close()
	cq, err := convert.OpenCheckpoint(ctx, quant)
	if err != nil {
		return nil, err
	}
	defer cq.Close()
	// The layers as kitchen dequantize (and ComfyUI) read them: configs
	// from the markers or _quantization_metadata, each layer checked, a
	// layer dequantize would refuse refused here too.
	ins, err := convert.InspectCheckpoint(ctx, cq)
	if err != nil {
		return nil, err
	}
	if len(ins.Problems) > 0 {
		return nil, fmt.Errorf("eval: %s (kitchen dequantize refuses it too)", ins.Problems[0])
	}
	var layers []convert.LayerReport
	var prog convert.Progress
	for _, l := range ins.Layers {
		if opts.Include != nil && !opts.Include.MatchString(l.Name) {
			continue
		}
		if l.Problem != "" {
			return nil, fmt.Errorf("eval: %s: layer %q: %s (kitchen dequantize refuses it too)", l.Shard, l.Name, l.Problem)
		}
		layers = append(layers, l)
		prog.BytesTotal += int64(l.Shape[0]) * int64(l.Shape[1]) // a layer without a problem has a [N, K] weight
	}
	if len(layers) == 0 {
		if opts.Include != nil && len(ins.Layers) > 0 {
			return nil, fmt.Errorf("eval: no quantized layer of %s matches %q", quant, opts.Include)
		}
		return nil, fmt.Errorf("eval: %s holds no quantized layers (no %s markers, no %s): not a quantized checkpoint",
			quant, comfyquant.MarkerSuffix, comfyquant.MetadataKey)
	}
	if opts.Backend != "" {
		if err := hostOps(ctx, opts.Backend, layers); err != nil {
			return nil, err
		}
	}
	prog.TensorsTotal = len(layers)
	rep := &Report{Original: orig, Quantized: quant, Tokens: opts.Tokens, Seed: opts.Seed, Outliers: opts.Outliers, OutlierScale: opts.OutlierScale}
	for _, lr := range layers {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		l, err := evalLayer(ctx, co, cq, lr, opts)
		if err != nil {
			return nil, err
		}
		rep.Layers = append(rep.Layers, l)
		if opts.Progress != nil {
			prog.Tensor, prog.TensorsDone, prog.BytesDone = lr.Name, prog.TensorsDone+1, prog.BytesDone+int64(l.N)*int64(l.K)
			opts.Progress(prog)
		}
	}
	sortWorstFirst(rep.Layers)
	return rep, nil
}

// hostOps checks that the named backend accepts, on the host, the calls
// eval makes: with no layers, plain int8_linear (checked before anything
// is read, since every evaluation is about it); for layers, int8_linear
// with each linear layer's ConvRot group other than none, and dequantize_int8_convrot_weight
// if a table has ConvRot (its workload rotates in the default group; the
// other tables' rows are summed on the host by convert.WeightErrorSums,
// which calls no backend). It asks the backend's constraints about small
// workloads (backend.Workload.Check) and runs nothing.
func hostOps(ctx context.Context, name string, layers []convert.LayerReport) error {
	type call struct {
		op    backend.Operation
		group int
	}
	var calls []call
	seen := map[call]bool{}
	if layers == nil {
		calls = append(calls, call{op.Int8Linear, 0})
	} else {
		seen[call{op.Int8Linear, 0}] = true // checked with no layers, before reading
	}
	for _, l := range layers {
		c := call{op.Int8Linear, l.ConvRot}
		if convert.IsEmbeddingTable(l.Name + comfyquant.WeightSuffix) {
			if l.ConvRot == 0 {
				continue
			}
			c = call{op.DequantizeConvRotWeight, 0}
		}
		if !seen[c] {
			seen[c] = true
			calls = append(calls, c)
		}
	}
	for _, c := range calls {
		k := max(c.group, op.DefaultGroup) // groups are powers of 4: a K both divide
		spec := &backend.Spec{Shape: []int{1, k, 1}, DType: dtype.BFloat16, Group: c.group}
		if c.op == op.DequantizeConvRotWeight {
			spec = &backend.Spec{Shape: []int{1, k}, DType: dtype.Float32} // Spec.Group is int8_linear's
		}
		w, err := c.op.Workload(ctx, backend.Default, spec)
		if err == nil {
			err = w.Check(ctx, backend.Default, name)
		}
		if err != nil {
			return fmt.Errorf("eval: backend %q cannot run %s on the host: %w", name, c.op.Name(), err)
		}
	}
	return nil
}

// sortWorstFirst orders layers by their worst error, largest first. A
// NaN error (where an original layer's output is not finite) counts as
// infinite, so that it comes first rather than breaking the order; equal
// errors keep the file's order.
func sortWorstFirst(layers []Layer) {
	key := func(l Layer) float64 {
		if w := l.Worst(); !math.IsNaN(w) {
			return w
		}
		return math.Inf(1)
	}
	slices.SortStableFunc(layers, func(a, b Layer) int { return cmp.Compare(key(b), key(a)) })
}

// hostTensor reads a tensor of a checkpoint as a host tensor (in place).
func hostTensor(c *convert.Checkpoint, name string) (*tensor.Tensor, error) {
	f, ti, ok := c.Tensor(name)
	if !ok {
		return nil, fmt.Errorf("eval: %s: no tensor %q", c.Path, name)
	}
	dt, ok := safetensors.KitchenDType(ti.DType)
	if !ok {
		return nil, fmt.Errorf("eval: %s: tensor %q has dtype %s, which kitchen does not read", f.Path, name, ti.DType)
	}
	b, err := f.Data(ti)
	if err != nil {
		return nil, err
	}
	t, err := tensor.FromBytes(dt, b, ti.Shape...)
	if err != nil {
		return nil, fmt.Errorf("eval: %s: tensor %q: %w", f.Path, name, err)
	}
	return t, nil
}

// evalLayer evaluates the layer lr of fq (as convert.Inspect read it)
// against the same layer of fo.
func evalLayer(ctx context.Context, fo, fq *convert.Checkpoint, lr convert.LayerReport, opts Options) (Layer, error) {
	p := lr.Name
	l := Layer{Name: p}
	q, err := hostTensor(fq, p+comfyquant.WeightSuffix)
	if err != nil {
		return l, err
	}
	scale, err := hostTensor(fq, p+comfyquant.ScaleSuffix)
	if err != nil {
		return l, err
	}
	w, err := hostTensor(fo, p+comfyquant.WeightSuffix)
	if err != nil {
		return l, err
	}
	if !w.DType().IsFloat() {
		return l, fmt.Errorf("eval: %q: %s is %v in %s, not a float: the original must be the checkpoint before quantization", p, comfyquant.WeightSuffix, w.DType(), fo.Path)
	}
	if q.Rank() != 2 || !slices.Equal(q.Shape(), w.Shape()) {
		return l, fmt.Errorf("eval: %q: %s is %v in %s but %v in %s", p, comfyquant.WeightSuffix, q, fq.Path, w, fo.Path)
	}
	l.N, l.K = q.Dim(0), q.Dim(1)
	l.Scales, l.ConvRot, l.Note = lr.Scales, lr.ConvRot, lr.Note
	if convert.IsEmbeddingTable(p + comfyquant.WeightSuffix) {
		return evalTable(ctx, l, q, scale, w, opts)
	}
	var bias *tensor.Tensor
	if _, _, ok := fo.Tensor(p + ".bias"); ok {
		if bias, err = hostTensor(fo, p+".bias"); err != nil {
			return l, err
		}
	}
	var bv []float32
	if bias != nil {
		if bv, err = bias.Float32s(); err != nil {
			return l, err
		}
	}
	kopts := []kitchen.Option{kitchen.WithOutDType(kitchen.Float32)}
	if bias != nil {
		kopts = append(kopts, kitchen.WithBias(bias))
	}
	if l.ConvRot > 0 {
		kopts = append(kopts, kitchen.WithConvRot(l.ConvRot))
	}
	if opts.Backend != "" {
		kopts = append(kopts, kitchen.UsingBackend(opts.Backend))
	}
	for i, outliers := range []int{0, opts.Outliers} {
		x := activations(opts, l.K, outliers, p)
		xt, err := tensor.FromFloat32(dtype.BFloat16, x, opts.Tokens, l.K)
		if err != nil {
			return l, err
		}
		xr, _ := xt.Float32s() // x as the layer sees it, rounded to bfloat16
		y, err := kitchen.Int8Linear(ctx, xt, q, scale, kopts...)
		if err != nil {
			return l, fmt.Errorf("eval: %q: %w", p, err)
		}
		yv, _ := y.Float32s()
		want, err := reference(ctx, xr, w, bv, opts.Tokens)
		if err != nil {
			return l, err
		}
		e := relError(yv, want)
		if i == 0 {
			l.PlainError = e
		} else {
			l.OutlierError = e
		}
	}
	return l, nil
}

// evalTable evaluates an embedding table: its rows dequantized as an
// int8 embedding lookup does (rotated back if ConvRot), against the
// original's, with the converter's sums (convert.WeightErrorSums), which
// go a step of rows at a time: a large table costs a step's memory beyond
// the files, not a float copy of the whole.
func evalTable(ctx context.Context, l Layer, q, scale, w *tensor.Tensor, opts Options) (Layer, error) {
	l.Embedding = true
	var kopts []kitchen.Option
	if opts.Backend != "" {
		kopts = append(kopts, kitchen.UsingBackend(opts.Backend))
	}
	d, n, err := convert.WeightErrorSums(ctx, w, q, scale, l.ConvRot, kopts...)
	if err != nil {
		return l, fmt.Errorf("eval: %q: %w", l.Name, err)
	}
	l.PlainError = relNorm(d, n)
	l.OutlierError = l.PlainError
	return l, nil
}

// activations makes tokens rows of k normal values, seeded by the layer's
// name, with the given number of outlier channels scaled up.
func activations(o Options, k, outliers int, name string) []float32 {
	var h uint64 = 14695981039346656037
	for i := range len(name) {
		h = (h ^ uint64(name[i])) * 1099511628211
	}
	rng := rand.New(rand.NewPCG(o.Seed, h))
	x := make([]float32, o.Tokens*k)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	for _, c := range rng.Perm(k)[:min(outliers, k)] {
		for m := range o.Tokens {
			x[m*k+c] *= float32(o.OutlierScale)
		}
	}
	return x
}

// reference computes x·wᵀ + b in float64, for x [m, k] and the original
// weight w [n, k] (any float dtype): each product of two float32 values is
// exact in float64, each sum runs in k's order, and the bias comes last.
// The weight's rows are shared out among the processors, each widened to
// float64 once and met with four rows of x at a time: the weight is read
// once whatever m is, and four independent sums keep the adder busy
// (eight rows at a time spill registers and were slower). Since every
// product is exact, a fused multiply-add gives the same sums.
func reference(ctx context.Context, x []float32, w *tensor.Tensor, b []float32, m int) ([]float64, error) {
	wb, err := w.Bytes()
	if err != nil {
		return nil, err
	}
	n, k, dt := w.Dim(0), w.Dim(1), w.DType()
	xd := make([]float64, len(x))
	for i, v := range x {
		xd[i] = float64(v)
	}
	y := make([]float64, m*n)
	const rows = 8 // weight rows a worker takes at a time
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), (n+rows-1)/rows) {
		wg.Go(func() {
			wr := make([]float64, k)
			for ctx.Err() == nil {
				j0 := int(next.Add(rows)) - rows
				if j0 >= n {
					return
				}
				for j := j0; j < min(n, j0+rows); j++ {
					for p := range wr {
						wr[p] = float64(dtype.Load(wb, dt, j*k+p))
					}
					sums := func(i int, s ...float64) {
						for r, v := range s {
							if b != nil {
								v += float64(b[j])
							}
							y[(i+r)*n+j] = v
						}
					}
					i := 0
					for ; i+4 <= m; i += 4 {
						x0, x1, x2, x3 := xd[i*k:][:k], xd[(i+1)*k:][:k], xd[(i+2)*k:][:k], xd[(i+3)*k:][:k]
						var s0, s1, s2, s3 float64
						for p, f := range wr {
							s0 += x0[p] * f
							s1 += x1[p] * f
							s2 += x2[p] * f
							s3 += x3[p] * f
						}
						sums(i, s0, s1, s2, s3)
					}
					for ; i < m; i++ {
						xi := xd[i*k:][:k]
						var s float64
						for p, f := range wr {
							s += xi[p] * f
						}
						sums(i, s)
					}
				}
			}
		})
	}
	wg.Wait()
	return y, ctx.Err()
}

// relError is ||got - want|| / ||want||.
func relError(got []float32, want []float64) float64 {
	var d, n float64
	for i, w := range want {
		e := float64(got[i]) - w
		d += e * e
		n += w * w
	}
	return relNorm(d, n)
}

// relNorm is sqrt(d / n) for the squared norms of an error and of what it
// is relative to: the error's own norm when that is zero.
func relNorm(d, n float64) float64 {
	if n == 0 {
		return math.Sqrt(d)
	}
	return math.Sqrt(d / n)
}
