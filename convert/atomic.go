package convert

import (
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unicode/utf8"
)

// pending is an output being written under a temporary name in its target
// directory; commit moves it into place, abort removes it. Nothing ever
// appears under the final name until it is complete and synced. The
// temporary file is created with mode 0666 less the umask, as os.Create
// makes files, and, on Unix, locked (flock) until it is moved or removed,
// which tells removeStale that its writer is alive.
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
	f, err := createTemp(dir, tempPrefix(base))
	if err != nil {
		// err names the temporary file: say which output it was for.
		return nil, fmt.Errorf("%s: creating the output: %w", final, err)
	}
	lock(f)
	return &pending{final: final, f: f, existed: existed}, nil
}

// nameMax is the longest file name most file systems allow, in bytes.
const nameMax = 255

// tempPrefix is the start of the temporary names of an output named base:
// ".BASE.kitchen-tmp-", followed by up to 10 random digits. For a base so
// long that the name would not fit in nameMax bytes, BASE is cut at a
// character boundary and followed by "~" and a hash of the whole name, so
// that the temporary names of different outputs stay apart.
func tempPrefix(base string) string {
	const suffix = ".kitchen-tmp-"
	if p := "." + base + suffix; len(p)+10 <= nameMax {
		return p
	}
	h := fnv.New32a()
	h.Write([]byte(base))
	tag := fmt.Sprintf("~%08x", h.Sum32())
	keep := nameMax - 10 - len(suffix) - len(tag) - 1
	for keep > 0 && !utf8.RuneStart(base[keep]) {
		keep--
	}
	return "." + base[:keep] + tag + suffix
}

// createTemp creates a new file named prefix and random digits in dir, as
// os.CreateTemp does, but with mode 0666, so that the umask decides its
// permissions as it does for os.Create (os.CreateTemp's 0600 would make
// every output private).
func createTemp(dir, prefix string) (*os.File, error) {
	for range 10000 {
		name := filepath.Join(dir, prefix+strconv.FormatUint(uint64(rand.Uint32()), 10))
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o666)
		if !errors.Is(err, fs.ErrExist) {
			return f, err
		}
	}
	return nil, &fs.PathError{Op: "createtemp", Path: filepath.Join(dir, prefix+"*"), Err: fs.ErrExist}
}

// removeStale removes the temporary files of the output final that runs
// killed before they could clean up (SIGKILL, a crash, a power cut) left
// behind, and returns their names. A file that a running conversion holds
// locked is left alone; where files cannot be locked (outside Unix),
// nothing is removed.
func removeStale(final string) []string {
	dir, base := filepath.Split(final)
	if dir == "" {
		dir = "."
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	prefix := tempPrefix(base)
	var removed []string
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), prefix)
		if !ok || !e.Type().IsRegular() || rest == "" || strings.Trim(rest, "0123456789") != "" {
			continue
		}
		path := filepath.Join(dir, e.Name())
		if removeUnlocked(path) {
			removed = append(removed, path)
		}
	}
	return removed
}

// finish syncs the temporary file.
func (p *pending) finish() error { return p.f.Sync() }

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
	if err := p.f.Close(); err != nil {
		return err
	}
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
	if !p.committed {
		os.Remove(p.f.Name())
		p.f.Close()
	}
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
