package tensor

import (
	"fmt"

	"github.com/gokitchen/kitchen/dtype"
)

// CPU returns the host device. Its tensors are Go byte slices. Every call
// returns the same (comparable) value.
func CPU() Device { return cpuDevice{} }

type cpuDevice struct{}

func (cpuDevice) Type() string   { return "cpu" }
func (cpuDevice) String() string { return "cpu" }

// Alloc returns a tensor of unspecified contents: large ones may reuse the
// memory of a released tensor (see pool.go).
func (cpuDevice) Alloc(dt dtype.DType, shape []int) (*Tensor, error) { return Empty(dt, shape...) }

// Release recycles the memory of a large tensor that Alloc made; for
// others it does nothing and the garbage collector reclaims them.
func (cpuDevice) Release(t *Tensor) { releaseHost(t) }

func (cpuDevice) CopyFromHost(dst *Tensor, src []byte) error {
	b, err := dst.Bytes()
	if err != nil {
		return err
	}
	if len(b) != len(src) {
		return fmt.Errorf("cpu: copy of %d bytes into %v: %w", len(src), dst, ErrShape)
	}
	copy(b, src)
	return nil
}

func (cpuDevice) CopyToHost(dst []byte, src *Tensor) error {
	b, err := src.Bytes()
	if err != nil {
		return err
	}
	if len(b) != len(dst) {
		return fmt.Errorf("cpu: copy of %v into %d bytes: %w", src, len(dst), ErrShape)
	}
	copy(dst, b)
	return nil
}
