//go:build unix

package convert_test

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

func mkfifo(path string) error { return unix.Mkfifo(path, 0o600) }

// lockedFile creates a file and locks it as a running conversion locks its
// temporary file; it reports whether locks exist here.
func lockedFile(t *testing.T, path string) (bool, func()) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	return true, func() { f.Close() }
}

func setUmask(mask int) (int, bool) { return unix.Umask(mask), true }
