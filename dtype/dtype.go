// Package dtype defines the element types kitchen tensors hold and the exact
// conversions between float32 and the two 16-bit float formats.
//
// Conversions to the narrow formats round to nearest, ties to even, keep
// infinities and NaNs, and produce subnormals where the value calls for them,
// so they match what PyTorch and IEEE 754 hardware do.
package dtype

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"
)

// DType is the element type of a tensor.
type DType uint8

// The element types. The zero value is Invalid, so a DType that was never set
// is caught by validation rather than read as float32.
const (
	Invalid DType = iota
	Float32
	Float16
	BFloat16
	Int8
	Int32
	Uint8
	Int64
)

var names = [...]string{
	Invalid:  "invalid",
	Float32:  "float32",
	Float16:  "float16",
	BFloat16: "bfloat16",
	Int8:     "int8",
	Int32:    "int32",
	Uint8:    "uint8",
	Int64:    "int64",
}

var sizes = [...]int{Float32: 4, Float16: 2, BFloat16: 2, Int8: 1, Int32: 4, Uint8: 1, Int64: 8}

// Floats returns the floating-point types in the order they are usually
// shown.
func Floats() []DType { return []DType{Float32, Float16, BFloat16} }

// String returns the PyTorch-style name: "float32", "bfloat16", "int8" and so on.
func (d DType) String() string {
	if int(d) < len(names) {
		return names[d]
	}
	return fmt.Sprintf("dtype(%d)", uint8(d))
}

// Size is the number of bytes one element occupies; 0 for Invalid.
func (d DType) Size() int {
	if int(d) < len(sizes) {
		return sizes[d]
	}
	return 0
}

// Valid reports whether d is one of the defined types.
func (d DType) Valid() bool { return d > Invalid && int(d) < len(names) }

// IsFloat reports whether d is float32, float16 or bfloat16.
func (d DType) IsFloat() bool { return d == Float32 || d == Float16 || d == BFloat16 }

// Parse accepts the PyTorch names ("bfloat16"), their common short forms
// ("bf16", "fp16", "f32") and the safetensors codes ("BF16", "F16", "I8").
func Parse(s string) (DType, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "float32", "fp32", "f32", "float":
		return Float32, nil
	case "float16", "fp16", "f16", "half":
		return Float16, nil
	case "bfloat16", "bf16":
		return BFloat16, nil
	case "int8", "i8":
		return Int8, nil
	case "int32", "i32":
		return Int32, nil
	case "uint8", "u8":
		return Uint8, nil
	case "int64", "i64":
		return Int64, nil
	}
	return Invalid, fmt.Errorf("dtype: unknown type %q (want float32, float16, bfloat16, int8, int32, int64 or uint8)", s)
}

// MarshalText encodes d as its String form.
func (d DType) MarshalText() ([]byte, error) {
	if !d.Valid() {
		return nil, fmt.Errorf("dtype: cannot marshal %v", d)
	}
	return []byte(d.String()), nil
}

// UnmarshalText decodes any form Parse accepts.
func (d *DType) UnmarshalText(b []byte) error {
	v, err := Parse(string(b))
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// Round rounds f to the nearest value representable in d (ties to even) and
// returns it widened back to float32. It is the identity for Float32 and for
// non-float types.
func (d DType) Round(f float32) float32 {
	switch d {
	case Float16:
		return Float16ToFloat32(Float16FromFloat32(f))
	case BFloat16:
		return BFloat16ToFloat32(BFloat16FromFloat32(f))
	}
	return f
}

// IntRange is the range of an integer type, as float64, the type a float32
// widens to exactly: lo and hi are its smallest and largest values, but
// for int64's top, where hi is the largest float64 below 2^63 (no float32
// lies between them). ok is false for the float types and Invalid.
func (d DType) IntRange() (lo, hi float64, ok bool) {
	switch d {
	case Int8:
		return math.MinInt8, math.MaxInt8, true
	case Uint8:
		return 0, math.MaxUint8, true
	case Int32:
		return math.MinInt32, math.MaxInt32, true
	case Int64:
		return math.MinInt64, 1<<63 - 1024, true
	}
	return 0, 0, false
}

// TinyNormal is the smallest positive normal value of a float type:
// 2^-14 for float16 and 2^-126 for bfloat16 and float32. It is 0 for
// non-float types.
func (d DType) TinyNormal() float32 {
	switch d {
	case Float16:
		return 0x1p-14
	case BFloat16, Float32:
		return 0x1p-126
	}
	return 0
}

// Float16FromFloat32 converts f to IEEE 754 binary16 bits, rounding to
// nearest even. Values too large become infinity; NaN stays NaN (quieted).
func Float16FromFloat32(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23) & 0xff
	mant := b & 0x7fffff
	if exp == 0xff {
		if mant == 0 {
			return sign | 0x7c00
		}
		return sign | 0x7e00 | uint16(mant>>13)
	}
	e := exp - 127 + 15 // biased binary16 exponent
	switch {
	case e >= 0x1f:
		return sign | 0x7c00
	case e <= 0:
		// Subnormal result: the unit is 2^-24. Anything below half of it
		// (e < -10) rounds to zero.
		if e < -10 {
			return sign
		}
		m := mant | 0x800000
		shift := uint(14 - e)
		h := m >> shift
		rem := m & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rem > half || (rem == half && h&1 == 1) {
			h++ // may carry into the smallest normal, whose encoding is exactly h
		}
		return sign | uint16(h)
	}
	h := uint32(e)<<10 | mant>>13
	rem := mant & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && h&1 == 1) {
		h++ // a carry out of the mantissa bumps the exponent, up to infinity
	}
	return sign | uint16(h)
}

// Float16ToFloat32 widens IEEE 754 binary16 bits to float32 exactly.
func Float16ToFloat32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp == 0:
		if mant == 0 {
			return math.Float32frombits(sign)
		}
		// Subnormal: shift the leading one up to the implicit bit.
		e := uint32(127 - 15 + 1)
		for mant&0x400 == 0 {
			mant <<= 1
			e--
		}
		return math.Float32frombits(sign | e<<23 | (mant&0x3ff)<<13)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
}

// BFloat16FromFloat32 converts f to bfloat16 bits, rounding to nearest even.
// NaN stays NaN (quieted).
func BFloat16FromFloat32(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// BFloat16ToFloat32 widens bfloat16 bits to float32 exactly.
func BFloat16ToFloat32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// Load widens element i of little-endian data b of type dt exactly to
// float32 (int32 values beyond 2^24 round).
func Load(b []byte, dt DType, i int) float32 {
	switch dt {
	case Float32:
		return math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	case Float16:
		return Float16ToFloat32(binary.LittleEndian.Uint16(b[2*i:]))
	case BFloat16:
		return BFloat16ToFloat32(binary.LittleEndian.Uint16(b[2*i:]))
	case Int8:
		return float32(int8(b[i]))
	case Uint8:
		return float32(b[i])
	case Int32:
		return float32(int32(binary.LittleEndian.Uint32(b[4*i:])))
	case Int64:
		return float32(int64(binary.LittleEndian.Uint64(b[8*i:])))
	}
	panic("dtype: load of " + dt.String())
}

// LoadInt returns element i of little-endian integer data b of type dt
// (int8, uint8, int32 or int64) exactly.
func LoadInt(b []byte, dt DType, i int) int64 {
	switch dt {
	case Int8:
		return int64(int8(b[i]))
	case Uint8:
		return int64(b[i])
	case Int32:
		return int64(int32(binary.LittleEndian.Uint32(b[4*i:])))
	case Int64:
		return int64(binary.LittleEndian.Uint64(b[8*i:]))
	}
	panic("dtype: integer load of " + dt.String())
}

// Store rounds v to dt (nearest, ties to even; integer types truncate
// toward zero) and writes it as element i of little-endian data b. For an
// integer type v must be in range: NaN, or a value that truncates outside
// dt.IntRange, stores whatever Go's conversion gives (300 as int8 is 44 on
// amd64), so callers check first, as tensor.FromFloat32 does.
func Store(b []byte, dt DType, i int, v float32) {
	switch dt {
	case Float32:
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	case Float16:
		binary.LittleEndian.PutUint16(b[2*i:], Float16FromFloat32(v))
	case BFloat16:
		binary.LittleEndian.PutUint16(b[2*i:], BFloat16FromFloat32(v))
	case Int8:
		b[i] = byte(int8(v))
	case Uint8:
		b[i] = byte(v)
	case Int32:
		binary.LittleEndian.PutUint32(b[4*i:], uint32(int32(v)))
	case Int64:
		binary.LittleEndian.PutUint64(b[8*i:], uint64(int64(v)))
	default:
		panic("dtype: store of " + dt.String())
	}
}
