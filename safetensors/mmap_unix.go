//go:build unix

package safetensors

import (
	"os"

	"golang.org/x/sys/unix"
)

// mapping maps the whole file read-only. Tensors are slices of it, so the
// kernel pages them in on use and out again on release, and memory use does
// not grow with the file.
type mapping struct {
	data []byte
}

func (m *mapping) open(f *os.File, size int64) error {
	if size == 0 {
		return nil
	}
	b, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return err
	}
	// Tensors are read front to back.
	_ = unix.Madvise(b, unix.MADV_SEQUENTIAL)
	m.data = b
	return nil
}

func (m *mapping) bytes(_ *os.File, off, n int64) ([]byte, error) {
	return m.data[off : off+n : off+n], nil
}

func (m *mapping) release(off, n int64) {
	page := int64(os.Getpagesize())
	start := (off + page - 1) / page * page // only whole pages inside the range
	end := (off + n) / page * page
	if end > start {
		_ = unix.Madvise(m.data[start:end], unix.MADV_DONTNEED)
	}
}

func (m *mapping) close() error {
	if m.data == nil {
		return nil
	}
	err := unix.Munmap(m.data)
	m.data = nil
	return err
}
