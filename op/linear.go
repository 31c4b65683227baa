package op

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/gokitchen/kitchen/backend"
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/tensor"
)

// The INT8 linear operations: the exact int8 matrix product and the layer
// ComfyUI runs for every int8_tensorwise weight.
var (
	// MMInt8 is mm_int8: the exact int32 product of two int8 matrices.
	MMInt8 = backend.Declare[*MMInt8Args, MMInt8Result]("mm_int8", prepareMMInt8)
	// Int8Linear is int8_linear: activations quantized row-wise (after an
	// optional activation function and ConvRot rotation), multiplied by an
	// int8 weight exactly, scaled back, plus an optional bias.
	Int8Linear = backend.Declare[*LinearArgs, Dequantized]("int8_linear", prepareLinear)
)

// MaxK is the largest inner dimension of the int8 products: 131,072 *
// 128 * 128 = 2^31, so the int32 sum cannot overflow below it.
const MaxK = 131072

// The activation functions int8_linear applies to x first.
const (
	ActGeluTanh = "gelu_tanh"
	ActSwiGLU   = "swiglu"
)

// MMInt8Args are the arguments of mm_int8.
type MMInt8Args struct {
	// A is int8 [M, K]; B is int8 [K, N] on A's device, K <= MaxK.
	A, B *tensor.Tensor
	backend.Into[MMInt8Result]
}

// MMInt8Result is the int32 product [M, N].
type MMInt8Result struct {
	Out *tensor.Tensor
}

// Outputs implements backend.Result.
func (r MMInt8Result) Outputs() []*tensor.Tensor { return []*tensor.Tensor{r.Out} }

// Device implements backend.Args.
func (a *MMInt8Args) Device() tensor.Device { return deviceOf(a.A) }

// Tensor implements backend.Args.
func (a *MMInt8Args) Tensor(param string) *tensor.Tensor {
	switch param {
	case "a":
		return a.A
	case "b":
		return a.B
	}
	return nil
}

// DType implements backend.Args.
func (a *MMInt8Args) DType(param string) (dtype.DType, bool) { return dtypeOf(a.Tensor(param)) }

// Validate implements backend.Args.
func (a *MMInt8Args) Validate() error {
	name := MMInt8.Name()
	for _, p := range []struct {
		name string
		t    *tensor.Tensor
	}{{"a", a.A}, {"b", a.B}} {
		if err := checkTensor(name, p.name, p.t, false, deviceOf(a.A), "a"); err != nil {
			return err
		}
		if p.t.DType() != dtype.Int8 {
			return argError(name, p.name, backend.ErrDType, "got %v, want int8", p.t.DType())
		}
		if p.t.Rank() != 2 {
			return argError(name, p.name, tensor.ErrShape, "shape %v, want a matrix", p.t.Shape())
		}
	}
	if k := a.A.Dim(1); k != a.B.Dim(0) {
		return argError(name, "b", tensor.ErrShape, "shape %v does not follow a %v: want [%d, N]", a.B.Shape(), a.A.Shape(), k)
	}
	if k := a.A.Dim(1); k > MaxK {
		return argError(name, "a", tensor.ErrShape, "K = %d is more than %d, where the int32 sum could overflow", k, MaxK)
	}
	return checkOuts(name, a.A.Device(), a.outs(), a.A, a.B)
}

func (a *MMInt8Args) outs() outList { return oneOut(a.Out.Out, dtype.Int32, lastDim(a.A, a.B.Dim(1))) }

// Result returns the tensor the call writes, int32 [M, N]: Out's, or a
// fresh one on a's device.
func (a *MMInt8Args) Result() (MMInt8Result, error) {
	t, err := allocOne(a.A.Device(), a.outs())
	return MMInt8Result{Out: t}, err
}

// LinearArgs are the arguments of int8_linear.
type LinearArgs struct {
	// X is float32, float16 or bfloat16 [..., K] (or [..., 2K] for swiglu:
	// gate then up).
	X *tensor.Tensor
	// Weight is int8 [N, K].
	Weight *tensor.Tensor
	// WeightScale is float32, float16 or bfloat16 with one element or N
	// ([], [1], [N] or [N, 1]), each finite and > 0.
	WeightScale *tensor.Tensor
	// Bias, if not nil, is [N] of any float dtype.
	Bias *tensor.Tensor
	// OutDType is float32, float16 or bfloat16 (ComfyUI's default is
	// bfloat16).
	OutDType dtype.DType
	// Group > 0 rotates x by ConvRot in groups of Group before quantizing
	// it (the weight must have been quantized with the same rotation).
	Group int
	// InputAct is "", ActGeluTanh or ActSwiGLU.
	InputAct string
	// Packed, if not nil, is a PackedWeight made for Weight (this very
	// tensor): the backend that runs the call may keep its own layout of
	// the weight there and reuse it on later calls; others ignore it.
	Packed *PackedWeight
	backend.Into[Dequantized]
}

// Device implements backend.Args.
func (a *LinearArgs) Device() tensor.Device { return deviceOf(a.X) }

// Tensor implements backend.Args.
func (a *LinearArgs) Tensor(param string) *tensor.Tensor {
	switch param {
	case "x":
		return a.X
	case "weight":
		return a.Weight
	case "weight_scale":
		return a.WeightScale
	case "bias":
		return a.Bias
	}
	return nil
}

// DType implements backend.Args.
func (a *LinearArgs) DType(param string) (dtype.DType, bool) {
	if param == "out_dtype" {
		return a.OutDType, true
	}
	return dtypeOf(a.Tensor(param))
}

// K is the inner dimension: x's last, halved for swiglu.
func (a *LinearArgs) K() int {
	if a.InputAct == ActSwiGLU {
		return a.X.Dim(-1) / 2
	}
	return a.X.Dim(-1)
}

// OutShape is the output's shape, [..., N].
func (a *LinearArgs) OutShape() []int {
	s := a.X.Shape()
	s[len(s)-1] = a.Weight.Dim(0)
	return s
}

// Explain implements backend.Explainer: a call that rotates x says that a
// row found not finite may be one the rotation took out of range (see
// explainRotation).
func (a *LinearArgs) Explain(err error) error {
	if a.Group > 0 {
		return explainRotation(err)
	}
	return err
}

// Validate implements backend.Args. The weight scales are read (copied to
// the host) to check that each is finite and positive.
func (a *LinearArgs) Validate() error {
	name := Int8Linear.Name()
	if err := checkTensor(name, "x", a.X, true, nil, ""); err != nil {
		return err
	}
	dev := a.X.Device()
	if a.X.Rank() == 0 {
		return argError(name, "x", tensor.ErrShape, "got a scalar, want shape [..., K]")
	}
	if err := checkTensor(name, "weight", a.Weight, false, dev, "x"); err != nil {
		return err
	}
	if a.Weight.DType() != dtype.Int8 || a.Weight.Rank() != 2 {
		return argError(name, "weight", backend.ErrDType, "got %v, want an int8 matrix [N, K]", a.Weight)
	}
	if a.Packed != nil {
		if a.Packed.Weight() != a.Weight {
			return argError(name, "weight", ErrPacked, "the packed weight was made for %v, not this %v", a.Packed.Weight(), a.Weight)
		}
		if a.Packed.Released() {
			return argError(name, "weight", ErrReleased, "the packed weight was released")
		}
	}
	switch a.InputAct {
	case "", ActGeluTanh:
	case ActSwiGLU:
		if a.X.Dim(-1)%2 != 0 {
			return argError(name, "x", tensor.ErrShape, "last dimension %d is odd: swiglu wants [gate | up]", a.X.Dim(-1))
		}
	default:
		return argError(name, "input_act", backend.ErrOption, "%q: want %q or %q", a.InputAct, ActGeluTanh, ActSwiGLU)
	}
	n, k := a.Weight.Dim(0), a.Weight.Dim(1)
	if a.K() != k {
		return argError(name, "x", tensor.ErrShape, "K = %d (x %v, input_act %q), but the weight %v has K = %d", a.K(), a.X.Shape(), a.InputAct, a.Weight.Shape(), k)
	}
	if k > MaxK {
		return argError(name, "weight", tensor.ErrShape, "K = %d is more than %d, where the int32 sum could overflow", k, MaxK)
	}
	if err := checkTensor(name, "weight_scale", a.WeightScale, true, dev, "x"); err != nil {
		return err
	}
	if s := a.WeightScale.Shape(); a.WeightScale.Numel() != 1 && !slices.Equal(s, []int{n}) && !slices.Equal(s, []int{n, 1}) {
		return argError(name, "weight_scale", tensor.ErrShape, "shape %v, want one element, [%d] or [%d, 1]", s, n, n)
	}
	if i, v, err := FirstNotPositive(a.WeightScale); err != nil {
		return err
	} else if i >= 0 {
		return argError(name, "weight_scale", backend.ErrScale, "element %d is %v: want finite and > 0", i, v)
	}
	if a.Bias != nil {
		if err := checkTensor(name, "bias", a.Bias, true, dev, "x"); err != nil {
			return err
		}
		if !slices.Equal(a.Bias.Shape(), []int{n}) {
			return argError(name, "bias", tensor.ErrShape, "shape %v, want [%d]", a.Bias.Shape(), n)
		}
	}
	if a.Group != 0 {
		// Named on the weight, whose K the group must divide: x's last
		// dimension is 2K with swiglu, and PrepareInt8Linear's caller
		// gives no x.
		if err := checkGroup(name, "weight", a.Group, k); err != nil {
			return err
		}
	}
	if err := checkOutDType(name, a.OutDType); err != nil {
		return err
	}
	return checkOuts(name, dev, a.outs(), a.X, a.Weight, a.WeightScale, a.Bias)
}

func (a *LinearArgs) outs() outList {
	return oneOut(a.Out.Out, a.OutDType, lastDim(a.X, a.Weight.Dim(0)))
}

// Result returns the tensor the call writes, [..., N] of OutDType: Out's,
// or a fresh one on x's device.
func (a *LinearArgs) Result() (Dequantized, error) {
	t, err := allocOne(a.X.Device(), a.outs())
	return Dequantized{Out: t}, err
}

// FirstNotPositive returns the index and value of the first element of t
// (float32, float16 or bfloat16) that is not a finite number > 0, or -1:
// the rule for every scale, which int8_linear checks on each call and
// convert's readers (inspect, dequantize, eval) check in files: so NaN,
// infinities, zero and negative values are all "not positive" here.
// Finite and > 0 is a range of the bits (the sign clear, from 1 up to the
// largest finite value), so each element of a host tensor costs one
// comparison and nothing is converted (a device tensor is copied to the
// host first). Another dtype is an error matching backend.ErrDType.
func FirstNotPositive(t *tensor.Tensor) (int, float32, error) {
	h, err := t.To(tensor.CPU())
	if err != nil {
		return 0, 0, err
	}
	b, err := h.Bytes()
	if err != nil {
		return 0, 0, err
	}
	dt := h.DType()
	i := -1
	switch dt {
	case dtype.Float32:
		i = firstOutside32(b, 0x7f7fffff)
	case dtype.Float16:
		i = firstOutside16(b, 0x7bff)
	case dtype.BFloat16:
		i = firstOutside16(b, 0x7f7f)
	default:
		return 0, 0, fmt.Errorf("op: FirstNotPositive of a %v tensor: %w: want float32, float16 or bfloat16", dt, backend.ErrDType)
	}
	if i < 0 {
		return -1, 0, nil
	}
	return i, dtype.Load(b, dt, i), nil
}

// firstOutside32 returns the index of the first little-endian uint32 of b
// outside [1, top], or -1.
func firstOutside32(b []byte, top uint32) int {
	for i := 0; 4*i+4 <= len(b); i++ {
		if binary.LittleEndian.Uint32(b[4*i:])-1 >= top {
			return i
		}
	}
	return -1
}

// firstOutside16 returns the index of the first little-endian uint16 of b
// outside [1, top], or -1.
func firstOutside16(b []byte, top uint32) int {
	for i := 0; 2*i+2 <= len(b); i++ {
		if uint32(binary.LittleEndian.Uint16(b[2*i:]))-1 >= top {
			return i
		}
	}
	return -1
}

// gemmShape reads a matrix-product workload's spec: M, K, N.
func gemmShape(spec *backend.Spec) (m, k, n int, err error) {
	if len(spec.Shape) != 3 || spec.Shape[1] > MaxK {
		return 0, 0, 0, fmt.Errorf("%w: shape %v is not M, K, N with K <= %d", backend.ErrNoWorkload, spec.Shape, MaxK)
	}
	return spec.Shape[0], spec.Shape[1], spec.Shape[2], nil
}

// randomTensor makes a host tensor of dt and shape, every int8 value or
// normal floats, from seed, on dev.
func randomTensor(dev tensor.Device, dt dtype.DType, seed uint64, shape ...int) (*tensor.Tensor, error) {
	if err := tensor.CheckShape(dtype.Float32, shape...); err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(seed, 7))
	var t *tensor.Tensor
	var err error
	if dt == dtype.Int8 {
		b := make([]byte, tensor.Numel(shape))
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		t, err = tensor.FromBytes(dt, b, shape...)
	} else {
		v := make([]float32, tensor.Numel(shape))
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		t, err = tensor.FromFloat32(dt, v, shape...)
	}
	if err != nil || dev == nil {
		return t, err
	}
	return t.To(dev)
}

// prepareMMInt8 multiplies random int8 matrices [M, K] and [K, N].
func prepareMMInt8(_ context.Context, _ *backend.Registry, spec *backend.Spec) (*MMInt8Args, backend.Cost, error) {
	m, k, n, err := gemmShape(spec)
	if err != nil {
		return nil, backend.Cost{}, err
	}
	a, err := randomTensor(spec.Device, dtype.Int8, 1, m, k)
	if err != nil {
		return nil, backend.Cost{}, err
	}
	b, err := randomTensor(spec.Device, dtype.Int8, 2, k, n)
	if err != nil {
		return nil, backend.Cost{}, err
	}
	return &MMInt8Args{A: a, B: b}, backend.Cost{Bytes: int64(m*k + k*n + 4*m*n), CopyBytes: int64(k * n), Ops: 2 * int64(m) * int64(n) * int64(k)}, nil
}

// prepareLinear runs normal x [M, K] of the spec's dtype through a random
// int8 layer [N, K] with per-channel scales and a bias, to x's dtype,
// with the spec's ConvRot group and input activation (swiglu: x is [M,
// 2K]), which Validate checks as it checks any call's.
func prepareLinear(_ context.Context, _ *backend.Registry, spec *backend.Spec) (*LinearArgs, backend.Cost, error) {
	m, k, n, err := gemmShape(spec)
	if err != nil {
		return nil, backend.Cost{}, err
	}
	if !spec.DType.IsFloat() {
		return nil, backend.Cost{}, fmt.Errorf("%w: dtype %v is not a float", backend.ErrNoWorkload, spec.DType)
	}
	kx := k
	if spec.InputAct == ActSwiGLU {
		kx = 2 * k
	}
	x, err := randomTensor(spec.Device, spec.DType, 3, m, kx)
	if err != nil {
		return nil, backend.Cost{}, err
	}
	w, err := randomTensor(spec.Device, dtype.Int8, 4, n, k)
	if err != nil {
		return nil, backend.Cost{}, err
	}
	sv := make([]float32, n)
	for i := range sv {
		sv[i] = float32(i%7+1) / 4096
	}
	s, err := tensor.FromFloat32(dtype.Float32, sv, n, 1)
	if err == nil && spec.Device != nil {
		s, err = s.To(spec.Device)
	}
	if err != nil {
		return nil, backend.Cost{}, err
	}
	bias, err := randomTensor(spec.Device, spec.DType, 5, n)
	if err != nil {
		return nil, backend.Cost{}, err
	}
	size := int64(spec.DType.Size())
	return &LinearArgs{X: x, Weight: w, WeightScale: s, Bias: bias, OutDType: spec.DType, Group: spec.Group, InputAct: spec.InputAct},
		backend.Cost{Bytes: int64(m*kx)*size + int64(n*k) + 4*int64(n) + int64(n)*size + int64(m*n)*size,
			CopyBytes: int64(n * k), Ops: 2 * int64(m) * int64(n) * int64(k)}, nil
}
