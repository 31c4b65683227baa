package convert

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/gokitchen/kitchen/safetensors"
)

// Large input tensors are read with O_DIRECT (Linux), ahead of the
// producer, into a buffer of the conversion's own, instead of through the
// mapping. A mapped page costs a page-cache fill and a fault to map it, on
// the two cores the kernels need (and on a virtual machine the fault waits
// for the host, counted as the faulting thread's own time): on a 2-core
// virtual machine a 3.17 GB conversion took 4.45-4.79 s and 2.1-2.6 s of
// user time mapped, 3.38-4.50 s and 1.36-1.51 s read directly
// (BENCHMARKS.md, "Reading the input directly"). Tensors under directMin
// stay mapped: for them a direct read is a disk round trip each, where the
// page cache reads many ahead at once.
//
// The buffer is a ring outside the Go heap (whose collector would let the
// heap grow to twice it again), the size of the largest unit's inputs (a
// weight, and a dequantized layer's scale, each rounded out to the
// alignment O_DIRECT asks for) and directAhead more. Units take regions in
// the producer's order, each right after the last, and are read in
// pieces. A region must be contiguous: the ring's first directAhead bytes
// are mapped again after its end (see mapRing), so a region may run up to
// that far past the end; one that would run further starts at the ring's
// start instead, once the units before it have freed the room. The pages
// mapped twice count twice in the process's RSS, so the second mapping is
// short; and its pages stay mapped: taking pages out of a mapping and
// faulting them back in on every wrap (the first way, session 13) cost a
// 3.1 GB conversion 2.3-2.6 s of CPU time more on a virtual machine whose
// page-table changes are slow (BENCHMARKS.md, "The ring's pages stay").
// The producer works on a unit's rows as they arrive (a quantized layer's
// chunks, a copied tensor's pieces), waiting for the whole only where the
// whole is needed (one scale for the tensor, a dequantized layer), and
// frees a quantized layer's rows as it is done with them, the rest of a
// unit once done (a copied tensor's once the writer has written it: its
// pieces are slices of the ring). The reader waits only for room in the
// ring, so it stays ahead of the producer even within a unit of the
// largest size, and the ring's memory is the largest tensor and
// directAhead (and at most directAhead counted twice), within the
// README's bound of twice the largest tensor.

// directMin is the smallest input tensor read directly (a variable for
// tests, which read small files both ways).
var directMin int64 = 1 << 20

// directRead can be turned off by tests, to compare the two ways of
// reading where the direct one works.
var directRead = true

// directAhead is how many bytes the ring holds beyond the largest unit (a
// multiple of the page size; a variable for tests, which make the ring
// wrap often).
var directAhead int64 = 16 << 20

// directUnits counts the units read directly, for tests: where O_DIRECT
// works, a conversion's large inputs must have been read that way.
var directUnits atomic.Int64

// directAlign is the alignment of direct reads' offsets, lengths and
// buffers: a page, a multiple of every logical block size.
const directAlign = 4096

// directPiece is the most one read asks for: the producer can start on a
// unit's first rows while the rest is read, and an interrupt does not
// wait for a whole large tensor.
const directPiece = 8 << 20

// directFile is the input opened for direct reads (see openDirect).
type directFile interface {
	// readAt fills b, page-aligned and a multiple of directAlign long,
	// from off, a multiple of directAlign; at the end of the file it may
	// return fewer bytes.
	readAt(b []byte, off int64) (int, error)
	close() error
}

// directUnit is a unit's region of the ring.
type directUnit struct {
	k      int   // the unit's position in the producer's order
	start  int64 // the region's place in the stream of regions
	n      int64 // its size
	in     []byte
	scale  []byte // nil where the unit has none
	inSkip int64  // where in's bytes start in the region
	// Under the reader's mu: the bytes of the region read so far, the
	// bytes from its start that are free again, and why reading it failed.
	read, freed int64
	err         error
}

// directReader reads the units it takes (see takes) in the producer's
// order, ahead of it.
type directReader struct {
	f     *safetensors.File
	df    directFile
	units []unit
	ord   []int32
	ring  []byte // size+cross bytes, the last cross the same memory as the first (see mapRing)
	size  int64
	cross int64 // how far past the ring's end a region may run
	unmap func()

	mu      sync.Mutex
	changed *sync.Cond    // a piece read, a region freed, or stopped
	live    []*directUnit // regions in use, in order
	head    int64         // where the last region placed ends, in the stream
	stopped bool

	ready chan *directUnit // units placed, in order
	wg    sync.WaitGroup
}

// startDirect starts reading the large inputs of units ahead of the
// producer, or returns nil where direct reads are not available (not
// Linux, a file system that refuses O_DIRECT) or no unit needs them. Its
// close must be called once neither stage reads the ring any more: it
// unmaps it.
func startDirect(ctx context.Context, f *safetensors.File, units []unit, ord []int32) *directReader {
	if !directRead || !f.Mapped() {
		return nil
	}
	r := &directReader{f: f, units: units, ord: ord}
	var largest int64
	count := 0
	for _, i := range ord {
		if u := &units[i]; r.takes(u) {
			largest = max(largest, r.regionSize(u))
			count++
		}
	}
	if count == 0 {
		return nil
	}
	df, err := openDirect(f)
	if err != nil {
		return nil // read through the mapping, as elsewhere
	}
	size := largest + directAhead      // both multiples of the page size
	cross := min(directAhead, largest) // every region is at most largest
	ring, unmap, err := mapRing(int(size), int(cross))
	if err != nil {
		df.close()
		return nil
	}
	r.df, r.ring, r.size, r.cross, r.unmap = df, ring, size, cross, unmap
	r.changed = sync.NewCond(&r.mu)
	// Every unit placed can wait in the channel: the reader never blocks
	// on it, only on the ring.
	r.ready = make(chan *directUnit, count)
	stop := context.AfterFunc(ctx, r.stop)
	r.wg.Go(func() {
		defer stop()
		defer close(r.ready)
		r.run(ctx)
	})
	return r
}

// takes reports whether r reads u's inputs (nil-safe: a nil reader reads
// none).
func (r *directReader) takes(u *unit) bool {
	return r != nil && r.f.Tensors[u.in].Size() >= directMin
}

// span returns the aligned file range that holds t's bytes.
func (r *directReader) span(t safetensors.TensorInfo) (off, n int64) {
	begin, end := r.f.DataStart+t.Begin, r.f.DataStart+t.End
	off = begin &^ (directAlign - 1)
	return off, (end - off + directAlign - 1) &^ (directAlign - 1)
}

// regionSize is the ring bytes u's inputs take.
func (r *directReader) regionSize(u *unit) int64 {
	_, n := r.span(r.f.Tensors[u.in])
	if u.scale >= 0 {
		_, m := r.span(r.f.Tensors[u.scale])
		n += m
	}
	return n
}

func (r *directReader) stop() {
	r.mu.Lock()
	r.stopped = true
	r.mu.Unlock()
	r.changed.Broadcast()
}

func (r *directReader) run(ctx context.Context) {
	for k, i := range r.ord {
		u := &r.units[i]
		if !r.takes(u) {
			continue
		}
		d := &directUnit{k: k, n: r.regionSize(u)}
		if !r.place(d) {
			return
		}
		tensors := r.views(d, u) // before the producer can see d
		r.ready <- d
		directUnits.Add(1)
		if err := r.read(ctx, d, tensors); err != nil {
			r.mu.Lock()
			d.err = err
			r.mu.Unlock()
			r.changed.Broadcast()
			return
		}
	}
}

// place waits until the ring has room for d's region after the last one
// placed (or at the ring's start, where it would run too far past the
// end), and takes it; false if stopped.
func (r *directReader) place(d *directUnit) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	start := r.head
	if at := start % r.size; at+d.n-r.size > r.cross {
		start += r.size - at // the bytes skipped are free once the units before are
	}
	for !r.stopped {
		if len(r.live) == 0 || start+d.n-r.tail() <= r.size {
			d.start = start
			r.head = start + d.n
			r.live = append(r.live, d)
			return true
		}
		r.changed.Wait()
	}
	return false
}

// tail is where the bytes in use start, in the stream of regions: the
// ring holds [tail, head).
func (r *directReader) tail() int64 {
	if len(r.live) == 0 {
		return r.head
	}
	return r.live[0].start + r.live[0].freed
}

// views sets d's views of u's inputs in its region, and returns the
// inputs in the order the region holds them.
func (r *directReader) views(d *directUnit, u *unit) []safetensors.TensorInfo {
	inputs := []*[]byte{&d.in}
	tensors := []safetensors.TensorInfo{r.f.Tensors[u.in]}
	if u.scale >= 0 {
		inputs, tensors = append(inputs, &d.scale), append(tensors, r.f.Tensors[u.scale])
	}
	region := r.region(d)
	var at int64
	for i, t := range tensors {
		off, n := r.span(t)
		skip := at + r.f.DataStart + t.Begin - off
		if i == 0 {
			d.inSkip = skip
		}
		*inputs[i] = region[skip : skip+t.Size() : skip+t.Size()]
		at += n
	}
	return tensors
}

// region returns d's region of the ring.
func (r *directReader) region(d *directUnit) []byte {
	at := d.start % r.size
	return r.ring[at : at+d.n : at+d.n]
}

// read reads the tensors into d's region, a piece at a time.
func (r *directReader) read(ctx context.Context, d *directUnit, tensors []safetensors.TensorInfo) error {
	region := r.region(d)
	var at int64
	for _, t := range tensors {
		off, n := r.span(t)
		want := r.f.DataStart + t.End - off // the bytes that must be there
		for done := int64(0); done < n; {
			if err := ctx.Err(); err != nil {
				return err
			}
			m, err := r.df.readAt(region[at+done:at+min(n, done+directPiece)], off+done)
			if err != nil {
				return fmt.Errorf("%s: reading tensor %q: %w", r.f.Path, t.Name, err)
			}
			if m == 0 {
				if done < want {
					// The file shrank since it was opened: the ring's stale
					// bytes must not pass for the tensor's.
					return fmt.Errorf("%s: reading tensor %q: %w: the file ends at byte %d, before the tensor does",
						r.f.Path, t.Name, io.ErrUnexpectedEOF, off+done)
				}
				break // the span was rounded past the end of the file
			}
			done += int64(m)
			r.mu.Lock()
			d.read = at + min(done, n)
			r.mu.Unlock()
			r.changed.Broadcast()
		}
		at += n
		r.mu.Lock()
		d.read = at
		r.mu.Unlock()
	}
	r.changed.Broadcast()
	return nil
}

// take returns the region of the unit at position k of the producer's
// order, once placed (its bytes may still be on their way: see await); k
// must be the next position r takes.
func (r *directReader) take(ctx context.Context, k int) (*directUnit, error) {
	select {
	case d, ok := <-r.ready:
		switch {
		case !ok:
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			r.mu.Lock()
			defer r.mu.Unlock()
			for _, l := range r.live {
				if l.err != nil {
					return nil, l.err
				}
			}
			return nil, fmt.Errorf("%s: the direct reader stopped before unit %d", r.f.Path, k)
		case d.k != k:
			return nil, fmt.Errorf("%s: the direct reader read unit %d, want %d", r.f.Path, d.k, k)
		}
		return d, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// await waits until d's first n region bytes are read (n < 0: all of them).
func (r *directReader) await(ctx context.Context, d *directUnit, n int64) error {
	if n < 0 || n > d.n {
		n = d.n
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for d.read < n {
		switch {
		case d.err != nil:
			return d.err
		case r.stopped:
			if err := ctx.Err(); err != nil {
				return err
			}
			return fmt.Errorf("%s: the direct reader stopped", r.f.Path)
		}
		r.changed.Wait()
	}
	return nil
}

// free frees d's first n region bytes for the units after it, once
// nothing reads them.
func (r *directReader) free(d *directUnit, n int64) {
	r.mu.Lock()
	d.freed = max(d.freed, min(n, d.n))
	for len(r.live) > 0 && r.live[0].freed == r.live[0].n {
		r.live[0] = nil
		r.live = r.live[1:]
	}
	r.mu.Unlock()
	r.changed.Broadcast()
}

// release frees all of d's region.
func (r *directReader) release(d *directUnit) {
	d.in, d.scale = nil, nil
	r.free(d, d.n)
}

// close stops the reading goroutine, waits for it and unmaps the ring. It
// must be called once neither stage reads the ring.
func (r *directReader) close() error {
	if r == nil {
		return nil
	}
	r.stop()
	r.wg.Wait()
	r.unmap()
	r.ring = nil
	return r.df.close()
}
