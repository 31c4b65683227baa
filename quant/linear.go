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
// float32 (no fused multiply-add): float32(AccFloat(acc) · float32(xs·ws)).
func LinearOut(acc int32, xs, ws float32) float32 {
	c := float32(xs * ws)
	return float32(AccFloat(acc) * c)
}

// AccFloat is int8_linear's int32 sum as float32, rounded to nearest
// even, with -2^31 read as 2^31: K is at most op.MaxK (131,072), where the
// smallest true sum is -128·127·K, far above -2^31, and the only sum
// that wraps is a row of -128 times a column of -128 at K = 131,072,
// 2^31, which int32 arithmetic (mm_int8's, and PyTorch's _int_mm's)
// wraps to -2^31. Reading it back keeps the layer's output exact rather
// than of the wrong sign.
func AccFloat(acc int32) float32 {
	if acc == math.MinInt32 {
		return 1 << 31
	}
	return float32(acc)
}
