//go:build !amd64 || purego

package cpu

import "github.com/gokitchen/kitchen/quant"

// rotate is quant.Rotate: the ConvRot rotation of each group of g values of
// v, in place, in the contract's summation order.
func rotate(v []float32, g int) { quant.Rotate(v, g) }
