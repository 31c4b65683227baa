package backend

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"

	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/tensor"
)

// Args are the typed arguments of one call of an operation. Each operation
// declares its own Args type (see package op), so a kernel receives exactly
// the parameters of its operation, named and typed, rather than a bag of
// optional fields shared by every operation.
type Args interface {
	// Device is the device the call runs on: its main tensor's.
	Device() tensor.Device
	// Tensor returns the tensor parameter of that name, or nil when the
	// operation has no such parameter or the call leaves it out.
	Tensor(param string) *tensor.Tensor
	// DType returns the dtype of the parameter of that name: a tensor's
	// element type, or the value of a dtype parameter such as out_dtype.
	DType(param string) (dtype.DType, bool)
	// Validate checks the arguments against the contract: presence,
	// dtypes, shapes, devices and scalars. It reads no tensor data except
	// single-element scale tensors; kernels report NaN and infinity in x.
	Validate() error
}

// Stochastic is implemented by the Args of operations that can round
// stochastically; StochasticRoundingOff declines calls that ask for it.
type Stochastic interface {
	Stochastic() bool
}

// Explainer is implemented by the Args of an operation that can say more
// about some of its kernels' errors than a kernel can: a rotating
// operation, whose kernels report a row not finite after the rotation,
// which may be a finite row the rotation took out of its dtype's range.
// Op.Run passes every error of a kernel through Explain, so each
// operation says it once, in its own package, whoever calls Run.
type Explainer interface {
	Explain(err error) error
}

// Result is what an operation returns: one or more tensors.
type Result interface {
	// Outputs lists the tensors the call made, so that generic code (the
	// benchmark, the conformance suite) can compare and release them.
	Outputs() []*tensor.Tensor
}

// Into holds the caller-owned outputs of one call. Each operation's Args
// embed it, so that every operation can write into tensors its caller owns
// and reuses; the Args' Validate checks them (package op says how).
type Into[R Result] struct {
	// Out holds the tensors to write, in R's fields; a nil field (the
	// zero value) asks for a fresh tensor.
	Out R
}

// Given returns the caller-owned outputs.
func (i *Into[R]) Given() R { return i.Out }

// SetGiven sets the caller-owned outputs.
func (i *Into[R]) SetGiven(r R) { i.Out = r }

// given is implemented by Args that embed Into[R].
type given[R Result] interface {
	Given() R
	SetGiven(R)
}

// rebuilder is implemented by results that can be rebuilt over other
// tensors, in Outputs' order.
type rebuilder[R Result] interface {
	WithOutputs(ts []*tensor.Tensor) R
}

// Operation is the part of an operation's declaration that does not depend
// on its argument types: what the registry, `kitchen backends` and `kitchen
// bench` need to handle every operation alike.
type Operation interface {
	// Name is comfy-kitchen's name of the operation.
	Name() string
	// Workload prepares a typical call of the operation for benchmarks,
	// with inputs made as spec says. It returns nil, nil when the
	// operation declares none, an error wrapping ErrNoWorkload when the
	// spec's shape or dtype does not fit it, and the call's own argument
	// error when an option the spec sets is invalid (checked as a call
	// checks it, by its arguments' Validate).
	Workload(ctx context.Context, r *Registry, spec *Spec) (*Workload, error)
}

// Spec says what a benchmark workload's inputs are: a shape (a float
// input's, for the quantize and dequantize operations; M, K, N for the
// matrix products), a float dtype and the device that holds them.
type Spec struct {
	Shape  []int
	DType  dtype.DType
	Device tensor.Device // nil: the host
	// The options of the workloads that take them (int8_linear): the
	// ConvRot group (0: none) and the input activation ("": none).
	Group    int
	InputAct string

	once sync.Once
	x    *tensor.Tensor
	err  error
}

// Input returns the spec's float input: deterministic normal values of its
// shape and dtype on its device, made once and shared by the workloads.
func (s *Spec) Input() (*tensor.Tensor, error) {
	s.once.Do(func() {
		if s.err = tensor.CheckShape(dtype.Float32, s.Shape...); s.err != nil {
			return
		}
		rng := rand.New(rand.NewPCG(1, 2))
		v := make([]float32, tensor.Numel(s.Shape))
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		s.x, s.err = tensor.FromFloat32(s.DType, v, s.Shape...)
		if s.err == nil && s.Device != nil {
			s.x, s.err = s.x.To(s.Device)
		}
	})
	return s.x, s.err
}

// Cost is what a workload must do at the least.
type Cost struct {
	// Bytes is what the call must read and write.
	Bytes int64
	// CopyBytes is the size of the copy whose same-run speed is the
	// workload's memory reference (the input, or the weight a matrix
	// product streams).
	CopyBytes int64
	// Ops counts the arithmetic operations of a matrix product (2·M·N·K),
	// 0 for the others.
	Ops int64
}

// Workload is one prepared call of an operation.
type Workload struct {
	Cost
	// Check reports whether the named backend of r accepts the call.
	Check func(ctx context.Context, r *Registry, backend string) error
	// Run calls the operation once on the named backend of r and releases
	// its outputs.
	Run func(ctx context.Context, r *Registry, backend string) error
	// Reuse calls the operation once on the named backend of r and returns
	// run, which calls it again writing into the first call's outputs
	// (caller-owned outputs), and release, which frees them. Run and the
	// run functions share the workload's arguments: call them one at a
	// time.
	Reuse func(ctx context.Context, r *Registry, backend string) (run func() error, release func(), err error)
}

// Op declares an operation whose calls take arguments A and return R. Create
// it with Declare, once, in the package that holds the operation's contract.
type Op[A Args, R Result] struct {
	name    string
	prepare func(ctx context.Context, r *Registry, spec *Spec) (A, Cost, error)
}

// Declare declares the operation of that name. prepare, which may be nil,
// makes a typical call as a benchmark spec says and returns its cost;
// it returns an error wrapping ErrNoWorkload for a spec that does not fit.
// Declaring a name twice panics: it is meant for package-level variables.
func Declare[A Args, R Result](name string, prepare func(ctx context.Context, r *Registry, spec *Spec) (A, Cost, error)) *Op[A, R] {
	o := &Op[A, R]{name: name, prepare: prepare}
	declared.mu.Lock()
	defer declared.mu.Unlock()
	for _, d := range declared.ops {
		if d.Name() == name {
			panic("backend: operation " + name + " declared twice")
		}
	}
	declared.ops = append(declared.ops, o)
	return o
}

var declared struct {
	mu  sync.Mutex
	ops []Operation
}

// Ops returns every declared operation, sorted by name (declaration order
// follows Go's package initialization, which no one should have to read).
func Ops() []Operation {
	declared.mu.Lock()
	ops := slices.Clone(declared.ops)
	declared.mu.Unlock()
	slices.SortFunc(ops, func(a, b Operation) int { return strings.Compare(a.Name(), b.Name()) })
	return ops
}

// Name returns the operation's name.
func (o *Op[A, R]) Name() string { return o.name }

// String returns the operation's name.
func (o *Op[A, R]) String() string { return o.name }

// Kernel runs one call of an operation. The registry has validated the
// arguments against the contract and the backend's constraints before it
// is called.
type Kernel[A Args, R Result] func(ctx context.Context, args A) (R, error)

// Implement makes the capability of running o with kernel k on the calls
// that cs accepts, for a Backend's list.
func (o *Op[A, R]) Implement(cs Constraints, k Kernel[A, R]) Capability {
	return Capability{Op: o.name, Constraints: cs, run: k}
}

// Run validates args, picks the backend (the one named, or else the first
// in r's priority order whose constraints accept the call) and runs the
// call there. It returns the name of the backend that ran it.
func (o *Op[A, R]) Run(ctx context.Context, r *Registry, args A, name string) (R, string, error) {
	var zero R
	if ctx == nil {
		return zero, "", &ArgError{Op: o.name, Param: "ctx", Row: -1, Err: ErrNil, Detail: "nil context"}
	}
	if err := ctx.Err(); err != nil {
		return zero, "", err
	}
	cap, err := r.pick(ctx, o.name, args, name)
	if err != nil {
		return zero, "", err
	}
	k, ok := cap.run.(Kernel[A, R])
	if !ok {
		return zero, "", fmt.Errorf("backend: %s: %s kernel of %s has type %T", cap.backend, o.name, cap.backend, cap.run)
	}
	var mine []*tensor.Tensor // the caller's outputs, if any
	if g, ok := any(args).(given[R]); ok {
		if mine = g.Given().Outputs(); !slices.ContainsFunc(mine, func(t *tensor.Tensor) bool { return t != nil }) {
			mine = nil
		}
	}
	res, err := k(ctx, args)
	if err == nil && mine != nil {
		res, err = o.deliver(ctx, r, cap.backend, res, mine)
	}
	if err != nil {
		for _, t := range res.Outputs() {
			if t != nil && !overlapsAny(t, mine) {
				t.Release() // nothing is returned on error
			}
		}
		if e, ok := any(args).(Explainer); ok {
			err = e.Explain(err)
		}
		return zero, cap.backend, fmt.Errorf("backend %s: %w", cap.backend, err)
	}
	return res, cap.backend, nil
}

// overlapsAny reports whether t shares memory with one of ts.
func overlapsAny(t *tensor.Tensor, ts []*tensor.Tensor) bool {
	return slices.ContainsFunc(ts, func(u *tensor.Tensor) bool { return tensor.Overlaps(t, u) })
}

// deliver makes sure res holds the caller's outputs where mine gives them:
// a kernel that wrote a fresh tensor instead has it copied into the
// caller's and released, so every backend honours caller-owned outputs.
func (o *Op[A, R]) deliver(ctx context.Context, r *Registry, name string, res R, mine []*tensor.Tensor) (R, error) {
	got := res.Outputs()
	var moved []*tensor.Tensor
	for i, t := range mine {
		if t == nil || got[i] == t {
			continue
		}
		if moved == nil {
			moved = slices.Clone(got)
		}
		// A view of the caller's tensor was written in place: it is
		// returned as the caller's own, and not released (on a device
		// that would free the caller's memory).
		if !tensor.Overlaps(got[i], t) {
			if err := tensor.Copy(t, got[i]); err != nil {
				return res, err
			}
			got[i].Release()
		}
		moved[i] = t
	}
	if moved == nil {
		return res, nil
	}
	rb, ok := any(res).(rebuilder[R])
	if !ok {
		return res, fmt.Errorf("backend: %s: result %T cannot take caller-owned outputs", o.name, res)
	}
	r.log().DebugContext(ctx, "kitchen: copied into caller-owned outputs", "op", o.name, "backend", name)
	return rb.WithOutputs(moved), nil
}

// SetOutputs gives args caller-owned outputs: one tensor per result, in
// the order of R's Outputs, nil for one the call should allocate. It fails
// for a list of another length. Validate checks the tensors themselves.
func (o *Op[A, R]) SetOutputs(args A, outs []*tensor.Tensor) error {
	var zero R
	g, ok1 := any(args).(given[R])
	rb, ok2 := any(zero).(rebuilder[R])
	if n := len(zero.Outputs()); !ok1 || !ok2 || len(outs) != n {
		return &ArgError{Op: o.name, Param: "out", Row: -1, Err: ErrOption,
			Detail: fmt.Sprintf("%d output tensors given; %s returns %d", len(outs), o.name, n)}
	}
	g.SetGiven(rb.WithOutputs(outs))
	return nil
}

// Workload implements Operation.
func (o *Op[A, R]) Workload(ctx context.Context, r *Registry, spec *Spec) (*Workload, error) {
	if o.prepare == nil {
		return nil, nil
	}
	args, cost, err := o.prepare(ctx, r, spec)
	if errors.Is(err, ErrNoWorkload) {
		return nil, fmt.Errorf("%s: %w", o.name, err)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: preparing a workload: %w", o.name, err)
	}
	if err := args.Validate(); err != nil {
		return nil, err // an ArgError names the operation
	}
	return &Workload{
		Cost: cost,
		Check: func(ctx context.Context, r *Registry, name string) error {
			_, err := r.pick(ctx, o.name, args, name)
			return err
		},
		Run: func(ctx context.Context, r *Registry, name string) error {
			if g, ok := any(args).(given[R]); ok {
				var zero R
				g.SetGiven(zero) // fresh outputs, whatever Reuse set
			}
			res, _, err := o.Run(ctx, r, args, name)
			if err != nil {
				return err
			}
			for _, t := range res.Outputs() {
				t.Release() // device memory would pile up otherwise
			}
			return nil
		},
		Reuse: func(ctx context.Context, r *Registry, name string) (func() error, func(), error) {
			g, ok := any(args).(given[R])
			if !ok {
				return nil, nil, fmt.Errorf("backend: %s takes no caller-owned outputs", o.name)
			}
			res, _, err := o.Run(ctx, r, args, name)
			if err != nil {
				return nil, nil, err
			}
			run := func() error {
				g.SetGiven(res) // again: Run clears it
				_, _, err := o.Run(ctx, r, args, name)
				return err
			}
			release := func() {
				var zero R
				g.SetGiven(zero)
				for _, t := range res.Outputs() {
					t.Release()
				}
			}
			return run, release, nil
		},
	}, nil
}
