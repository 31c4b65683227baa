//go:build !unix

package convert

import (
	"errors"
	"os"
	"syscall"
)

// flushRange syncs the file (there is no sync_file_range here): everything
// written so far goes to the disk, in the flusher's goroutine, while the
// conversion goes on. A file system that cannot sync reports ok = false,
// with no error. Any other error is returned: a system may report a failed
// write-back only once, so the final sync could not be trusted to.
func flushRange(f *os.File, _, _ int64) (ok bool, err error) {
	if err := f.Sync(); err != nil {
		if errors.Is(err, errors.ErrUnsupported) || errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOTSUP) {
			return false, nil
		}
		return false, err
	}
	return true, nil
}
