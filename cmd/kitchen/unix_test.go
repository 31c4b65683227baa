//go:build unix

package main

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func mkfifo(path string) error { return unix.Mkfifo(path, 0o600) }

// TestForceOverLink: --force onto a symbolic link replaces the link with
// the output (it is renamed into place) and leaves the link's target as
// it was, as the README says.
func TestForceOverLink(t *testing.T) {
	dir := t.TempDir()
	target, link := filepath.Join(dir, "target.safetensors"), filepath.Join(dir, "link.safetensors")
	if err := os.WriteFile(target, []byte("keep me"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if _, err := runCLI(t, "quantize", "../../testdata/tiny-dit.safetensors", "-o", link, "--force", "--quiet"); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(target); string(b) != "keep me" {
		t.Errorf("the link's target was written: %.20q", b)
	}
	if st, err := os.Lstat(link); err != nil || !st.Mode().IsRegular() {
		t.Errorf("the output is not a regular file in the link's place: %v %v", st, err)
	}
}
