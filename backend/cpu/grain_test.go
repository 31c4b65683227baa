package cpu

import (
	"context"
	"fmt"
	"testing"

	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/op"
	"github.com/gokitchen/kitchen/tensor"
)

// BenchmarkGrain times row-wise quantization of mid-sized tensors with the
// work split at different minimum part sizes: the measurement behind the
// grain constant. Run: go test -run X -bench Grain ./backend/cpu
func BenchmarkGrain(b *testing.B) {
	defer func(g int) { grainBytes = g }(grainBytes)
	for _, rows := range []int{8, 32, 128, 512} {
		v := make([]float32, rows*1024)
		for i := range v {
			v[i] = float32(i%255) - 127
		}
		x := must(tensor.FromFloat32(dtype.BFloat16, v, rows, 1024))
		for _, g := range []int{4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 30} {
			grainBytes = g
			b.Run(fmt.Sprintf("%dKiB/grain=%dKiB", rows*2, g>>10), func(b *testing.B) {
				b.SetBytes(int64(rows * 1024 * 3))
				args := &op.RowwiseArgs{X: x}
				for b.Loop() {
					if _, err := quantizeRowwise(context.Background(), args); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
