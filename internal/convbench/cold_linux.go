package convbench

import (
	"errors"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// dropCache drops the file's clean pages from the page cache, so that the
// next read comes from the disk.
func dropCache(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		return &os.PathError{Op: "posix_fadvise", Path: path, Err: err}
	}
	return nil
}

// timeWriteDirect writes n bytes to a new file at path with O_DIRECT, as
// the converter writes its output on Linux (aligned chunks from a buffer
// of its own; the last partial chunk through the page cache), syncs it
// and removes it. It returns 0 where the file system refuses O_DIRECT.
func timeWriteDirect(path string, n int64) (float64, error) {
	const chunk = 8 << 20
	buf, err := unix.Mmap(-1, 0, chunk, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		return 0, err
	}
	defer unix.Munmap(buf)
	fill(buf)
	f, done, err := floorFile(path)
	if err != nil {
		return 0, err
	}
	defer done()
	dfd, err := unix.Open(path, unix.O_WRONLY|unix.O_DIRECT|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, nil
	}
	defer unix.Close(dfd)
	start := time.Now()
	var off int64
	for ; off+chunk <= n; off += chunk {
		if _, err := unix.Pwrite(dfd, buf, off); err != nil {
			return 0, nil
		}
	}
	if _, err := f.WriteAt(buf[:n-off], off); err != nil {
		return 0, err
	}
	if err := f.Sync(); err != nil {
		return 0, err
	}
	return time.Since(start).Seconds(), nil
}

// timeReadDirect reads the files with O_DIRECT in 8 MiB pieces, as the
// converter reads large tensors on Linux (O_DIRECT bypasses the page
// cache: the read is cold whatever was cached). It returns 0 where the
// file system refuses O_DIRECT.
func timeReadDirect(files []string) (float64, error) {
	const piece = 8 << 20
	buf, err := unix.Mmap(-1, 0, piece, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		return 0, err
	}
	defer unix.Munmap(buf)
	var total time.Duration
	for _, path := range files {
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECT|unix.O_CLOEXEC, 0)
		if err != nil {
			return 0, nil
		}
		start := time.Now()
		for off := int64(0); ; {
			n, err := unix.Pread(fd, buf, off)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil {
				unix.Close(fd)
				if errors.Is(err, unix.EINVAL) {
					return 0, nil // refused
				}
				return 0, &os.PathError{Op: "read", Path: path, Err: err}
			}
			if n == 0 {
				break
			}
			off += int64(n)
		}
		total += time.Since(start)
		unix.Close(fd)
	}
	return total.Seconds(), nil
}
