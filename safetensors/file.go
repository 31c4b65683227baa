package safetensors

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// File is an open safetensors file whose tensors can be read in place.
type File struct {
	Path string
	Header
	f    *os.File
	size int64
	m    mapping
}

// Open opens and validates a safetensors file.
func Open(path string) (*File, error) { return OpenContext(context.Background(), path) }

// OpenContext is Open, returning an error that wraps ctx.Err() if ctx ends
// while the header is read. Every error it returns names the file, save
// the one for a nil ctx.
func OpenContext(ctx context.Context, path string) (*File, error) {
	if ctx == nil {
		return nil, errors.New("safetensors: OpenContext: nil context")
	}
	f, st, err := OpenRegular(path)
	if err != nil {
		return nil, err
	}
	h, err := readHeader(ctx, f, st.Size(), path)
	if err != nil {
		f.Close()
		return nil, err
	}
	sf := &File{Path: path, Header: *h, f: f, size: st.Size()}
	if err := sf.m.open(f, st.Size()); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return sf, nil
}

// OpenRegular opens path for reading if it is a regular file (or a link to
// one), and refuses anything else with a *FormatError saying what it is.
// It never blocks: a named pipe is refused before it is opened, and opened
// without waiting for a writer where the platform allows (in case one
// took the file's place in between), then refused.
func OpenRegular(path string) (*os.File, fs.FileInfo, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, nil, err
	}
	if err := checkRegular(path, st); err != nil {
		return nil, nil, err
	}
	f, err := openNonBlocking(path)
	if err != nil {
		return nil, nil, err
	}
	if st, err = f.Stat(); err == nil {
		err = checkRegular(path, st)
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, st, nil
}

func checkRegular(path string, st fs.FileInfo) error {
	m := st.Mode()
	if m.IsRegular() {
		return nil
	}
	what := "not a regular file"
	switch {
	case m.IsDir():
		what = "a directory, not a regular file"
	case m&fs.ModeNamedPipe != 0:
		what = "a named pipe (FIFO), not a regular file"
	case m&fs.ModeSocket != 0:
		what = "a socket, not a regular file"
	case m&fs.ModeDevice != 0:
		what = "a device, not a regular file"
	}
	return &FormatError{Path: path, Problem: what}
}

// Size is the file's length in bytes.
func (f *File) Size() int64 { return f.size }

// Data returns the bytes of a tensor. They are valid until Release(t) or
// Close, and must not be modified: the mapping is read-only.
func (f *File) Data(t TensorInfo) ([]byte, error) {
	b, err := f.m.bytes(f.f, f.DataStart+t.Begin, t.Size())
	if err != nil {
		return nil, fmt.Errorf("%s: reading tensor %q: %w", f.Path, t.Name, err)
	}
	return b, nil
}

// Mapped reports whether Data returns views of a memory mapping (Unix),
// which cost no memory until read, rather than buffers read for the call,
// which hold the tensor's size in memory until dropped.
func (f *File) Mapped() bool { return f.m.mapped() }

// Release tells the file that t's bytes are no longer needed, so the pages
// holding them leave this process's memory; reading them again is allowed
// and reads the file again.
func (f *File) Release(t TensorInfo) { f.m.release(f.DataStart+t.Begin, t.Size()) }

// Fd returns the open file's descriptor, for reading it another way (the
// converter reads large tensors with O_DIRECT through it). It is valid
// until Close.
func (f *File) Fd() uintptr { return f.f.Fd() }

// Close unmaps and closes the file.
func (f *File) Close() error {
	merr := f.m.close()
	if err := f.f.Close(); err != nil {
		return err
	}
	return merr
}
