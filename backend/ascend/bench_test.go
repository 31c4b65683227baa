package ascend_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/gokitchen/kitchen"
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/internal/bench"
	"github.com/gokitchen/kitchen/tensor"
)

// BenchmarkNPU is the seed's measurement: bfloat16 [8352, 3840] on the NPU,
// row-wise and tensor-wise quantization on eager and on ascend, 10 warm-up
// calls before the measured ones. It needs hardware:
//
//	KITCHEN_ASCEND_HARDWARE=1 go test -run '^$' -bench 'NPU$' -benchtime 30x ./backend/ascend/
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

// BenchmarkNPULinear is int8_linear on the NPU, ascend only (eager declines
// the linear operations there), at the first shape: bfloat16 x
// [4096, 3072] by an int8 weight [3072, 3072] to bfloat16, with one weight
// scale (the operator's epilogue, exact), one per channel (its epilogue,
// within one ulp) and one per channel with a bias (int32 sums and the
// epilogue by element-wise operators). It needs hardware:
//
//	KITCHEN_ASCEND_HARDWARE=1 go test -run '^$' -bench NPULinear -benchtime 30x ./backend/ascend/
func BenchmarkNPULinear(b *testing.B) {
	if !onHardware() {
		b.Skip("set KITCHEN_ASCEND_HARDWARE=1 on a machine with an Ascend NPU")
	}
	e := newEnv(b)
	const m, k, n = 4096, 3072, 3072
	rng := rand.New(rand.NewPCG(1, 2))
	xv := make([]float32, m*k)
	for i := range xv {
		xv[i] = float32(rng.NormFloat64())
	}
	wv := make([]int8, n*k)
	for i := range wv {
		wv[i] = int8(rng.IntN(256) - 128)
	}
	sv := make([]float32, n)
	for i := range sv {
		sv[i] = 1e-3 * float32(1+i%7)
	}
	up := func(t *tensor.Tensor) *tensor.Tensor {
		d := must(t.To(e.dev))
		b.Cleanup(d.Release)
		return d
	}
	x := up(must(tensor.FromFloat32(dtype.BFloat16, xv, m, k)))
	w := up(must(tensor.FromInt8(wv, n, k)))
	one := up(must(tensor.FromFloat32(dtype.Float32, sv[:1])))
	perChannel := up(must(tensor.FromFloat32(dtype.Float32, sv, n)))
	bias := up(must(tensor.FromFloat32(dtype.BFloat16, sv, n)))
	for _, c := range []struct {
		name string
		ws   *tensor.Tensor
		opts []kitchen.Option
	}{
		{"one-scale", one, nil},
		{"per-channel", perChannel, nil},
		{"per-channel-bias", perChannel, []kitchen.Option{kitchen.WithBias(bias)}},
	} {
		b.Run(c.name, func(b *testing.B) {
			run := func() {
				y, err := kitchen.Int8Linear(e.ctx, x, w, c.ws, e.opts(append(c.opts, kitchen.UsingBackend("ascend"))...)...)
				if err != nil {
					b.Fatal(err)
				}
				y.Release()
			}
			for range 10 {
				run()
			}
			b.ResetTimer()
			for range b.N {
				run()
			}
			b.ReportMetric(2*m*k*n*float64(b.N)/b.Elapsed().Seconds()/1e9, "GOPS")
		})
	}
}

// TestBenchDeclined: a bench of NPU tensors on a backend that declines
// them times nothing, and says so, a line a backend and reason naming its
// operations, as the text output does, rather than print an empty table.
func TestBenchDeclined(t *testing.T) {
	e := newEnv(t)
	_, err := bench.Run(context.Background(), bench.Config{Shape: []int{4, 8}, DType: dtype.BFloat16, Runs: 1, Device: e.dev, Backends: []string{"cpu"},
		Ops: []string{"quantize_int8_rowwise", "quantize_int8_tensorwise"}})
	if err == nil || !strings.Contains(err.Error(), "no backend ran") ||
		!strings.Contains(err.Error(), "\n  declined by cpu, not timed: quantize_int8_rowwise, quantize_int8_tensorwise (device: ") {
		t.Errorf("got %v, want the operations cpu declined, named on one line", err)
	}
}
