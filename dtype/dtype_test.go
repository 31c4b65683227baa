package dtype

import (
	"math"
	"testing"
)

// value16 decodes a 16-bit float with exponent width ebits from first
// principles in float64, independently of the conversion under test.
func value16(h uint16, ebits, mbits uint) float64 {
	bias := 1<<(ebits-1) - 1
	sign := 1.0
	if h>>15 == 1 {
		sign = -1
	}
	exp := int(h>>mbits) & (1<<ebits - 1)
	mant := float64(h & (1<<mbits - 1))
	switch exp {
	case 1<<ebits - 1:
		if mant != 0 {
			return math.NaN()
		}
		return math.Inf(int(sign))
	case 0:
		return sign * math.Ldexp(mant, 1-bias-int(mbits))
	}
	return sign * math.Ldexp(1+mant/float64(uint(1)<<mbits), exp-bias)
}

type format16 struct {
	name         string
	ebits, mbits uint
	from         func(float32) uint16
	to           func(uint16) float32
	inf          uint16
}

var formats = []format16{
	{"float16", 5, 10, Float16FromFloat32, Float16ToFloat32, 0x7c00},
	{"bfloat16", 8, 7, BFloat16FromFloat32, BFloat16ToFloat32, 0x7f80},
}

// TestWidenExhaustive checks every one of the 65,536 bit patterns of each
// format against a float64 decoding, and that narrowing the widened value
// gives the same bits back.
func TestWidenExhaustive(t *testing.T) {
	for _, f := range formats {
		for i := 0; i < 1<<16; i++ {
			h := uint16(i)
			got := f.to(h)
			want := value16(h, f.ebits, f.mbits)
			if math.IsNaN(want) {
				if !math.IsNaN(float64(got)) || !math.IsNaN(float64(f.to(f.from(got)))) {
					t.Fatalf("%s %#04x: NaN not kept: widened %v", f.name, h, got)
				}
				continue
			}
			if float64(got) != want || math.Signbit(float64(got)) != (h>>15 == 1) {
				t.Fatalf("%s %#04x: widened to %v, want %v", f.name, h, got, want)
			}
			if back := f.from(got); back != h {
				t.Fatalf("%s %#04x: round trip gave %#04x", f.name, h, back)
			}
		}
	}
}

// TestNarrowMidpointsExhaustive checks rounding at and around the midpoint of
// every pair of adjacent finite values of each format (both signs): the
// midpoint goes to the even neighbour, the float32 values on either side of
// it to the nearer one. Midpoints of adjacent 16-bit floats are exact in
// float32, so this covers every rounding boundary.
func TestNarrowMidpointsExhaustive(t *testing.T) {
	for _, f := range formats {
		for i := 0; i < int(f.inf); i++ {
			lo := uint16(i)
			hi := lo + 1
			vlo := value16(lo, f.ebits, f.mbits)
			vhi := value16(hi, f.ebits, f.mbits)
			if hi == f.inf {
				// The boundary to infinity is half an ulp past the largest finite value.
				vhi = vlo + (vlo - value16(lo-1, f.ebits, f.mbits))
			}
			mid := (vlo + vhi) / 2
			m32 := float32(mid)
			if float64(m32) != mid {
				t.Fatalf("%s: midpoint %v of %#04x not exact in float32", f.name, mid, lo)
			}
			even := lo
			if lo&1 == 1 {
				even = hi
			}
			below := math.Nextafter32(m32, 0)
			above := math.Nextafter32(m32, float32(math.Inf(1)))
			for _, sign := range []float32{1, -1} {
				s := uint16(0)
				if sign < 0 {
					s = 0x8000
				}
				checks := []struct {
					in   float32
					want uint16
				}{{sign * m32, even | s}, {sign * below, lo | s}, {sign * above, hi | s}}
				for _, c := range checks {
					if got := f.from(c.in); got != c.want {
						t.Fatalf("%s: %v (%#08x) -> %#04x, want %#04x", f.name, c.in, math.Float32bits(c.in), got, c.want)
					}
				}
			}
		}
	}
}

func TestSpecialValues(t *testing.T) {
	inf := float32(math.Inf(1))
	cases := []struct {
		in   float32
		f16  uint16
		bf16 uint16
	}{
		{0, 0, 0},
		{float32(math.Copysign(0, -1)), 0x8000, 0x8000},
		{inf, 0x7c00, 0x7f80},
		{-inf, 0xfc00, 0xff80},
		{65504, 0x7bff, 0x4780},
		{65519.99, 0x7bff, 0x4780},
		{65520, 0x7c00, 0x4780},
		{1e30, 0x7c00, 0x714a},            // 1e30 is 0x7149f2ca in float32: the low half rounds up
		{math.MaxFloat32, 0x7c00, 0x7f80}, // bfloat16 rounds the largest float32 up to infinity
		{0x1p-24, 0x0001, 0x3380},
		{0x1p-25, 0x0000, 0x3300},
		{0x1.000002p-25, 0x0001, 0x3300},
		{0x1p-14, 0x0400, 0x3880},
		{0x1p-149, 0x0000, 0x0000},
	}
	for _, c := range cases {
		if got := Float16FromFloat32(c.in); got != c.f16 {
			t.Errorf("Float16FromFloat32(%v) = %#04x, want %#04x", c.in, got, c.f16)
		}
		if got := BFloat16FromFloat32(c.in); got != c.bf16 {
			t.Errorf("BFloat16FromFloat32(%v) = %#04x, want %#04x", c.in, got, c.bf16)
		}
	}
	nan := float32(math.NaN())
	for _, d := range Floats() {
		if r := d.Round(nan); !math.IsNaN(float64(r)) {
			t.Errorf("%v.Round(NaN) = %v", d, r)
		}
	}
}

func TestRoundAndTiny(t *testing.T) {
	if got := Float16.Round(1e-30); got != 0 {
		t.Errorf("Float16.Round(1e-30) = %v, want 0", got)
	}
	if got := BFloat16.Round(1e-30); got == 0 || math.Abs(float64(got)-1e-30) > 1e-32 {
		t.Errorf("BFloat16.Round(1e-30) = %v", got)
	}
	if got := Float32.Round(0.1); got != 0.1 {
		t.Errorf("Float32.Round(0.1) = %v", got)
	}
	if Float16.TinyNormal() != Float16ToFloat32(0x0400) {
		t.Error("float16 tiny normal")
	}
	if BFloat16.TinyNormal() != BFloat16ToFloat32(0x0080) || Float32.TinyNormal() != math.Float32frombits(0x00800000) {
		t.Error("bfloat16/float32 tiny normal")
	}
}

// TestIntRange: the integer types' ranges, as tensor.FromFloat32 checks
// them (int64's top the largest float64 below 2^63), and none for floats.
func TestIntRange(t *testing.T) {
	for _, c := range []struct {
		dt     DType
		lo, hi float64
	}{
		{Int8, -128, 127},
		{Uint8, 0, 255},
		{Int32, -1 << 31, 1<<31 - 1},
		{Int64, -1 << 63, math.Nextafter(1<<63, 0)},
	} {
		if lo, hi, ok := c.dt.IntRange(); !ok || lo != c.lo || hi != c.hi {
			t.Errorf("%v: [%v, %v] %v, want [%v, %v]", c.dt, lo, hi, ok, c.lo, c.hi)
		}
	}
	for _, dt := range Floats() {
		if _, _, ok := dt.IntRange(); ok {
			t.Errorf("%v has an integer range", dt)
		}
	}
}

func TestParseAndText(t *testing.T) {
	for _, d := range []DType{Float32, Float16, BFloat16, Int8, Int32, Uint8} {
		b, err := d.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var back DType
		if err := back.UnmarshalText(b); err != nil || back != d {
			t.Errorf("%v: text round trip gave %v, %v", d, back, err)
		}
		if !d.Valid() || d.Size() == 0 {
			t.Errorf("%v: Valid %v Size %d", d, d.Valid(), d.Size())
		}
	}
	for s, want := range map[string]DType{"BF16": BFloat16, "fp16": Float16, "F32": Float32, "I8": Int8, " half ": Float16} {
		if got, err := Parse(s); err != nil || got != want {
			t.Errorf("Parse(%q) = %v, %v", s, got, err)
		}
	}
	if _, err := Parse("float8"); err == nil {
		t.Error("Parse(float8) succeeded")
	}
	if _, err := Invalid.MarshalText(); err == nil {
		t.Error("Invalid marshalled")
	}
	if Invalid.Valid() || DType(200).String() != "dtype(200)" {
		t.Error("invalid dtype handling")
	}
}
