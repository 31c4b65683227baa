package cpu

import (
	"bytes"
	"context"
	"sync"
	"testing"

	"github.com/gokitchen/kitchen/backend"
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/op"
	"github.com/gokitchen/kitchen/tensor"
)

// TestConcurrentCalls runs split calls of every operation from several
// goroutines at once (sharing the workers and the pooled bodies) and checks
// each result against the same call made alone; the race detector checks
// the sharing.
func TestConcurrentCalls(t *testing.T) {
	ctx := context.Background()
	v := make([]float32, 256*1024) // 512 KiB of bfloat16: split into parts
	for i := range v {
		v[i] = float32(i%509)/7 - 30
	}
	x := must(tensor.FromFloat32(dtype.BFloat16, v, 256, 1024))
	q, scale := must2(quantizeRowwise(ctx, &op.RowwiseArgs{X: x}))
	result := func(r backend.Result, err error) []byte {
		if err != nil {
			t.Error(err)
			return nil
		}
		var b []byte
		for _, o := range r.Outputs() {
			b = append(b, must(o.Bytes())...)
		}
		return b
	}
	calls := []func() []byte{
		func() []byte { return result(quantizeRowwise(ctx, &op.RowwiseArgs{X: x})) },
		func() []byte { return result(quantizeTensorwise(ctx, &op.TensorwiseArgs{X: x})) },
		func() []byte { return result(quantizeRowwise(ctx, &op.RowwiseArgs{X: x, Seed: 11})) },
		func() []byte { return result(quantizeTensorwise(ctx, &op.TensorwiseArgs{X: x, Seed: 12})) },
		func() []byte {
			return result(dequantizeDType(ctx, &op.DequantizeDTypeArgs{DequantizeArgs: op.DequantizeArgs{Q: q, Scale: scale}, OutDType: dtype.Float16}))
		},
	}
	want := make([][]byte, len(calls))
	for i, c := range calls {
		want[i] = bytes.Clone(c())
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 6 {
				k := (g + i) % len(calls)
				if got := calls[k](); !bytes.Equal(got, want[k]) {
					t.Errorf("goroutine %d: call %d differs when run concurrently", g, k)
				}
			}
		})
	}
	wg.Wait()
}

func must2(r op.Quantized, err error) (*tensor.Tensor, *tensor.Tensor) {
	if err != nil {
		panic(err)
	}
	return r.Q, r.Scale
}
