package op

import (
	"encoding/binary"
	"errors"
	"math"
	"testing"

	"github.com/gokitchen/kitchen/backend"
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/tensor"
)

// TestFirstNotPositive checks the scale check's bit ranges against
// positive on every float16 and bfloat16 pattern and on float32's edges,
// one bad element at a time among good ones.
func TestFirstNotPositive(t *testing.T) {
	check := func(dt dtype.DType, bits uint32) {
		t.Helper()
		b := make([]byte, 3*dt.Size())
		for i := range 3 {
			dtype.Store(b, dt, i, 1)
		}
		if dt.Size() == 2 {
			binary.LittleEndian.PutUint16(b[2:], uint16(bits))
		} else {
			binary.LittleEndian.PutUint32(b[4:], bits)
		}
		x, err := tensor.FromBytes(dt, b, 3)
		if err != nil {
			t.Fatal(err)
		}
		i, v, err := FirstNotPositive(x)
		if err != nil {
			t.Fatal(err)
		}
		want := -1
		if w := dtype.Load(b, dt, 1); !positive(w) {
			want = 1
		}
		if i != want || (i == 1 && math.Float32bits(v) != math.Float32bits(dtype.Load(b, dt, 1))) {
			t.Fatalf("%v %#x: index %d (%v), want %d", dt, bits, i, v, want)
		}
	}
	for h := range uint32(1 << 16) {
		check(dtype.Float16, h)
		check(dtype.BFloat16, h)
	}
	for _, f := range []uint32{0, 1, 0x7fffff, 0x800000, 0x3f800000, 0x7f7fffff, 0x7f800000, 0x7f800001, 0x7fc00000,
		0x80000000, 0x80000001, 0xbf800000, 0xff7fffff, 0xff800000, 0xffffffff} {
		check(dtype.Float32, f)
	}
	q, _ := tensor.FromInt8([]int8{1}, 1)
	if _, _, err := FirstNotPositive(q); !errors.Is(err, backend.ErrDType) {
		t.Errorf("an int8 tensor: %v, want backend.ErrDType", err)
	}
}
