package kitchen_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/gokitchen/kitchen"
	"github.com/gokitchen/kitchen/backend"
	"github.com/gokitchen/kitchen/dtype"
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
			if err != nil {
				b.Fatal(err)
			}
			if w == nil {
				continue
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
