package safetensors

import (
	"fmt"
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
func Open(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, &FormatError{Path: path, Problem: "not a regular file"}
	}
	h, err := ReadHeader(f, st.Size(), path)
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

// Release tells the file that t's bytes are no longer needed, so the pages
// holding them leave this process's memory; reading them again is allowed
// and reads the file again.
func (f *File) Release(t TensorInfo) { f.m.release(f.DataStart+t.Begin, t.Size()) }

// Close unmaps and closes the file.
func (f *File) Close() error {
	merr := f.m.close()
	if err := f.f.Close(); err != nil {
		return err
	}
	return merr
}
