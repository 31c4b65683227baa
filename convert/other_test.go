//go:build !unix

package convert_test

import (
	"errors"
	"os"
	"testing"
)

func mkfifo(string) error { return errors.New("not on this platform") }

func lockedFile(t *testing.T, path string) (bool, func()) {
	t.Helper()
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return false, func() {}
}

func setUmask(int) (int, bool) { return 0, false }
