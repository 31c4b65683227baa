package kitchen_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gokitchen/kitchen"
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/tensor"
)

// The benchmarks run each operation on the shape of the seed's table
// (bfloat16 [8352, 3840]) and on a small one, for every backend, with the
// bytes each operation must move set so results read as throughput. Compare
// with BenchmarkCopy, the same machine copying the input's bytes.

var benchShapes = [][2]int{{8352, 3840}, {64, 256}}

func benchInput(b *testing.B, dt dtype.DType, rows, k int) *tensor.Tensor {
	b.Helper()
	rng := rand.New(rand.NewPCG(1, 1))
	v := make([]float32, rows*k)
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	return must(tensor.FromFloat32(dt, v, rows, k))
}

func BenchmarkCopy(b *testing.B) {
	for _, s := range benchShapes {
		src := make([]byte, s[0]*s[1]*2)
		dst := make([]byte, len(src))
		b.Run(fmt.Sprintf("%dx%d", s[0], s[1]), func(b *testing.B) {
			b.SetBytes(int64(2 * len(src))) // read and written
			for b.Loop() {
				copy(dst, src)
			}
		})
	}
}

func benchOps(b *testing.B, dt dtype.DType) {
	ctx := context.Background()
	for _, s := range benchShapes {
		x := benchInput(b, dt, s[0], s[1])
		q, scale, err := kitchen.QuantizeInt8Rowwise(ctx, x)
		if err != nil {
			b.Fatal(err)
		}
		n := int64(s[0] * s[1])
		size := int64(dt.Size())
		ops := []struct {
			name  string
			bytes int64
			run   func(opt kitchen.Option) error
		}{
			{"quantize_int8_rowwise", n*size + n, func(o kitchen.Option) error {
				_, _, err := kitchen.QuantizeInt8Rowwise(ctx, x, o)
				return err
			}},
			{"quantize_int8_tensorwise", 2*n*size + n, func(o kitchen.Option) error {
				_, _, err := kitchen.QuantizeInt8Tensorwise(ctx, x, o)
				return err
			}},
			{"dequantize_int8_simple", n + 4*n, func(o kitchen.Option) error {
				_, err := kitchen.DequantizeInt8(ctx, q, scale, o)
				return err
			}},
			{"dequantize_int8_simple_dtype", n + n*size, func(o kitchen.Option) error {
				_, err := kitchen.DequantizeInt8To(ctx, q, scale, dt, o)
				return err
			}},
		}
		for _, op := range ops {
			for _, be := range backendsFor("quantize_int8_rowwise") {
				if be == "eager" && n > 1<<20 && testing.Short() {
					continue
				}
				b.Run(fmt.Sprintf("%s/%s/%dx%d/%s", op.name, dt, s[0], s[1], be), func(b *testing.B) {
					b.SetBytes(op.bytes)
					b.ReportAllocs()
					for b.Loop() {
						if err := op.run(kitchen.UsingBackend(be)); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		}
	}
}

func BenchmarkBFloat16(b *testing.B) { benchOps(b, dtype.BFloat16) }
func BenchmarkFloat16(b *testing.B)  { benchOps(b, dtype.Float16) }
func BenchmarkFloat32(b *testing.B)  { benchOps(b, dtype.Float32) }
