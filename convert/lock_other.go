//go:build !unix

package convert

import "os"

// lock does nothing where flock is not available.
func lock(*os.File) {}

// removeUnlocked never removes anything where a live conversion's
// temporary file cannot be told from a dead one's.
func removeUnlocked(string) bool { return false }
