// Package tensor defines kitchen's tensors and the Device interface that owns
// their memory.
//
// A Tensor is an N-dimensional, contiguous, row-major array of one dtype on
// one device. Tensors on the host ("cpu") expose their bytes; tensors on an
// accelerator stay there until the caller copies them with To.
package tensor

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/gokitchen/kitchen/dtype"
)

// ErrNotHost is returned when host bytes are asked of a tensor that lives
// on an accelerator; copy it with To(tensor.CPU()) first.
var ErrNotHost = errors.New("tensor is not in host memory")

// ErrShape reports a shape that does not fit the data or the request.
// It is the one shape error of kitchen: operations wrap it too.
var ErrShape = errors.New("bad shape")

// ErrRange reports a value that the tensor's integer dtype cannot hold.
var ErrRange = errors.New("value out of range")

// Tensor is a contiguous row-major array. The zero value is not usable;
// create tensors with the constructors in this package or a Device's Alloc.
type Tensor struct {
	dtype dtype.DType
	shape []int
	dims  [4]int // backs shape up to rank 4, saving an allocation per tensor
	dev   Device
	host  []byte // the data of a host tensor (kept out of mem to avoid boxing it)
	mem   any
	// recycle marks a host tensor whose buffer Release may hand to a later
	// Alloc (see pool.go): one that the host's Alloc made, not a view.
	recycle bool
	// released is set by Release: the tensor must not be used again.
	released bool
}

// New wraps device memory in a Tensor. It is for Device implementations;
// mem is whatever the device uses to find the data: a pointer, since
// Overlaps takes two tensors with equal handles for the same memory (and
// cannot tell for handles that are not comparable). Host tensors are made
// with FromBytes instead. It fails for a nil device, an invalid dtype or a
// bad shape.
func New(dev Device, dt dtype.DType, shape []int, mem any) (*Tensor, error) {
	switch {
	case dev == nil:
		return nil, fmt.Errorf("tensor: new tensor on a nil device")
	case dev == CPU():
		b, _ := mem.([]byte)
		return FromBytes(dt, b, shape...)
	case !dt.Valid():
		return nil, fmt.Errorf("tensor: invalid dtype %v", dt)
	}
	if err := checkShape(shape, dt.Size()); err != nil {
		return nil, err
	}
	t := &Tensor{dtype: dt, dev: dev, mem: mem}
	t.setShape(shape)
	return t, nil
}

func newHost(dt dtype.DType, shape []int, b []byte) *Tensor {
	t := &Tensor{dtype: dt, dev: CPU(), host: b}
	t.setShape(shape)
	return t
}

func (t *Tensor) setShape(shape []int) {
	if len(shape) <= len(t.dims) {
		t.shape = t.dims[:len(shape):len(shape)]
		copy(t.shape, shape)
	} else {
		t.shape = append([]int(nil), shape...)
	}
}

// DType returns the element type.
func (t *Tensor) DType() dtype.DType { return t.dtype }

// Shape returns a copy of the dimensions.
func (t *Tensor) Shape() []int { return append([]int(nil), t.shape...) }

// AppendShape appends the dimensions to dst and returns the result; with a
// stack buffer it reads the shape without allocating.
func (t *Tensor) AppendShape(dst []int) []int { return append(dst, t.shape...) }

// Rank is the number of dimensions; a scalar has rank 0.
func (t *Tensor) Rank() int { return len(t.shape) }

// Dim returns dimension i; negative i counts from the end (-1 is the last).
func (t *Tensor) Dim(i int) int {
	if i < 0 {
		i += len(t.shape)
	}
	return t.shape[i]
}

// Numel is the number of elements (1 for a scalar).
func (t *Tensor) Numel() int { return Numel(t.shape) }

// Nbytes is the size of the data in bytes.
func (t *Tensor) Nbytes() int { return t.Numel() * t.dtype.Size() }

// Device returns the device holding the data.
func (t *Tensor) Device() Device { return t.dev }

// Storage returns the device's handle to the data, for Device
// implementations: for a host tensor, its []byte.
func (t *Tensor) Storage() any {
	if t.dev == CPU() {
		return t.host
	}
	return t.mem
}

// String describes the tensor, e.g. "bfloat16[8352 3840] on cpu".
func (t *Tensor) String() string {
	if t == nil {
		return "<nil tensor>"
	}
	return fmt.Sprintf("%v%v on %v", t.dtype, t.shape, t.dev)
}

// Reshape returns a tensor sharing t's storage with a new shape of the same
// number of elements.
func (t *Tensor) Reshape(shape ...int) (*Tensor, error) {
	if err := checkShape(shape, t.dtype.Size()); err != nil {
		return nil, err
	}
	if Numel(shape) != t.Numel() {
		return nil, fmt.Errorf("tensor: reshape %v to %v: %w: element counts differ", t.shape, shape, ErrShape)
	}
	if t.dev == CPU() {
		return newHost(t.dtype, shape, t.host), nil
	}
	r := &Tensor{dtype: t.dtype, dev: t.dev, mem: t.mem}
	r.setShape(shape)
	return r, nil
}

// Release returns the tensor's memory to its device. Using t, its bytes or
// a view of it (Reshape) afterwards is an error. On the host, a tensor of
// 4 KiB or more that an operation allocated is recycled for a later output (its
// bytes may change at any time after Release); other host tensors are left
// to the garbage collector. Either way the tensor is marked released:
// Bytes fails and operations refuse it. Releasing twice does nothing;
// Release must not race with itself or with other uses of t.
func (t *Tensor) Release() {
	if t != nil && t.dev != nil && !t.released {
		t.dev.Release(t)
		t.released = true
	}
}

// Released reports whether Release was called on t.
func (t *Tensor) Released() bool { return t.released }

// ErrReleased is returned for the bytes of a released tensor.
var ErrReleased = errors.New("tensor was released")

// To copies t to dev and returns the copy; if t is already on dev it returns
// t itself. This is the only way tensors move between host and accelerators.
func (t *Tensor) To(dev Device) (*Tensor, error) {
	if t.dev == dev {
		return t, nil
	}
	host, err := t.Bytes()
	if err != nil {
		h, aerr := CPU().Alloc(t.dtype, t.shape)
		if aerr != nil {
			return nil, aerr
		}
		host = h.host
		if err := t.dev.CopyToHost(host, t); err != nil {
			return nil, err
		}
	}
	if dev == CPU() {
		if t.dev != CPU() {
			return newHost(t.dtype, t.shape, host), nil // already a fresh copy
		}
		return newHost(t.dtype, t.shape, append([]byte(nil), host...)), nil
	}
	out, err := dev.Alloc(t.dtype, t.shape)
	if err != nil {
		return nil, err
	}
	if err := dev.CopyFromHost(out, host); err != nil {
		out.Release()
		return nil, err
	}
	return out, nil
}

// Bytes returns the little-endian bytes of a host tensor without copying.
// Callers must not modify them while the tensor is in use.
func (t *Tensor) Bytes() ([]byte, error) {
	if t.released {
		return nil, fmt.Errorf("tensor: %v: %w", t, ErrReleased)
	}
	if t.dev == CPU() {
		return t.host, nil
	}
	return nil, fmt.Errorf("tensor: %v: %w", t, ErrNotHost)
}

// Float32s returns a host tensor's values widened exactly to float32 (int32
// values beyond 2^24 round).
func (t *Tensor) Float32s() ([]float32, error) {
	b, err := t.Bytes()
	if err != nil {
		return nil, err
	}
	out := make([]float32, t.Numel())
	for i := range out {
		out[i] = dtype.Load(b, t.dtype, i)
	}
	return out, nil
}

// Int8s returns the values of a host int8 tensor.
func (t *Tensor) Int8s() ([]int8, error) {
	if t.dtype != dtype.Int8 {
		return nil, fmt.Errorf("tensor: Int8s of a %v tensor", t.dtype)
	}
	b, err := t.Bytes()
	if err != nil {
		return nil, err
	}
	out := make([]int8, len(b))
	for i, v := range b {
		out[i] = int8(v)
	}
	return out, nil
}

// Int32s returns the values of a host int32 tensor (mm_int8's output).
func (t *Tensor) Int32s() ([]int32, error) {
	if t.dtype != dtype.Int32 {
		return nil, fmt.Errorf("tensor: Int32s of a %v tensor", t.dtype)
	}
	b, err := t.Bytes()
	if err != nil {
		return nil, err
	}
	out := make([]int32, len(b)/4)
	for i := range out {
		out[i] = int32(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out, nil
}

// FromBytes makes a host tensor of dtype dt over b (little-endian) without
// copying. With no shape it is 1-D. The caller must not modify b while the
// tensor is in use.
func FromBytes(dt dtype.DType, b []byte, shape ...int) (*Tensor, error) {
	if !dt.Valid() {
		return nil, fmt.Errorf("tensor: invalid dtype %v", dt)
	}
	if shape == nil {
		if len(b)%dt.Size() != 0 {
			return nil, fmt.Errorf("tensor: %d bytes is not a whole number of %v: %w", len(b), dt, ErrShape)
		}
		shape = []int{len(b) / dt.Size()}
	}
	if err := checkShape(shape, dt.Size()); err != nil {
		return nil, err
	}
	if n := Numel(shape) * dt.Size(); n != len(b) {
		return nil, fmt.Errorf("tensor: %v%v needs %d bytes, got %d: %w", dt, shape, n, len(b), ErrShape)
	}
	return newHost(dt, shape, b), nil
}

// Zeros makes a host tensor of zeros.
func Zeros(dt dtype.DType, shape ...int) (*Tensor, error) {
	if !dt.Valid() {
		return nil, fmt.Errorf("tensor: invalid dtype %v", dt)
	}
	if err := checkShape(shape, dt.Size()); err != nil {
		return nil, err
	}
	return newHost(dt, shape, makeHost(Numel(shape)*dt.Size(), true)), nil
}

// FromFloat32 makes a host tensor of dtype dt holding v, each value rounded
// to dt (nearest, ties to even; integer types truncate toward zero). A
// value an integer dtype cannot hold (NaN, or beyond its range after
// truncation) is an error wrapping ErrRange, not a wrapped number. With no
// shape it is 1-D.
func FromFloat32(dt dtype.DType, v []float32, shape ...int) (*Tensor, error) {
	if shape == nil {
		shape = []int{len(v)}
	}
	if err := checkShape(shape, dt.Size()); err != nil {
		return nil, err
	}
	if Numel(shape) != len(v) {
		return nil, fmt.Errorf("tensor: shape %v holds %d values, got %d: %w", shape, Numel(shape), len(v), ErrShape)
	}
	if lo, hi, ok := dt.IntRange(); ok {
		for i, x := range v {
			if t := math.Trunc(float64(x)); !(t >= lo && t <= hi) {
				return nil, fmt.Errorf("tensor: element %d, %v, as %v: %w [%v, %v]", i, x, dt, ErrRange, lo, hi)
			}
		}
	}
	t, err := Zeros(dt, shape...)
	if err != nil {
		return nil, err
	}
	b := t.host
	for i, x := range v {
		dtype.Store(b, dt, i, x)
	}
	return t, nil
}

// FromInt8 makes a host int8 tensor holding a copy of v. With no shape it
// is 1-D.
func FromInt8(v []int8, shape ...int) (*Tensor, error) {
	b := make([]byte, len(v))
	for i, x := range v {
		b[i] = byte(x)
	}
	return FromBytes(dtype.Int8, b, shape...)
}

// Numel is the number of elements of a shape.
func Numel(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// CheckShape reports, as ErrShape, what every constructor refuses in a
// shape: a negative dimension, or a size in bytes (of dt's elements) that
// overflows an int. Callers that size a buffer from Numel check it first.
func CheckShape(dt dtype.DType, shape ...int) error { return checkShape(shape, dt.Size()) }

// checkShape reports negative dimensions, and shapes whose size in bytes
// (size bytes per element) overflows an int. The error formats a copy, so
// shape does not escape and callers may pass stack memory.
func checkShape(shape []int, size int) error {
	n := max(size, 1)
	for _, d := range shape {
		if d < 0 {
			return fmt.Errorf("tensor: negative dimension in %v: %w", slices.Clone(shape), ErrShape)
		}
		if d > 0 && n > math.MaxInt/d {
			return fmt.Errorf("tensor: shape %v overflows: %w", slices.Clone(shape), ErrShape)
		}
		n *= d
	}
	return nil
}
