// Package quant holds the scalar arithmetic of the INT8 contract: the
// constants, the rounding of a quantized value to int8 and the
// stochastic-rounding noise (quant.go); the ConvRot rotation in kitchen's
// fixed summation order (rotate.go); and int8_linear's input activations
// and epilogue (linear.go). Every backend uses these definitions, so there
// is one statement of each rule; the scalar functions also serve as the
// reference the vectorised kernels are tested against.
package quant

import "math"

const (
	// QMax is the largest magnitude a quantized value takes: scales are
	// abs-max / QMax.
	QMax = 127
	// MinScale is the floor applied to computed scales, so that an all-zero
	// row gets a usable scale (as float32: 1e-30 rounded to nearest).
	MinScale float32 = 1e-30
)

// RoundHalfEven rounds y to the nearest integer (ties to even) and saturates
// it to the int8 range. y must not be NaN.
func RoundHalfEven(y float32) int8 {
	return Saturate(float32(math.RoundToEven(float64(y))))
}

// Floor rounds y toward minus infinity and saturates it to the int8 range;
// stochastic rounding floors y plus noise.
func Floor(y float32) int8 {
	return Saturate(float32(math.Floor(float64(y))))
}

// Saturate clamps an integral value to [-128, 127] and converts it.
func Saturate(r float32) int8 {
	switch {
	case r >= 127:
		return 127
	case r <= -128:
		return -128
	}
	return int8(r)
}

// Noise is the contract's stochastic-rounding noise u in [0, 1) for the
// element with flat row-major index i under the given seed. It depends on
// nothing else, so results are the same for any threading or backend.
// Callers round it to the input dtype before adding it.
func Noise(seed int64, i uint64) float32 {
	k := i + uint64(seed)
	h := pcg(uint32(k) ^ uint32(k>>32))
	return float32(h>>8) * 0x1p-24
}

// pcg is the PCG-RXS-M-XS 32-bit output permutation used as a hash.
func pcg(x uint32) uint32 {
	state := x*747796405 + 2891336453
	word := ((state >> ((state >> 28) + 4)) ^ state) * 277803737
	return (word >> 22) ^ word
}
