//go:build !amd64 || purego

package cpu

import "github.com/gokitchen/kitchen/dtype"

// Without assembly every quantize and dequantize kernel is the portable
// one (the int8 products: linear_noasm.go).

var impl = implGeneric

var vnni = false // the int8 products' VNNI form: amd64 assembly only

const zen5 = false // no assembly to tune (see rowsStreaming)
const zen3 = false // no assembly to tune (see colsMax)

// hasVNNI reports whether this CPU has kernel set i's VNNI form: never
// without assembly.
func hasVNNI(int) bool { return false }

func impls() []int { return []int{implGeneric} }

func absMaxBits(dt dtype.DType, src []byte) uint32 { return absMaxBitsGeneric(dt, src) }

func quantize(dt dtype.DType, src, dst []byte, t float32, seed int64, base uint64) {
	quantizeGeneric(dt, src, dst, t, seed, base)
}

func quantizeHinted(dt dtype.DType, src, dst []byte, t float32, seed int64, base uint64, h hints) {
	quantizeGenericHinted(dt, src, dst, t, seed, base, h)
}

func quantizeRowNext(dt dtype.DType, src, dst []byte, t float32, next []byte, _ hints) uint32 {
	quantizeGenericHinted(dt, src, dst, t, 0, 0, hints{bounded: true})
	return absMaxBitsGeneric(dt, next)
}

func sfence() {} // no non-temporal stores without assembly

func dequantize(out dtype.DType, q []byte, s float32, dst []byte) {
	dequantizeGeneric(out, q, s, dst)
}

func dequantizeHinted(out dtype.DType, q []byte, s float32, dst []byte, _ bool) {
	dequantizeGeneric(out, q, s, dst)
}

func widenRow(dt dtype.DType, src []byte, dst []float32) { widenBlock(dt, src, 0, dst) }

func storeRow(dt dtype.DType, dst []byte, v []float32) { storeBlock(dt, dst, 0, v) }

func scaleInt8(q []byte, s float32, dst []float32) { scaleInt8Generic(q, s, dst) }

func mulInt8(q []byte, s, dst []float32) { mulInt8Generic(q, s, dst) }

func squaresKernel(dtype.DType, []byte, []byte, *squareSums) int { return 0 }

func squaresQKernel(dtype.DType, []byte, []byte, float32, *squareSums) int { return 0 }
