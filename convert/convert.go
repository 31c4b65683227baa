package convert

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/gokitchen/kitchen"
	"github.com/gokitchen/kitchen/backend"
	"github.com/gokitchen/kitchen/comfyquant"
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/safetensors"
)

// Options control Quantize and Dequantize.
type Options struct {
	Selection
	// PerTensor gives each quantized layer one scale (shape []) instead of
	// one per output row ([N, 1], the default).
	PerTensor bool
	// ConvRot, when > 0, quantizes each layer after a ConvRot rotation of
	// its input dimension K: in groups of ConvRot (a power of 4, 256 in
	// comfy-kitchen and ComfyUI), or, where K is not a multiple of it, of
	// the largest power of 4 below it that divides K; a layer whose K no
	// power of 4 divides is quantized per channel without rotation.
	// ConvRot layers always have one scale per row.
	ConvRot int
	// OutDType is Dequantize's output type (default bfloat16).
	OutDType dtype.DType
	// AllowInf lets Dequantize write values too large for OutDType as
	// infinities (as q * scale computed in PyTorch would be) instead of
	// failing with ErrOverflow.
	AllowInf bool
	// Backend forces a kitchen backend; empty picks the fastest capable.
	Backend string
	// Force replaces existing outputs.
	Force bool
	// DryRun plans without writing anything.
	DryRun bool
	// Progress, if set, is called after each tensor.
	Progress func(Progress)
}

// Progress reports how far a conversion has come, in input tensors and
// bytes over all shards.
type Progress struct {
	Tensor       string
	TensorsDone  int
	TensorsTotal int
	BytesDone    int64
	BytesTotal   int64
}

// Summary describes a finished (or, with DryRun, planned) conversion.
type Summary struct {
	// Operation is "quantize" or "dequantize".
	Operation string `json:"operation"`
	// Input and Output are the paths as given: a file, or a sharded
	// checkpoint's index (the index, where the input was its directory).
	Input  string `json:"input"`
	Output string `json:"output"`
	// Shards is the number of files converted (1 for a single file).
	Shards int `json:"shards"`
	// DryRun is set when nothing was written (the counts and Plan say what
	// would be).
	DryRun bool `json:"dry_run"`
	// Quantized, Dequantized and Copied count the tensors quantized, the
	// layers dequantized (each with its scale) and the tensors copied.
	Quantized   int `json:"quantized"`
	Dequantized int `json:"dequantized"`
	Copied      int `json:"copied"`
	// BytesIn is the size of the input files; BytesOut that of the files
	// written, the index included.
	BytesIn  int64 `json:"bytes_in"`
	BytesOut int64 `json:"bytes_out"`
	// Seconds is the conversion's wall time, and MBPerSecond BytesIn over
	// it in millions of bytes a second (both zero for a dry run).
	Seconds     float64 `json:"seconds"`
	MBPerSecond float64 `json:"mb_per_second"`
	// Backends are the backends that ran the operations, sorted.
	Backends []string `json:"backends,omitempty"`
	// RemovedTemporaries are hidden temporary files of the outputs that a
	// run killed before it could remove them had left behind, and that this
	// run removed (see Quantize).
	RemovedTemporaries []string `json:"removed_temporaries,omitempty"`
	// Layers is each quantized layer's weight error, in input order
	// (Quantize only).
	Layers []LayerQuality `json:"layers,omitempty"`
	// Plan is every input tensor (a dequantized layer's scale with its
	// weight) and what happens to it, file by file.
	Plan []Item `json:"plan,omitempty"`
}

// unit is one step of writing a file: an input tensor (the weight, for a
// layer) and the output tensors it produces. Units are kept small, since a
// checkpoint may hold millions of tensors: they name their tensors by
// index into the file's list, and what the plan shows and the output
// tensors are derived from them when needed.
type unit struct {
	in, scale int32 // the input tensor; dequantize: the layer's scale (else -1)
	outScale  int32 // quantize: the index of its scale in the output's layout
	group     int32 // the layer's ConvRot group (0: none)
	action    action
	perRow    bool        // quantize: one scale per row
	out       dtype.DType // dequantize: the output type
	reason    string      // why a tensor is quantized or copied
}

// action is an Action in a byte.
type action uint8

const (
	copyAction action = iota
	quantizeAction
	dequantizeAction
)

var actions = [...]Action{copyAction: ActionCopy, quantizeAction: ActionQuantize, dequantizeAction: ActionDequantize}

func (u *unit) item(f *safetensors.File) Item {
	t := f.Tensors[u.in]
	it := Item{Name: t.Name, DType: t.DType, Shape: t.Shape, Bytes: t.Size(), Action: actions[u.action], Reason: u.reason, ConvRot: int(u.group)}
	if u.scale >= 0 {
		it.Bytes += f.Tensors[u.scale].Size()
	}
	switch {
	case u.action == quantizeAction && u.perRow, u.action == dequantizeAction && f.Tensors[u.scale].Numel() > 1:
		it.Scales = "channel"
	case u.action != copyAction:
		it.Scales = "tensor"
	}
	return it
}

// inputs calls each with the input tensors the unit reads.
func (u *unit) inputs(f *safetensors.File, each func(t safetensors.TensorInfo)) {
	each(f.Tensors[u.in])
	if u.scale >= 0 {
		each(f.Tensors[u.scale])
	}
}

// config is a quantize unit's comfy_quant config.
func (u *unit) config() comfyquant.Config {
	return comfyquant.Config{Format: Format, ConvRot: u.group > 0, Group: int(u.group)}
}

// appendOutput appends the output tensor the unit streams (a quantize
// unit's int8 weight; its scale and marker have places of their own, see
// layout), without offsets.
func (u *unit) appendOutput(f *safetensors.File, dst []safetensors.TensorInfo) []safetensors.TensorInfo {
	t := f.Tensors[u.in]
	switch u.action {
	case quantizeAction:
		return append(dst, safetensors.TensorInfo{Name: t.Name, DType: "I8", Shape: t.Shape})
	case dequantizeAction:
		return append(dst, safetensors.TensorInfo{Name: t.Name, DType: safetensors.Name(u.out), Shape: t.Shape})
	}
	return append(dst, safetensors.TensorInfo{Name: t.Name, DType: t.DType, Shape: t.Shape})
}

// align is the alignment of the tensor the unit streams.
func (u *unit) align(f *safetensors.File) int {
	switch u.action {
	case quantizeAction:
		return 1 // the int8 weight
	case dequantizeAction:
		return u.out.Size()
	}
	n, _ := safetensors.DTypeSize(f.Tensors[u.in].DType)
	return n
}

// conv is the state shared by the units of one conversion.
type conv struct {
	opts     Options
	f        *safetensors.File
	backends map[string]bool
	progress *Progress
	layers   []LayerQuality // the quantized layers' weight errors so far

	// The output being written: its file, where its data starts, and its
	// tensors with their offsets (for the scales, written in place).
	out       io.WriterAt
	dataStart int64
	laid      []safetensors.TensorInfo
}

// kitchenOptions are the options for every kitchen call.
func (c *conv) kitchenOptions(ran *string) []kitchen.Option {
	opts := []kitchen.Option{kitchen.ReportBackend(ran)}
	if c.opts.Backend != "" {
		opts = append(opts, kitchen.UsingBackend(c.opts.Backend))
	}
	return opts
}

func copyUnit(i int, reason string) unit {
	return unit{in: int32(i), scale: -1, action: copyAction, reason: reason}
}

// order returns the order in which writeUnits streams the units: by the
// alignment of the tensor each streams, largest first (and in input order
// among equals), and the position in that order of the scales of the
// quantized layers (after the units aligned to 4 bytes or more). Every
// tensor then starts at a multiple of its element size, since each one's
// size is a multiple of that alignment: the data runs 8-byte types,
// 4-byte ones, the float32 scales, 2-byte types, then the int8 weights and
// other 1-byte tensors, and last the comfy_quant markers, whose lengths
// are then free (ComfyUI's exact bytes, no padding). safetensors' own
// serializer orders tensors by alignment the same way.
func order(f *safetensors.File, units []unit) (idx []int32, scales int) {
	idx = make([]int32, len(units))
	for i := range idx {
		idx[i] = int32(i)
	}
	slices.SortStableFunc(idx, func(a, b int32) int { return cmp.Compare(units[b].align(f), units[a].align(f)) })
	scales = sort.Search(len(idx), func(i int) bool { return units[idx[i]].align(f) < 4 })
	return idx, scales
}

// layout returns the output tensors of units in the order given (see
// order), without offsets, and sets each quantize unit's outScale.
func layout(f *safetensors.File, units []unit, ord []int32, scales int) []safetensors.TensorInfo {
	n, layers := 0, 0
	for i := range units {
		n++
		if units[i].action == quantizeAction {
			n += 2
			layers++
		}
	}
	out := make([]safetensors.TensorInfo, 0, n)
	for _, i := range ord[:scales] {
		out = units[i].appendOutput(f, out)
	}
	for _, i := range ord {
		if u := &units[i]; u.action == quantizeAction {
			t := f.Tensors[u.in]
			u.outScale = int32(len(out))
			out = append(out, safetensors.TensorInfo{Name: layerName(t.Name) + scaleSuffix, DType: "F32", Shape: scaleShape(t, u.perRow)})
		}
	}
	for _, i := range ord[scales:] {
		out = units[i].appendOutput(f, out)
	}
	for _, i := range ord {
		if u := &units[i]; u.action == quantizeAction {
			out = append(out, safetensors.TensorInfo{Name: layerName(f.Tensors[u.in].Name) + quantSuffix, DType: "U8", Shape: []int{len(comfyquant.Encode(u.config()))}})
		}
	}
	return out
}

// checkHeader refuses, before anything is written, an output whose header
// would be over the limit that every safetensors reader enforces (each
// quantized layer adds two tensors to the header).
func checkHeader(j *job) error {
	ord, scales := order(j.f, j.units)
	laid := layout(j.f, j.units, ord, scales)
	var off int64
	for i := range laid {
		t := &laid[i]
		n, _ := safetensors.TensorBytes(t.DType, t.Shape) // an input's, or a kitchen dtype's
		t.Begin, t.End = off, off+n
		off = t.End
	}
	if n := safetensors.HeaderSize(j.meta, laid); n > safetensors.MaxHeaderSize {
		return &safetensors.HeaderSizeError{Path: j.out, Size: n}
	}
	return nil
}

// writeFile writes units to out (a pending file) in the order that order
// gives, and returns the file's size and its tensors with their offsets.
func writeFile(ctx context.Context, c *conv, p *pending, meta map[string]string, units []unit) (int64, []safetensors.TensorInfo, error) {
	n, layout, err := writeUnits(ctx, c, p, meta, units)
	if err != nil && ctx.Err() == nil {
		err = fmt.Errorf("writing %s: %w", p.final, err)
	}
	return n, layout, err
}

// zeros is what the scales' places hold until each layer's scales are
// written there.
var zeros = make([]byte, 64<<10)

// writeHook, when set (by tests), runs after each piece is written: the
// memory test's slow disk, where the producer keeps the flow full.
var writeHook func(n int)

func writeUnits(ctx context.Context, c *conv, p *pending, meta map[string]string, units []unit) (n int64, laid []safetensors.TensorInfo, err error) {
	out := newSink(p.f)
	defer func() {
		// A failed early writeback is as much a failed write as any.
		if cerr := out.close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	ord, scales := order(c.f, units)
	w, err := safetensors.NewWriter(out, meta, layout(c.f, units, ord, scales))
	if err != nil {
		return 0, nil, err
	}
	// The scales come before the int8 weights computed with them: their
	// places are filled with zeros as the stream passes them, and each
	// layer's scales are written there (WriteAt) once it is quantized.
	c.out, c.dataStart, c.laid = out, w.Written(), w.Tensors()
	zeroed := false
	writeZeros := func() error {
		zeroed = true
		for _, i := range ord {
			if u := &units[i]; u.action == quantizeAction {
				t := c.laid[u.outScale]
				for left := t.Size(); left > 0; left -= min(left, int64(len(zeros))) {
					if err := w.WriteTensor(t.Name, zeros[:min(left, int64(len(zeros)))]); err != nil {
						return err
					}
				}
			}
		}
		return out.settle()
	}

	// The producer computes ahead while this goroutine writes; it stops
	// when the context ends or this function returns.
	pctx, cancel := context.WithCancel(ctx)
	pieces := make(chan piece, 64)
	fl, rel := newFlow(), &releaser{f: c.f}
	direct := startDirect(pctx, c.f, units, ord)
	// Deferred first, so run last: once neither stage reads its buffers.
	defer direct.close()
	var perr error
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(pieces)
		perr = (&producer{c: c, out: pieces, fl: fl, rel: rel, bufs: &buffers{slotSize: slotSize(c.f, units)}, direct: direct}).run(pctx, units, ord)
	})
	defer func() {
		cancel()
		wg.Wait()
	}()
	pos := 0 // the units written
	for pc := range pieces {
		if err := ctx.Err(); err != nil {
			return 0, nil, err
		}
		if pos == scales && !zeroed {
			if err := writeZeros(); err != nil {
				return 0, nil, err
			}
		}
		if pc.scale != nil {
			if _, err := c.out.WriteAt(pc.scale, pc.scaleAt); err != nil {
				return 0, nil, err
			}
		}
		if err := w.WriteTensor(pc.name, pc.data); err != nil {
			return 0, nil, err
		}
		if writeHook != nil {
			writeHook(len(pc.data))
		}
		// The buffers go back before the flow wakes the producer, so that
		// the piece it may make next finds them in the list instead of
		// allocating. Nothing holds pc's bytes any more: the sink copied
		// them (into its buffer or staging chunk) or wrote them before
		// WriteTensor and WriteAt returned.
		if pc.free != nil {
			pc.free()
		}
		fl.release(pc.cost)
		if pc.release != nil {
			rel.release(pc.release.Begin, pc.release.End)
		}
		if !pc.last {
			continue
		}
		u := pc.u
		switch {
		case pc.input != nil:
			direct.release(pc.input)
		case u.action == dequantizeAction && !direct.takes(u):
			u.inputs(c.f, func(t safetensors.TensorInfo) { rel.release(t.Begin, t.End) })
		}
		u.inputs(c.f, func(t safetensors.TensorInfo) { c.progress.BytesDone += t.Size() })
		pos++
		c.progress.TensorsDone++
		c.progress.Tensor = c.f.Tensors[u.in].Name
		if c.opts.Progress != nil {
			c.opts.Progress(*c.progress)
		}
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return 0, nil, err
	}
	if perr != nil {
		return 0, nil, perr
	}
	if !zeroed {
		if err := writeZeros(); err != nil {
			return 0, nil, err
		}
	}
	for _, i := range ord {
		if u := &units[i]; u.action == quantizeAction {
			if err := w.WriteTensor(layerName(c.f.Tensors[u.in].Name)+quantSuffix, comfyquant.Encode(u.config())); err != nil {
				return 0, nil, err
			}
		}
	}
	if err := w.Finish(); err != nil {
		return 0, nil, err
	}
	if err := out.finish(); err != nil {
		return 0, nil, err
	}
	return w.Written(), w.Tensors(), nil
}

// job is one input file and its output.
type job struct {
	in, out string
	f       *safetensors.File
	meta    map[string]string // the output's __metadata__
	units   []unit
	layout  []safetensors.TensorInfo // the output's tensors, once written
}

// checkBackend refuses a backend asked for by name that no call could use,
// before anything is written, even if the conversion makes no call.
func checkBackend(name string) error {
	if name == "" {
		return nil
	}
	for _, b := range kitchen.ListBackends() {
		switch {
		case b.Name != name:
		case !b.Available:
			return &backend.BackendNotFoundError{Name: name, Reason: "unavailable: " + b.Reason}
		case b.Disabled:
			return &backend.BackendNotFoundError{Name: name, Reason: "disabled"}
		default:
			return nil
		}
	}
	return &backend.BackendNotFoundError{Name: name, Reason: "no backend of that name is registered"}
}

// run converts every job, all or nothing: outputs are written under
// temporary names and moved into place only when every one is complete
// and the context has not ended, extra (an index, if set) last.
func run(ctx context.Context, opts Options, sum *Summary, jobs []*job, extra func() (string, []byte, error)) (err error) {
	start := time.Now()
	if err := checkBackend(opts.Backend); err != nil {
		return err
	}
	prog := &Progress{}
	for _, j := range jobs {
		for i := range j.units {
			u := &j.units[i]
			prog.TensorsTotal++
			u.inputs(j.f, func(t safetensors.TensorInfo) { prog.BytesTotal += t.Size() })
			switch u.action {
			case quantizeAction:
				sum.Quantized++
			case dequantizeAction:
				sum.Dequantized++
			default:
				sum.Copied++
			}
		}
		sum.BytesIn += j.f.Size()
		if err := checkHeader(j); err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	sum.Shards = len(jobs)
	if opts.DryRun {
		sum.DryRun = true
		sum.Plan = plan(jobs)
		return nil
	}
	var done []*pending
	defer func() {
		if err != nil {
			for _, p := range done {
				p.abort()
			}
		}
	}()
	c := &conv{opts: opts, backends: map[string]bool{}, progress: prog}
	for _, j := range jobs {
		sum.RemovedTemporaries = append(sum.RemovedTemporaries, removeStale(j.out)...)
		p, err := createPending(j.out)
		if err != nil {
			return err
		}
		done = append(done, p)
		c.f = j.f
		n, layout, err := writeFile(ctx, c, p, j.meta, j.units)
		if err != nil {
			return err
		}
		if err := p.finish(); err != nil {
			return err
		}
		j.layout = layout
		sum.BytesOut += n
	}
	if extra != nil {
		path, data, err := extra()
		if err != nil {
			return err
		}
		sum.RemovedTemporaries = append(sum.RemovedTemporaries, removeStale(path)...)
		p, err := createPending(path)
		if err != nil {
			return err
		}
		done = append(done, p)
		if _, err := p.f.Write(data); err != nil {
			return err
		}
		if err := p.finish(); err != nil {
			return err
		}
		sum.BytesOut += int64(len(data))
	}
	// An interrupt that came during the last writes or syncs stops the
	// conversion here, before anything takes a final name, and between
	// moves (the deferred abort removes what was moved).
	for _, p := range done {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := p.commit(opts.Force); err != nil {
			return err
		}
	}
	sum.Seconds = time.Since(start).Seconds()
	if sum.Seconds > 0 {
		sum.MBPerSecond = float64(sum.BytesIn) / 1e6 / sum.Seconds
	}
	for b := range c.backends {
		sum.Backends = append(sum.Backends, b)
	}
	slices.Sort(sum.Backends)
	sum.Layers = c.layers
	sum.Plan = plan(jobs)
	return nil
}

// plan lists every input tensor and what happens to it.
func plan(jobs []*job) []Item {
	n := 0
	for _, j := range jobs {
		n += len(j.units)
	}
	items := make([]Item, 0, n)
	for _, j := range jobs {
		for i := range j.units {
			items = append(items, j.units[i].item(j.f))
		}
	}
	return items
}
