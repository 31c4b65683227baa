//go:build amd64 && !purego

package cpu

import (
	"fmt"

	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/quant"
)

// rotate is quant.Rotate, the ConvRot rotation of each group of g values of
// v in place, on the kernel set in use, with the same bits. The kernels do
// quant.Rotate's operations in its order (see _asm/main.go): the first pass
// every stage of groups of up to 64 values (AVX2) or 256 (AVX-512), in
// registers, each later pass one more stage, and the last pass the product
// by 2^-(log4 g) too.
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
	// Groups of up to rk.whole values rotate in registers in one pass
	// (rotateGroups), four registers or a group at a time: rk.unit values
	// at least. Groups smaller than that leave a tail of whole groups to
	// Go; larger groups are multiples of it, and take one more pass per
	// further stage.
	rk := &rotations[impl]
	unit := max(rk.unit, min(g, rk.whole))
	n := len(v) &^ (unit - 1)
	body := v[:n]
	scale := rotateScale(g)
	if g <= rk.whole {
		rk.groups[g](body, scale)
	} else {
		rk.stages(body) // every stage in groups of rk.whole
		for s := rk.whole; s < g/4; s *= 4 {
			rk.stage(body, s)
		}
		rk.stageScaled(body, g/4, scale)
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

// rotationKernels are an assembly set's rotation kernels (see rotate).
type rotationKernels struct {
	unit, whole int                                      // the fewest values of a pass; the largest group rotated in one
	groups      map[int]func(v []float32, scale float32) // the whole rotation, by group size up to whole
	stages      func(v []float32)                        // the stages of groups of whole
	stage       func(v []float32, stride int)            // one later stage
	stageScaled func(v []float32, stride int, scale float32)
}

var rotations = [...]rotationKernels{
	implAVX2: {
		unit: 32, whole: 64,
		groups: map[int]func([]float32, float32){4: rotate4AVX2, 16: rotate16ScaledAVX2, 64: rotate64ScaledAVX2},
		stages: rotate64AVX2, stage: rotateStageAVX2, stageScaled: rotateStageScaledAVX2,
	},
	implAVX512: {
		unit: 64, whole: 256,
		groups: map[int]func([]float32, float32){4: rotate4AVX512, 16: rotate16ScaledAVX512, 64: rotate64ScaledAVX512, 256: rotate256ScaledAVX512},
		stages: rotate256AVX512, stage: rotateStageAVX512, stageScaled: rotateStageScaledAVX512,
	},
}

// The one-pass row kernels (AVX-512), by group size and kernelIndex.
var (
	rotateRowKernels = map[int][3]func(src, dst []byte, scale float32) uint32{
		16:  {rotateRows16BF16AVX512, rotateRows16F16AVX512, rotateRows16F32AVX512},
		64:  {rotateRows64BF16AVX512, rotateRows64F16AVX512, rotateRows64F32AVX512},
		256: {rotateRows256BF16AVX512, rotateRows256F16AVX512, rotateRows256F32AVX512},
	}
	rotateQRowKernels = map[int][3]func(q []byte, s float32, dst []byte, scale float32, pf []byte){
		16:  {rotateRowsQ16BF16AVX512, rotateRowsQ16F16AVX512, rotateRowsQ16F32AVX512},
		64:  {rotateRowsQ64BF16AVX512, rotateRowsQ64F16AVX512, rotateRowsQ64F32AVX512},
		256: {rotateRowsQ256BF16AVX512, rotateRowsQ256F16AVX512, rotateRowsQ256F32AVX512},
	}
)

// The AVX2 rotations' first passes (rotateLoad), by kernelIndex and for
// int8 rows, by the group they rotate.
var (
	rotateLoads = map[int][3]func(src []byte, dst []float32){
		16: {rotateLoad16BF16AVX2, rotateLoad16F16AVX2, rotateLoad16F32AVX2},
		64: {rotateLoad64BF16AVX2, rotateLoad64F16AVX2, rotateLoad64F32AVX2},
	}
	rotateLoadsQ = map[int]func(q []byte, s float32, dst []float32, pf []byte){16: rotateLoad16QAVX2, 64: rotateLoad64QAVX2}
)

// fusedRotation reports whether rows of k values rotate in groups of g
// with their conversions fused into the rotation (rotateRowFused,
// rotateQRowFused):
// with AVX-512, all in one pass, for g of 16 to 256 (k a multiple of the
// kernels' 64 values and of g); with AVX2, the widening into the first of
// the passes, for g of 64 or more.
func fusedRotation(k, g int) bool {
	switch impl {
	case implAVX512:
		return g >= 16 && g <= 256 && k%max(64, g) == 0
	case implAVX2:
		return g >= 64 && k%g == 0
	}
	return false
}

// rotateRowFused is rotateRow where fusedRotation: with AVX-512 one
// kernel, with AVX2 the widening in the rotation's first pass (through v).
func rotateRowFused(dt dtype.DType, src, dst []byte, g int, v []float32) uint32 {
	if impl == implAVX512 {
		return rotateRowKernels[g][kernelIndex(dt)](src, dst, rotateScale(g))
	}
	v = v[:len(dst)/dt.Size()]
	first := min(g/4, 64)
	rotateLoads[first][kernelIndex(dt)](src, v)
	laterStages(v, first, g)
	storeRow(dt, dst, v)
	return absMaxBits(dt, dst)
}

// rotateQRowFused is rotateQRow where fusedRotation, prefetching next as
// it reads q.
func rotateQRowFused(out dtype.DType, q []byte, s float32, dst []byte, g int, v []float32, next []byte) {
	if impl == implAVX512 {
		rotateQRowKernels[g][kernelIndex(out)](q, s, dst, rotateScale(g), next)
		return
	}
	v = v[:len(q)]
	first := min(g/4, 64)
	rotateLoadsQ[first](q, s, v, next)
	laterStages(v, first, g)
	storeRow(out, dst, v)
}

// laterStages does the stages of the AVX2 rotation in groups of g after
// its first pass's, which rotated groups of first: the last one scaled.
func laterStages(v []float32, first, g int) {
	for s := first; s < g/4; s *= 4 {
		rotateStageAVX2(v, s)
	}
	rotateStageScaledAVX2(v, g/4, rotateScale(g))
}

// rotateScale is the rotation's scale for groups of g, 2^-(log4 g).
func rotateScale(g int) float32 {
	scale := float32(1)
	for s := 1; s < g; s *= 4 {
		scale /= 2
	}
	return scale
}
