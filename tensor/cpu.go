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

func (cpuDevice) Alloc(dt dtype.DType, shape []int) (*Tensor, error) { return Zeros(dt, shape...) }

func (cpuDevice) Release(*Tensor) {}

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
