// Package kitchen provides fast INT8 quantization kernels behind a backend
// registry with constraint-based dispatch: the Go counterpart of
// comfy-kitchen's INT8 operations, to the same contract (the host backends
// bit-exact; accelerators state their bounds).
//
// Importing this package registers the built-in host backends, cpu and
// eager. Accelerator backends are opt-in, like database/sql drivers: a
// program that wants Ascend NPUs adds
//
//	import _ "github.com/gokitchen/kitchen/backend/ascend"
//
// Each operation goes to the first backend, in priority order, whose
// declared constraints accept the call; the choice is checked before
// calling, and a refusal lists every backend's reason. Choose a backend for
// one call with UsingBackend, or for everything under a context with
// WithBackend.
//
// The operations take tensors from the tensor package (aliased here as
// Tensor) and never modify them:
//
//	x, _ := kitchen.FromFloat32(kitchen.BFloat16, weights, 3840, 3840)
//	q, scale, err := kitchen.QuantizeInt8Rowwise(ctx, x)
package kitchen

import (
	"context"
	"fmt"

	"github.com/gokitchen/kitchen/backend"
	_ "github.com/gokitchen/kitchen/backend/cpu"   // the fused host backend
	_ "github.com/gokitchen/kitchen/backend/eager" // the reference backend
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/tensor"
)

// Tensor is a contiguous row-major array on a device.
type Tensor = tensor.Tensor

// DType is a tensor element type.
type DType = dtype.DType

// The element types.
const (
	Float32  = dtype.Float32
	Float16  = dtype.Float16
	BFloat16 = dtype.BFloat16
	Int8     = dtype.Int8
	Int32    = dtype.Int32
	Int64    = dtype.Int64
	Uint8    = dtype.Uint8
)

// FromFloat32 makes a host tensor of dtype dt from v, rounding each value
// to dt (an integer dtype truncates, and refuses a value it cannot hold
// with an error wrapping tensor.ErrRange). With no shape it is 1-D.
func FromFloat32(dt DType, v []float32, shape ...int) (*Tensor, error) {
	return tensor.FromFloat32(dt, v, shape...)
}

// FromBytes makes a host tensor over little-endian bytes without copying.
func FromBytes(dt DType, b []byte, shape ...int) (*Tensor, error) {
	return tensor.FromBytes(dt, b, shape...)
}

// Option adjusts one call. Options are plain values, so passing them costs
// no allocation. An option that the operation does not take is an error
// (backend.ErrOption), never ignored.
type Option struct {
	kind     optionKind
	name     string
	n        int64 // a seed or a group size
	value    float32
	tensor   *Tensor
	registry *backend.Registry
	chosen   *string
	outs     []*Tensor
}

type optionKind uint8

const (
	optBackend optionKind = iota + 1
	optSeed
	optScale
	optScaleTensor
	optRegistry
	optReport
	optGroup
	optBias
	optOutDType
	optConvRot
	optInputAct
	optInto
)

// param is the parameter an option sets, for errors.
func (k optionKind) param() string {
	switch k {
	case optSeed:
		return "stochastic_rounding"
	case optScale, optScaleTensor:
		return "scale"
	case optRegistry:
		return "registry"
	case optGroup, optConvRot:
		return "group_size"
	case optBias:
		return "bias"
	case optOutDType:
		return "out_dtype"
	case optInputAct:
		return "input_act"
	case optBackend, optReport:
		return "backend"
	case optInto:
		return "out"
	}
	return "option"
}

// UsingBackend runs the call on the named backend, or fails saying why it
// cannot; it overrides WithBackend.
func UsingBackend(name string) Option { return Option{kind: optBackend, name: name} }

// WithStochasticRounding rounds stochastically with the given seed (> 0)
// instead of to nearest even. The noise depends only on the seed and each
// element's index, so results are reproducible on every backend.
func WithStochasticRounding(seed int64) Option { return Option{kind: optSeed, n: seed} }

// WithScale gives QuantizeInt8Tensorwise a scale instead of recalculating it.
func WithScale(s float32) Option { return Option{kind: optScale, value: s} }

// WithScaleTensor gives QuantizeInt8Tensorwise a one-element scale tensor
// (any float dtype, on x's device) instead of recalculating it.
func WithScaleTensor(s *Tensor) Option { return Option{kind: optScaleTensor, tensor: s} }

// WithConvRotGroup sets the ConvRot rotation's group size, a power of 4 of
// at least 4 (the rotation operations default to 256; an int8 embedding
// table is not rotated unless this is given).
func WithConvRotGroup(g int) Option { return Option{kind: optGroup, n: int64(g)} }

// WithBias adds a bias [N] (any float dtype) to Int8Linear's output.
func WithBias(b *Tensor) Option { return Option{kind: optBias, tensor: b} }

// WithOutDType sets Int8Linear's output dtype (default bfloat16, as
// ComfyUI's; the zero DType is refused rather than read as the default).
func WithOutDType(dt DType) Option { return Option{kind: optOutDType, n: int64(dt)} }

// WithConvRot makes Int8Linear rotate x by ConvRot in groups of g (a power
// of 4; ComfyUI's files use 256) before quantizing it: for weights that
// were quantized with QuantizeInt8ConvRotWeight and the same group.
func WithConvRot(g int) Option { return Option{kind: optConvRot, n: int64(g)} }

// WithInputAct applies an activation function to Int8Linear's x first:
// "gelu_tanh", or "swiglu" (x's last dimension is [gate | up]). For none,
// leave the option out: "" is refused.
func WithInputAct(name string) Option { return Option{kind: optInputAct, name: name} }

// Into makes the call write its results into tensors the caller owns
// instead of fresh ones, so that loops reuse their buffers: one tensor per
// result, in the order the function returns them (QuantizeInt8Rowwise: q,
// then scale), each of the dtype and shape the result would have, on the
// call's device, sharing no memory with an input or another output; a nil
// entry asks for a fresh tensor. The function returns the given tensors.
// Every operation accepts it. If the call fails, their contents are
// unspecified.
func Into(out ...*Tensor) Option { return Option{kind: optInto, outs: out} }

// WithRegistry dispatches through r instead of backend.Default.
func WithRegistry(r *backend.Registry) Option { return Option{kind: optRegistry, registry: r} }

// ReportBackend stores the name of the backend that ran the call in *name.
func ReportBackend(name *string) Option { return Option{kind: optReport, chosen: name} }

type ctxKey struct{}

// WithBackend returns a context under which calls that do not name a
// backend with UsingBackend run on the named one: a scoped choice that
// needs no global state.
func WithBackend(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, ctxKey{}, name)
}

// settings are a call's options, applied.
type settings struct {
	registry    *backend.Registry
	backend     string
	report      *string
	seed        int64
	scale       *float32
	scaleTensor *Tensor
	value       float32 // backs scale
	group       int     // 0: the operation's default
	bias        *Tensor
	outDType    DType
	act         string
	into        []*Tensor
}

// settle applies opts for the operation named op, which takes the
// operation-specific options in accepts (the backend, registry, report and
// Into options are always accepted).
func settle(ctx context.Context, op string, opts []Option, accepts ...optionKind) (*settings, error) {
	return settleFor(ctx, op, op, opts, accepts...)
}

// settleFor is settle for a call of op through the function named caller,
// which an option it does not take is "not an option of".
func settleFor(ctx context.Context, op, caller string, opts []Option, accepts ...optionKind) (*settings, error) {
	if ctx == nil {
		return nil, &backend.ArgError{Op: op, Param: "ctx", Row: -1, Err: backend.ErrNil, Detail: "nil context"}
	}
	s := &settings{registry: backend.Default}
	if name, ok := ctx.Value(ctxKey{}).(string); ok {
		s.backend = name
	}
	bad := func(o Option, detail string) error {
		return &backend.ArgError{Op: op, Param: o.kind.param(), Row: -1, Err: backend.ErrOption, Detail: detail}
	}
	for _, o := range opts {
		switch o.kind {
		case optBackend, optRegistry, optReport, optInto:
		default:
			accepted := false
			for _, k := range accepts {
				accepted = accepted || k == o.kind
			}
			if !accepted {
				return nil, bad(o, "not an option of "+caller)
			}
		}
		switch o.kind {
		case optBackend:
			s.backend = o.name
		case optRegistry:
			if o.registry == nil {
				return nil, bad(o, "WithRegistry(nil)")
			}
			s.registry = o.registry
		case optReport:
			s.report = o.chosen
		case optInto:
			if len(o.outs) == 0 {
				return nil, bad(o, "Into()")
			}
			s.into = o.outs
		case optSeed:
			if o.n <= 0 {
				return nil, bad(o, "WithStochasticRounding wants a seed > 0")
			}
			s.seed = o.n
		case optScale:
			s.value = o.value
			s.scale = &s.value
		case optGroup, optConvRot:
			s.group = int(o.n) // checked by the operation
			if s.group == 0 || int64(s.group) != o.n {
				return nil, bad(o, fmt.Sprintf("group size %d", o.n))
			}
		case optBias:
			if o.tensor == nil {
				return nil, bad(o, "WithBias(nil)")
			}
			s.bias = o.tensor
		case optOutDType:
			if DType(o.n) == dtype.Invalid {
				// The zero DType would read as the default, bfloat16.
				return nil, bad(o, "WithOutDType of the zero DType")
			}
			s.outDType = DType(o.n) // checked by the operation
		case optInputAct:
			if o.name == "" {
				return nil, bad(o, `WithInputAct(""): leave the option out for none`)
			}
			s.act = o.name
		case optScaleTensor:
			if o.tensor == nil {
				return nil, bad(o, "WithScaleTensor(nil)")
			}
			s.scaleTensor = o.tensor
		default:
			return nil, bad(o, "unknown option")
		}
	}
	return s, nil
}

// run dispatches one call through the settings' registry.
func run[A backend.Args, R backend.Result](ctx context.Context, s *settings, o *backend.Op[A, R], args A) (R, error) {
	if s.into != nil {
		if err := o.SetOutputs(args, s.into); err != nil {
			var zero R
			return zero, err
		}
	}
	res, ran, err := o.Run(ctx, s.registry, args, s.backend)
	if s.report != nil {
		*s.report = ran
	}
	return res, err
}

// ListBackends describes every known backend of the default registry in
// priority order.
func ListBackends() []backend.Info { return backend.Default.ListBackends() }
