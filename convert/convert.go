package convert

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gokitchen/kitchen"
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/safetensors"
	"github.com/gokitchen/kitchen/tensor"
)

// Options control Quantize and Dequantize.
type Options struct {
	Selection
	// PerChannel gives each output row its own scale (row-wise
	// quantization) instead of one scale per tensor.
	PerChannel bool
	// OutDType is Dequantize's output type (default bfloat16).
	OutDType dtype.DType
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
	Input       string   `json:"input"`
	Output      string   `json:"output"`
	Shards      int      `json:"shards"`
	DryRun      bool     `json:"dry_run"`
	Quantized   int      `json:"quantized"`
	Dequantized int      `json:"dequantized"`
	Copied      int      `json:"copied"`
	BytesIn     int64    `json:"bytes_in"`
	BytesOut    int64    `json:"bytes_out"`
	Seconds     float64  `json:"seconds"`
	MBPerSecond float64  `json:"mb_per_second"`
	Backends    []string `json:"backends,omitempty"`
	Plan        []Item   `json:"plan,omitempty"`
}

// unit is one step of writing a file: an input tensor (or a quantized
// layer's tensors) and the output tensors it produces, in order.
type unit struct {
	item  Item
	in    []safetensors.TensorInfo // input tensors read
	out   []safetensors.TensorInfo // output tensors written, in order
	write func(ctx context.Context, c *conv, w *safetensors.Writer) error
}

// align is the alignment the unit's first output tensor needs.
func (u *unit) align() int {
	if len(u.out) == 0 {
		return 1
	}
	n, _ := safetensors.DTypeSize(u.out[0].DType)
	return n
}

// conv is the state shared by the units of one conversion.
type conv struct {
	opts     Options
	f        *safetensors.File
	backends map[string]bool
	progress *Progress
}

// kitchenOptions are the options for every kitchen call.
func (c *conv) kitchenOptions(ran *string) []kitchen.Option {
	opts := []kitchen.Option{kitchen.ReportBackend(ran)}
	if c.opts.Backend != "" {
		opts = append(opts, kitchen.UsingBackend(c.opts.Backend))
	}
	return opts
}

// input returns an input tensor as a kitchen tensor over the mapped bytes.
func (c *conv) input(t safetensors.TensorInfo) (*tensor.Tensor, error) {
	dt, ok := safetensors.KitchenDType(t.DType)
	if !ok {
		return nil, fmt.Errorf("%s: tensor %q: dtype %s cannot be converted", c.f.Path, t.Name, t.DType)
	}
	b, err := c.f.Data(t)
	if err != nil {
		return nil, err
	}
	x, err := tensor.FromBytes(dt, b, t.Shape...)
	if err != nil {
		return nil, fmt.Errorf("%s: tensor %q: %w", c.f.Path, t.Name, err)
	}
	return x, nil
}

func copyUnit(t safetensors.TensorInfo, reason string) unit {
	return unit{
		item: Item{Name: t.Name, DType: t.DType, Shape: t.Shape, Bytes: t.Size(), Action: ActionCopy, Reason: reason},
		in:   []safetensors.TensorInfo{t},
		out:  []safetensors.TensorInfo{{Name: t.Name, DType: t.DType, Shape: t.Shape}},
		write: func(_ context.Context, c *conv, w *safetensors.Writer) error {
			b, err := c.f.Data(t)
			if err != nil {
				return err
			}
			return w.WriteTensor(t.Name, b)
		},
	}
}

// writeFile writes units to out (a pending file) in an order that keeps
// every tensor aligned to its element size: units sorted by the alignment
// of their first tensor, largest first, each unit's size a multiple of it.
// It returns the file's size and its tensors with their offsets.
func writeFile(ctx context.Context, c *conv, p *pending, units []unit) (int64, []safetensors.TensorInfo, error) {
	n, layout, err := writeUnits(ctx, c, p, units)
	if err != nil && ctx.Err() == nil {
		err = fmt.Errorf("writing %s: %w", p.final, err)
	}
	return n, layout, err
}

func writeUnits(ctx context.Context, c *conv, p *pending, units []unit) (int64, []safetensors.TensorInfo, error) {
	slices.SortStableFunc(units, func(a, b unit) int { return cmp.Compare(b.align(), a.align()) })
	var layout []safetensors.TensorInfo
	for _, u := range units {
		layout = append(layout, u.out...)
	}
	bw := bufio.NewWriterSize(p.f, 4<<20)
	w, err := safetensors.NewWriter(bw, c.f.Metadata, layout)
	if err != nil {
		return 0, nil, err
	}
	for _, u := range units {
		if err := ctx.Err(); err != nil {
			return 0, nil, err
		}
		if err := u.write(ctx, c, w); err != nil {
			return 0, nil, err
		}
		for _, t := range u.in {
			c.f.Release(t)
			c.progress.BytesDone += t.Size()
		}
		c.progress.TensorsDone++
		c.progress.Tensor = u.item.Name
		if c.opts.Progress != nil {
			c.opts.Progress(*c.progress)
		}
	}
	if err := w.Finish(); err != nil {
		return 0, nil, err
	}
	if err := bw.Flush(); err != nil {
		return 0, nil, err
	}
	return w.Written(), w.Tensors(), nil
}

// job is one input file and its output.
type job struct {
	in, out string
	f       *safetensors.File
	units   []unit
	layout  []safetensors.TensorInfo // the output's tensors, once written
}

// run converts every job, all or nothing: outputs are written under
// temporary names and moved into place only when every one is complete,
// extra (an index, if set) last.
func run(ctx context.Context, opts Options, sum *Summary, jobs []*job, extra func() (string, []byte, error)) (err error) {
	start := time.Now()
	prog := &Progress{}
	for _, j := range jobs {
		for _, u := range j.units {
			prog.TensorsTotal++
			for _, t := range u.in {
				prog.BytesTotal += t.Size()
			}
			sum.Plan = append(sum.Plan, u.item)
			switch u.item.Action {
			case ActionQuantize:
				sum.Quantized++
			case ActionDequantize:
				sum.Dequantized++
			default:
				sum.Copied++
			}
		}
		sum.BytesIn += j.f.Size()
	}
	sum.Shards = len(jobs)
	if opts.DryRun {
		sum.DryRun = true
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
		p, err := createPending(j.out)
		if err != nil {
			return err
		}
		done = append(done, p)
		c.f = j.f
		n, layout, err := writeFile(ctx, c, p, j.units)
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
	for _, p := range done {
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
	return nil
}

// countQuantized counts a file's quantized layers.
func countQuantized(h *safetensors.Header) int {
	n := 0
	for _, t := range h.Tensors {
		if strings.HasSuffix(t.Name, quantSuffix) {
			n++
		}
	}
	return n
}
