// Package backendtest is kitchen's conformance suite for backends, in the
// spirit of testing/fstest.TestFS: a backend's tests call Run with a
// registry holding the backend and eager, and the suite checks every
// operation the backend implements against the contract
// (docs/CONTRACT.md), in five parts:
//
//   - golden: the PyTorch vectors of testdata/golden (int8.json,
//     convrot.json and linear.json);
//   - agree: the same bytes as eager on random and adversarial inputs, for
//     every float dtype and both rounding modes;
//   - bad: each bad argument is an error that names the operation, the
//     parameter and, for NaN or infinity, the first offending row;
//   - into: caller-owned outputs (kitchen.Into) are written and returned,
//     give what a fresh call gives, and are refused when they do not fit;
//   - paths: what small random inputs miss: inputs the backend splits into
//     parts, a NaN in a late part, scales of every float dtype.
//
// Every call starts from host tensors moved to the device under test;
// eager runs the same call on the host. Outputs are compared whole (count,
// dtype, shape, bytes, and the device they are on), inputs must be unchanged
// after every call, and a call that fails must return no outputs.
//
// A case that the backend's constraints decline is skipped and counted;
// a part fails if the backend declined every case of an operation (or any
// case at all, with AcceptsAll).
//
// Each operation's cases live in the file of its family (quantize.go,
// dequantize.go, convrot.go, linear.go), registered from init under the
// operation's name (see cases in cases.go for how to add one). Run fails
// for an operation that the backend implements and the suite has no cases
// for.
//
// The subtests are named operation/part, e.g.
// TestConformance/quantize_int8_rowwise/paths, for go test -run.
package backendtest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/gokitchen/kitchen/backend"
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/tensor"
)

// Reference is the name of the backend every result is compared with, run
// on host tensors. The registry passed to Run must hold it.
const Reference = "eager"

// Option adjusts Run.
type Option func(*config)

type config struct {
	acceptsAll bool
	random     int
	bound      Bound
	only       []string
}

// A Bound accepts output i of a call of op that differs from the
// reference's (same dtype and shape, other bytes): it returns "" if got is
// within the backend's stated bound of want, or what is wrong.
type Bound func(op string, i int, dt dtype.DType, got, want []byte) string

// WithinBound compares the backend's outputs with the reference's by b
// where they are not byte-identical, for backends that state a numeric
// bound instead of bit-exactness (an accelerator's fused kernels).
func WithinBound(b Bound) Option { return func(c *config) { c.bound = b } }

// AcceptsAll declares that the backend's constraints accept every valid
// call on the device, as the host backends' do: a case it declines then
// fails the test instead of being skipped.
func AcceptsAll() Option { return func(c *config) { c.acceptsAll = true } }

// RandomCases sets how many random cases the agreement part runs per
// operation, float dtype and rounding mode (default 40, or 10 with
// -short).
func RandomCases(n int) Option { return func(c *config) { c.random = n } }

// Only restricts Run to the named operations (for a run that repeats
// another's but for a setting that only they see).
func Only(ops ...string) Option { return func(c *config) { c.only = ops } }

// Run checks the backend called name in reg on tensors placed on dev, for
// every operation it implements. The registry must also hold the
// reference backend, eager.
func Run(t *testing.T, reg *backend.Registry, name string, dev tensor.Device, opts ...Option) {
	t.Helper()
	cfg := config{random: 40}
	if testing.Short() {
		cfg.random = 10
	}
	for _, o := range opts {
		o(&cfg)
	}
	e := &env{reg: reg, name: name, dev: dev, cfg: cfg}
	ops := e.ops(t)
	for _, o := range ops {
		if cfg.only != nil && !slices.Contains(cfg.only, o) {
			continue
		}
		cs := suite[o]
		if cs == nil {
			t.Errorf("%s implements %s, which the suite has no cases for: add them to internal/backendtest", name, o)
			continue
		}
		t.Run(o, func(t *testing.T) {
			t.Run("golden", func(t *testing.T) { e.golden(t, o, cs) })
			t.Run("agree", func(t *testing.T) { e.random(t, o, cs) })
			t.Run("bad", func(t *testing.T) {
				tl := e.tally(o)
				for _, b := range cs.bad(e) {
					e.fails(t, tl, b)
				}
				tl.check(t, "bad")
			})
			t.Run("into", func(t *testing.T) { e.into(t, o, cs) })
			t.Run("paths", func(t *testing.T) {
				// Let the backend run parts in parallel. (The cpu backend
				// sizes its pool once, at first use; its tests see to that.)
				defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(max(2, runtime.GOMAXPROCS(0))))
				tl := e.tally(o)
				cs.paths(t, e, tl)
				tl.check(t, "paths")
			})
		})
	}
}

// ops lists the operations the backend under test implements, after
// checking that it and the reference can run.
func (e *env) ops(t *testing.T) []string {
	t.Helper()
	var ops []string
	found := map[string]bool{}
	for _, b := range e.reg.ListBackends() {
		if b.Name != e.name && b.Name != Reference {
			continue
		}
		found[b.Name] = true
		if !b.Available || b.Disabled {
			t.Fatalf("backend %s cannot run: available %v, disabled %v, %s", b.Name, b.Available, b.Disabled, b.Reason)
		}
		if b.Name == e.name {
			for o := range b.Capabilities {
				ops = append(ops, o)
			}
		}
	}
	for _, n := range []string{e.name, Reference} {
		if !found[n] {
			t.Fatalf("the registry has no backend %s", n)
		}
	}
	if len(ops) == 0 {
		t.Fatalf("backend %s implements no operation", e.name)
	}
	slices.Sort(ops)
	return ops
}

// env is one run of the suite: the backend under test and its device.
type env struct {
	reg  *backend.Registry
	name string
	dev  tensor.Device
	cfg  config
}

// tally counts the cases of one operation that a part ran and declined.
type tally struct {
	op               string
	acceptsAll       bool
	ran, declined    int
	firstDeclination string
}

func (e *env) tally(op string) *tally { return &tally{op: op, acceptsAll: e.cfg.acceptsAll} }

// count records whether a case ran; with AcceptsAll a decline fails t.
func (tl *tally) count(t testing.TB, c Call, declined bool, err error) {
	t.Helper()
	if !declined {
		tl.ran++
		return
	}
	if tl.acceptsAll {
		t.Errorf("%s: declined, but the backend accepts every call: %v", c.Name, err)
	}
	if tl.declined++; tl.firstDeclination == "" {
		tl.firstDeclination = fmt.Sprintf("%s: %v", c.Name, err)
	}
}

// check fails t if every case was declined, and logs the counts.
func (tl *tally) check(t testing.TB, part string) {
	t.Helper()
	switch {
	case tl.ran == 0 && tl.declined == 0 && part == "golden":
		t.Errorf("%s golden: no golden vectors for it (a file in testdata/golden, listed in goldenCases)", tl.op)
		return
	case tl.ran == 0 && tl.declined == 0:
		t.Errorf("%s %s: the suite made no cases", tl.op, part)
		return
	case tl.ran == 0:
		t.Errorf("%s %s: the backend declined every case (%d), e.g. %s", tl.op, part, tl.declined, tl.firstDeclination)
		return
	}
	if tl.declined > 0 {
		t.Logf("%s %s: ran %d cases, declined %d (skipped), e.g. %s", tl.op, part, tl.ran, tl.declined, tl.firstDeclination)
	}
}

// A Call is one call of an operation on host tensors. The suite moves its
// inputs to the device under test, runs it on the backend there and on the
// reference on the host, and compares.
type Call struct {
	// Name describes the call in failures.
	Name string
	// Op is the operation's name.
	Op string
	// In are the tensor arguments, usually on the host (nil for an absent
	// one); the suite moves host inputs to the device under test.
	In []*tensor.Tensor
	// Out, when set, are caller-owned outputs for the call to write into
	// (one per result, nil for a fresh one), on the device under test.
	Out []*tensor.Tensor
	run func(ctx context.Context, r *backend.Registry, name string, in, out []*tensor.Tensor) (backend.Result, string, error)
}

// newCall makes a call of o whose arguments args builds from the inputs in
// (as moved to the device).
func newCall[A backend.Args, R backend.Result](o *backend.Op[A, R], name string, args func(in []*tensor.Tensor) A, in ...*tensor.Tensor) Call {
	return Call{Name: name, Op: o.Name(), In: in, run: func(ctx context.Context, r *backend.Registry, b string, in, out []*tensor.Tensor) (backend.Result, string, error) {
		a := args(in)
		if out != nil {
			if err := o.SetOutputs(a, out); err != nil {
				return nil, "", err
			}
		}
		return o.Run(ctx, r, a, b)
	}}
}

// output is one output tensor of a call, read back to the host.
type output struct {
	DType dtype.DType
	Shape []int
	Bytes []byte
}

func (o output) String() string {
	return fmt.Sprintf("%v%v %x", o.DType, o.Shape, o.Bytes[:min(len(o.Bytes), 24)])
}

// outcome is what a call gave: outputs, or an error; declined when the
// backend's constraints refused it.
type outcome struct {
	out      []output
	err      error
	declined bool
}

// moveInputs copies the host inputs to dev; release frees the copies.
func moveInputs(in []*tensor.Tensor, dev tensor.Device) (moved []*tensor.Tensor, release func(), err error) {
	moved = make([]*tensor.Tensor, len(in))
	release = func() {
		for i, m := range moved {
			if m != nil && m != in[i] {
				m.Release()
			}
		}
	}
	for i, x := range in {
		if x == nil || x.Device() != tensor.CPU() { // absent, or deliberately elsewhere
			moved[i] = x
			continue
		}
		if moved[i], err = x.To(dev); err != nil {
			release()
			return nil, nil, fmt.Errorf("moving input %d (%v) to %v: %w", i, x, dev, err)
		}
	}
	return moved, release, nil
}

// exec runs c on the named backend with its inputs on dev and reads the
// outcome back, checking what every call must do: the named backend ran
// it, its outputs are on dev, a failure returns no outputs, and the inputs
// are unchanged. A case whose inputs dev cannot hold counts as declined.
func (e *env) exec(t testing.TB, c Call, name string, dev tensor.Device) outcome {
	t.Helper()
	var before [][]byte
	for _, x := range c.In {
		var b []byte
		if x != nil && x.Device() == tensor.CPU() {
			b = bytes.Clone(must(x.Bytes()))
		}
		before = append(before, b)
	}
	in, release, err := moveInputs(c.In, dev)
	if err != nil {
		// The device cannot hold an input (an empty tensor, say): the case
		// cannot run there, as if declined.
		return outcome{err: err, declined: true}
	}
	defer release()
	res, ran, err := c.run(context.Background(), e.reg, name, in, c.Out)
	var outs []*tensor.Tensor
	if res != nil {
		outs = res.Outputs()
	}
	if c.Out != nil && err == nil {
		for i, x := range c.Out {
			if x != nil && outs[i] != x {
				t.Errorf("%s on %s: output %d is %p, not the caller's %p", c.Name, name, i, outs[i], x)
			}
		}
	}
	var o outcome
	if err != nil {
		for i, x := range outs {
			if x != nil && !slices.Contains(c.Out, x) {
				t.Errorf("%s on %s: output %d (%v) returned with the error %v", c.Name, name, i, x, err)
				x.Release()
			}
		}
		var refused *backend.NoCapableBackendError
		o.err, o.declined = err, errors.As(err, &refused)
	} else {
		if ran != name {
			t.Errorf("%s: asked for %s, ran on %s", c.Name, name, ran)
		}
		for i, x := range outs {
			if x == nil {
				t.Fatalf("%s on %s: output %d is nil", c.Name, name, i)
			}
			if x.Device() != dev {
				t.Errorf("%s on %s: output %d is on %v, not %v", c.Name, name, i, x.Device(), dev)
			}
			h, err := x.To(tensor.CPU())
			if err != nil {
				t.Fatalf("%s on %s: reading output %d back: %v", c.Name, name, i, err)
			}
			o.out = append(o.out, output{DType: h.DType(), Shape: h.Shape(), Bytes: bytes.Clone(must(h.Bytes()))})
		}
		for _, x := range outs {
			if !slices.Contains(c.Out, x) {
				x.Release()
			}
		}
	}
	for i, x := range in {
		if before[i] == nil {
			continue
		}
		h, err := x.To(tensor.CPU())
		if err != nil {
			t.Fatalf("%s on %s: reading input %d back: %v", c.Name, name, i, err)
		}
		if !bytes.Equal(must(h.Bytes()), before[i]) {
			t.Errorf("%s on %s: input %d was modified", c.Name, name, i)
		}
	}
	return o
}

// Agree runs c on the named backend with its inputs on dev and on the
// reference on the host, and fails t unless both give the same outputs,
// byte for byte and of the same dtypes and shapes, or both fail with the
// same argument error (sentinel, parameter and row). It reports whether the
// backend's constraints declined the call, which is not a failure.
func Agree(t testing.TB, reg *backend.Registry, name string, dev tensor.Device, c Call) (declined bool) {
	t.Helper()
	e := &env{reg: reg, name: name, dev: dev}
	return e.agree(t, c).declined
}

// agree is Agree in a run of the suite. It returns the backend's outcome.
func (e *env) agree(t testing.TB, c Call) outcome {
	t.Helper()
	key, keyed := callKey(c)
	got := e.exec(t, c, e.name, e.dev)
	if got.declined {
		return got
	}
	if e.name == Reference && e.dev == tensor.CPU() {
		return got // the reference itself: nothing to compare with
	}
	calls, _ := references.LoadOrStore(e.reg, new(sync.Map))
	if d, ok := calls.(*sync.Map).Load(key); keyed && ok && got.err == nil && d == digest(got.out) {
		return got // the very outputs the reference gave for this call before
	}
	want := e.exec(t, c, Reference, tensor.CPU())
	if want.declined {
		t.Fatalf("%s: the reference declined: %v", c.Name, want.err)
	}
	if keyed && want.err == nil {
		calls.(*sync.Map).Store(key, digest(want.out))
	}
	if msg := diffOutcomes(got, want, c.Op, e.cfg.bound); msg != "" {
		t.Errorf("%s: %s differs from %s: %s", c.Name, e.name, Reference, msg)
	}
	return got
}

// references holds, per registry, the digest of the reference's outputs
// for each call that agree has run, by callKey: a backend's tests run the
// suite again for each of its variants (the cpu backend's kernel sets),
// whose calls are the same, and under the race detector the reference's
// runs were half the suite's time. An outcome with the same digest is the
// same bytes; any other (an error, outputs within a bound, a difference)
// runs the reference again, for diffOutcomes to judge and describe. Keyed
// by registry too, so that a test whose registry holds another reference
// (the suite's own tests) gets its own.
var references sync.Map // *backend.Registry -> *sync.Map of string -> string

// callKey identifies a call by what its result depends on: its operation
// and name (which the cases write to hold every argument that is not a
// tensor), the dtype, shape and bytes of each input, and the dtype and
// shape of each given output (whose bytes the call overwrites; one that
// is also an input counts as an input), as a SHA-256. It reports false
// for a call with an input off the host.
func callKey(c Call) (string, bool) {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%d\x00", c.Op, c.Name, len(c.In))
	for _, x := range c.In {
		if x != nil && x.Device() != tensor.CPU() {
			return "", false
		}
		if x != nil {
			fmt.Fprintf(h, "%v%v;", x.DType(), x.Shape()) // which fix the length of the bytes
			h.Write(must(x.Bytes()))
		} else {
			h.Write([]byte("nil;"))
		}
	}
	fmt.Fprintf(h, "%d\x00", len(c.Out))
	for _, x := range c.Out {
		if x != nil {
			fmt.Fprintf(h, "%v%v;", x.DType(), x.Shape())
		} else {
			h.Write([]byte("nil;"))
		}
	}
	return string(h.Sum(nil)), true
}

// digest is the SHA-256 of outputs: each one's dtype, shape and bytes.
func digest(out []output) string {
	h := sha256.New()
	fmt.Fprintf(h, "%d\x00", len(out))
	for _, o := range out {
		fmt.Fprintf(h, "%v%v:%d;", o.DType, o.Shape, len(o.Bytes))
		h.Write(o.Bytes)
	}
	return string(h.Sum(nil))
}

// match is agree for a case of a part, counted in tl.
func (e *env) match(t testing.TB, tl *tally, c Call) {
	t.Helper()
	o := e.agree(t, c)
	tl.count(t, c, o.declined, o.err)
}

// diffOutcomes describes how got differs from want, or returns "".
func diffOutcomes(got, want outcome, op string, bound Bound) string {
	switch {
	case got.err != nil && want.err != nil:
		var g, w *backend.ArgError
		if !errors.As(got.err, &g) || !errors.As(want.err, &w) {
			return fmt.Sprintf("error %v, want %v", got.err, want.err)
		}
		if g.Op != w.Op || g.Param != w.Param || g.Row != w.Row || !errors.Is(got.err, w.Err) {
			return fmt.Sprintf("error %v, want %v (op, parameter, row and sentinel must match)", got.err, want.err)
		}
		return ""
	case got.err != nil:
		return fmt.Sprintf("error %v, want outputs", got.err)
	case want.err != nil:
		return fmt.Sprintf("no error, want %v", want.err)
	}
	return diffOutputs(got.out, want.out, op, bound)
}

// diffOutputs describes the first difference between two lists of
// outputs of op (beyond bound, if not nil), or returns "".
func diffOutputs(got, want []output, op string, bound Bound) string {
	if len(got) != len(want) {
		return fmt.Sprintf("%d outputs, want %d", len(got), len(want))
	}
	for i := range got {
		g, w := got[i], want[i]
		switch {
		case g.DType != w.DType || !slices.Equal(g.Shape, w.Shape):
			return fmt.Sprintf("output %d is %v%v, want %v%v", i, g.DType, g.Shape, w.DType, w.Shape)
		case bytes.Equal(g.Bytes, w.Bytes):
		case bound != nil:
			if msg := bound(op, i, w.DType, g.Bytes, w.Bytes); msg != "" {
				return fmt.Sprintf("output %d (%v%v) beyond the bound: %s", i, w.DType, w.Shape, msg)
			}
		default:
			j := firstDiff(g.Bytes, w.Bytes)
			el := j / max(1, w.DType.Size())
			return fmt.Sprintf("output %d (%v%v) differs first at element %d: %x, want %x", i, w.DType, w.Shape, el,
				g.Bytes[j:min(j+8, len(g.Bytes))], w.Bytes[j:min(j+8, len(w.Bytes))])
		}
	}
	return ""
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// badCall is a call that must fail with an argument error.
type badCall struct {
	Call
	param string
	err   error // the sentinel, matched with errors.Is
	row   int   // the row for backend.ErrNonFinite, else -1
}

// fails checks that b fails on the backend under test with its error: an
// *backend.ArgError naming the operation, the parameter and (for NaN or
// infinity) the row, in its message too, and no outputs. (Bad arguments
// fail validation before any backend's constraints are consulted; NaN and
// infinity are found by the kernels, so a backend may decline those.)
func (e *env) fails(t testing.TB, tl *tally, b badCall) {
	t.Helper()
	o := e.exec(t, b.Call, e.name, e.dev)
	tl.count(t, b.Call, o.declined, o.err)
	var ae *backend.ArgError
	switch {
	case o.declined:
	case o.err == nil:
		t.Errorf("%s: no error, want %v on %s", b.Name, b.err, b.param)
	case !errors.As(o.err, &ae) || !errors.Is(o.err, b.err) || ae.Op != b.Op || ae.Param != b.param || ae.Row != b.row:
		t.Errorf("%s: error %q, want an *backend.ArgError of %s on %s wrapping %q, row %d", b.Name, o.err, b.Op, b.param, b.err, b.row)
	default:
		if msg := o.err.Error(); !strings.Contains(msg, b.Op) || !strings.Contains(msg, b.param) ||
			(b.row >= 0 && !strings.Contains(msg, fmt.Sprint("row ", b.row))) {
			t.Errorf("%s: message %q does not name the operation, the parameter and the row", b.Name, msg)
		}
	}
}

// expect checks that c gives the outputs want on the backend under test.
func (e *env) expect(t testing.TB, tl *tally, c Call, want []output) {
	t.Helper()
	o := e.exec(t, c, e.name, e.dev)
	tl.count(t, c, o.declined, o.err)
	switch {
	case o.declined:
	case o.err != nil:
		t.Errorf("%s: %v", c.Name, o.err)
	default:
		if msg := diffOutputs(o.out, want, c.Op, e.cfg.bound); msg != "" {
			t.Errorf("%s: %s", c.Name, msg)
		}
	}
}

// same checks that two calls give the same outputs on the backend under
// test: a relation the contract implies (a scale tensor of any dtype acts
// as its value widened to float32), which holds on the reference too.
func (e *env) same(t testing.TB, tl *tally, a, b Call) {
	t.Helper()
	oa := e.exec(t, a, e.name, e.dev)
	ob := e.exec(t, b, e.name, e.dev)
	tl.count(t, a, oa.declined || ob.declined, errors.Join(oa.err, ob.err))
	if oa.declined || ob.declined {
		return
	}
	if oa.err != nil || ob.err != nil {
		t.Errorf("%s / %s: errors %v, %v", a.Name, b.Name, oa.err, ob.err)
		return
	}
	if msg := diffOutputs(oa.out, ob.out, a.Op, e.cfg.bound); msg != "" {
		t.Errorf("%s gives other outputs than %s: %s", a.Name, b.Name, msg)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
