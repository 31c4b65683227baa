package convert

import (
	"context"
	"os"
	"sync"

	"github.com/gokitchen/kitchen/safetensors"
)

// prefaulter maps the pages of the units' inputs ahead of the producer, on
// a goroutine of its own. The kernel reads the next tensor ahead
// (willNeed), but each page still has to be mapped into the process by a
// page fault (a few pages at a time), and taken on the producer's thread
// those faults do not overlap the computation: on a 2-core virtual machine
// with a fast disk, a 3.17 GB conversion took 3.4-3.8 s with the faults on
// the producer's thread and 2.8-3.2 s with this goroutine touching the
// pages first (BENCHMARKS.md, "The converter on a faster disk"). Only for
// a mapped input: elsewhere reading a tensor is what the producer does
// anyway.
//
// It touches the units' inputs (a weight and its scale) in the producer's
// order, one page at a time, at most window bytes past the end of the
// unit the producer is on: no more than half the largest tensor it maps
// (or 4 MiB, for files of small tensors; the direct reader's tensors it
// skips), so that the pages mapped ahead fit
// the README's memory bound with room to spare: it counts mapped pages
// and allows twice the largest tensor (a case of TestMemoryBound with 48
// MiB tensors checks it). Touched pages may be dropped again before
// the producer reads them (the mapping's sweeps of released ranges, since
// units run in the output's order, not the file's): they are then read by
// a fault as before, and the window counts them all the same.
type prefaulter struct {
	f      *safetensors.File
	units  []unit
	ord    []int32
	window int64
	direct *directReader // reads some units itself; nil: none

	mu      sync.Mutex
	wake    *sync.Cond
	cur     int     // the position in ord of the unit the producer is on
	touched []int64 // bytes touched of each position's inputs
	ahead   int64   // bytes touched of the positions after cur
	stop    bool
	done    chan struct{}
	sink    byte // what the touches read, so that they are not dropped
}

// prefaultMin and prefaultMax bound a prefaulter's window, the bytes it
// maps ahead of the producer: half the size of the largest tensor it maps,
// within them.
const (
	prefaultMin = 4 << 20
	prefaultMax = 64 << 20
)

// startPrefault starts a prefaulter for a mapped input, or returns nil.
// Its stopAndWait must be called before the file is closed: the goroutine
// reads the mapping.
func startPrefault(ctx context.Context, f *safetensors.File, units []unit, ord []int32, direct *directReader) *prefaulter {
	if !f.Mapped() || len(ord) < 2 {
		return nil
	}
	var largest int64 // of the tensors it maps: the direct reader reads its own
	for _, i := range ord {
		if u := &units[i]; !direct.takes(u) {
			u.inputs(f, func(t safetensors.TensorInfo) { largest = max(largest, t.Size()) })
		}
	}
	p := &prefaulter{f: f, units: units, ord: ord, direct: direct, window: min(max(largest/2, prefaultMin), prefaultMax),
		touched: make([]int64, len(ord)), done: make(chan struct{})}
	p.wake = sync.NewCond(&p.mu)
	stop := context.AfterFunc(ctx, p.halt)
	go func() {
		defer close(p.done)
		defer stop()
		p.run()
	}()
	return p
}

// advance says that the producer is now on position k of ord.
func (p *prefaulter) advance(k int) {
	if p == nil {
		return
	}
	p.mu.Lock()
	for p.cur < k {
		p.cur++
		p.ahead -= p.touched[p.cur]
	}
	p.mu.Unlock()
	p.wake.Broadcast()
}

// halt tells the goroutine to stop at its next page.
func (p *prefaulter) halt() {
	p.mu.Lock()
	p.stop = true
	p.mu.Unlock()
	p.wake.Broadcast()
}

// stopAndWait halts the goroutine and waits for it to end.
func (p *prefaulter) stopAndWait() {
	if p == nil {
		return
	}
	p.halt()
	<-p.done
}

// touchStep is the bytes touched between two looks at the budget.
const touchStep = 256 << 10

func (p *prefaulter) run() {
	page := os.Getpagesize()
	for k := 1; k < len(p.ord); k++ {
		u := &p.units[p.ord[k]]
		if p.direct.takes(u) {
			continue
		}
		var tensors []safetensors.TensorInfo
		u.inputs(p.f, func(t safetensors.TensorInfo) { tensors = append(tensors, t) })
		for _, t := range tensors {
			b, err := p.f.Data(t) // a slice of the mapping
			if err != nil {
				return
			}
			for len(b) > 0 {
				n := min(len(b), touchStep)
				switch p.wait(k, int64(n)) {
				case stopTouching:
					return
				case skipUnit:
					b = nil
					continue
				}
				var s byte
				for i := 0; i < n; i += page {
					s += b[i]
				}
				p.sink += s
				b = b[n:]
			}
		}
	}
}

// What wait says to do next.
const (
	touch = iota
	skipUnit
	stopTouching
)

// wait blocks until n more bytes of position k may be touched and counts
// them (touch), or says that the producer has reached k already (skipUnit:
// its pages are being read or were released) or that the prefaulter is
// halted (stopTouching).
func (p *prefaulter) wait(k int, n int64) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	for !p.stop && k > p.cur && p.ahead+n > p.window {
		p.wake.Wait()
	}
	switch {
	case p.stop:
		return stopTouching
	case k <= p.cur:
		return skipUnit
	}
	p.touched[k] += n
	p.ahead += n
	return touch
}
