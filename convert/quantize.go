package convert

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"

	"github.com/gokitchen/kitchen"
	"github.com/gokitchen/kitchen/backend"
	"github.com/gokitchen/kitchen/comfyquant"
	"github.com/gokitchen/kitchen/quant"
	"github.com/gokitchen/kitchen/safetensors"
	"github.com/gokitchen/kitchen/tensor"
)

// Format is the comfy_quant format this package writes and reads.
const Format = comfyquant.Int8Tensorwise

// ErrAlreadyQuantized is wrapped by every *AlreadyQuantizedError.
var ErrAlreadyQuantized = errors.New("already quantized")

// Sign is what shows that a checkpoint is quantized already.
type Sign string

// The signs Quantize looks for: each makes ComfyUI load the file as a
// quantized one (or holds quantized weights).
const (
	// SignMarker is a P.comfy_quant tensor.
	SignMarker Sign = "a comfy_quant marker"
	// SignMetadata is a _quantization_metadata entry in __metadata__,
	// from which ComfyUI makes markers.
	SignMetadata Sign = "a " + comfyquant.MetadataKey + " entry in __metadata__"
	// SignScaledFP8 is the legacy scaled_fp8 tensor of ComfyUI's fp8
	// checkpoints.
	SignScaledFP8 Sign = "a scaled_fp8 tensor (ComfyUI's legacy fp8 format)"
	// SignScaledWeight is a weight in a dtype other than the floats a
	// checkpoint before quantization holds (F64, F32, F16, BF16: see
	// wideFloat), with a scale beside it: int8, fp8, the packed fp4 and fp6
	// types, any integer type.
	SignScaledWeight Sign = "a weight in a dtype other than F64, F32, F16 or BF16 with a weight_scale"
)

// AlreadyQuantizedError is Quantize's refusal of an input that is quantized
// already; it says which sign showed it, and where.
type AlreadyQuantizedError struct {
	Path string
	Sign Sign
	// Name is the tensor (or the __metadata__ key) that shows it; Count how
	// many tensors show it.
	Name  string
	Count int
}

func (e *AlreadyQuantizedError) Error() string {
	what := fmt.Sprintf("%q", e.Name)
	if e.Count > 1 {
		what += fmt.Sprintf(" and %d more", e.Count-1)
	}
	return fmt.Sprintf("%s: %s: it holds %s (%s); quantize the original checkpoint instead", e.Path, ErrAlreadyQuantized, e.Sign, what)
}

func (e *AlreadyQuantizedError) Unwrap() error { return ErrAlreadyQuantized }

// checkNotQuantized refuses a file that shows any sign of being quantized.
func checkNotQuantized(f *safetensors.File) error {
	if _, ok := f.Metadata[comfyquant.MetadataKey]; ok {
		return &AlreadyQuantizedError{Path: f.Path, Sign: SignMetadata, Name: comfyquant.MetadataKey, Count: 1}
	}
	signs := map[Sign]*AlreadyQuantizedError{}
	note := func(s Sign, name string) {
		if e := signs[s]; e != nil {
			e.Count++
			return
		}
		signs[s] = &AlreadyQuantizedError{Path: f.Path, Sign: s, Name: name, Count: 1}
	}
	for _, t := range f.Tensors {
		switch {
		case strings.HasSuffix(t.Name, quantSuffix):
			note(SignMarker, t.Name)
		case t.Name == "scaled_fp8" || strings.HasSuffix(t.Name, ".scaled_fp8"):
			note(SignScaledFP8, t.Name)
		case strings.HasSuffix(t.Name, weightSuffix) && !wideFloat(t.DType):
			base := layerName(t.Name)
			if _, ok := f.Tensor(base + scaleSuffix); ok {
				note(SignScaledWeight, t.Name)
			} else if _, ok := f.Tensor(base + ".scale_weight"); ok {
				note(SignScaledWeight, t.Name)
			}
		}
	}
	for _, s := range []Sign{SignMarker, SignScaledFP8, SignScaledWeight} {
		if e := signs[s]; e != nil {
			return e
		}
	}
	return nil
}

// wideFloat reports whether a safetensors dtype is a float of 16 bits or
// more: what a checkpoint before quantization holds its weights in.
func wideFloat(dt string) bool {
	switch dt {
	case "F64", "F32", "F16", "BF16":
		return true
	}
	return false
}

// Quantize converts the checkpoint at in (a .safetensors file, or a
// .safetensors.index.json with its shards, or a directory holding one
// such index) to int8_tensorwise at out. The output appears only when
// complete; on error or cancellation nothing is left behind, and the input
// is never modified. An input that is quantized already is refused
// (*AlreadyQuantizedError). An output whose header would be over
// safetensors.MaxHeaderSize is refused before anything is written
// (*safetensors.HeaderSizeError). On Unix, hidden temporary files
// of the output left by a run that was killed (.NAME.kitchen-tmp-*, which
// a running conversion keeps locked) are removed first, and listed in the
// Summary. The Summary lists each quantized layer's weight error.
//
// kitchen writes no _quantization_metadata (ComfyUI does not either): the
// markers are the layers' configs, and the input has none to keep.
func Quantize(ctx context.Context, in, out string, opts Options) (*Summary, error) {
	if opts.ConvRot != 0 {
		if !quant.ValidGroup(opts.ConvRot) {
			return nil, fmt.Errorf("quantize: ConvRot group %d is not a power of 4 of at least 4", opts.ConvRot)
		}
		if opts.PerTensor {
			return nil, errors.New("quantize: ConvRot layers have one scale per row; per-tensor scales and ConvRot exclude each other")
		}
	}
	return convertAny(ctx, "quantize", in, out, opts, quantizeUnits)
}

// convRotGroup is the ConvRot group of a layer of input width k: the
// largest power of 4, at most max and at least 4, that divides k, or 0.
func convRotGroup(k, max int) int {
	for g := max; g >= 4; g /= 4 {
		if k%g == 0 {
			return g
		}
	}
	return 0
}

// quantizeUnits plans one file; shardOf finds every tensor name of the
// checkpoint (all shards), so a new tensor never takes an existing name.
func quantizeUnits(f *safetensors.File, opts Options, shardOf func(string) (string, bool)) ([]unit, map[string]string, error) {
	if err := checkNotQuantized(f); err != nil {
		return nil, nil, err
	}
	units := make([]unit, 0, len(f.Tensors))
	for i, t := range f.Tensors {
		ok, reason := opts.decide(t)
		if ok {
			base := layerName(t.Name)
			for _, extra := range []string{base + scaleSuffix, base + quantSuffix} {
				if _, taken := shardOf(extra); taken {
					ok, reason = false, "its layer already has "+extra
				}
			}
		}
		if !ok {
			units = append(units, copyUnit(i, reason))
			continue
		}
		u := unit{in: int32(i), scale: -1, action: quantizeAction, perRow: !opts.PerTensor, reason: reason}
		if opts.ConvRot > 0 {
			k := t.Shape[1]
			switch g := convRotGroup(k, opts.ConvRot); {
			case g == 0:
				u.reason += fmt.Sprintf("; not rotated: no power of 4 divides K = %d", k)
			case g < opts.ConvRot:
				u.group = int32(g)
				u.reason += fmt.Sprintf("; ConvRot %d: K = %d is not a multiple of %d", g, k, opts.ConvRot)
			default:
				u.group = int32(g)
			}
		}
		units = append(units, u)
	}
	return units, maps.Clone(f.Metadata), nil
}

// layerName is the layer P of a tensor P.weight.
func layerName(weight string) string { return strings.TrimSuffix(weight, weightSuffix) }

// scaleShape is the shape of a quantized layer's scale: [] for one scale,
// [N, 1] for one per row.
func scaleShape(t safetensors.TensorInfo, perRow bool) []int {
	if perRow {
		return []int{t.Shape[0], 1}
	}
	return []int{}
}

// quantizeChunk is about how many elements of a row-wise or ConvRot layer
// are quantized at a time (a whole number of the weight error's steps,
// so that its sums run in the same order as over the whole layer): each
// row's scale and values depend on that row alone, so the chunks' results
// are the layer's, while the outputs in flight stay small and the writer
// can start on the first rows while the next are quantized.
const quantizeChunk = 4 * errorRows

// chunkRows is how many rows of an [n, k] layer are quantized at a time:
// quantizeChunk's worth of a row-wise or ConvRot layer, all of one with a
// scale for the tensor.
func chunkRows(n, k int, perRow bool) int {
	if !perRow || n == 0 || k == 0 {
		return n
	}
	step := max(1, errorRows/k)
	return step * max(1, quantizeChunk/(step*k))
}

// produceQuantized quantizes a layer (row-wise and ConvRot layers in chunks
// of rows), measures its weight error and sends its int8 values and scales
// to the writer. The input's pages are dropped as each chunk is done.
func produceQuantized(ctx context.Context, p *producer, u *unit) error {
	c := p.c
	t := c.f.Tensors[u.in]
	if !c.f.Mapped() {
		if err := p.fl.idle(ctx); err != nil {
			return err
		}
	}
	x, err := p.input(u, u.in)
	if err != nil {
		return err
	}
	n, k := x.Dim(0), x.Dim(1)
	rows := chunkRows(n, k, u.perRow)
	xb, err := x.Bytes()
	if err != nil {
		return err
	}
	es := int64(x.DType().Size())
	st := c.laid[u.outScale]
	lq := LayerQuality{Name: layerName(t.Name), Scales: "tensor", ConvRot: int(u.group)}
	if st.Numel() > 1 {
		lq.Scales = "channel"
	}
	var sums errorSums
	for r0 := 0; r0 < n || r0 == 0; r0 += rows {
		r1 := min(n, r0+rows)
		span := int64(r1-r0) * int64(k)
		xc := x
		if rows < n {
			if xc, err = tensor.FromBytes(x.DType(), xb[int64(r0)*int64(k)*es:int64(r1)*int64(k)*es], r1-r0, k); err != nil {
				return err
			}
		}
		if err := p.fl.acquire(ctx, span+st.Size()); err != nil {
			return err
		}
		if err := p.await(ctx, int64(r1)*int64(k)*es); err != nil {
			return err
		}
		// The outputs go into buffers of the conversion's own, which the
		// writer gives back (see buffers).
		sshape := []int{}
		if u.perRow {
			sshape = []int{r1 - r0, 1}
		}
		qt, qbuf, err := p.bufs.output(kitchen.Int8, r1-r0, k)
		if err != nil {
			return err
		}
		sc, sbuf, err := p.bufs.output(kitchen.Float32, sshape...)
		if err != nil {
			return err
		}
		q, scale, err := quantizeRows(ctx, c, xc, u, qt, sc)
		if err != nil {
			return fmt.Errorf("%s: tensor %q: %w", c.f.Path, t.Name, shiftRow(err, r0))
		}
		qb, err := q.Bytes()
		if err != nil {
			return err
		}
		sb, err := scale.Bytes()
		if err != nil {
			return err
		}
		at := st.Begin
		if u.perRow {
			at += int64(r0) * 4
		}
		if want := min(st.Size(), int64(r1-r0)*4); int64(len(sb)) != want {
			return fmt.Errorf("%q: %d bytes of scales, want %d", st.Name, len(sb), want)
		}
		var ran string
		err = sums.add(ctx, xc, q, scale, int(u.group), &p.errBuf, c.kitchenOptions(&ran)...)
		if ran != "" {
			c.backends[ran] = true
		}
		if err != nil {
			if ir := (*infiniteRow)(nil); errors.As(err, &ir) {
				ir.row += r0
				return fmt.Errorf("%s: tensor %q: %w: in its int8 form, %v (its values come within rounding of float32's largest), so ComfyUI would load infinities",
					c.f.Path, t.Name, ErrOverflow, ir)
			}
			return fmt.Errorf("%s: tensor %q: measuring the weight error: %w", c.f.Path, t.Name, err)
		}
		// Only this chunk's pages: the weight error has read them.
		p.releaseInput(t, int64(r0)*int64(k)*es, int64(r1)*int64(k)*es)
		pc := piece{name: t.Name, data: qb, scale: sb, scaleAt: c.dataStart + at, cost: span + st.Size(), last: r1 >= n, u: u,
			free: func() {
				q.Release()
				scale.Release()
				for _, b := range [][]byte{qbuf, sbuf} {
					if b != nil {
						p.bufs.put(b)
					}
				}
			}}
		if err := p.send(ctx, pc); err != nil {
			return err
		}
		if pc.last {
			break
		}
	}
	sums.finish(&lq)
	c.layers = append(c.layers, lq)
	return nil
}

// quantizeRows quantizes x (a layer, or some of its rows) as u says, into
// intoQ and intoScale where they are not nil (kitchen.Into).
func quantizeRows(ctx context.Context, c *conv, x *tensor.Tensor, u *unit, intoQ, intoScale *tensor.Tensor) (q, scale *tensor.Tensor, err error) {
	var ran string
	opts := c.kitchenOptions(&ran)
	if intoQ != nil || intoScale != nil {
		opts = append(opts, kitchen.Into(intoQ, intoScale))
	}
	switch {
	case u.group > 0:
		q, scale, err = kitchen.QuantizeInt8ConvRotWeight(ctx, x, append(opts, kitchen.WithConvRotGroup(int(u.group)))...)
	case u.perRow:
		q, scale, err = kitchen.QuantizeInt8Rowwise(ctx, x, opts...)
	default:
		q, scale, err = kitchen.QuantizeInt8Tensorwise(ctx, x, opts...)
	}
	if err == nil {
		c.backends[ran] = true
	}
	return q, scale, err
}

// shiftRow makes the row of a NaN or infinity found in a chunk starting
// at row r0 the row in the whole tensor, in the error and its message.
func shiftRow(err error, r0 int) error {
	var ae *backend.ArgError
	if r0 == 0 || !errors.As(err, &ae) || ae.Row < 0 {
		return err
	}
	shifted := *ae
	shifted.Row += r0
	return &shiftedError{msg: strings.Replace(err.Error(), ae.Error(), shifted.Error(), 1), err: &shifted}
}

// shiftedError is an error whose ArgError's row shiftRow moved.
type shiftedError struct {
	msg string
	err *backend.ArgError
}

func (e *shiftedError) Error() string { return e.msg }
func (e *shiftedError) Unwrap() error { return e.err }

// planner plans the units of one input file of a checkpoint, and returns
// them with the output's __metadata__; shardOf says which file of the
// checkpoint holds a tensor name, if any does.
type planner func(f *safetensors.File, opts Options, shardOf func(name string) (string, bool)) ([]unit, map[string]string, error)

// convertAny runs a conversion of a single file or of a sharded checkpoint.
func convertAny(ctx context.Context, operation, in, out string, opts Options, plan planner) (*Summary, error) {
	if ctx == nil {
		return nil, fmt.Errorf("%s: nil context", operation)
	}
	in, err := InputPath(in)
	if err != nil {
		return nil, err
	}
	switch {
	case out == "" && !opts.DryRun:
		return nil, fmt.Errorf("%s: no output path", operation)
	case out != "" && isIndex(out) && !isIndex(in):
		// A single file under an index's name would be read as an index.
		return nil, fmt.Errorf("%s: the output's name ends in %s, an index's, but the input %s is a single file", out, IndexSuffix, in)
	}
	sum := &Summary{Operation: operation, Input: in, Output: out}
	if isIndex(in) {
		if err := convertIndex(ctx, in, out, opts, plan, sum); err != nil {
			return nil, err
		}
		return sum, nil
	}
	if !opts.DryRun {
		if err := checkOutput(out, opts.Force, in); err != nil {
			return nil, err
		}
	}
	f, err := safetensors.OpenContext(ctx, in)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	units, meta, err := plan(f, opts, func(name string) (string, bool) {
		_, ok := f.Tensor(name)
		return in, ok
	})
	if err != nil {
		return nil, err
	}
	if err := run(ctx, opts, sum, []*job{{in: in, out: out, f: f, meta: meta, units: units}}, nil); err != nil {
		return nil, err
	}
	return sum, nil
}
