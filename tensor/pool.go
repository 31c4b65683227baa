package tensor

import (
	"fmt"
	"sync"

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
// view (Reshape) are never recycled. The pools are sync.Pools, so the
// garbage collector bounds what they keep.

// poolMin is the smallest buffer worth recycling: below it, zeroing costs
// less than the bookkeeping.
const poolMin = 1 << 20

// pools maps a buffer size to the *sync.Pool of *[]byte of that size.
var pools sync.Map

func poolFor(n int) *sync.Pool {
	if p, ok := pools.Load(n); ok {
		return p.(*sync.Pool)
	}
	p, _ := pools.LoadOrStore(n, new(sync.Pool))
	return p.(*sync.Pool)
}

// Empty makes a host tensor of unspecified contents, as the host's Alloc
// does: a large one reuses the memory of a released tensor of its size
// when there is one (see Tensor.Release), for outputs that are about to be
// overwritten whole.
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
	var b []byte
	if p, ok := poolFor(n).Get().(*[]byte); ok {
		b = *p
	} else {
		b = makeHost(n, false)
	}
	t := newHost(dt, shape, b)
	t.recycle = true
	return t, nil
}

// releaseHost gives a buffer that allocHost made back to its pool, once.
func releaseHost(t *Tensor) {
	if !t.recycle {
		return
	}
	b := t.host
	t.host, t.recycle = nil, false
	poolFor(len(b)).Put(&b)
}
