package quant

import "fmt"

// ValidGroup reports whether g is a ConvRot group size: a power of 4, at
// least 4.
func ValidGroup(g int) bool {
	if g < 4 {
		return false
	}
	for g > 1 {
		if g%4 != 0 {
			return false
		}
		g /= 4
	}
	return true
}

// Rotate multiplies each group of g consecutive values of v by the
// normalized regular Hadamard matrix H_g (the contract's ConvRot
// rotation), in place, in float32. g must be a valid group size dividing
// len(v).
//
// This is kitchen's one summation order, which every backend follows so
// that they agree bit for bit: a radix-4 fast transform whose first stage
// combines 4 consecutive values (the last Kronecker factor of H_g) and each
// later stage 4 values 4 times further apart; each butterfly maps a, b, c,
// d to s-2d, s-2c, s-2b, s-2a with s = ((a+b)+c)+d; and the result is
// multiplied last by 2^-(log4 g), which is exact but for subnormals. Every
// product by 2 is exact, so each output is a float32 sum rounded in that
// order.
func Rotate(v []float32, g int) {
	if !ValidGroup(g) || len(v)%g != 0 {
		panic(fmt.Sprintf("quant: rotate %d values in groups of %d", len(v), g))
	}
	scale := float32(1)
	for stride := 1; stride < g; stride *= 4 {
		scale /= 2
		// Each block of 4*stride values holds stride butterflies, on the
		// values stride apart.
		for base := 0; base < len(v); base += 4 * stride {
			for j := base; j < base+stride; j++ {
				a, b, c, d := v[j], v[j+stride], v[j+2*stride], v[j+3*stride]
				s := a + b + c + d
				v[j] = s - float32(2*d)
				v[j+stride] = s - float32(2*c)
				v[j+2*stride] = s - float32(2*b)
				v[j+3*stride] = s - float32(2*a)
			}
		}
	}
	for i := range v {
		v[i] *= scale
	}
}
