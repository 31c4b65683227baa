package convert

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/gokitchen/kitchen/safetensors"
)

// The conversion runs as two stages: a producer goroutine reads the input
// (hinting the kernel to read the next tensor ahead) and computes each
// unit's output, in pieces of a few MiB, while the caller's goroutine
// writes the pieces out in order (see writeback for the disk side). The
// stages overlap, so the disk, the kernel's page copies and the kernels
// all work at once, and the bytes in flight between them stay under
// flowBudget, so memory still follows the largest piece, not the file.

// flowBudget is how many bytes of output (or of mapped input, for copied
// tensors) the producer may have handed on and the writer not yet written.
// A piece larger than the budget waits until nothing is in flight.
// (16 MiB: the garbage collector may hold as much again of written pieces
// that are not recycled before it runs.)
const flowBudget = 16 << 20

// pieceBytes is the size of the pieces a copied tensor is written in, so
// that an interrupt does not wait for a large tensor and its mapped pages
// can be dropped as it goes.
const pieceBytes = 8 << 20

// piece is part of the output, handed from the producer to the writer.
type piece struct {
	name string // the streamed tensor the data belongs to
	data []byte
	// scale, if set, is written at scaleAt in the file before data (a
	// quantized layer's scales, whose place the stream has passed).
	scale   []byte
	scaleAt int64
	// release, if set, is the input range whose pages the writer drops
	// once data is written (copied tensors: data is the mapped input).
	release *safetensors.TensorInfo
	cost    int64 // what the producer acquired from the flow for it
	// free, if set, gives the buffers back once written (kitchen outputs,
	// which the host then hands to the next call instead of zeroing new
	// memory).
	free func()
	last bool // the unit's last piece
	u    *unit
}

// flow bounds the bytes in flight between the producer and the writer.
// Only the producer acquires; only the writer releases.
type flow struct {
	acquired int64 // producer only
	written  atomic.Int64
	wake     chan struct{}
}

func newFlow() *flow { return &flow{wake: make(chan struct{}, 1)} }

// acquire waits until n more bytes fit in the budget, or nothing is in
// flight, and takes them.
func (f *flow) acquire(ctx context.Context, n int64) error {
	for {
		in := f.acquired - f.written.Load()
		if in == 0 || in+n <= flowBudget {
			f.acquired += n
			return nil
		}
		select {
		case <-f.wake:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// idle waits until nothing is in flight: before reading a whole tensor
// into memory where the input is not memory-mapped, so that the tensor
// and the pieces before it are not held at once.
func (f *flow) idle(ctx context.Context) error {
	for f.acquired != f.written.Load() {
		select {
		case <-f.wake:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// release gives back n bytes, once written.
func (f *flow) release(n int64) {
	f.written.Add(n)
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// releaser drops input pages for both stages: the mapping's bookkeeping
// is not safe for concurrent use.
type releaser struct {
	mu sync.Mutex
	f  *safetensors.File
}

// release drops the pages of the input bytes [begin, end) of the data
// section.
func (r *releaser) release(begin, end int64) {
	r.mu.Lock()
	r.f.Release(safetensors.TensorInfo{Begin: begin, End: end})
	r.mu.Unlock()
}

// producer computes the units' pieces in the order given and sends them.
type producer struct {
	c   *conv
	out chan<- piece
	fl  *flow
	rel *releaser
}

// send hands a piece, whose bytes were acquired, to the writer.
func (p *producer) send(ctx context.Context, pc piece) error {
	select {
	case p.out <- pc:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *producer) run(ctx context.Context, units []unit, ord []int32) error {
	f := p.c.f
	if len(ord) > 0 {
		units[ord[0]].inputs(f, p.readAhead)
	}
	for k, i := range ord {
		if err := ctx.Err(); err != nil {
			return err
		}
		if k+1 < len(ord) {
			// The next unit's input streams in while this one is computed.
			units[ord[k+1]].inputs(f, p.readAhead)
		}
		u := &units[i]
		var err error
		switch u.action {
		case quantizeAction:
			err = produceQuantized(ctx, p, u)
		case dequantizeAction:
			err = produceDequantized(ctx, p, u)
		default:
			err = p.produceCopy(ctx, u)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// readAhead asks the kernel to start reading t's bytes.
func (p *producer) readAhead(t safetensors.TensorInfo) { willNeed(p.c.f, t) }

// produceCopy sends a copied tensor's mapped bytes in pieces; the writer
// drops each piece's pages once it is written.
func (p *producer) produceCopy(ctx context.Context, u *unit) error {
	t := p.c.f.Tensors[u.in]
	if !p.c.f.Mapped() {
		if err := p.fl.idle(ctx); err != nil {
			return err
		}
	}
	b, err := p.c.f.Data(t)
	if err != nil {
		return err
	}
	for off := int64(0); ; {
		n := min(int64(len(b))-off, pieceBytes)
		if err := p.fl.acquire(ctx, n); err != nil {
			return err
		}
		rel := safetensors.TensorInfo{Begin: t.Begin + off, End: t.Begin + off + n}
		off += n
		pc := piece{name: t.Name, data: b[off-n : off], release: &rel, cost: n, last: off == int64(len(b)), u: u}
		if err := p.send(ctx, pc); err != nil {
			return err
		}
		if pc.last {
			return nil
		}
	}
}
