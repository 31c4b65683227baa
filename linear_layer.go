package kitchen

import (
	"context"

	"github.com/gokitchen/kitchen/backend"
	"github.com/gokitchen/kitchen/op"
	"github.com/gokitchen/kitchen/tensor"
)

// Int8Layer is an int8_linear layer prepared for many calls: its weight,
// weight scale, bias and options fixed, and the weight kept in the layout
// of the backend that runs it, made once (the cpu backend's: panels of 32
// output channels with AVX-512, else 16, holding int8 pairs of k, or quads
// of k with VNNI; about the weight's size again, N and K rounded up to
// whole panels and pairs or quads), so that no call packs it. Forward
// gives the same bytes as Int8Linear with the same arguments; a backend
// that did not make the layout (another device, UsingBackend) reads the
// plain weight.
//
// Lifetime: the layer holds weight, weightScale and bias as given and
// reads them again on calls a backend runs without its layout, so their
// contents must not change while the layer is in use (kitchen's
// operations never modify their inputs; only writing to the bytes a host
// tensor was made from, as FromBytes allows, can). Release frees the
// layout; Forward then fails with an error wrapping op.ErrReleased. An
// Int8Layer is safe for concurrent use.
type Int8Layer struct {
	weight, scale, bias *Tensor
	outDType            DType
	group               int
	act                 string
	registry            *backend.Registry
	backend             string
	packed              *op.PackedWeight
}

// PrepareInt8Linear prepares weight (int8 [N, K]) and weightScale (one
// element or N) for repeated Int8Linear calls. It accepts Int8Linear's
// options (WithBias, WithOutDType, WithConvRot, WithInputAct), which then
// apply to every call, and the backend options (UsingBackend,
// WithRegistry), which become the layer's defaults. It checks the layer as
// a call would, with the same errors, by running it once on a row of
// zeros, which also has the backend that runs it make its layout.
func PrepareInt8Linear(ctx context.Context, weight, weightScale *Tensor, opts ...Option) (*Int8Layer, error) {
	s, err := settle(ctx, op.Int8Linear.Name(), opts, optBias, optOutDType, optConvRot, optInputAct)
	if err != nil {
		return nil, err
	}
	if s.into != nil {
		// Outputs belong to calls: Prepare's own call is a row of zeros.
		return nil, &backend.ArgError{Op: op.Int8Linear.Name(), Param: optInto.param(), Row: -1, Err: backend.ErrOption,
			Detail: "Into is an option of Forward, not of PrepareInt8Linear"}
	}
	l := &Int8Layer{weight: weight, scale: weightScale, bias: s.bias, outDType: s.outDType, group: s.group, act: s.act,
		registry: s.registry, backend: s.backend}
	if l.outDType == 0 {
		l.outDType = BFloat16
	}
	if weight != nil {
		l.packed = op.NewPackedWeight(weight)
	}
	// x: one row of zeros of K (2K for swiglu) on the weight's device; a
	// weight that cannot give one is left for validation to name.
	x, err := tensor.Zeros(BFloat16, 1)
	if weight != nil && weight.Rank() == 2 && weight.Device() != nil {
		kx := weight.Dim(1)
		if l.act == op.ActSwiGLU {
			kx *= 2
		}
		if x, err = tensor.Zeros(BFloat16, 1, kx); err == nil {
			x, err = x.To(weight.Device())
		}
	}
	if err != nil {
		return nil, err
	}
	out, err := run(ctx, s, op.Int8Linear, l.args(x))
	x.Release() // ours, on the host or copied to the weight's device
	if err != nil {
		return nil, err
	}
	out.Out.Release()
	return l, nil
}

// args are the layer's int8_linear arguments for x.
func (l *Int8Layer) args(x *Tensor) *op.LinearArgs {
	return &op.LinearArgs{X: x, Weight: l.weight, WeightScale: l.scale, Bias: l.bias, OutDType: l.outDType,
		Group: l.group, InputAct: l.act, Packed: l.packed}
}

// Forward runs the layer on x [..., K] (float32, float16 or bfloat16;
// [..., 2K] for swiglu), as Int8Linear does: [..., N] of the layer's
// output dtype. It accepts Into (the output written into a tensor the
// caller owns) and the backend options (UsingBackend, WithRegistry,
// ReportBackend); without the latter the layer's defaults apply (a
// context's WithBackend before them).
func (l *Int8Layer) Forward(ctx context.Context, x *Tensor, opts ...Option) (*Tensor, error) {
	// The layer's own options are fixed, so an int8_linear option given
	// here is "not an option of" Forward.
	s, err := settleFor(ctx, op.Int8Linear.Name(), "Int8Layer.Forward", opts)
	if err != nil {
		return nil, err
	}
	if l == nil {
		return nil, &backend.ArgError{Op: op.Int8Linear.Name(), Param: "weight", Row: -1, Err: backend.ErrNil,
			Detail: "Forward of a nil *Int8Layer (PrepareInt8Linear failed?)"}
	}
	if s.backend == "" {
		s.backend = l.backend
	}
	registry := false
	for _, o := range opts {
		registry = registry || o.kind == optRegistry
	}
	if !registry {
		s.registry = l.registry
	}
	res, err := run(ctx, s, op.Int8Linear, l.args(x))
	return res.Out, err
}

// Release frees the layer's prepared layout; the layer cannot be used
// afterwards. Its tensors are the caller's and are not released. Release
// of a nil layer does nothing, as Tensor.Release does.
func (l *Int8Layer) Release() {
	if l != nil && l.packed != nil {
		l.packed.Release()
	}
}
