package convert

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/gokitchen/kitchen/safetensors"
	"golang.org/x/sys/unix"
)

// linuxDirect reads the input with O_DIRECT, through a second descriptor
// of the same open file (/proc/self/fd: the file the header was read
// from, whatever its name now is).
type linuxDirect struct {
	dfd int // O_DIRECT; -1 once refused
	fd  int // the file's own descriptor, for what O_DIRECT refuses
}

func openDirect(f *safetensors.File) (directFile, error) {
	fd := int(f.Fd())
	dfd, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", fd), unix.O_RDONLY|unix.O_DIRECT|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return &linuxDirect{dfd: dfd, fd: fd}, nil
}

func (d *linuxDirect) readAt(b []byte, off int64) (int, error) {
	for {
		fd := d.fd
		if d.dfd >= 0 {
			fd = d.dfd
		}
		n, err := unix.Pread(fd, b, off)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case d.dfd >= 0 && (errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP)):
			// Refused (an alignment the file system wants larger, or no
			// direct reads): the rest goes through the page cache.
			unix.Close(d.dfd)
			d.dfd = -1
			continue
		}
		return max(n, 0), err
	}
}

func (d *linuxDirect) close() error {
	if d.dfd >= 0 {
		err := unix.Close(d.dfd)
		d.dfd = -1
		return err
	}
	return nil
}

// mapRing returns 2n bytes of address space whose second half maps the
// same n bytes of memory as the first (a memfd mapped twice, outside the
// Go heap), so that any n bytes from an offset under n are contiguous,
// and a function that unmaps them. n must be a multiple of the page size.
func mapRing(n int) ([]byte, func(), error) {
	fd, err := unix.MemfdCreate("kitchen-read", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, nil, err
	}
	defer unix.Close(fd) // the mappings keep the memory
	if err := unix.Ftruncate(fd, int64(n)); err != nil {
		return nil, nil, err
	}
	// Reserve 2n of address space, then map the memory over both halves.
	base, err := unix.MmapPtr(-1, 0, nil, uintptr(2*n), unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, nil, err
	}
	free := func() { _ = unix.MunmapPtr(base, uintptr(2*n)) }
	for _, at := range []unsafe.Pointer{base, unsafe.Add(base, n)} {
		if _, err := unix.MmapPtr(fd, 0, at, uintptr(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_FIXED); err != nil {
			free()
			return nil, nil, err
		}
	}
	return unsafe.Slice((*byte)(base), 2*n), free, nil
}

// dropPages takes b's pages out of this mapping (MADV_DONTNEED): the
// memory stays, reachable through the ring's other mapping, and the next
// touch here maps it back.
func dropPages(b []byte) { _ = unix.Madvise(b, unix.MADV_DONTNEED) }
