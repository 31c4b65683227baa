package convert

import (
	"testing"

	"github.com/gokitchen/kitchen/dtype"
)

// TestBuffers: the list hands back the smallest buffer that fits, and keeps
// no more than flowBudget bytes, or one buffer larger than that.
func TestBuffers(t *testing.T) {
	var b buffers
	get := func(n int) []byte {
		t.Helper()
		f, err := b.get(n)
		if err != nil || len(f) != n {
			t.Fatalf("get(%d): %d bytes, %v", n, len(f), err)
		}
		return f
	}
	small, large := get(1<<20), get(4<<20)
	b.put(large)
	b.put(small)
	if f := get(512 << 10); &f[:1][0] != &small[0] {
		t.Error("get(512 KiB) did not reuse the 1 MiB buffer")
	}
	if f := get(2 << 20); &f[:1][0] != &large[0] {
		t.Error("get(2 MiB) did not reuse the 4 MiB buffer")
	}
	if b.held != 0 || len(b.free) != 0 {
		t.Errorf("%d bytes in %d buffers left, want none", b.held, len(b.free))
	}
	for range 2 * flowBudget / (1 << 20) {
		b.put(make([]byte, 1<<20))
	}
	if b.held > flowBudget {
		t.Errorf("holds %d bytes, over the budget of %d", b.held, flowBudget)
	}
	huge := make([]byte, 2*flowBudget)
	b.put(huge)
	if len(b.free) != 1 || &b.free[0][0] != &huge[0] || b.held != int64(len(huge)) {
		t.Errorf("after a buffer over the budget: %d bytes in %d buffers, want that one alone", b.held, len(b.free))
	}
	if tn, buf, err := b.output(dtype.Int8, 100); tn != nil || buf != nil || err != nil {
		t.Errorf("output of 100 bytes: %v, %d bytes, %v; want a fresh one (nil)", tn, len(buf), err)
	}
}
