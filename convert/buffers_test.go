package convert

import (
	"math/rand/v2"
	"testing"

	"github.com/gokitchen/kitchen/dtype"
)

// check fails t unless b holds what its count says: at most flowBudget
// bytes in its list, of buffers no larger than that, and in its slot
// nothing or one buffer over flowBudget.
func (b *buffers) check(t *testing.T) {
	t.Helper()
	var sum int64
	for _, f := range b.free {
		sum += int64(cap(f))
		if cap(f) > flowBudget {
			t.Fatalf("the list holds a buffer of %d bytes, over the budget of %d", cap(f), flowBudget)
		}
	}
	if sum != b.held {
		t.Fatalf("holds %d bytes in %d buffers, counted %d", sum, len(b.free), b.held)
	}
	if b.held > flowBudget {
		t.Fatalf("holds %d bytes in %d buffers, over the budget of %d", b.held, len(b.free), flowBudget)
	}
	if b.large != nil && cap(b.large) <= flowBudget {
		t.Fatalf("the slot holds a buffer of %d bytes, within the budget of %d", cap(b.large), flowBudget)
	}
}

// same reports whether f and g start at the same byte.
func same(f, g []byte) bool { return &f[:1][0] == &g[:1][0] }

// TestBuffers: the list hands back the smallest buffer that fits, but not
// one over twice the size asked for (unless the request is over half the
// budget), drops the oldest buffers first, and keeps no more than
// flowBudget bytes; one buffer over the budget waits in a slot of its own,
// whatever small buffers come back or small requests pass it over, until
// a request over half the budget takes it or is larger than it, or a
// larger one comes back.
func TestBuffers(t *testing.T) {
	const mib = 1 << 20
	var b buffers
	get := func(n int) []byte {
		t.Helper()
		f, err := b.get(n)
		if err != nil || len(f) != n {
			t.Fatalf("get(%d): %d bytes, %v", n, len(f), err)
		}
		b.check(t)
		return f
	}
	put := func(f []byte) {
		t.Helper()
		b.put(f)
		b.check(t)
	}
	empty := func() {
		t.Helper()
		if b.held != 0 || len(b.free) != 0 || b.large != nil {
			t.Fatalf("%d bytes in %d buffers and %d in the slot left, want none", b.held, len(b.free), cap(b.large))
		}
	}
	slot := func(want []byte, what string) {
		t.Helper()
		if b.large == nil || !same(b.large, want) {
			t.Errorf("%s: the slot holds %d bytes, want the buffer of %d", what, cap(b.large), cap(want))
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
	slot(huge, "after a buffer over the budget came back")
	if len(b.free) != 0 || b.held != 0 {
		t.Errorf("%d buffers in the list after one over the budget came back, want none", len(b.free))
	}
	if f := get(flowBudget/2 + 1); !same(f, huge) {
		t.Error("get(half the budget and a byte) did not reuse the buffer of twice the budget")
	}
	empty()

	// The slot's buffer stays when small requests pass it over and small
	// buffers come back, whatever the order, even past the budget...
	put(huge)
	var bufs [][]byte
	for range 2 * flowBudget / (4 * mib) {
		f := get(4 * mib)
		if same(f, huge) {
			t.Fatal("get(4 MiB) took the buffer of twice the budget")
		}
		bufs = append(bufs, f)
	}
	slot(huge, "after small requests passed it over")
	for _, f := range bufs {
		put(f)
	}
	slot(huge, "after small buffers came back")
	if b.held != flowBudget {
		t.Errorf("the list holds %d bytes after %d came back, want the budget, %d", b.held, 2*flowBudget, flowBudget)
	}
	// ... and a request over half the budget prefers the list's smaller
	// buffer, when one fits.
	if f := get(4*mib + 1); same(f, huge) {
		t.Error("get(4 MiB and a byte) took the slot's buffer")
	}
	before = newBuffers.Load()
	if f := get(flowBudget/2 + 1); !same(f, huge) {
		t.Error("get(half the budget and a byte) did not take the slot's buffer")
	}
	if newBuffers.Load() != before {
		t.Error("get(half the budget and a byte) allocated")
	}
	b = buffers{}

	// A request over half the budget larger than the slot's buffer drops
	// it: the buffer allocated for it replaces it.
	put(huge)
	larger := get(2*flowBudget + 1)
	if same(larger, huge) || b.large != nil {
		t.Errorf("get(twice the budget and a byte): the slot holds %d bytes, want none", cap(b.large))
	}
	put(larger)
	slot(larger, "after the larger buffer came back")
	b = buffers{}

	// Of two buffers over the budget, the larger stays, whatever the
	// order they come back in.
	next := get(flowBudget + 1)
	put(huge)
	put(next)
	slot(huge, "after a smaller one came back onto it")
	b = buffers{}
	put(next)
	put(huge)
	slot(huge, "after it came back onto a smaller one")
	b = buffers{}

	// Over the budget, the list's oldest go first.
	bufs = bufs[:0]
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
// order: the small pieces hit the list, once the first are back, and the
// large layer's buffer waits in its slot for the next large layer. (The
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
		if b.large == nil || !same(b.large, big) {
			t.Errorf("reverse %v: the slot holds %d bytes, want the large layer's buffer", reverse, cap(b.large))
		}
		before = newBuffers.Load()
		if f, err := b.get(100 << 20); err != nil || !same(f, big) || newBuffers.Load() != before {
			t.Errorf("reverse %v: the next large layer did not reuse the large buffer", reverse)
		}
	}
}

// TestBuffersGrowing: layers over half the budget, each larger than the
// last, are served by one buffer, made at the conversion's largest such
// request (slotSize) at the first; a small request still gets a small one.
func TestBuffersGrowing(t *testing.T) {
	const mib = 1 << 20
	b := buffers{slotSize: 96 * mib}
	before := newBuffers.Load()
	var first []byte
	for _, n := range []int{9 * mib, 48 * mib, 64 * mib, 96 * mib, 20 * mib} {
		f, err := b.get(n)
		if err != nil || len(f) != n {
			t.Fatalf("get(%d): %d bytes, %v", n, len(f), err)
		}
		if first == nil {
			first = f
		} else if !same(f, first) {
			t.Errorf("get(%d MiB): a buffer other than the first", n/mib)
		}
		b.put(f)
		b.check(t)
	}
	if n := newBuffers.Load() - before; n != 1 {
		t.Errorf("%d buffers allocated, want 1", n)
	}
	if f, err := b.get(4 * mib); err != nil || cap(f) != 4*mib {
		t.Errorf("get(4 MiB): capacity %d, %v; want a buffer of its own size", cap(f), err)
	}
}

// TestBuffersRandom: whatever is asked for and given back, the list keeps
// its count and its bound, the slot changes only as the rules say, and get
// allocates only when nothing given back fits.
func TestBuffersRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	sizes := []int{bufMin, 300 << 10, 1 << 20, 4 << 20, 4<<20 + 4096, 9 << 20, flowBudget, 20 << 20, 24 << 20, 40 << 20}
	var b buffers
	var out [][]byte
	for range 4000 {
		slot := b.large
		if len(out) > 0 && (len(out) > 6 || r.IntN(2) == 0) {
			i := r.IntN(len(out))
			f := out[i]
			b.put(f)
			b.check(t)
			out = append(out[:i], out[i+1:]...)
			want := slot
			if cap(f) > flowBudget && (slot == nil || cap(f) > cap(slot)) {
				want = f
			}
			if (want == nil) != (b.large == nil) || want != nil && !same(b.large, want) {
				t.Fatalf("put(%d) onto a slot of %d: the slot holds %d, want %d", cap(f), cap(slot), cap(b.large), cap(want))
			}
			continue
		}
		n := sizes[r.IntN(len(sizes))]
		hit := slot != nil && fits(cap(slot), n)
		for _, f := range b.free {
			hit = hit || fits(cap(f), n)
		}
		before := newBuffers.Load()
		f, err := b.get(n)
		if err != nil || len(f) != n || (cap(f) > 2*n && n <= flowBudget/2) {
			t.Fatalf("get(%d): %d bytes of %d, %v", n, len(f), cap(f), err)
		}
		b.check(t)
		if missed := newBuffers.Load() != before; missed == hit {
			t.Fatalf("get(%d): allocated %v, with a buffer that fits given back %v", n, missed, hit)
		}
		want := slot
		if slot != nil && (same(f, slot) || n > flowBudget/2 && cap(slot) < n) {
			want = nil
		}
		if (want == nil) != (b.large == nil) || want != nil && !same(b.large, want) {
			t.Fatalf("get(%d) with a slot of %d: the slot holds %d, want %d", n, cap(slot), cap(b.large), cap(want))
		}
		out = append(out, f)
	}
}
