//go:build !linux

package convert

import "os"

// flushRange syncs the file (there is no sync_file_range here): everything
// written so far goes to the disk, in the flusher's goroutine, while the
// conversion goes on. A file system that cannot sync reports ok = false,
// with no error; the final sync then reports the problem, if it is one.
func flushRange(f *os.File, _, _ int64) (ok bool, err error) {
	if err := f.Sync(); err != nil {
		return false, nil
	}
	return true, nil
}
