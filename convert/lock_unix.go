//go:build unix

package convert

import (
	"os"

	"golang.org/x/sys/unix"
)

// lock takes an exclusive lock on the temporary file f, held until it is
// closed (or the process ends, however it ends).
func lock(f *os.File) { _ = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) }

// removeUnlocked removes the file at path if no process holds a lock on
// it, and reports whether it did.
func removeUnlocked(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
		return false // a live conversion's
	}
	return os.Remove(path) == nil
}
