package convert

import (
	"math/rand/v2"
	"testing"

	"github.com/gokitchen/kitchen/dtype"
)

// check fails t unless b holds what its count says, and no more than
// flowBudget bytes, or one buffer.
func (b *buffers) check(t *testing.T) {
	t.Helper()
	var sum int64
	for _, f := range b.free {
		sum += int64(cap(f))
	}
	if sum != b.held {
		t.Fatalf("holds %d bytes in %d buffers, counted %d", sum, len(b.free), b.held)
	}
	if b.held > flowBudget && len(b.free) > 1 {
		t.Fatalf("holds %d bytes in %d buffers, over the budget of %d", b.held, len(b.free), flowBudget)
	}
}

// TestBuffers: the list hands back the smallest buffer that fits, but not
// one over twice the size asked for (unless the request is over half the
// budget), drops the oldest buffers first, and keeps no more than
// flowBudget bytes, or one buffer larger than that, which goes as soon as
// a smaller piece is made or another buffer comes back.
func TestBuffers(t *testing.T) {
	const mib = 1 << 20
	var b buffers
	get := func(n int) []byte {
		t.Helper()
		f, err := b.get(n)
		if err != nil || len(f) != n {
			t.Fatalf("get(%d): %d bytes, %v", n, len(f), err)
		}
		return f
	}
	put := func(f []byte) {
		t.Helper()
		b.put(f)
		b.check(t)
	}
	same := func(f, g []byte) bool { return &f[:1][0] == &g[:1][0] }
	empty := func() {
		t.Helper()
		if b.held != 0 || len(b.free) != 0 {
			t.Fatalf("%d bytes in %d buffers left, want none", b.held, len(b.free))
		}
	}

	// Best fit, within twice the request.
	small, large := get(1*mib), get(4*mib)
	put(large)
	put(small)
	if f := get(768 << 10); !same(f, small) {
		t.Error("get(768 KiB) did not reuse the 1 MiB buffer")
	}
	if f := get(3 * mib); !same(f, large) {
		t.Error("get(3 MiB) did not reuse the 4 MiB buffer")
	}
	empty()

	// A buffer more than twice the request stays in the list, unused.
	put(large)
	before := newBuffers.Load()
	if f := get(1 * mib); same(f, large) {
		t.Error("get(1 MiB) took the 4 MiB buffer")
	}
	if n := newBuffers.Load() - before; n != 1 {
		t.Errorf("get(1 MiB) past a 4 MiB buffer allocated %d, want 1", n)
	}
	if len(b.free) != 1 || !same(b.free[0], large) {
		t.Error("the 4 MiB buffer passed over is no longer in the list")
	}
	b = buffers{}

	// A request over half the budget takes any buffer that fits: such
	// pieces are in flight one at a time.
	huge := get(2 * flowBudget)
	put(huge)
	if f := get(flowBudget/2 + 1); !same(f, huge) {
		t.Error("get(half the budget and a byte) did not reuse the buffer of twice the budget")
	}
	empty()

	// A buffer over the budget is dropped when a small piece passes it
	// over...
	put(huge)
	if f := get(4 * mib); same(f, huge) {
		t.Error("get(4 MiB) took the buffer of twice the budget")
	}
	empty()
	// ... or when another buffer comes back, whatever the order.
	put(huge)
	put(small)
	if len(b.free) != 1 || !same(b.free[0], small) {
		t.Errorf("%d buffers after a small one came back onto one over the budget, want the small one alone", len(b.free))
	}
	put(huge)
	if len(b.free) != 1 || !same(b.free[0], huge) {
		t.Errorf("%d buffers after one over the budget came back onto a small one, want it alone", len(b.free))
	}
	b = buffers{}

	// Over the budget, the oldest go first.
	var bufs [][]byte
	for range flowBudget / mib {
		bufs = append(bufs, make([]byte, mib))
		put(bufs[len(bufs)-1])
	}
	put(make([]byte, 3*mib))
	if len(b.free) != flowBudget/mib-2 || !same(b.free[0], bufs[3]) {
		t.Errorf("after 3 MiB more: %d buffers, want the oldest 3 dropped", len(b.free))
	}
	b = buffers{}

	if tn, buf, err := b.output(dtype.Int8, 100); tn != nil || buf != nil || err != nil {
		t.Errorf("output of 100 bytes: %v, %d bytes, %v; want a fresh one (nil)", tn, len(buf), err)
	}
}

// TestBuffersAfterLarge: a dequantized layer over the budget followed by
// many small pieces, several in flight, given back in batches in either
// order: the small pieces hit the list, once the first are back. (The
// list that dropped its smallest buffers kept the large one, which took
// one small piece at a time: 75 misses in 100.)
func TestBuffersAfterLarge(t *testing.T) {
	for _, reverse := range []bool{false, true} {
		var b buffers
		big, err := b.get(128 << 20)
		if err != nil {
			t.Fatal(err)
		}
		b.put(big)
		before := newBuffers.Load()
		const pieces, inFlight = 100, 4
		var batch [][]byte
		for range pieces {
			f, err := b.get(4 << 20)
			if err != nil {
				t.Fatal(err)
			}
			batch = append(batch, f)
			if len(batch) == inFlight {
				for i := range batch {
					if reverse {
						i = len(batch) - 1 - i
					}
					b.put(batch[i])
					b.check(t)
				}
				batch = batch[:0]
			}
		}
		if n := newBuffers.Load() - before; n > inFlight {
			t.Errorf("reverse %v: %d misses in %d pieces, %d in flight; want at most %d", reverse, n, pieces, inFlight, inFlight)
		} else {
			t.Logf("reverse %v: %d misses in %d pieces", reverse, n, pieces)
		}
		for _, f := range b.free {
			if cap(f) > flowBudget {
				t.Errorf("reverse %v: the list still holds a buffer of %d bytes", reverse, cap(f))
			}
		}
	}
}

// TestBuffersRandom: whatever is asked for and given back, the list keeps
// its count and its bound.
func TestBuffersRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	sizes := []int{bufMin, 300 << 10, 1 << 20, 4 << 20, 4<<20 + 4096, 9 << 20, flowBudget, 20 << 20}
	var b buffers
	var out [][]byte
	for range 2000 {
		if len(out) > 0 && (len(out) > 6 || r.IntN(2) == 0) {
			i := r.IntN(len(out))
			b.put(out[i])
			b.check(t)
			out = append(out[:i], out[i+1:]...)
			continue
		}
		n := sizes[r.IntN(len(sizes))]
		f, err := b.get(n)
		if err != nil || len(f) != n || (cap(f) > 2*n && n <= flowBudget/2) {
			t.Fatalf("get(%d): %d bytes of %d, %v", n, len(f), cap(f), err)
		}
		b.check(t)
		out = append(out, f)
	}
}
