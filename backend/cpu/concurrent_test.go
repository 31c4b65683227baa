package cpu

import (
	"bytes"
	"context"
	"sync"
	"testing"

	"github.com/gokitchen/kitchen/backend"
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/tensor"
)

// TestConcurrentCalls runs split calls of every operation from several
// goroutines at once on one backend (sharing its workers and reused jobs)
// and checks each result against the same call made alone; the race
// detector checks the sharing.
func TestConcurrentCalls(t *testing.T) {
	be := &cpuBackend{}
	v := make([]float32, 256*1024) // 512 KiB of bfloat16: split into parts
	for i := range v {
		v[i] = float32(i%509)/7 - 30
	}
	x, _ := tensor.FromFloat32(dtype.BFloat16, v, 256, 1024)
	calls := []*backend.Call{
		{Op: backend.QuantizeRowwise, X: x},
		{Op: backend.QuantizeTensorwise, X: x},
		{Op: backend.QuantizeRowwise, X: x, Seed: 11},
	}
	run := func(c *backend.Call) []byte {
		var res backend.Result
		var err error
		if c.Op == backend.QuantizeRowwise {
			res, err = be.quantizeRowwise(context.Background(), c)
		} else {
			res, err = be.quantizeTensorwise(context.Background(), c)
		}
		if err != nil {
			t.Error(err)
			return nil
		}
		q, _ := res.Q.Bytes()
		s, _ := res.Scale.Bytes()
		return append(bytes.Clone(q), s...)
	}
	want := make([][]byte, len(calls))
	for i, c := range calls {
		want[i] = run(c)
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 6 {
				k := (g + i) % len(calls)
				if got := run(calls[k]); !bytes.Equal(got, want[k]) {
					t.Errorf("goroutine %d: call %d differs when run concurrently", g, k)
				}
			}
		}()
	}
	wg.Wait()
}
