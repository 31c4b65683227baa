//go:build !amd64 || purego

package cpu

import (
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/quant"
)

// rotate is quant.Rotate: the ConvRot rotation of each group of g values of
// v, in place, in the contract's summation order.
func rotate(v []float32, g int) { quant.Rotate(v, g) }

// fusedRotation is false: the Go rotation takes the rows in passes.
func fusedRotation(k, g int) bool { return false }

func rotateRowFused(dtype.DType, []byte, []byte, int, []float32) uint32 {
	panic("cpu: no fused rotation")
}

func rotateQRowFused(dtype.DType, []byte, float32, []byte, int, []float32, []byte) {
	panic("cpu: no fused rotation")
}
