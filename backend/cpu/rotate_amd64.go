//go:build amd64 && !purego

package cpu

import (
	"fmt"

	"github.com/gokitchen/kitchen/quant"
)

// rotate is quant.Rotate, the ConvRot rotation of each group of g values of
// v in place, on the kernel set in use, with the same bits. The kernels do
// quant.Rotate's operations in its order (see _asm/main.go): the first pass
// the stride-1 and stride-4 stages, each later pass one stage of stride 16
// or more, and the last pass the product by 2^-(log4 g) too.
//
// A row that holds a NaN goes to quant.Rotate itself. Which of two NaNs an
// addition returns IEEE 754 leaves open: x86 returns the first operand's,
// and the Go compiler may swap the operands of an addition (it does in
// quant.Rotate under -race), so only the same compiled code is sure to
// give the same NaN payloads. Without NaN in the input, every NaN the
// rotation makes (from infinities of both signs) is the one default NaN,
// and the order of the operands cannot show.
func rotate(v []float32, g int) {
	if impl == implGeneric {
		quant.Rotate(v, g)
		return
	}
	if !quant.ValidGroup(g) || len(v)%g != 0 {
		panic(fmt.Sprintf("cpu: rotate %d values in groups of %d", len(v), g))
	}
	if hasNaN(v) {
		quant.Rotate(v, g)
		return
	}
	// The first pass works on four registers of values at a time: 32 or
	// 64. Groups smaller than that leave a tail of whole groups to Go;
	// larger groups are multiples of it.
	unit := 32
	if impl == implAVX512 {
		unit = 64
	}
	n := len(v) &^ (unit - 1)
	body := v[:n]
	scale := float32(1)
	for s := 1; s < g; s *= 4 {
		scale /= 2
	}
	switch impl {
	case implAVX512:
		switch g {
		case 4:
			rotate4AVX512(body, scale)
		case 16:
			rotate16ScaledAVX512(body, scale)
		default:
			rotate16AVX512(body)
			for s := 16; s < g/4; s *= 4 {
				rotateStageAVX512(body, s)
			}
			rotateStageScaledAVX512(body, g/4, scale)
		}
	default:
		switch g {
		case 4:
			rotate4AVX2(body, scale)
		case 16:
			rotate16ScaledAVX2(body, scale)
		default:
			rotate16AVX2(body)
			for s := 16; s < g/4; s *= 4 {
				rotateStageAVX2(body, s)
			}
			rotateStageScaledAVX2(body, g/4, scale)
		}
	}
	if n < len(v) {
		quant.Rotate(v[n:], g)
	}
}

// hasNaN reports whether v holds a NaN.
func hasNaN(v []float32) bool {
	var n int
	switch impl {
	case implAVX512:
		n = len(v) &^ 127
		if hasNaNAVX512(v[:n]) {
			return true
		}
	case implAVX2:
		n = len(v) &^ 63
		if hasNaNAVX2(v[:n]) {
			return true
		}
	}
	for _, f := range v[n:] {
		if f != f {
			return true
		}
	}
	return false
}
