package cpu

import (
	"context"
	"os"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/gokitchen/kitchen/backend"
	"github.com/gokitchen/kitchen/backend/eager"
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/internal/backendtest"
	"github.com/gokitchen/kitchen/op"
	"github.com/gokitchen/kitchen/tensor"
)

// TestMain starts at least one worker (parallelFor starts them up to
// GOMAXPROCS-1), so that split calls run on more than one goroutine even
// under go test -cpu 1.
func TestMain(m *testing.M) {
	prev := runtime.GOMAXPROCS(max(2, runtime.GOMAXPROCS(0)))
	parallelFor(context.Background(), nopBody{}, 1, 1)
	runtime.GOMAXPROCS(prev)
	os.Exit(m.Run())
}

type nopBody struct{}

func (nopBody) run(int, int) {}

// newRegistry returns a registry holding eager and cpu only, so the tests
// do not depend on backend.Default.
func newRegistry(t testing.TB) *backend.Registry {
	t.Helper()
	reg := backend.NewRegistry(nil)
	for _, b := range []backend.Backend{eager.New(), New()} {
		if err := reg.Register(b); err != nil {
			t.Fatal(err)
		}
	}
	return reg
}

// TestConformance runs the conformance suite on cpu with each kernel set
// this build and CPU run. cpu accepts every host call, so a declined case
// fails.
func TestConformance(t *testing.T) {
	reg := newRegistry(t)
	forEachProductSet(t, true, func(t *testing.T) {
		backendtest.Run(t, reg, Name, tensor.CPU(), conformanceOptions()...)
	})
}

// conformanceOptions are the suite's options for the kernel set in use: a
// set's VNNI form changes the int8 products alone, so only they run again.
func conformanceOptions() []backendtest.Option {
	opts := []backendtest.Option{backendtest.AcceptsAll()}
	if vnni {
		opts = append(opts, backendtest.Only(op.MMInt8.Name(), op.Int8Linear.Name()))
	}
	return opts
}

// TestConformanceNonTemporal runs the conformance suite with every output
// taken for larger than the last-level cache and small parts, so that the
// operations store non-temporally, part by part, as they do only on inputs
// of tens of megabytes otherwise (a stochastic run after a wrap of the
// noise index once handed a misaligned output to the non-temporal stores).
func TestConformanceNonTemporal(t *testing.T) {
	defer func(llc func() int, g int) { lastLevelCache, grainBytes = llc, g }(lastLevelCache, grainBytes)
	lastLevelCache, grainBytes = func() int { return 0 }, 256
	reg := newRegistry(t)
	forEachProductSet(t, false, func(t *testing.T) {
		backendtest.Run(t, reg, Name, tensor.CPU(), conformanceOptions()...)
	})
}

// partCounter is a context that counts the calls of its Err method.
// parallelFor checks the context before each part it runs, once more per
// goroutine that finds no part left, and once at the end (or, for a call
// it does not split, once in all), so the count bounds the number of parts.
type partCounter struct {
	context.Context
	n atomic.Int64
}

func (c *partCounter) Err() error {
	c.n.Add(1)
	return c.Context.Err()
}

// TestSuiteSplits checks that the inputs of the conformance suite's split
// paths are large enough for cpu to split each operation into parts, so
// that the suite reaches the code that joins them (the noise index and the
// reported row of each part).
func TestSuiteSplits(t *testing.T) {
	shape := backendtest.SplitShape()
	rows := shape[0]
	for _, dt := range dtype.Floats() {
		x := must(tensor.Zeros(dt, shape...))
		q := must(tensor.Zeros(dtype.Int8, shape...))
		// Dequantize scales must be finite and > 0.
		ones := func(n int) []float32 {
			v := make([]float32, n)
			for i := range v {
				v[i] = 1
			}
			return v
		}
		row := must(tensor.FromFloat32(dt, ones(rows), rows, 1))
		full := must(tensor.FromFloat32(dt, ones(tensor.Numel(shape)), shape...))
		kernels := []struct {
			name   string
			passes int
			run    func(ctx context.Context) error
		}{
			{"rowwise", 1, func(ctx context.Context) error {
				_, err := quantizeRowwise(ctx, &op.RowwiseArgs{X: x, Seed: 1})
				return err
			}},
			{"tensorwise", 2, func(ctx context.Context) error {
				_, err := quantizeTensorwise(ctx, &op.TensorwiseArgs{X: x, Seed: 1})
				return err
			}},
			{"dequantize by rows", 1, func(ctx context.Context) error {
				_, err := dequantizeDType(ctx, &op.DequantizeDTypeArgs{DequantizeArgs: op.DequantizeArgs{Q: q, Scale: row}, OutDType: dt})
				return err
			}},
			{"dequantize by elements", 1, func(ctx context.Context) error {
				_, err := dequantizeDType(ctx, &op.DequantizeDTypeArgs{DequantizeArgs: op.DequantizeArgs{Q: q, Scale: full}, OutDType: dt})
				return err
			}},
		}
		for _, k := range kernels {
			ctx := &partCounter{Context: context.Background()}
			if err := k.run(ctx); err != nil {
				t.Fatal(err)
			}
			// A pass of P parts on W goroutines checks the context P+W+1
			// times, and W <= P; unsplit, it checks once. So there were
			// at least (n-passes)/2 parts in all.
			n := int(ctx.n.Load())
			least := (n - k.passes) / 2
			if least < 2*k.passes {
				t.Errorf("%s of %v%v: %d context checks: not split into parts", k.name, dt, shape, n)
			} else {
				t.Logf("%s of %v%v: at least %d parts", k.name, dt, shape, least)
			}
		}
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
