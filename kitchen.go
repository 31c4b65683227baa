// Package kitchen provides fast INT8 quantization kernels behind a backend
// registry with constraint-based dispatch: the Go counterpart of
// comfy-kitchen's INT8 Q/DQ operations, to the same contract (the host
// backends bit-exact; accelerators state their bounds).
//
// Importing this package registers the built-in backends: cpu, eager and,
// where CANN and an NPU are present, ascend. Each operation
// goes to the first backend, in priority order, whose declared constraints
// accept the call; the choice is checked before calling, and a refusal
// lists every backend's reason. Choose a backend for one call with
// UsingBackend, or for everything under a context with WithBackend.
//
// The operations take tensors from the tensor package (aliased here as
// Tensor) and never modify them:
//
//	x, _ := kitchen.FromFloat32(kitchen.BFloat16, weights, 3840, 3840)
//	q, scale, err := kitchen.QuantizeInt8Rowwise(ctx, x)
package kitchen

import (
	"context"
	"sync"

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
	Uint8    = dtype.Uint8
)

// FromFloat32 makes a host tensor of dtype dt from v, rounding each value
// to dt. With no shape it is 1-D.
func FromFloat32(dt DType, v []float32, shape ...int) (*Tensor, error) {
	return tensor.FromFloat32(dt, v, shape...)
}

// FromBytes makes a host tensor over little-endian bytes without copying.
func FromBytes(dt DType, b []byte, shape ...int) (*Tensor, error) {
	return tensor.FromBytes(dt, b, shape...)
}

// Option adjusts one call. Options are plain values, so passing them costs
// no allocation.
type Option struct {
	kind     optionKind
	name     string
	seed     int64
	value    float32
	tensor   *Tensor
	registry *backend.Registry
	chosen   *string
}

type optionKind uint8

const (
	optBackend optionKind = iota + 1
	optSeed
	optScale
	optScaleTensor
	optRegistry
	optReport
)

// UsingBackend runs the call on the named backend, or fails saying why it
// cannot; it overrides WithBackend.
func UsingBackend(name string) Option { return Option{kind: optBackend, name: name} }

// WithStochasticRounding rounds stochastically with the given seed (> 0)
// instead of to nearest even. The noise depends only on the seed and each
// element's index, so results are reproducible on every backend.
func WithStochasticRounding(seed int64) Option { return Option{kind: optSeed, seed: seed} }

// WithScale gives QuantizeInt8Tensorwise a scale instead of recalculating it.
func WithScale(s float32) Option { return Option{kind: optScale, value: s} }

// WithScaleTensor gives QuantizeInt8Tensorwise a one-element scale tensor
// (any float dtype, on x's device) instead of recalculating it.
func WithScaleTensor(s *Tensor) Option { return Option{kind: optScaleTensor, tensor: s} }

// WithRegistry dispatches through r instead of backend.Default.
func WithRegistry(r *backend.Registry) Option { return Option{kind: optRegistry, registry: r} }

// ReportBackend stores the name of the backend that ran the call in *name.
func ReportBackend(name *string) Option { return Option{kind: optReport, chosen: name} }

// WithBackend returns a context under which calls that do not name a
// backend with UsingBackend run on the named one.
func WithBackend(ctx context.Context, name string) context.Context {
	return backend.WithBackend(ctx, name)
}

func dispatch(ctx context.Context, c backend.Call, opts []Option) (backend.Result, error) {
	registry, name, chosen := backend.Default, "", (*string)(nil)
	call := calls.Get().(*backend.Call)
	defer func() { *call = backend.Call{}; calls.Put(call) }()
	*call = c
	for _, o := range opts {
		switch o.kind {
		case optBackend:
			name = o.name
		case optSeed:
			call.Seed = o.seed
		case optScale:
			v := o.value
			call.ScaleValue = &v
		case optScaleTensor:
			if c.Scale != nil {
				return backend.Result{}, &backend.ArgError{Op: c.Op, Param: backend.ParamScale, Row: -1,
					Err: backend.ErrOption, Detail: "WithScaleTensor is for QuantizeInt8Tensorwise; pass the scale as an argument"}
			}
			call.Scale = o.tensor
		case optRegistry:
			registry = o.registry
		case optReport:
			chosen = o.chosen
		}
	}
	res, ran, err := registry.Dispatch(ctx, call, name)
	if chosen != nil {
		*chosen = ran
	}
	return res, err
}

// calls recycles call records, which escape to the kernels, so that an
// operation allocates only its outputs.
var calls = sync.Pool{New: func() any { return new(backend.Call) }}

// QuantizeInt8Rowwise quantizes x of shape [..., K] with one scale per row:
// scale = max(abs-max / 127, 1e-30) as float32 of shape [..., 1], and q, the
// int8 tensor of x's shape. A 1-D x is one row. Accepts WithStochasticRounding.
func QuantizeInt8Rowwise(ctx context.Context, x *Tensor, opts ...Option) (q, scale *Tensor, err error) {
	res, err := dispatch(ctx, backend.Call{Op: backend.QuantizeRowwise, X: x}, opts)
	return res.Q, res.Scale, err
}

// QuantizeInt8Tensorwise quantizes x with one scale for the whole tensor,
// recalculated from its abs-max unless WithScale or WithScaleTensor supplies
// it. The scale is returned as a float32 scalar. Accepts
// WithStochasticRounding.
func QuantizeInt8Tensorwise(ctx context.Context, x *Tensor, opts ...Option) (q, scale *Tensor, err error) {
	res, err := dispatch(ctx, backend.Call{Op: backend.QuantizeTensorwise, X: x}, opts)
	return res.Q, res.Scale, err
}

// DequantizeInt8 returns float32 q * scale, where scale has one element, one
// per row ([..., 1]) or q's shape (dequantize_int8_simple).
func DequantizeInt8(ctx context.Context, q, scale *Tensor, opts ...Option) (*Tensor, error) {
	res, err := dispatch(ctx, backend.Call{Op: backend.Dequantize, Q: q, Scale: scale, OutDType: Float32}, opts)
	return res.Out, err
}

// DequantizeInt8To returns q * scale rounded to out (float32, float16 or
// bfloat16) (dequantize_int8_simple_dtype).
func DequantizeInt8To(ctx context.Context, q, scale *Tensor, out DType, opts ...Option) (*Tensor, error) {
	res, err := dispatch(ctx, backend.Call{Op: backend.DequantizeDType, Q: q, Scale: scale, OutDType: out}, opts)
	return res.Out, err
}

// ListBackends describes every known backend of the default registry in
// priority order.
func ListBackends() []backend.Info { return backend.Default.ListBackends() }
