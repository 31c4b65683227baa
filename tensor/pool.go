package tensor

import (
	"fmt"
	"slices"
	"sync"
	"unsafe"
	"weak"

	"github.com/gokitchen/kitchen/dtype"
)

// Host outputs are recycled. A fresh Go allocation of a multi-megabyte
// output is zeroed by the allocating goroutine before any kernel runs
// (about 4 ms for 32 MB on the machines BENCHMARKS.md describes, as long as
// a row-wise quantization of it on two cores), and the kernels overwrite
// every byte anyway. So the host's Alloc hands out buffers that Release
// gave back, unzeroed, and Release gives back the buffers Alloc made; and
// where it must allocate, it asks the runtime not to clear (makeUninit). Only
// those: a tensor over caller memory (FromBytes), a zeroed one (Zeros) and a
// view (Reshape) are never recycled.

// poolMin is the smallest buffer worth recycling. Not zeroing is worth
// little below a megabyte, but fresh memory's first touch takes page
// faults, which the virtual machines BENCHMARKS.md describes take slowly
// (about 50 µs for 16 KiB): more than the list's bookkeeping for outputs
// of a few KiB too, such as a one-row product's.
const poolMin = 4 << 10

// free holds the released buffers, by size, for Empty to reuse. It is one
// list for the process: a sync.Pool keeps the last buffer each processor
// puts where only that processor's Gets find it, so a buffer released on
// one goroutine and wanted on another (a converter's writer and producer,
// an inference loop's workers) was missed, and with many processors the
// heap grew with them (TestRecycleAcrossGoroutines; convert's
// TestMemoryBound at GOMAXPROCS=16). Its entries are weak pointers, so the
// garbage collector still bounds what it keeps: a buffer that no one takes
// before a collection is freed.
var free = struct {
	sync.Mutex
	bySize map[int][]weak.Pointer[byte]
}{bySize: map[int][]weak.Pointer[byte]{}}

// maxFree is the most buffers of one size the list remembers.
const maxFree = 64

// takeFree returns a released buffer of n bytes, or nil.
func takeFree(n int) []byte {
	free.Lock()
	defer free.Unlock()
	l := free.bySize[n]
	for len(l) > 0 {
		w := l[len(l)-1]
		l[len(l)-1] = weak.Pointer[byte]{}
		l = l[:len(l)-1]
		if p := w.Value(); p != nil {
			free.bySize[n] = l
			return unsafe.Slice(p, n)
		}
	}
	delete(free.bySize, n)
	return nil
}

// putFree remembers a released buffer, forgetting those the collector
// has freed and, past maxFree, the oldest.
func putFree(b []byte) {
	w := weak.Make(&b[0])
	free.Lock()
	defer free.Unlock()
	l := slices.DeleteFunc(free.bySize[len(b)], func(w weak.Pointer[byte]) bool { return w.Value() == nil })
	if len(l) == maxFree {
		l = slices.Delete(l, 0, 1)
	}
	free.bySize[len(b)] = append(l, w)
}

// Empty makes a host tensor of unspecified contents, as the host's Alloc
// does: one of 4 KiB or more reuses the memory of a released tensor of its
// size when there is one (see Tensor.Release), for outputs that are about
// to be overwritten whole.
func Empty(dt dtype.DType, shape ...int) (*Tensor, error) {
	if !dt.Valid() {
		return nil, fmt.Errorf("tensor: invalid dtype %v", dt)
	}
	if err := checkShape(shape, dt.Size()); err != nil {
		return nil, err
	}
	n := Numel(shape) * dt.Size()
	if n < poolMin {
		return newHost(dt, shape, make([]byte, n)), nil
	}
	b := takeFree(n)
	if b == nil {
		b = makeHost(n, false)
	}
	t := newHost(dt, shape, b)
	t.recycle = true
	return t, nil
}

// releaseHost gives a buffer that Empty made back to the free list, once.
func releaseHost(t *Tensor) {
	if !t.recycle {
		return
	}
	b := t.host
	t.host, t.recycle = nil, false
	putFree(b)
}
