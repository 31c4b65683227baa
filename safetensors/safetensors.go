// Package safetensors reads and writes the safetensors checkpoint format:
// an 8-byte little-endian header length, a JSON header naming each tensor's
// dtype, shape and byte range, then the tensor data, contiguous.
//
// The reader treats every file as hostile: each number in the header is
// checked before use, and a bad file is a *FormatError naming the file and
// the problem, never a panic or a read out of bounds. The JSON is read as
// the reference reader reads it (exact field names, unknown fields
// ignored) and a key repeated anywhere is an error, so no reader can see
// other tensors in a file than kitchen does. Files are memory-mapped where
// the platform allows, so tensors are read in place and dropped from
// memory once used. The writer streams: it takes the complete header first
// (output sizes are known in advance), encodes it without holding it whole,
// refusing one over MaxHeaderSize, and then each tensor's bytes in order.
package safetensors

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/internal/strictjson"
)

// MaxHeaderSize is the largest header accepted, as in the reference
// implementation: 100 MB.
const MaxHeaderSize = 100_000_000

// ErrFormat is wrapped by every *FormatError.
var ErrFormat = errors.New("invalid safetensors file")

// FormatError reports a malformed file.
type FormatError struct {
	Path    string
	Tensor  string // the tensor concerned, if any
	Problem string
	// Err is the lower-level error the problem was found by, if any (the
	// JSON reader's, for a header that is not valid JSON or a number that
	// is not a count); Problem already includes its text.
	Err error
}

// Error names the file, the tensor if any, and the problem.
func (e *FormatError) Error() string {
	var b strings.Builder
	b.WriteString(e.Path)
	b.WriteString(": invalid safetensors file: ")
	if e.Tensor != "" {
		fmt.Fprintf(&b, "tensor %q: ", e.Tensor)
	}
	b.WriteString(e.Problem)
	return b.String()
}

// Unwrap returns ErrFormat, and Err when there is one, so that errors.Is
// and errors.As reach both.
func (e *FormatError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrFormat, e.Err}
	}
	return []error{ErrFormat}
}

// elementBits are the bits per element of the dtypes the format defines,
// by their header names: F4 and the F6 types (safetensors 0.6) are packed,
// and a tensor of them must fill whole bytes.
var elementBits = map[string]int{
	"F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
	"BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8,
	"I16": 16, "U16": 16, "F16": 16, "BF16": 16,
	"I32": 32, "U32": 32, "F32": 32,
	"I64": 64, "U64": 64, "F64": 64, "C64": 64,
}

// DTypeSize returns the bytes an element of a header dtype takes, rounded
// up (1 for the packed F4 and F6 types: the alignment of their data; a
// tensor's size is TensorBytes), and false for names the format does not
// define.
func DTypeSize(name string) (int, bool) {
	n, ok := elementBits[name]
	return (n + 7) / 8, ok
}

// TensorBytes is the size in bytes of a tensor of a header dtype and
// shape, and false for an unknown dtype, a negative dimension, a size
// beyond an int64, or a packed tensor that does not fill whole bytes.
func TensorBytes(name string, shape []int) (int64, bool) {
	n, ok := tensorBits(name, shape)
	if !ok || n%8 != 0 {
		return 0, false
	}
	return int64(n / 8), true
}

// tensorBits is the size in bits of a tensor of a header dtype and shape,
// and false for an unknown dtype, a negative dimension or more bits than
// an int64 holds. TensorBytes and the header's check share it.
func tensorBits(name string, shape []int) (uint64, bool) {
	b, ok := elementBits[name]
	if !ok {
		return 0, false
	}
	n := uint64(b)
	for _, d := range shape {
		if d < 0 {
			return 0, false
		}
		hi, lo := bits.Mul64(n, uint64(d))
		if hi != 0 || lo > math.MaxInt64 {
			return 0, false
		}
		n = lo
	}
	return n, true
}

// kitchenNames pairs the header names with the kitchen dtypes they hold.
var kitchenNames = [...]struct {
	name string
	dt   dtype.DType
}{{"F32", dtype.Float32}, {"F16", dtype.Float16}, {"BF16", dtype.BFloat16}, {"I8", dtype.Int8}, {"I32", dtype.Int32}, {"U8", dtype.Uint8}}

// KitchenDType maps a header dtype name to a kitchen dtype, if there is one.
func KitchenDType(name string) (dtype.DType, bool) {
	for _, p := range kitchenNames {
		if p.name == name {
			return p.dt, true
		}
	}
	return dtype.Invalid, false
}

// Name is the header dtype name of a kitchen dtype, or "" if it has none.
func Name(d dtype.DType) string {
	for _, p := range kitchenNames {
		if p.dt == d {
			return p.name
		}
	}
	return ""
}

// TensorInfo describes one tensor. Begin and End are byte offsets into the
// data section (after the header).
type TensorInfo struct {
	Name  string
	DType string
	Shape []int
	Begin int64
	End   int64
}

// Size is the tensor's length in bytes.
func (t TensorInfo) Size() int64 { return t.End - t.Begin }

// Numel is the number of elements.
func (t TensorInfo) Numel() int64 {
	n := int64(1)
	for _, d := range t.Shape {
		n *= int64(d)
	}
	return n
}

// Header is a parsed header.
type Header struct {
	// Metadata is the optional "__metadata__" map of strings.
	Metadata map[string]string
	// Tensors are in data order (by Begin).
	Tensors []TensorInfo
	// DataStart is the file offset of the data section: 8 + header length.
	DataStart int64

	byName map[string]int // index into Tensors, built by the parser
}

// Tensor returns the tensor of that name.
func (h *Header) Tensor(name string) (TensorInfo, bool) {
	i := h.Index(name)
	if i < 0 {
		return TensorInfo{}, false
	}
	return h.Tensors[i], true
}

// Index returns the index in Tensors of the tensor of that name, or -1.
func (h *Header) Index(name string) int {
	if h.byName == nil {
		h.byName = make(map[string]int, len(h.Tensors))
		for i, t := range h.Tensors {
			h.byName[t.Name] = i
		}
	}
	i, ok := h.byName[name]
	if !ok {
		return -1
	}
	return i
}

// DataSize is the length of the data section.
func (h *Header) DataSize() int64 {
	if len(h.Tensors) == 0 {
		return 0
	}
	return h.Tensors[len(h.Tensors)-1].End
}

// ReadHeader reads and validates the header of a file of the given size.
// path is used in errors only.
func ReadHeader(r io.ReaderAt, size int64, path string) (*Header, error) {
	return readHeader(context.Background(), r, size, path)
}

func readHeader(ctx context.Context, r io.ReaderAt, size int64, path string) (*Header, error) {
	bad := func(format string, a ...any) error {
		return &FormatError{Path: path, Problem: fmt.Sprintf(format, a...)}
	}
	var lenBuf [8]byte
	if size < 8 {
		return nil, bad("%d bytes is too short for the 8-byte header length", size)
	}
	if _, err := r.ReadAt(lenBuf[:], 0); err != nil {
		return nil, fmt.Errorf("%s: reading header length: %w", path, err)
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	switch {
	case n > MaxHeaderSize:
		return nil, bad("header length %d is over the %d-byte limit", n, MaxHeaderSize)
	case n > uint64(size-8):
		return nil, bad("header length %d runs past the end of the %d-byte file", n, size)
	case n < 2:
		return nil, bad("header length %d is too short for a JSON object", n)
	}
	raw := make([]byte, n)
	if _, err := r.ReadAt(raw, 8); err != nil {
		return nil, fmt.Errorf("%s: reading header: %w", path, err)
	}
	h, err := parseHeader(ctx, raw, path)
	if err != nil {
		return nil, err
	}
	h.DataStart = 8 + int64(n)
	if got, want := h.DataSize(), size-h.DataStart; got != want {
		return nil, bad("tensors cover %d bytes of data but the file holds %d after the header", got, want)
	}
	return h, nil
}

// dtypeNames maps each header dtype name to itself, so that every tensor
// of a dtype shares one string.
var dtypeNames = func() map[string]string {
	m := make(map[string]string, len(elementBits))
	for name := range elementBits {
		m[name] = name
	}
	return m
}()

// parseHeader reads the JSON header as the reference reader (serde_json
// into the reference's structs) does, with internal/strictjson: names match
// exactly ("DTYPE" is not "dtype"), an unknown field of a tensor's entry is
// ignored, as there, and a key that appears twice in any object is an
// error (the reference refuses a repeated field and keeps the last of a
// repeated tensor or metadata key; refusing them all leaves no reading on
// which two readers could differ). It checks every entry.
func parseHeader(ctx context.Context, raw []byte, path string) (*Header, error) {
	bad := func(tensor, format string, a ...any) error {
		return &FormatError{Path: path, Tensor: tensor, Problem: fmt.Sprintf(format, a...)}
	}
	if !utf8.Valid(raw) {
		return nil, bad("", "header is not valid UTF-8")
	}
	if raw[0] != '{' {
		return nil, bad("", "header does not start with a JSON object")
	}
	s := strictjson.NewScanner(raw)
	// Size the table and the list once: every entry names data_offsets,
	// in at least 47 bytes (a header can name it more often than it has
	// entries, but not more often than that).
	n := min(bytes.Count(raw, []byte(`"data_offsets"`)), len(raw)/47)
	h := &Header{byName: make(map[string]int, n), Tensors: make([]TensorInfo, 0, n)}
	var (
		metadata bool   // seen
		current  string // the tensor being read, for errors
		count    int
	)
	err := s.Members(func(name string) error {
		if count++; count%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("%s: reading header: %w", path, err) // every error names the file
			}
		}
		if name == "__metadata__" {
			if metadata {
				return bad(name, "appears twice in the header")
			}
			metadata = true
			return parseMetadata(s, h)
		}
		if _, dup := h.byName[name]; dup {
			return bad(name, "appears twice in the header")
		}
		current = name
		info, err := parseInfo(s, name)
		if err != nil {
			return err
		}
		current = ""
		h.byName[name] = len(h.Tensors)
		h.Tensors = append(h.Tensors, info)
		return nil
	})
	if err == nil {
		err = s.End()
	}
	var (
		syn  *strictjson.SyntaxError
		info *infoError
	)
	// An entry's problem first: it may wrap the syntax error behind it.
	switch {
	case errors.As(err, &info):
		return nil, &FormatError{Path: path, Tensor: current, Problem: err.Error(), Err: info.Unwrap()}
	case errors.As(err, &syn):
		return nil, &FormatError{Path: path, Tensor: current, Problem: "invalid JSON header: " + err.Error(), Err: syn}
	case err != nil:
		return nil, err
	}
	// The data must be covered exactly: sorted by offset, each tensor starts
	// where the previous one ends, the first at 0.
	slices.SortStableFunc(h.Tensors, func(a, b TensorInfo) int {
		return cmp.Or(cmp.Compare(a.Begin, b.Begin), cmp.Compare(a.End, b.End))
	})
	var end int64
	for i, t := range h.Tensors {
		switch {
		case t.Begin < end:
			return nil, bad(t.Name, "data [%d, %d) overlaps the previous tensor, which ends at %d", t.Begin, t.End, end)
		case t.Begin > end:
			return nil, bad(t.Name, "data starts at %d, leaving a gap after the previous tensor, which ends at %d", t.Begin, end)
		}
		end = t.End
		h.byName[t.Name] = i
	}
	return h, nil
}

// parseMetadata reads "__metadata__": null, or an object of strings.
func parseMetadata(s *strictjson.Scanner, h *Header) error {
	if null, err := s.Null(); null || err != nil {
		return err
	}
	if s.Peek() != '{' {
		return infoErrorf("__metadata__ must map strings to strings")
	}
	h.Metadata = map[string]string{}
	// Members, not Object: the map itself finds a repeated key.
	return s.Members(func(key string) error {
		if _, dup := h.Metadata[key]; dup {
			return infoErrorf("__metadata__: key %q appears twice", key)
		}
		if s.Peek() != '"' {
			return infoErrorf("__metadata__ must map strings to strings: %q is not a string", key)
		}
		v, err := s.String()
		h.Metadata[key] = v
		return err
	})
}

// infoError is a tensor entry's problem, other than its JSON syntax; it
// wraps what a %w in its format names, such as a number the JSON reader
// refused.
type infoError struct{ err error }

func (e *infoError) Error() string { return e.err.Error() }

func (e *infoError) Unwrap() error { return errors.Unwrap(e.err) }

func infoErrorf(format string, a ...any) error { return &infoError{fmt.Errorf(format, a...)} }

// parseInfo reads one tensor's entry and checks it.
func parseInfo(s *strictjson.Scanner, name string) (TensorInfo, error) {
	if s.Peek() != '{' {
		return TensorInfo{}, infoErrorf("invalid entry: want an object with dtype, shape and data_offsets")
	}
	info := TensorInfo{Name: name}
	var (
		dims  [8]int
		shape = dims[:0]
		offs  [2]int64
		nOffs int
		have  [3]bool // dtype, shape, data_offsets
	)
	err := s.Object(func(key string) error {
		switch key {
		case "dtype":
			have[0] = true
			d, err := s.String()
			if err != nil {
				return err
			}
			canon, ok := dtypeNames[d]
			if !ok {
				return infoErrorf("unknown dtype %q", d)
			}
			info.DType = canon
		case "shape":
			have[1] = true
			return s.Array(func(int) error {
				d, err := s.Uint()
				if err != nil {
					return infoErrorf("bad dimension in shape: %w", err)
				}
				if uint64(d) > math.MaxInt {
					return infoErrorf("bad dimension %d in shape", d)
				}
				shape = append(shape, int(d))
				return nil
			})
		case "data_offsets":
			have[2] = true
			return s.Array(func(i int) error {
				v, err := s.Uint()
				if err != nil {
					return infoErrorf("bad data_offsets: %w", err)
				}
				if i < 2 {
					offs[i] = v
				}
				nOffs = i + 1
				return nil
			})
		default:
			// The reference reader ignores fields it does not know.
			return s.Skip()
		}
		return nil
	})
	if err != nil {
		return TensorInfo{}, err
	}
	if !have[0] || !have[1] || !have[2] {
		return TensorInfo{}, infoErrorf("entry needs dtype, shape and data_offsets")
	}
	if nOffs != 2 {
		return TensorInfo{}, infoErrorf("data_offsets has %d numbers, want 2", nOffs)
	}
	if offs[1] < offs[0] {
		return TensorInfo{}, infoErrorf("data_offsets [%d, %d] out of order", offs[0], offs[1])
	}
	info.Begin, info.End = offs[0], offs[1]
	nbits, ok := tensorBits(info.DType, shape) // a known dtype, dimensions <= MaxInt
	if !ok {
		return TensorInfo{}, infoErrorf("shape %v is too large", shape)
	}
	info.Shape = []int{}
	if len(shape) > 0 {
		info.Shape = append(make([]int, 0, len(shape)), shape...)
	}
	if nbits%8 != 0 {
		return TensorInfo{}, infoErrorf("shape %v of %s is not a whole number of bytes", info.Shape, info.DType)
	}
	if nbytes := int64(nbits / 8); nbytes != info.Size() {
		return TensorInfo{}, infoErrorf("shape %v of %s needs %d bytes but data_offsets span %d", info.Shape, info.DType, nbytes, info.Size())
	}
	return info, nil
}
