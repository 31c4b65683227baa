package convert

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// pending is an output being written under a temporary name in its target
// directory; commit renames it into place, abort removes it. Nothing ever
// appears under the final name until it is complete and synced.
type pending struct {
	final string
	f     *os.File
}

func createPending(final string) (*pending, error) {
	dir, base := filepath.Split(final)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".kitchen-tmp-*")
	if err != nil {
		return nil, err
	}
	return &pending{final: final, f: f}, nil
}

// finish syncs and closes the temporary file.
func (p *pending) finish() error {
	if err := p.f.Chmod(0o644); err != nil {
		return err
	}
	if err := p.f.Sync(); err != nil {
		return err
	}
	return p.f.Close()
}

// commit renames the finished file into place and syncs the directory, so
// the rename itself survives a crash.
func (p *pending) commit() error {
	if err := os.Rename(p.f.Name(), p.final); err != nil {
		return err
	}
	if d, err := os.Open(filepath.Dir(p.final)); err == nil {
		_ = d.Sync() // not supported everywhere; the rename is done either way
		d.Close()
	}
	return nil
}

func (p *pending) abort() {
	p.f.Close()
	os.Remove(p.f.Name())
}

// ErrExists is returned when an output exists and Force is not set.
var ErrExists = errors.New("output exists (use --force to replace it)")

// ErrSameFile is returned when an output would replace an input.
var ErrSameFile = errors.New("output is the input file")

// checkOutput refuses an output that exists (without force) or that is one
// of the inputs.
func checkOutput(out string, force bool, inputs ...string) error {
	st, err := os.Stat(out)
	if errors.Is(err, fs.ErrNotExist) {
		absOut, _ := filepath.Abs(out)
		for _, in := range inputs {
			if absIn, _ := filepath.Abs(in); absIn == absOut {
				return fmt.Errorf("%s: %w", out, ErrSameFile)
			}
		}
		return nil
	}
	if err != nil {
		return err
	}
	for _, in := range inputs {
		if ist, err := os.Stat(in); err == nil && os.SameFile(st, ist) {
			return fmt.Errorf("%s: %w %s", out, ErrSameFile, in)
		}
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s: output exists and is not a regular file", out)
	}
	if !force {
		return fmt.Errorf("%s: %w", out, ErrExists)
	}
	return nil
}
