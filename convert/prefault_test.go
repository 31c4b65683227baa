package convert

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/gokitchen/kitchen/safetensors"
)

// TestPrefaulter runs the prefaulter over 8 tensors of 1 MiB (its window
// then the 4 MiB minimum) with a producer that moves only when told: it
// touches no more than the window past the producer's unit, goes on as the
// producer advances, skips what the producer has reached, and stops when
// asked or when its context ends.
func TestPrefaulter(t *testing.T) {
	path := filepath.Join(t.TempDir(), "in.safetensors")
	infos := make([]safetensors.TensorInfo, 8)
	for i := range infos {
		infos[i] = safetensors.TensorInfo{Name: fmt.Sprintf("t%d", i), DType: "BF16", Shape: []int{512, 1024}} // 1 MiB
	}
	var buf bytes.Buffer
	w, err := safetensors.NewWriter(&buf, nil, infos)
	if err != nil {
		t.Fatal(err)
	}
	for _, ti := range infos {
		if err := w.WriteTensor(ti.Name, make([]byte, 1<<20)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := safetensors.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if !f.Mapped() {
		t.Skip("the input is not memory-mapped on this platform")
	}
	units := make([]unit, len(f.Tensors))
	ord := make([]int32, len(units))
	for i := range units {
		units[i], ord[i] = copyUnit(i, ""), int32(i)
	}
	const mib = 1 << 20
	state := func(p *prefaulter) (ahead int64, touched []int64) {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.ahead, append([]int64(nil), p.touched...)
	}
	// settle waits for the prefaulter to have touched want bytes ahead.
	settle := func(p *prefaulter, want int64) []int64 {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			ahead, touched := state(p)
			if ahead == want {
				time.Sleep(20 * time.Millisecond) // and no more after that
				if a, tt := state(p); a == ahead {
					return tt
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("prefaulter has %d bytes ahead, want %d (touched %v)", ahead, want, touched)
			}
			time.Sleep(time.Millisecond)
		}
	}

	p := startPrefault(context.Background(), f, units, ord, nil)
	if p == nil || p.window != 4*mib {
		t.Fatalf("prefaulter %+v, want one with a 4 MiB window", p)
	}
	touched := settle(p, 4*mib)
	if want := []int64{0, mib, mib, mib, mib, 0, 0, 0}; !slices.Equal(touched, want) {
		t.Fatalf("with the producer on unit 0, touched %v, want %v", touched, want)
	}
	p.advance(2) // units 1 and 2 are no longer ahead: two more fit
	touched = settle(p, 4*mib)
	if want := []int64{0, mib, mib, mib, mib, mib, mib, 0}; !slices.Equal(touched, want) {
		t.Fatalf("with the producer on unit 2, touched %v, want %v", touched, want)
	}
	p.advance(7) // past everything: unit 7 is the producer's, so nothing is left
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		t.Fatal("prefaulter did not end once the producer reached the last unit")
	}
	if _, touched := state(p); touched[7] != 0 {
		t.Fatalf("touched %d bytes of the producer's own unit", touched[7])
	}
	p.stopAndWait() // after the end too

	// Blocked on its window, it ends when asked, or when its context does.
	p = startPrefault(context.Background(), f, units, ord, nil)
	settle(p, 4*mib)
	p.stopAndWait()
	ctx, cancel := context.WithCancel(context.Background())
	p = startPrefault(ctx, f, units, ord, nil)
	settle(p, 4*mib)
	cancel()
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		t.Fatal("prefaulter did not end with its context")
	}
}
