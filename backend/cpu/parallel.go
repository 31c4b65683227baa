package cpu

import (
	"context"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
)

// grainBytes is the smallest number of bytes of input worth handing to a
// worker; below it a call runs on one goroutine. BenchmarkGrain measures
// the choice (see BENCHMARKS.md); tests may change it.
var grainBytes = 64 << 10

// partsPerThread bounds the parts of a large call from below: none is
// smaller than 1/partsPerThread of a thread's share, unless the call
// runs out (see loop.work for how parts shrink to it). A cancelled
// context stops a call once the parts in progress end.
const partsPerThread = 4

// A body is the work of one call, split into contiguous ranges of units
// (rows or elements). Every unit costs about the same, and a body's result
// never depends on how the units were split.
type body interface {
	run(lo, hi int)
}

// workers are goroutines, started on first use (and more when GOMAXPROCS
// grows), that help callers with their parts. They live as long as the
// process, idle on a channel between calls, like the runtime's own worker
// threads; concurrent calls share them, and a call whose helpers are all
// busy runs its parts itself.
var workers = struct {
	mu    sync.Mutex
	n     atomic.Int32 // started
	loops chan *loop
}{loops: make(chan *loop)}

// helpers starts workers up to GOMAXPROCS-1 and returns how many there are.
func helpers() int {
	want := runtime.GOMAXPROCS(0) - 1
	if n := int(workers.n.Load()); n >= want {
		return n
	}
	workers.mu.Lock()
	defer workers.mu.Unlock()
	for int(workers.n.Load()) < want {
		go func() {
			for l := range workers.loops {
				l.work()
				l.wg.Done()
			}
		}()
		workers.n.Add(1)
	}
	return want
}

// loop is one parallel-for in progress: the caller and the workers that
// join it claim its parts in turn.
type loop struct {
	ctx     context.Context
	b       body
	units   int
	least   int          // the fewest units in a part, but the last
	threads int          // the caller and its helpers
	next    atomic.Int64 // the first unit not yet claimed
	wg      sync.WaitGroup
}

var loops = sync.Pool{New: func() any { return new(loop) }}

// parallelFor runs b over [0, units) in parts of at least minUnits units,
// on the calling goroutine and idle workers. It returns ctx.Err() if the
// context was cancelled before every part ran.
func parallelFor(ctx context.Context, b body, units, minUnits int) error {
	return parallelForParts(ctx, b, units, minUnits, partsPerThread)
}

// parallelForParts is parallelFor with parts down to 1/perThread of a
// thread's share (partsPerThread's role).
func parallelForParts(ctx context.Context, b body, units, minUnits, perThread int) error {
	n := helpers()
	parts := min(max(1, units/max(1, minUnits)), perThread*(n+1))
	if parts == 1 {
		if err := ctx.Err(); err != nil {
			return err
		}
		b.run(0, units)
		sfence()
		return nil
	}
	l := loops.Get().(*loop)
	l.ctx, l.b, l.units, l.least, l.threads = ctx, b, units, (units+parts-1)/parts, n+1
	l.next.Store(0)
	woke := false
	for range min(n, parts-1) {
		l.wg.Add(1)
		select {
		case workers.loops <- l:
			woke = true
		default: // every worker is busy with another call
			l.wg.Done()
		}
	}
	if woke {
		// The scheduler put the worker we woke in this thread's "run
		// next" slot, which an idle thread steals from only after a
		// pause (on a 2-core Zen 5 VM, the worker then started a median
		// 137-204 us after the call, against 42-44 us for a goroutine in
		// the run queue). Yielding runs the worker here at once and lets
		// the idle thread take up this goroutine instead.
		runtime.Gosched()
	}
	l.work()
	l.wg.Wait()
	*l = loop{} // keep no caller memory alive in the pool
	loops.Put(l)
	return ctx.Err()
}

// work claims and runs parts until none is left or the context is done,
// then fences the parts' non-temporal stores (see hints) before the
// WaitGroup hands them back. Each part is a share of what is left, half of
// a thread's (a quarter of the call with two threads), and at least least
// units: parts shrink as the call runs out, so threads end together
// however late one started or however slowly it ran (guided
// self-scheduling). Against parts of least units each (and the one-row
// path's 4 parts a thread, see productParts), medians of 20 calls in
// blocks alternated twice in one process on a 2-core Zen 5: int8_linear
// of 1, 4 and 16 rows 0.88-0.97 of the time, Q/DQ of [8352, 3840]
// 0.93-1.01, 512x4096x4096 0.98-0.99, 4096x3072x3072 0.97 and 1.04.
func (l *loop) work() {
	defer sfence()
	for l.ctx.Err() == nil {
		lo := int(l.next.Load())
		if lo >= l.units {
			return
		}
		left := l.units - lo
		size := max(l.least, (left+2*l.threads-1)/(2*l.threads))
		if l.next.CompareAndSwap(int64(lo), int64(lo+size)) {
			l.b.run(lo, min(lo+size, l.units))
		}
	}
}

// firstIndex records the smallest index that any part reports.
type firstIndex struct{ v atomic.Int64 }

func (f *firstIndex) reset() { f.v.Store(math.MaxInt64) }

func (f *firstIndex) report(i int) {
	for {
		old := f.v.Load()
		if int64(i) >= old || f.v.CompareAndSwap(old, int64(i)) {
			return
		}
	}
}

// get returns the smallest index reported, or -1.
func (f *firstIndex) get() int {
	if v := f.v.Load(); v != math.MaxInt64 {
		return int(v)
	}
	return -1
}

// maxBits records the largest abs-bits value that any part reports.
type maxBits struct{ v atomic.Uint32 }

func (m *maxBits) report(b uint32) {
	for {
		old := m.v.Load()
		if b <= old || m.v.CompareAndSwap(old, b) {
			return
		}
	}
}
