package backendtest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"

	"github.com/gokitchen/kitchen/backend"
	"github.com/gokitchen/kitchen/backend/eager"
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/op"
	"github.com/gokitchen/kitchen/tensor"
)

// TestEveryOpHasCases checks that the suite has cases for every declared
// operation, so that no backend's implementation of one goes untested.
func TestEveryOpHasCases(t *testing.T) {
	declared := map[string]bool{}
	for _, o := range backend.Ops() {
		declared[o.Name()] = true
		if suite[o.Name()] == nil {
			t.Errorf("no conformance cases for %s", o.Name())
		}
	}
	for _, o := range opNames() {
		if !declared[o] {
			t.Errorf("cases for %s, which is not a declared operation", o)
		}
	}
}

// recorder is a testing.TB that records failures instead of reporting
// them, to check that the suite's comparison fails when it should.
type recorder struct {
	testing.TB
	mu   sync.Mutex
	errs []string
}

func (r *recorder) Helper()             {}
func (r *recorder) Logf(string, ...any) {}
func (r *recorder) Errorf(format string, a ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Sprintf(format, a...))
}
func (r *recorder) Fatalf(format string, a ...any) {
	r.Errorf(format, a...)
	panic(r) // stops the check; recovered by agree
}

// agreeOn runs Agree for the named backend under a recorder and returns
// what it reported.
func agreeOn(t *testing.T, reg *backend.Registry, name string, c Call) (declined bool, errs []string) {
	r := &recorder{TB: t}
	func() {
		defer func() {
			if v := recover(); v != nil && v != any(r) {
				panic(v)
			}
		}()
		declined = Agree(r, reg, name, tensor.CPU(), c)
	}()
	return declined, r.errs
}

// brokenBackend implements quantize_int8_rowwise by running eager and then
// breaking the result with spoil; refuse, when set, declines every call.
func brokenBackend(name string, refuse bool, spoil func(a *op.RowwiseArgs, r op.Quantized, err error) (op.Quantized, error)) backend.Backend {
	ref := backend.NewRegistry(nil)
	if err := ref.Register(eager.New()); err != nil {
		panic(err)
	}
	var cs backend.Constraints
	if refuse {
		cs.Devices = []string{"nowhere"}
	}
	return backend.Backend{Name: name, Kind: backend.Host, Caps: []backend.Capability{
		op.QuantizeRowwise.Implement(cs, func(ctx context.Context, a *op.RowwiseArgs) (op.Quantized, error) {
			r, _, err := op.QuantizeRowwise.Run(ctx, ref, a, eager.Name)
			return spoil(a, r, err)
		}),
	}}
}

// TestAgreeFails checks that the comparison catches each way a backend can
// be wrong, and passes a backend that is not.
func TestAgreeFails(t *testing.T) {
	clone := func(x *tensor.Tensor) *tensor.Tensor {
		return must(tensor.FromBytes(x.DType(), append([]byte(nil), must(x.Bytes())...), x.Shape()...))
	}
	backends := []struct {
		name   string
		refuse bool
		want   string  // in the failure
		fails  [2]bool // on a finite x, on an x holding NaN
		spoil  func(a *op.RowwiseArgs, r op.Quantized, err error) (op.Quantized, error)
	}{
		{"faithful", false, "", [2]bool{}, func(_ *op.RowwiseArgs, r op.Quantized, err error) (op.Quantized, error) { return r, err }},
		{"declines", true, "", [2]bool{}, nil},
		{"flips", false, "differs first at element 11", [2]bool{true, false}, func(_ *op.RowwiseArgs, r op.Quantized, err error) (op.Quantized, error) {
			if err == nil {
				r.Q = clone(r.Q)
				must(r.Q.Bytes())[11] ^= 1
			}
			return r, err
		}},
		{"flat scale", false, "output 1 is float32[3], want float32[3 1]", [2]bool{true, false}, func(_ *op.RowwiseArgs, r op.Quantized, err error) (op.Quantized, error) {
			if err == nil {
				r.Scale = must(r.Scale.Reshape(r.Scale.Numel()))
			}
			return r, err
		}},
		{"wrong row", false, "in row 3, want", [2]bool{false, true}, func(_ *op.RowwiseArgs, r op.Quantized, err error) (op.Quantized, error) {
			var ae *backend.ArgError
			if errors.As(err, &ae) {
				return r, backend.NonFinite(ae.Op, ae.Row+1)
			}
			return r, err
		}},
		{"scribbles", false, "input 0 was modified", [2]bool{true, true}, func(a *op.RowwiseArgs, r op.Quantized, err error) (op.Quantized, error) {
			must(a.X.Bytes())[0] ^= 0x80
			return r, err
		}},
	}
	reg := backend.NewRegistry(nil)
	all := []backend.Backend{eager.New()}
	for _, b := range backends {
		all = append(all, brokenBackend(b.name, b.refuse, b.spoil))
	}
	for _, b := range all {
		if err := reg.Register(b); err != nil {
			t.Fatal(err)
		}
	}
	nan := ramp(12)
	nan[9] = float32(math.NaN())
	for _, b := range backends {
		for i, x := range []*tensor.Tensor{floats(dtype.BFloat16, ramp(12), 3, 4), floats(dtype.Float16, nan, 3, 4)} {
			c := rowwiseCall(x, int64(i))
			declined, errs := agreeOn(t, reg, b.name, c)
			failed := strings.Join(errs, "\n")
			switch {
			case declined != b.refuse:
				t.Errorf("%s, %s: declined %v", b.name, c.Name, declined)
			case !b.fails[i] && failed != "":
				t.Errorf("%s, %s: failed: %s", b.name, c.Name, failed)
			case b.fails[i] && failed == "":
				t.Errorf("%s, %s: passed", b.name, c.Name)
			case b.fails[i] && !strings.Contains(failed, b.want):
				t.Errorf("%s, %s: failed with %q, want it to say %q", b.name, c.Name, failed, b.want)
			}
		}
	}
}
