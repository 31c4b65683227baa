package tensor_test

import (
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/tensor"
)

func TestConstructorsAndAccessors(t *testing.T) {
	x, err := tensor.FromFloat32(dtype.BFloat16, []float32{1, 2.5, -3, 0.1, 5, 6}, 2, 3)
	if err != nil {
		t.Fatal(err)
	}
	if x.Rank() != 2 || x.Dim(-1) != 3 || x.Dim(0) != 2 || x.Numel() != 6 || x.Nbytes() != 12 {
		t.Errorf("metadata of %v", x)
	}
	got, _ := x.Float32s()
	want := []float32{1, 2.5, -3, dtype.BFloat16.Round(0.1), 5, 6}
	if !slices.Equal(got, want) {
		t.Errorf("Float32s = %v, want %v", got, want)
	}
	b, _ := x.Bytes()
	if b[6] != 0xcd || b[7] != 0x3d { // bfloat16(0.1) = 0x3dcd, little-endian
		t.Errorf("bytes % x", b)
	}
	y, err := tensor.FromBytes(dtype.BFloat16, b, 3, 2)
	if err != nil || y.String() != "bfloat16[3 2] on cpu" {
		t.Errorf("FromBytes: %v %v", y, err)
	}
	s := x.Shape()
	s[0] = 99 // Shape returns a copy
	if x.Dim(0) != 2 {
		t.Error("Shape exposed the tensor's own slice")
	}
	r, err := x.Reshape(6)
	if err != nil || r.Rank() != 1 {
		t.Errorf("Reshape: %v %v", r, err)
	}
	if _, err := x.Reshape(4); !errors.Is(err, tensor.ErrShape) {
		t.Errorf("Reshape to wrong size: %v", err)
	}
	q, _ := tensor.FromInt8([]int8{-128, 127})
	if v, _ := q.Int8s(); !slices.Equal(v, []int8{-128, 127}) {
		t.Errorf("Int8s = %v", v)
	}
	if _, err := x.Int8s(); err == nil {
		t.Error("Int8s of a bfloat16 tensor")
	}
	i32, _ := tensor.FromBytes(dtype.Int32, []byte{0, 0, 0, 0x80, 0xff, 0xff, 0xff, 0x7f, 0xfe, 0xff, 0xff, 0xff})
	if v, err := i32.Int32s(); err != nil || !slices.Equal(v, []int32{math.MinInt32, math.MaxInt32, -2}) {
		t.Errorf("Int32s = %v, %v", v, err)
	}
	if _, err := q.Int32s(); err == nil {
		t.Error("Int32s of an int8 tensor")
	}
	c, err := x.To(tensor.CPU())
	if err != nil || c != x {
		t.Errorf("To(same device) = %v, %v", c, err)
	}
}

func TestConstructorErrors(t *testing.T) {
	if _, err := tensor.FromBytes(dtype.Float32, make([]byte, 6)); !errors.Is(err, tensor.ErrShape) {
		t.Errorf("6 bytes of float32: %v", err)
	}
	if _, err := tensor.FromBytes(dtype.Float16, make([]byte, 6), 2, 2); !errors.Is(err, tensor.ErrShape) {
		t.Errorf("6 bytes for float16[2 2]: %v", err)
	}
	if _, err := tensor.FromFloat32(dtype.Float32, []float32{1}, -1); !errors.Is(err, tensor.ErrShape) {
		t.Errorf("negative dimension: %v", err)
	}
	if _, err := tensor.FromFloat32(dtype.Float32, []float32{1, 2}, 3); !errors.Is(err, tensor.ErrShape) {
		t.Errorf("length mismatch: %v", err)
	}
	if _, err := tensor.FromFloat32(dtype.Float32, nil, math.MaxInt/2+1, 3); !errors.Is(err, tensor.ErrShape) {
		t.Errorf("overflowing shape: %v", err)
	}
	if _, err := tensor.FromBytes(dtype.Float32, make([]byte, 4), math.MaxInt/2+1, 2); !errors.Is(err, tensor.ErrShape) {
		t.Errorf("shape whose byte size overflows: %v", err)
	}
	if _, err := tensor.Zeros(dtype.Float32, math.MaxInt/4+1); !errors.Is(err, tensor.ErrShape) {
		t.Errorf("Zeros of an overflowing size: %v", err)
	}
	if _, err := tensor.FromBytes(dtype.Invalid, nil); err == nil {
		t.Error("invalid dtype accepted")
	}
}

// TestFromFloat32Range: an integer tensor refuses what it cannot hold
// rather than wrap it (300 as int8 was 44), and truncates fractions.
func TestFromFloat32Range(t *testing.T) {
	for _, c := range []struct {
		dt dtype.DType
		v  float32
	}{
		{dtype.Int8, 300}, {dtype.Int8, -129}, {dtype.Int8, float32(math.NaN())}, {dtype.Uint8, -1}, {dtype.Uint8, 256},
		{dtype.Int32, 1 << 31}, {dtype.Int32, float32(math.Inf(-1))}, {dtype.Int64, 1 << 63},
	} {
		if _, err := tensor.FromFloat32(c.dt, []float32{0, c.v}); !errors.Is(err, tensor.ErrRange) {
			t.Errorf("%v as %v: %v, want %v", c.v, c.dt, err, tensor.ErrRange)
		}
	}
	x, err := tensor.FromFloat32(dtype.Int8, []float32{-128, 127, -128.9, 127.9, 2.5, -0.5})
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := x.Int8s(); !slices.Equal(v, []int8{-128, 127, -128, 127, 2, 0}) {
		t.Errorf("int8 %v", v)
	}
	if _, err := tensor.FromFloat32(dtype.Int32, []float32{-1 << 31, 1<<31 - 128}); err != nil {
		t.Errorf("int32 extremes: %v", err)
	}
}
