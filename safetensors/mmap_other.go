//go:build !unix

package safetensors

import (
	"io"
	"os"
)

// mapping reads each tensor into a fresh buffer where memory mapping is
// not available; buffers are dropped when the caller lets go of them, so
// memory still follows the tensors in use, not the file.
type mapping struct{}

func (m *mapping) open(*os.File, int64) error { return nil }

func (m *mapping) bytes(f *os.File, off, n int64) ([]byte, error) {
	b := make([]byte, n)
	if _, err := f.ReadAt(b, off); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF // the file shrank since it was opened
		}
		return nil, err
	}
	return b, nil
}

func (m *mapping) release(int64, int64) {}

func (m *mapping) mapped() bool { return false }

func (m *mapping) close() error { return nil }

// openNonBlocking opens path read-only. Outside Unix there is no
// O_NONBLOCK to open with: OpenRegular's check of the path before the open
// is the guard.
func openNonBlocking(path string) (*os.File, error) { return os.Open(path) }
