package tensor

import (
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gokitchen/kitchen/dtype"
)

// TestRecycle checks which host tensors Release recycles: only large ones
// that Alloc made, once, and never a view or caller memory.
func TestRecycle(t *testing.T) {
	shape := []int{poolMin / 4}
	a, err := CPU().Alloc(dtype.Float32, shape)
	if err != nil {
		t.Fatal(err)
	}
	if !a.recycle || len(a.host) != poolMin {
		t.Fatalf("Alloc of %v: recycle %v, %d bytes", shape, a.recycle, len(a.host))
	}
	view, _ := a.Reshape(2, poolMin/8)
	view.Release() // a view: nothing happens
	if a.host == nil || view.host == nil {
		t.Fatal("releasing a view released its storage")
	}
	a.Release()
	if a.host != nil || a.recycle {
		t.Fatal("Release kept the buffer")
	}
	a.Release() // a second Release must not give the buffer back twice
	got := map[*byte]int{}
	for range 2 {
		c, _ := CPU().Alloc(dtype.Int8, []int{poolMin})
		got[&c.host[0]]++
		defer c.Release()
	}
	for p, n := range got {
		if n > 1 {
			t.Fatalf("buffer %p handed out %d times", p, n)
		}
	}

	mine := make([]byte, poolMin)
	u, _ := FromBytes(dtype.Int8, mine)
	u.Release()
	if u.host == nil {
		t.Fatal("Release of a tensor over caller memory dropped it")
	}
	small, _ := CPU().Alloc(dtype.Int8, []int{10})
	if small.recycle {
		t.Fatal("a small tensor is recycled")
	}
	z, _ := Zeros(dtype.Int8, poolMin)
	if z.recycle {
		t.Fatal("a Zeros tensor is recycled")
	}
}

// TestZerosAfterGarbage checks that Zeros clears what Empty does not: it
// fills large Empty buffers, drops them for the collector to free, and
// then asks for zeros of the same size, which may be that memory.
func TestZerosAfterGarbage(t *testing.T) {
	const n = 4 << 20
	for round := range 8 {
		for range 4 {
			e, err := Empty(dtype.Int8, n)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := e.Bytes()
			for i := range b {
				b[i] = 0xA5
			}
		}
		runtime.GC()
		z, err := Zeros(dtype.Int8, n)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := z.Bytes()
		for i, v := range b {
			if v != 0 {
				t.Fatalf("round %d: Zeros byte %d is %#x", round, i, v)
			}
		}
	}
}

// TestRecycleAcrossGoroutines checks that buffers released on goroutines
// running at once (so on different processors) all serve later
// allocations of their size on another goroutine. (A sync.Pool keeps the
// last buffer each processor puts where only that processor finds it.)
func TestRecycleAcrossGoroutines(t *testing.T) {
	const k = 4
	if runtime.NumCPU() < 2 {
		t.Skip("one CPU: goroutines cannot run at once")
	}
	defer debug.SetGCPercent(debug.SetGCPercent(-1)) // no collection in between
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(k + 1))
	const n = 2 * poolMin
	released := map[*byte]bool{}
	bufs := make([]*Tensor, k)
	for i := range bufs {
		bufs[i], _ = Empty(dtype.Int8, n)
		released[&bufs[i].host[0]] = true
	}
	var started atomic.Int32
	var wg sync.WaitGroup
	for _, b := range bufs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Spin until all have started: they then run at once, each on
			// a processor of its own.
			for started.Add(1); started.Load() < k; {
			}
			b.Release()
		}()
	}
	wg.Wait()
	hits := 0
	for range k {
		c, _ := Empty(dtype.Int8, n)
		if released[&c.host[0]] {
			hits++
		}
	}
	if hits != k {
		t.Errorf("%d of %d allocations found a buffer released on another goroutine", hits, k)
	}
}

// TestFreeListForgets checks that the list of released buffers does not
// keep them from the garbage collector.
func TestFreeListForgets(t *testing.T) {
	const n = 3 * poolMin
	a, err := Empty(dtype.Int8, n)
	if err != nil {
		t.Fatal(err)
	}
	a.Release()
	runtime.GC()
	runtime.GC()
	if b := takeFree(n); b != nil {
		t.Fatal("a released buffer outlived two collections")
	}
}
