//go:build !linux

package convbench

import "errors"

// dropCache cannot drop a file's pages here: kitchen uses posix_fadvise,
// which only its Linux build calls.
func dropCache(string) error {
	return errors.New("no posix_fadvise DONTNEED on this system")
}

// timeWriteDirect returns 0: the converter writes with O_DIRECT on Linux
// only.
func timeWriteDirect(string, int64) (float64, error) { return 0, nil }

// timeReadDirect returns 0: the converter reads with O_DIRECT on Linux
// only.
func timeReadDirect([]string) (float64, error) { return 0, nil }
