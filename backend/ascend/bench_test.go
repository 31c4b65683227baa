package ascend_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gokitchen/kitchen"
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/tensor"
)

// BenchmarkNPU is the seed's measurement: bfloat16 [8352, 3840] on the NPU,
// row-wise and tensor-wise quantization on eager and on ascend, 10 warm-up
// calls before the measured ones. It needs hardware:
//
//	KITCHEN_ASCEND_HARDWARE=1 go test -run '^$' -bench NPU -benchtime 30x ./backend/ascend/
//
// Each call includes waiting for the device (every operation synchronizes
// its stream before returning).
func BenchmarkNPU(b *testing.B) {
	if !onHardware() {
		b.Skip("set KITCHEN_ASCEND_HARDWARE=1 on a machine with an Ascend NPU")
	}
	e := newEnv(b)
	rng := rand.New(rand.NewPCG(1, 2))
	v := make([]float32, 8352*3840)
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	host := must(tensor.FromFloat32(dtype.BFloat16, v, 8352, 3840))
	x := must(host.To(e.dev))
	defer x.Release()
	for _, op := range []struct {
		name string
		run  func(kitchen.Option) error
	}{
		{"rowwise", func(o kitchen.Option) error {
			q, s, err := kitchen.QuantizeInt8Rowwise(e.ctx, x, kitchen.WithRegistry(e.reg), o)
			q.Release()
			s.Release()
			return err
		}},
		{"tensorwise", func(o kitchen.Option) error {
			q, s, err := kitchen.QuantizeInt8Tensorwise(e.ctx, x, kitchen.WithRegistry(e.reg), o)
			q.Release()
			s.Release()
			return err
		}},
	} {
		for _, name := range []string{"eager", "ascend"} {
			b.Run(fmt.Sprintf("%s/%s", op.name, name), func(b *testing.B) {
				for range 10 {
					if err := op.run(kitchen.UsingBackend(name)); err != nil {
						b.Fatal(err)
					}
				}
				b.SetBytes(int64(host.Nbytes()))
				b.ResetTimer()
				for range b.N {
					if err := op.run(kitchen.UsingBackend(name)); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
