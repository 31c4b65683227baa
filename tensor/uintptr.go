package tensor

import "unsafe"

// uintptrOf returns the address of b's first byte, for alignment arithmetic.
func uintptrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
