//go:build unix && !linux

package convert

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// flushRange syncs the file (there is no sync_file_range here): everything
// written so far goes to the disk, in the flusher's goroutine, while the
// conversion goes on. It is a plain fsync, not the F_FULLFSYNC that
// os.File.Sync makes on macOS: these are intermediate windows, and the
// commit's final Sync flushes the device's cache once. A file system that
// cannot sync reports ok = false, with no error. Any other error is
// returned: a system may report a failed write-back only once, so the
// final sync could not be trusted to.
func flushRange(f *os.File, _, _ int64) (ok bool, err error) {
	for {
		err = unix.Fsync(int(f.Fd()))
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOTSUP), errors.Is(err, unix.EOPNOTSUPP):
		return false, nil
	}
	return false, &os.PathError{Op: "fsync", Path: f.Name(), Err: err}
}
