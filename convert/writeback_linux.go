package convert

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// flushRange writes the n bytes at off to the disk and waits for them
// (sync_file_range: the data only, without the whole file's sync). It
// reports ok = false, with no error, where the file system does not
// support it; the final fsync then does all the work.
func flushRange(f *os.File, off, n int64) (ok bool, err error) {
	err = unix.SyncFileRange(int(f.Fd()), off, n, unix.SYNC_FILE_RANGE_WAIT_BEFORE|unix.SYNC_FILE_RANGE_WRITE|unix.SYNC_FILE_RANGE_WAIT_AFTER)
	if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ESPIPE) {
		return false, nil
	}
	if err != nil {
		return false, &os.PathError{Op: "sync_file_range", Path: f.Name(), Err: err}
	}
	return true, nil
}
