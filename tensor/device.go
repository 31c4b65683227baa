package tensor

import (
	"fmt"

	"github.com/gokitchen/kitchen/dtype"
)

// Device owns tensor memory: it allocates it, frees it and copies it to and
// from the host. That is all every device must do. A device that can also
// run the device-generic eager backend implements eager.Primitives as well,
// and eager.RotatePrimitives and eager.LinearPrimitives for the ConvRot and
// linear operations (the eager backend finds them by type assertion, and
// declines a family whose primitives are missing); a device that only has
// fused kernels of its own does not need to.
type Device interface {
	// Type is the device kind that backend constraints match: "cpu", "npu".
	Type() string
	// String names this device, e.g. "cpu" or "npu:0".
	String() string

	// Alloc returns a tensor with unspecified contents.
	Alloc(dt dtype.DType, shape []int) (*Tensor, error)
	// Release frees a tensor's memory.
	Release(t *Tensor)
	// CopyFromHost fills dst with little-endian host bytes of its exact size.
	CopyFromHost(dst *Tensor, src []byte) error
	// CopyToHost copies src into host bytes of its exact size.
	CopyToHost(dst []byte, src *Tensor) error
}

// Copier is implemented by devices that copy a tensor to another on the
// same device without a trip through the host. Copy uses it when it can.
type Copier interface {
	// CopyDevice copies src into dst, both on this device, of the same
	// dtype and number of elements.
	CopyDevice(dst, src *Tensor) error
}

// Copy copies src into dst: two tensors on the same device, of the same
// dtype and number of elements (shapes may differ). Host tensors are copied
// directly, others by the device's Copier or else through host memory.
func Copy(dst, src *Tensor) error {
	switch {
	case dst.dev != src.dev:
		return fmt.Errorf("tensor: copy %v into %v: different devices", src, dst)
	case dst.dtype != src.dtype || dst.Numel() != src.Numel():
		return fmt.Errorf("tensor: copy %v into %v: %w: dtype or size differ", src, dst, ErrShape)
	case dst.dev == CPU():
		copy(dst.host, src.host)
		return nil
	}
	if c, ok := dst.dev.(Copier); ok {
		return c.CopyDevice(dst, src)
	}
	buf := make([]byte, src.Nbytes())
	if err := src.dev.CopyToHost(buf, src); err != nil {
		return err
	}
	return dst.dev.CopyFromHost(dst, buf)
}

// Overlaps reports whether a and b may share memory: host tensors whose
// bytes overlap, or tensors on another device over the same storage handle
// (as Reshape makes). Nil tensors overlap nothing.
func Overlaps(a, b *Tensor) bool {
	switch {
	case a == nil || b == nil || a.dev != b.dev:
		return false
	case a == b:
		return true
	case a.dev == CPU():
		if len(a.host) == 0 || len(b.host) == 0 {
			return false
		}
		pa, pb := uintptrOf(a.host), uintptrOf(b.host)
		return pa < pb+uintptr(len(b.host)) && pb < pa+uintptr(len(a.host))
	}
	return sameStorage(a.mem, b.mem)
}

// sameStorage compares device storage handles, which need not be comparable.
func sameStorage(a, b any) (same bool) {
	defer func() {
		if recover() != nil {
			same = false
		}
	}()
	return a == b
}
