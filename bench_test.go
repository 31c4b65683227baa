package kitchen_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/gokitchen/kitchen"
	"github.com/gokitchen/kitchen/backend"
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/tensor"
)

// The benchmarks run each operation on the shape of the seed's table
// (bfloat16 [8352, 3840]) and on a small one, for every backend, with the
// bytes each operation must move set so results read as throughput, with
// fresh outputs each call (released after it) and, under "reused", writing
// into the same caller-owned outputs. Compare with BenchmarkCopy, the same
// machine copying the input's bytes.

var benchShapes = [][2]int{{8352, 3840}, {64, 256}}

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

// benchOps runs every declared operation's workload on every available
// backend that accepts it.
func benchOps(b *testing.B, dt dtype.DType) {
	ctx := context.Background()
	for _, s := range benchShapes {
		spec := &backend.Spec{Shape: s[:], DType: dt}
		for _, o := range backend.Ops() {
			w, err := o.Workload(ctx, backend.Default, spec)
			if errors.Is(err, backend.ErrNoWorkload) || err == nil && w == nil {
				continue // a shape the operation does not take, or none declared
			}
			if err != nil {
				b.Fatal(err)
			}
			for _, be := range kitchen.ListBackends() {
				if !be.Available || be.Disabled || w.Check(ctx, backend.Default, be.Name) != nil {
					continue
				}
				if be.Name == "eager" && s[0]*s[1] > 1<<20 && testing.Short() {
					continue
				}
				b.Run(fmt.Sprintf("%s/%s/%dx%d/%s", o.Name(), dt, s[0], s[1], be.Name), func(b *testing.B) {
					b.SetBytes(w.Bytes)
					b.ReportAllocs()
					for b.Loop() {
						if err := w.Run(ctx, backend.Default, be.Name); err != nil {
							b.Fatal(err)
						}
					}
				})
				b.Run(fmt.Sprintf("%s/%s/%dx%d/%s/reused", o.Name(), dt, s[0], s[1], be.Name), func(b *testing.B) {
					run, release, err := w.Reuse(ctx, backend.Default, be.Name)
					if err != nil {
						b.Fatal(err)
					}
					defer release()
					b.SetBytes(w.Bytes)
					b.ReportAllocs()
					for b.Loop() {
						if err := run(); err != nil {
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

// BenchmarkOutputs times row-wise quantization of bfloat16 [8352, 3840]
// with the three ways a caller can treat its outputs: dropping them for the
// garbage collector ("dropped"), releasing them after each call
// ("released", so the next call's come from the host pools) and writing
// into the same caller-owned ones ("into").
func BenchmarkOutputs(b *testing.B) {
	ctx := context.Background()
	v := make([]float32, 8352*3840)
	for i := range v {
		v[i] = float32(i%2047) - 1023
	}
	x, err := kitchen.FromFloat32(kitchen.BFloat16, v, 8352, 3840)
	if err != nil {
		b.Fatal(err)
	}
	run := func(b *testing.B, after func(q, s *kitchen.Tensor), opts ...kitchen.Option) {
		b.SetBytes(int64(8352 * 3840 * 3)) // read 2 bytes, write 1, per value
		for b.Loop() {
			q, s, err := kitchen.QuantizeInt8Rowwise(ctx, x, opts...)
			if err != nil {
				b.Fatal(err)
			}
			after(q, s)
		}
	}
	b.Run("dropped", func(b *testing.B) { run(b, func(q, s *kitchen.Tensor) {}) })
	b.Run("released", func(b *testing.B) {
		run(b, func(q, s *kitchen.Tensor) { q.Release(); s.Release() })
	})
	b.Run("into", func(b *testing.B) {
		q, s, err := kitchen.QuantizeInt8Rowwise(ctx, x)
		if err != nil {
			b.Fatal(err)
		}
		run(b, func(*kitchen.Tensor, *kitchen.Tensor) {}, kitchen.Into(q, s))
	})
}

// TestWorkloadShapeOverflow: a workload's spec whose size overflows is
// refused with tensor.ErrShape (or as no workload of that operation), not
// a panic making its buffers.
func TestWorkloadShapeOverflow(t *testing.T) {
	for _, shape := range [][]int{{1 << 62, 4}, {1<<63 - 1, 256}, {1 << 62, 64, 8}, {8, 8, 1 << 62}} {
		spec := &backend.Spec{Shape: shape, DType: dtype.BFloat16}
		for _, o := range backend.Ops() {
			w, err := o.Workload(context.Background(), backend.Default, spec)
			if w != nil || !errors.Is(err, tensor.ErrShape) && !errors.Is(err, backend.ErrNoWorkload) && err != nil {
				t.Errorf("%s of %v: %v, %v", o.Name(), shape, w, err)
			}
		}
	}
}
