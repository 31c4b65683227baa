package tensor

import (
	"github.com/gokitchen/kitchen/dtype"
)

// Device owns tensor memory: it allocates it, frees it and copies it to and
// from the host. That is all every device must do. A device that can also
// run the device-generic eager backend implements eager.Primitives as well
// (the eager backend finds them by type assertion); a device that only has
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
