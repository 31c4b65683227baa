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

// mapRing returns n+extra bytes of address space whose last extra bytes
// map the same memory as its first extra bytes (a memfd of n bytes mapped
// twice, outside the Go heap), so that a region that starts under n and
// runs up to extra bytes past it is contiguous, and a function that unmaps
// them. n and extra must be multiples of the page size, extra at most n.
func mapRing(n, extra int) ([]byte, func(), error) {
	fd, err := unix.MemfdCreate("kitchen-read", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, nil, err
	}
	defer unix.Close(fd) // the mappings keep the memory
	if err := unix.Ftruncate(fd, int64(n)); err != nil {
		return nil, nil, err
	}
	// Reserve the address space, then map the memory over it twice.
	base, err := unix.MmapPtr(-1, 0, nil, uintptr(n+extra), unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, nil, err
	}
	free := func() { _ = unix.MunmapPtr(base, uintptr(n+extra)) }
	for _, m := range []struct {
		at  unsafe.Pointer
		len int
	}{{base, n}, {unsafe.Add(base, n), extra}} {
		if m.len == 0 {
			continue
		}
		if _, err := unix.MmapPtr(fd, 0, m.at, uintptr(m.len), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_FIXED); err != nil {
			free()
			return nil, nil, err
		}
	}
	return unsafe.Slice((*byte)(base), n+extra), free, nil
}
