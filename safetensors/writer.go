package safetensors

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"unicode/utf8"
)

// ErrHeaderTooLarge is wrapped by every *HeaderSizeError.
var ErrHeaderTooLarge = errors.New("safetensors: header over the size limit")

// HeaderSizeError reports a header that would be over MaxHeaderSize, which
// every reader refuses: nothing is written.
type HeaderSizeError struct {
	Path string // the file that would have been written, if known
	Size int64  // the header's length (HeaderSize)
}

func (e *HeaderSizeError) Error() string {
	msg := fmt.Sprintf("its header would be %d bytes, over the %d-byte limit that safetensors readers enforce; nothing was written", e.Size, MaxHeaderSize)
	if e.Path == "" {
		return "safetensors: " + msg
	}
	return e.Path + ": " + msg
}

func (e *HeaderSizeError) Unwrap() error { return ErrHeaderTooLarge }

// Layout assigns contiguous data offsets to tensors in the order given
// (their Begin and End are overwritten) and checks each one's size against
// its dtype and shape. Names must be distinct and not "__metadata__".
func Layout(tensors []TensorInfo) ([]TensorInfo, error) {
	out := slices.Clone(tensors)
	return out, layOut(out)
}

// layOut is Layout in place.
func layOut(out []TensorInfo) error {
	var off int64
	for i := range out {
		t := &out[i]
		if t.Name == "__metadata__" {
			return fmt.Errorf("safetensors: %q cannot name a tensor", t.Name)
		}
		if _, ok := elementBits[t.DType]; !ok {
			return fmt.Errorf("safetensors: tensor %q: unknown dtype %q", t.Name, t.DType)
		}
		n, ok := TensorBytes(t.DType, t.Shape)
		if !ok {
			return fmt.Errorf("safetensors: tensor %q: bad shape %v for %s", t.Name, t.Shape, t.DType)
		}
		if n > math.MaxInt64-off {
			return fmt.Errorf("safetensors: tensor %q: data past %d bytes", t.Name, int64(math.MaxInt64))
		}
		t.Begin, t.End = off, off+n
		off = t.End
	}
	// Repeated names, found by sorting indices (4 bytes a tensor) rather
	// than with a set of the names, which costs ten times that.
	idx := make([]int32, len(out))
	for i := range idx {
		idx[i] = int32(i)
	}
	slices.SortFunc(idx, func(a, b int32) int { return cmp.Compare(out[a].Name, out[b].Name) })
	for i := 1; i < len(idx); i++ {
		if out[idx[i]].Name == out[idx[i-1]].Name {
			return fmt.Errorf("safetensors: tensor name %q appears twice", out[idx[i]].Name)
		}
	}
	return nil
}

// EncodeHeader returns the 8-byte length and the JSON header for tensors
// already laid out, metadata first and tensors in data order, padded with
// spaces so the data starts at a multiple of 8.
func EncodeHeader(metadata map[string]string, tensors []TensorInfo) ([]byte, error) {
	var b bytes.Buffer
	if _, err := writeHeader(&b, metadata, tensors); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// HeaderSize is the header length that EncodeHeader would write in the
// file's first 8 bytes (the JSON and its padding, which MaxHeaderSize
// limits), computed without building the header.
func HeaderSize(metadata map[string]string, tensors []TensorInfo) int64 {
	return encodeHeader(&headerEncoder{}, metadata, tensors)
}

// writeHeader writes the header for tensors already laid out, refusing
// one over MaxHeaderSize before writing anything, and returns its size.
// The header is encoded twice, to count its bytes and to write them,
// never held whole in memory.
func writeHeader(w io.Writer, metadata map[string]string, tensors []TensorInfo) (int64, error) {
	n := encodeHeader(&headerEncoder{}, metadata, tensors)
	if n > MaxHeaderSize {
		return 0, &HeaderSizeError{Size: n}
	}
	e := &headerEncoder{w: w}
	e.buf = binary.LittleEndian.AppendUint64(make([]byte, 0, 64<<10), uint64(n))
	encodeHeader(e, metadata, tensors)
	e.flush()
	return 8 + n, e.err
}

// encodeHeader writes the JSON header through e and returns its length,
// padding included: the bytes encoding/json would write for the metadata
// (sorted by key) and for each tensor's name and entry. Only counting
// (e.w nil), it takes the metadata in the map's order, which gives the
// same length without the cost of sorting millions of keys.
func encodeHeader(e *headerEncoder, metadata map[string]string, tensors []TensorInfo) int64 {
	start := e.n + int64(len(e.buf))
	e.buf = append(e.buf, '{')
	sep := false
	if len(metadata) > 0 {
		e.buf = append(e.buf, `"__metadata__":{`...)
		first := true
		entry := func(k, v string) {
			if !first {
				e.buf = append(e.buf, ',')
			}
			first = false
			e.str(k)
			e.buf = append(e.buf, ':')
			e.str(v)
			e.maybeFlush()
		}
		if e.w == nil {
			for k, v := range metadata {
				entry(k, v)
			}
		} else {
			keys := make([]string, 0, len(metadata))
			for k := range metadata {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			for _, k := range keys {
				entry(k, metadata[k])
			}
		}
		e.buf = append(e.buf, '}')
		sep = true
	}
	for _, t := range tensors {
		if sep {
			e.buf = append(e.buf, ',')
		}
		sep = true
		e.str(t.Name)
		e.buf = append(e.buf, `:{"dtype":`...)
		e.str(t.DType)
		e.buf = append(e.buf, `,"shape":[`...)
		for i, d := range t.Shape {
			if i > 0 {
				e.buf = append(e.buf, ',')
			}
			e.buf = strconv.AppendInt(e.buf, int64(d), 10)
		}
		e.buf = append(e.buf, `],"data_offsets":[`...)
		e.buf = strconv.AppendInt(e.buf, t.Begin, 10)
		e.buf = append(e.buf, ',')
		e.buf = strconv.AppendInt(e.buf, t.End, 10)
		e.buf = append(e.buf, "]}"...)
		e.maybeFlush()
	}
	e.buf = append(e.buf, '}')
	for (e.n+int64(len(e.buf))-start)%8 != 0 {
		e.buf = append(e.buf, ' ')
	}
	return e.n + int64(len(e.buf)) - start
}

// headerEncoder collects encoded bytes in buf and passes them on to w (or,
// with w nil, only counts them) each time buf grows past 64 KiB.
type headerEncoder struct {
	w   io.Writer
	buf []byte
	n   int64 // bytes passed on
	err error
}

func (e *headerEncoder) maybeFlush() {
	if len(e.buf) >= 64<<10 {
		e.flush()
	}
}

func (e *headerEncoder) flush() {
	if e.w != nil && e.err == nil {
		_, e.err = e.w.Write(e.buf)
	}
	e.n += int64(len(e.buf))
	e.buf = e.buf[:0]
}

// str appends s as a JSON string, escaped as encoding/json escapes it
// (HTML characters included), a part of 64 KiB at a time.
func (e *headerEncoder) str(s string) {
	const part = 64 << 10
	e.buf = append(e.buf, '"')
	for len(s) > 0 {
		n := len(s)
		if n > part {
			n = part
			for n < len(s) && !utf8.RuneStart(s[n]) {
				n++
			}
		}
		e.buf = appendEscaped(e.buf, s[:n])
		s = s[n:]
		e.maybeFlush()
	}
	e.buf = append(e.buf, '"')
}

const hexDigits = "0123456789abcdef"

// appendEscaped appends the body of the JSON string of s (no quotes), as
// encoding/json writes it: ", \ and control characters escaped, <, > and &
// as \u003c, \u003e and \u0026, invalid UTF-8 as \ufffd, U+2028 and U+2029
// escaped.
func appendEscaped(dst []byte, s string) []byte {
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' && b != '<' && b != '>' && b != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		if c == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if c == '\u2028' || c == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[c&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	return append(dst, s[start:]...)
}

// Writer streams a safetensors file: the header on creation, then each
// tensor's bytes in layout order.
type Writer struct {
	w       io.Writer
	tensors []TensorInfo
	next    int   // tensor being written
	done    int64 // bytes of it written so far
	n       int64 // bytes written in all
}

// NewWriter lays out the tensors in the order given, in place (as Layout
// does, setting their Begin and End), writes the header and returns a
// Writer that expects their data in that order; the Writer keeps the
// slice (Tensors returns it), so a checkpoint of millions of tensors is
// not held twice. A header over MaxHeaderSize, which no reader would
// accept, is a *HeaderSizeError, and then nothing is written.
func NewWriter(w io.Writer, metadata map[string]string, tensors []TensorInfo) (*Writer, error) {
	if err := layOut(tensors); err != nil {
		return nil, err
	}
	n, err := writeHeader(w, metadata, tensors)
	if err != nil {
		return nil, err
	}
	return &Writer{w: w, tensors: tensors, n: n}, nil
}

// Tensors returns the layout, with offsets.
func (w *Writer) Tensors() []TensorInfo { return w.tensors }

// WriteTensor writes part or all of the data of the named tensor, which
// must be the next one in the layout (or the one in progress).
func (w *Writer) WriteTensor(name string, data []byte) error {
	// Zero-size tensors have nothing to write; step over them.
	for w.next < len(w.tensors) && w.tensors[w.next].Size() == 0 && w.tensors[w.next].Name != name {
		w.next++
	}
	if w.next >= len(w.tensors) {
		return fmt.Errorf("safetensors: write of %q after the last tensor", name)
	}
	t := w.tensors[w.next]
	if t.Name != name {
		return fmt.Errorf("safetensors: write of %q, but %q comes next", name, t.Name)
	}
	if w.done+int64(len(data)) > t.Size() {
		return fmt.Errorf("safetensors: tensor %q: %d bytes written, only %d fit", name, w.done+int64(len(data)), t.Size())
	}
	m, err := w.w.Write(data)
	w.done += int64(m)
	w.n += int64(m)
	if err != nil {
		return err
	}
	if w.done == t.Size() {
		w.next, w.done = w.next+1, 0
	}
	return nil
}

// Written is the number of bytes written, header included.
func (w *Writer) Written() int64 { return w.n }

// Finish checks that every tensor was written in full.
func (w *Writer) Finish() error {
	for w.next < len(w.tensors) && w.tensors[w.next].Size() == 0 {
		w.next++
	}
	if w.next < len(w.tensors) {
		return fmt.Errorf("safetensors: tensor %q not written", w.tensors[w.next].Name)
	}
	return nil
}
