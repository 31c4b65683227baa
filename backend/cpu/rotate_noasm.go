//go:build !amd64 || purego

package cpu

import (
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/quant"
)

// rotate is quant.Rotate: the ConvRot rotation of each group of g values of
// v, in place, in the contract's summation order.
func rotate(v []float32, g int) { quant.Rotate(v, g) }

// oneRowPass is false: the Go rotation takes the rows in passes.
func oneRowPass(k, g int) bool { return false }

func rotateRow(dtype.DType, []byte, []byte, int) uint32 { panic("cpu: no one-pass rotation") }

func rotateQRow(dtype.DType, []byte, float32, []byte, int) { panic("cpu: no one-pass rotation") }
