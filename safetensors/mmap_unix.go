//go:build unix

package safetensors

import (
	"fmt"
	"math"
	"os"

	"golang.org/x/sys/unix"
)

// mapping maps the whole file read-only. Tensors are slices of it, so the
// kernel pages them in on use and out again on release, and memory use does
// not grow with the file.
type mapping struct {
	data []byte
	// The span of the ranges released since the last sweep, and their size.
	lo, hi   int64
	released int64
}

// Sweeping: the kernel maps pages around each fault (fault-around, 64 KiB
// by default), so pages of tensors released earlier creep back in, and with
// many small tensors they would add up to the file's size. After every
// sweepEvery bytes released, the whole span released since the last sweep,
// widened by the fault-around distance, is dropped again.
const (
	sweepEvery  = 8 << 20
	faultAround = 64 << 10
)

func (m *mapping) open(f *os.File, size int64) error {
	if size == 0 {
		return nil
	}
	if size > math.MaxInt {
		return fmt.Errorf("a %d-byte file cannot be mapped on this platform", size)
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

func (m *mapping) mapped() bool { return true }

func (m *mapping) bytes(_ *os.File, off, n int64) ([]byte, error) {
	return m.data[off : off+n : off+n], nil
}

// release drops the pages that lie wholly inside [off, off+n) at once,
// and the pages at its ends, which it may share with its neighbours, at
// the next sweep: dropping a page that the next tensor is about to read
// would cost a fault per tensor (and a system call per tensor) for
// tensors smaller than a page. The mapping is read-only and shared, so a
// dropped page that is still in use is simply read from the file again.
func (m *mapping) release(off, n int64) {
	if m.data == nil {
		return
	}
	if m.released == 0 {
		m.lo, m.hi = off, off+n
	}
	m.lo, m.hi = min(m.lo, off), max(m.hi, off+n)
	m.released += n
	page := int64(os.Getpagesize())
	if m.released >= sweepEvery {
		m.dontNeed(m.lo-faultAround, m.hi+faultAround, page)
		m.released = 0
		return
	}
	if start, end := (off+page-1)/page*page, (off+n)/page*page; end > start {
		m.dontNeed(start, end, page)
	}
}

// dontNeed drops the pages of [start, end), widened to whole pages and
// clipped to the mapping.
func (m *mapping) dontNeed(start, end, page int64) {
	start = max(start, 0) / page * page
	end = min((end+page-1)/page*page, int64(len(m.data)))
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

// openNonBlocking opens path read-only with O_NONBLOCK, so that opening a
// named pipe does not wait for a writer; for a regular file the flag
// changes nothing.
func openNonBlocking(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDONLY|unix.O_NONBLOCK, 0)
}
