package quant

import "math"

// GeluTanh is the tanh approximation of GELU that int8_linear's
// "gelu_tanh" applies: 0.5·v·(1 + tanh(z)) with z = √(2/π)·(v +
// 0.044715·v³), evaluated in float64 as the equal v / (1 + e^(-2z)) (the
// literal form cancels for v below about -3) and rounded once to float32.
// Callers round the result to the input dtype. Every backend uses this
// function, so they agree bit for bit; PyTorch's float32 evaluation may
// differ by an ulp of the input dtype, and by more for strongly negative v,
// where it is inaccurate.
func GeluTanh(v float32) float32 {
	x := float64(v)
	// The conversion rounds the cube term before the addition: without it
	// Go may fuse the last product and the sum into one FMA on arm64,
	// ppc64le and s390x, and the result would differ by architecture.
	c := float64(0.044715 * x * x * x)
	z := math.Sqrt(2/math.Pi) * (x + c)
	return float32(x / (1 + math.Exp(-2*z)))
}

// Silu is v·sigmoid(v) = v / (1 + e^-v), computed in float64 from v and
// rounded once to float32: the gate of int8_linear's "swiglu".
func Silu(v float32) float32 {
	x := float64(v)
	return float32(x / (1 + math.Exp(-x)))
}

// LinearOut is the epilogue of int8_linear for one output element: the
// int32 accumulator acc scaled back by the activation row's scale xs and
// the weight channel's scale ws, each product rounded on its own in
// float32 (no fused multiply-add): float32(float32(acc) · float32(xs·ws)).
func LinearOut(acc int32, xs, ws float32) float32 {
	c := float32(xs * ws)
	return float32(float32(acc) * c)
}
