package tensor

import (
	"runtime"
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
