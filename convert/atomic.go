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
	final     string
	f         *os.File
	existed   bool // the final name was taken when the conversion started
	committed bool
}

func createPending(final string) (*pending, error) {
	dir, base := filepath.Split(final)
	if dir == "" {
		dir = "."
	}
	_, err := os.Lstat(final)
	existed := err == nil
	f, err := os.CreateTemp(dir, "."+base+".kitchen-tmp-*")
	if err != nil {
		return nil, err
	}
	return &pending{final: final, f: f, existed: existed}, nil
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

// commit moves the finished file into place and syncs the directory, so
// the move itself survives a crash. Unless replace is set it never
// replaces a file, even one that appeared during the conversion: it links
// the new file under the final name, which fails if the name is taken.
func (p *pending) commit(replace bool) error {
	tmp := p.f.Name()
	if replace {
		if err := os.Rename(tmp, p.final); err != nil {
			return err
		}
	} else {
		err := os.Link(tmp, p.final)
		switch {
		case errors.Is(err, fs.ErrExist):
			return fmt.Errorf("%s: %w", p.final, ErrExists)
		case err != nil:
			// No hard links here (some file systems): check, then rename.
			if _, serr := os.Lstat(p.final); serr == nil {
				return fmt.Errorf("%s: %w", p.final, ErrExists)
			}
			if err := os.Rename(tmp, p.final); err != nil {
				return err
			}
		default:
			os.Remove(tmp)
		}
	}
	p.committed = true
	if d, err := os.Open(filepath.Dir(p.final)); err == nil {
		_ = d.Sync() // not supported everywhere; the rename is done either way
		d.Close()
	}
	return nil
}

// abort removes the temporary file and, if this conversion already
// committed a file under a name that was free when it started, that file
// too; a file replaced with --force cannot be brought back.
func (p *pending) abort() {
	p.f.Close()
	os.Remove(p.f.Name())
	if p.committed && !p.existed {
		os.Remove(p.final)
	}
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
