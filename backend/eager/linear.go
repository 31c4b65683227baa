package eager

import (
	"context"

	"github.com/gokitchen/kitchen/backend"
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/op"
	"github.com/gokitchen/kitchen/tensor"
)

// LinearPrimitives are the primitives of mm_int8 and int8_linear, beyond
// Primitives (and RotatePrimitives for ConvRot layers). A device that
// implements them runs eager's linear operations.
type LinearPrimitives interface {
	// Activate applies int8_linear's input activation ("gelu_tanh", or
	// "swiglu" on x = [gate | up], halving the last dimension) with
	// quant.GeluTanh or quant.Silu, rounding each result once to out (and,
	// for swiglu, the gate to out before the product).
	Activate(x *tensor.Tensor, act string, out dtype.DType) (*tensor.Tensor, error)
	// MatMulInt8 returns the exact int32 product of int8 a [M, K] and b,
	// which is [K, N], or [N, K] when transB is set.
	MatMulInt8(a, b *tensor.Tensor, transB bool) (*tensor.Tensor, error)
	// LinearEpilogue scales the int32 acc [M, N] back: quant.LinearOut
	// with the float32 row scales xs (M of them) and the weight scales ws
	// (one, or N of any float dtype), rounded to out, then, if bias is not
	// nil, rOut(out + rOut(bias[n])). wraps says that a sum may have
	// wrapped to -2^31, which must then be read as 2^31 (quant.AccFloat):
	// only a product of K = op.MaxK can; without wraps no sum is -2^31, so
	// a device may skip that check.
	LinearEpilogue(acc, xs, ws, bias *tensor.Tensor, out dtype.DType, wraps bool) (*tensor.Tensor, error)
}

// linearPrimitivesOf returns dev's linear primitives, if it has them.
func linearPrimitivesOf(dev tensor.Device) (LinearPrimitives, bool) {
	if dev == tensor.CPU() {
		return host{}, true
	}
	p, ok := dev.(LinearPrimitives)
	if ok {
		_, ok = dev.(Primitives)
	}
	return p, ok
}

// linearHardware is the device rule of both linear operations.
var linearHardware = backend.HardwareRule{
	Desc: "implements eager.Primitives and eager.LinearPrimitives",
	OK:   func(dev tensor.Device) bool { _, ok := linearPrimitivesOf(dev); return ok },
}

// mmInt8Constraints are mm_int8's: it only multiplies, so it needs no
// more than the linear primitives (it has no ConvRot to rotate for).
var mmInt8Constraints = backend.Constraints{Hardware: []backend.HardwareRule{linearHardware}}

// linear is the constraint of int8_linear. A ConvRot layer also needs the
// rotation primitives, checked as a call rule.
var linear = backend.Constraints{
	Hardware: []backend.HardwareRule{linearHardware},
	Calls: []backend.CallRule{{
		Param: "convrot",
		Desc:  "eager.RotatePrimitives on the device",
		OK: func(a backend.Args) bool {
			la, ok := a.(*op.LinearArgs)
			if !ok || la.Group == 0 {
				return true
			}
			_, ok = rotatePrimitivesOf(la.Device())
			return ok
		},
	}},
}

func mmInt8(ctx context.Context, a *op.MMInt8Args) (op.MMInt8Result, error) {
	lp, _ := linearPrimitivesOf(a.A.Device())
	t, err := lp.MatMulInt8(a.A, a.B, false)
	if err == nil && ctx.Err() != nil {
		// The product is one primitive: a context that ended while it ran
		// is reported after it, with no result.
		t.Release()
		return op.MMInt8Result{}, ctx.Err()
	}
	return op.MMInt8Result{Out: t}, err
}

// int8Linear is the layer step by step: activation, rotation, row-wise
// quantization, the exact int8 product, the float32 epilogue. A context
// that ends stops it between steps (each step is one primitive, which
// runs to its end).
func int8Linear(ctx context.Context, a *op.LinearArgs) (op.Dequantized, error) {
	lp, _ := linearPrimitivesOf(a.X.Device())
	T := a.X.DType()
	var tmp temps
	defer tmp.release()
	x, err := a.X.Reshape(a.X.Numel()/a.X.Dim(-1), a.X.Dim(-1))
	if err != nil {
		return op.Dequantized{}, err
	}
	if a.InputAct != "" {
		if x, err = tmp.keep(lp.Activate(x, a.InputAct, T)); err != nil {
			return op.Dequantized{}, err
		}
	}
	if a.Group > 0 {
		rp, _ := rotatePrimitivesOf(x.Device())
		if x, err = tmp.keep(rp.Rotate(x, a.Group, T)); err != nil {
			return op.Dequantized{}, err
		}
	}
	xq, err := quantize(op.Int8Linear.Name(), "x", true, x, nil, nil, 0)
	if err != nil {
		return op.Dequantized{}, err
	}
	tmp = append(tmp, xq.Q, xq.Scale)
	if err := ctx.Err(); err != nil {
		return op.Dequantized{}, err
	}
	acc, err := tmp.keep(lp.MatMulInt8(xq.Q, a.Weight, true))
	if err != nil {
		return op.Dequantized{}, err
	}
	if err := ctx.Err(); err != nil {
		return op.Dequantized{}, err
	}
	out, err := lp.LinearEpilogue(acc, xq.Scale, a.WeightScale, a.Bias, a.OutDType, xq.Q.Dim(1) == op.MaxK)
	if err != nil {
		return op.Dequantized{}, err
	}
	shaped, err := out.Reshape(a.OutShape()...)
	if err != nil {
		out.Release()
		return op.Dequantized{}, err
	}
	return op.Dequantized{Out: shaped}, nil
}
