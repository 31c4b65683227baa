package convert

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/safetensors"
	"github.com/gokitchen/kitchen/tensor"
)

// The conversion runs as two stages: a producer goroutine reads the input
// (large tensors through a direct reader that reads them ahead of it, see
// directread.go; the others mapped, hinting the kernel to read the next
// tensor ahead, with a prefaulter mapping its pages ahead of it) and
// computes each unit's output, in pieces of a few MiB, while the caller's
// goroutine writes the pieces out in order (see writeback for the disk
// side). The stages overlap, so the disk, the kernel's page copies and the
// kernels all work at once, and the bytes in flight between them stay
// under flowBudget, so memory still follows the largest piece, not the
// file.

// flowBudget is how many bytes of output (or of mapped input, for copied
// tensors) the producer may have handed on and the writer not yet written.
// A piece larger than the budget waits until nothing is in flight.
// (16 MiB: the list of output buffers may hold as much again of written
// pieces, and one larger than that, see buffers.)
const flowBudget = 16 << 20

// The outputs the producer computes (a quantized chunk's int8 values and
// scales, a dequantized layer) are written into buffers of the
// conversion's own (kitchen.Into), which the writer gives back once a
// piece is written, and the producer reuses. The host's recycling serves
// only a buffer of the same size, and only until the next collection, and
// it was once per processor: with GOMAXPROCS = 16 most of the producer's
// allocations missed it, and the heap, with the garbage collector's goal
// twice the live heap, grew with the number of processors, to a peak RSS
// of 75 to 90 MiB against 37 MiB, over the README's bound, whose
// allowance does not depend on the core count (TestMemoryBound's
// GOMAXPROCS=16 cases). The conversion's own list serves any size that
// fits, holds no more than was in flight, whatever GOMAXPROCS is, and
// allocates almost nothing once the first pieces are written.

// bufMin is the smallest output worth a buffer from the list: below it,
// a fresh allocation costs less than the bookkeeping, and the garbage
// of such pieces is small whatever is in flight.
const bufMin = 64 << 10

// buffers is the list of output buffers given back by the writer, for
// the producer to reuse. What it keeps follows what was in flight, in two
// parts:
//
//   - a list of buffers of up to flowBudget bytes each, holding at most
//     flowBudget bytes in all: put drops the oldest first (those given
//     back the longest ago and not taken since), so buffers of a size no
//     longer asked for go before those the producer keeps reusing;
//   - a slot for one buffer over flowBudget (a whole dequantized layer).
//     Small buffers coming back do not evict it, and small requests that
//     pass it over do not drop it: it waits for the next large layer. It
//     goes when a request over half the budget is larger than it (the
//     buffer allocated for that request would replace it), or when
//     another buffer over the budget comes back: the larger of the two
//     stays, since it serves every request the smaller would. (The
//     converter never has two out at once: only a request over half the
//     budget takes or allocates one, and it acquires its bytes from the
//     flow first, so any earlier such piece is written, and its buffer
//     back, by then.)
//
// get hands out the smallest buffer that fits, from either part, but not
// one more than twice the size asked for, unless the request is over half
// the budget: two such requests are never in flight together, so one
// buffer serves them in turn. A buffer far larger than a small piece
// would be stranded: one piece would hold it while the others in flight
// allocated afresh, and it would come back with them.
//
// So the list holds at most flowBudget bytes, and the slot one buffer no
// larger than the largest tensor, made that large at once (slotSize):
// with what is in flight, at most twice the budget and the largest
// tensor, and with the direct reader's ring (the largest input and 16
// MiB) within the README's bound of 64 MiB and twice the largest tensor.
// Before the slot, one list held both within flowBudget, or one buffer
// alone if larger, so a layer's buffer went as soon as a small piece came
// back or passed it over: in a file alternating dequantized layers of 4
// and 20 MiB, every large layer allocated afresh (20 buffers for 20
// layers, 2 now). Before that, the list dropped its smallest buffers and
// handed out any that fit, so a layer of 128 MiB served one small piece
// at a time while the others missed (75 misses in 100 pieces of 4 MiB
// after it, 4 in flight; now 4, those of the first pieces in flight).
type buffers struct {
	mu    sync.Mutex
	free  [][]byte // at most flowBudget bytes each, the oldest first
	held  int64    // the capacity of free, in bytes (at most flowBudget)
	large []byte   // the slot: nil, or one buffer over flowBudget bytes
	// slotSize is the capacity a buffer for a request over half the
	// budget is made with: the largest such request of the conversion
	// (see slotSize), so that the slot's buffer serves every later one.
	// Made only as large as each request was, it was replaced by each
	// larger layer while the garbage collector had yet to take the one
	// before: dequantizing layers of 54, 72 and 108 MiB (as bfloat16)
	// peaked at 314-325 MiB against the README's 280, and
	// TestMemoryBound's growing layers at 281 MiB against 256.
	slotSize int
}

// slotSize returns the largest output buffer over half the flow's budget
// that the producer asks for in converting units: a dequantized layer, or
// a quantized layer's int8 values in one piece (one scale for the tensor,
// or rows longer than a chunk).
func slotSize(f *safetensors.File, units []unit) int {
	size := 0
	for i := range units {
		u := &units[i]
		t := f.Tensors[u.in]
		n := 0
		switch u.action {
		case dequantizeAction:
			n = int(t.Numel()) * u.out.Size()
		case quantizeAction:
			if len(t.Shape) == 2 {
				n = chunkRows(t.Shape[0], t.Shape[1], u.perRow) * t.Shape[1]
			}
		}
		if n > flowBudget/2 {
			size = max(size, n)
		}
	}
	return size
}

// newBuffers counts the buffers get allocates, for tests (see
// export_test.go): a conversion whose pieces are all of one size should
// allocate no more than it has in flight at once.
var newBuffers atomic.Int64

// fits reports whether get hands a buffer of capacity c to a request of n
// bytes.
func fits(c, n int) bool {
	return c >= n && (c <= 2*n || n > flowBudget/2)
}

// get returns a buffer of n bytes: the smallest given back that fits (the
// list's or the slot's, see buffers), or a new one. A request over half
// the budget that the slot's buffer is too small for drops it, since the
// buffer allocated for it would replace it. A new buffer comes from
// tensor.Empty, as a kitchen output would (a large one backed by huge
// pages), but goes back to this list, never to the host's pools.
func (b *buffers) get(n int) ([]byte, error) {
	b.mu.Lock()
	best := -1
	for i, f := range b.free {
		if c := cap(f); fits(c, n) && (best < 0 || c < cap(b.free[best])) {
			best = i
		}
	}
	var f []byte
	switch {
	case best >= 0: // smaller than the slot's
		f = b.free[best]
		b.remove(best)
	case b.large != nil && fits(cap(b.large), n):
		f, b.large = b.large, nil
	case b.large != nil && n > flowBudget/2: // larger than the slot's
		b.large = nil
	}
	b.mu.Unlock()
	if f != nil {
		return f[:n], nil
	}
	newBuffers.Add(1)
	c := n
	if n > flowBudget/2 {
		c = max(n, b.slotSize) // its pages are touched only as far as used
	}
	t, err := tensor.Empty(dtype.Int8, c)
	if err != nil {
		return nil, err
	}
	f, err = t.Bytes()
	return f[:n], err
}

// remove takes free[i] off the list, keeping the others' order.
func (b *buffers) remove(i int) {
	b.held -= int64(cap(b.free[i]))
	last := len(b.free) - 1
	copy(b.free[i:], b.free[i+1:])
	b.free[last] = nil
	b.free = b.free[:last]
}

// put gives back a buffer that get returned, once nothing uses it. One
// over flowBudget goes to the slot, where the larger of it and the one
// there stays; another goes to the list, whose oldest buffers are dropped
// (to the garbage collector) while it holds over flowBudget bytes.
func (b *buffers) put(f []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if cap(f) > flowBudget {
		if b.large == nil || cap(f) > cap(b.large) {
			b.large = f
		}
		return
	}
	b.free = append(b.free, f)
	b.held += int64(cap(f))
	for b.held > flowBudget {
		b.remove(0)
	}
}

// output returns a tensor of dt and shape over a buffer from the list, for
// kitchen.Into, and the buffer, or (nil, nil) for an output under bufMin
// bytes, which the kitchen call then allocates (a nil entry of Into).
func (b *buffers) output(dt dtype.DType, shape ...int) (*tensor.Tensor, []byte, error) {
	n := tensor.Numel(shape) * dt.Size()
	if n < bufMin {
		return nil, nil, nil
	}
	buf, err := b.get(n)
	if err != nil {
		return nil, nil, err
	}
	t, err := tensor.FromBytes(dt, buf, shape...)
	if err != nil {
		b.put(buf)
		return nil, nil, err
	}
	return t, buf, nil
}

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
	// input, if set, is the direct reader's region holding a copied
	// tensor, which the writer frees once the last piece (a slice of it,
	// as data is) is written.
	input *directUnit
	cost  int64 // what the producer acquired from the flow for it
	// free, if set, gives the buffers back once written (to the list of
	// output buffers, which the producer then reuses instead of zeroing
	// new memory).
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
	c    *conv
	out  chan<- piece
	fl   *flow
	rel  *releaser
	bufs *buffers
	// direct reads the large inputs ahead (nil: all are mapped), and cur
	// holds the inputs of the unit the producer is on if it reads them.
	direct *directReader
	cur    *directUnit
	// errBuf holds the float32 rows that the weight error dequantizes,
	// reused from step to step and layer to layer (see buffers).
	errBuf []byte
}

// send hands a piece, whose bytes were acquired, to the writer.
func (p *producer) send(ctx context.Context, pc piece) error {
	if pc.last && pc.u.action == copyAction {
		pc.input = p.cur
	}
	select {
	case p.out <- pc:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *producer) run(ctx context.Context, units []unit, ord []int32) error {
	if len(ord) > 0 {
		p.readAhead(&units[ord[0]])
	}
	pf := startPrefault(ctx, p.c.f, units, ord, p.direct)
	defer pf.stopAndWait() // before the file can be closed
	for k, i := range ord {
		if err := ctx.Err(); err != nil {
			return err
		}
		pf.advance(k)
		if k+1 < len(ord) {
			// The next unit's input streams in while this one is computed.
			p.readAhead(&units[ord[k+1]])
		}
		u := &units[i]
		p.cur = nil
		if p.direct.takes(u) {
			d, err := p.direct.take(ctx, k)
			if err != nil {
				return err
			}
			p.cur = d
		}
		var err error
		switch u.action {
		case quantizeAction:
			err = produceQuantized(ctx, p, u)
		case dequantizeAction:
			err = produceDequantized(ctx, p, u)
		default:
			err = p.produceCopy(ctx, u) // the writer frees its region
		}
		if err != nil {
			return err
		}
		if p.cur != nil && u.action != copyAction {
			p.direct.release(p.cur) // its outputs are buffers of their own
		}
	}
	return nil
}

// readAhead asks the kernel to start reading u's mapped inputs (the
// direct reader reads its own ahead).
func (p *producer) readAhead(u *unit) {
	if !p.direct.takes(u) {
		u.inputs(p.c.f, func(t safetensors.TensorInfo) { willNeed(p.c.f, t) })
	}
}

// data returns the bytes of u's input tensor i (its weight or scale), u
// being the unit the producer is on: from the direct reader's ring if it
// reads them (the bytes may still be on their way: see await), else from
// the file.
func (p *producer) data(u *unit, i int32) ([]byte, error) {
	switch {
	case p.cur != nil && i == u.in:
		return p.cur.in, nil
	case p.cur != nil && i == u.scale:
		return p.cur.scale, nil
	}
	return p.c.f.Data(p.c.f.Tensors[i])
}

// input returns u's input tensor i as a kitchen tensor over its bytes
// (see data).
func (p *producer) input(u *unit, i int32) (*tensor.Tensor, error) {
	f := p.c.f
	t := f.Tensors[i]
	dt, ok := safetensors.KitchenDType(t.DType)
	if !ok {
		return nil, fmt.Errorf("%s: tensor %q: dtype %s cannot be converted", f.Path, t.Name, t.DType)
	}
	b, err := p.data(u, i)
	if err != nil {
		return nil, err
	}
	x, err := tensor.FromBytes(dt, b, t.Shape...)
	if err != nil {
		return nil, fmt.Errorf("%s: tensor %q: %w", f.Path, t.Name, err)
	}
	return x, nil
}

// await waits until the first n bytes of the input tensor of the unit
// the producer is on are there (n < 0: all its inputs), where the direct
// reader reads them.
func (p *producer) await(ctx context.Context, n int64) error {
	if p.cur == nil {
		return nil
	}
	if n >= 0 {
		n += p.cur.inSkip
	}
	return p.direct.await(ctx, p.cur, n)
}

// releaseInput says that the producer is done with bytes [begin, end) of
// the input tensor t of the unit it is on, and with those before them:
// their mapped pages are dropped, or their part of the direct reader's
// ring is free for the units after it.
func (p *producer) releaseInput(t safetensors.TensorInfo, begin, end int64) {
	if p.cur != nil {
		p.direct.free(p.cur, p.cur.inSkip+end)
		return
	}
	p.rel.release(t.Begin+begin, t.Begin+end)
}

// produceCopy sends a copied tensor's mapped bytes in pieces; the writer
// drops each piece's pages once it is written.
func (p *producer) produceCopy(ctx context.Context, u *unit) error {
	t := p.c.f.Tensors[u.in]
	if !p.c.f.Mapped() {
		if err := p.fl.idle(ctx); err != nil {
			return err
		}
	}
	b, err := p.data(u, u.in)
	if err != nil {
		return err
	}
	for off := int64(0); ; {
		n := min(int64(len(b))-off, pieceBytes)
		if err := p.fl.acquire(ctx, n); err != nil {
			return err
		}
		if err := p.await(ctx, off+n); err != nil {
			return err
		}
		pc := piece{name: t.Name, data: b[off : off+n], cost: n, last: off+n == int64(len(b)), u: u}
		if p.cur == nil {
			pc.release = &safetensors.TensorInfo{Begin: t.Begin + off, End: t.Begin + off + n}
		}
		off += n
		if err := p.send(ctx, pc); err != nil {
			return err
		}
		if pc.last {
			return nil
		}
	}
}
