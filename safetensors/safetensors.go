// Package safetensors reads and writes the safetensors checkpoint format:
// an 8-byte little-endian header length, a JSON header naming each tensor's
// dtype, shape and byte range, then the tensor data, contiguous.
//
// The reader treats every file as hostile: each number in the header is
// checked before use, and a bad file is a *FormatError naming the file and
// the problem, never a panic or a read out of bounds. Files are memory-mapped
// where the platform allows, so tensors are read in place and dropped from
// memory once used. The writer streams: it takes the complete header first
// (output sizes are known in advance) and then each tensor's bytes in order.
package safetensors

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/gokitchen/kitchen/dtype"
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
}

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

func (e *FormatError) Unwrap() error { return ErrFormat }

// elementSizes are the bytes per element of the dtypes the format defines,
// by their header names.
var elementSizes = map[string]int{
	"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "F8_E8M0": 1,
	"I16": 2, "U16": 2, "F16": 2, "BF16": 2,
	"I32": 4, "U32": 4, "F32": 4,
	"I64": 8, "U64": 8, "F64": 8, "C64": 8,
}

// DTypeSize returns the element size of a header dtype name, and false for
// names the format does not define.
func DTypeSize(name string) (int, bool) {
	n, ok := elementSizes[name]
	return n, ok
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
	if h.byName == nil {
		h.byName = make(map[string]int, len(h.Tensors))
		for i, t := range h.Tensors {
			h.byName[t.Name] = i
		}
	}
	i, ok := h.byName[name]
	if !ok {
		return TensorInfo{}, false
	}
	return h.Tensors[i], true
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
	h, err := parseHeader(raw, path)
	if err != nil {
		return nil, err
	}
	h.DataStart = 8 + int64(n)
	if got, want := h.DataSize(), size-h.DataStart; got != want {
		return nil, bad("tensors cover %d bytes of data but the file holds %d after the header", got, want)
	}
	return h, nil
}

type rawInfo struct {
	DType       *string  `json:"dtype"`
	Shape       *[]int64 `json:"shape"`
	DataOffsets *[]int64 `json:"data_offsets"`
}

// parseHeader decodes the JSON header token by token, so that duplicate
// names are caught (encoding/json would keep the last silently), and checks
// every entry.
func parseHeader(raw []byte, path string) (*Header, error) {
	bad := func(tensor, format string, a ...any) error {
		return &FormatError{Path: path, Tensor: tensor, Problem: fmt.Sprintf(format, a...)}
	}
	if !utf8.Valid(raw) {
		return nil, bad("", "header is not valid UTF-8")
	}
	trimmed := bytes.TrimRight(raw, " ")
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return nil, bad("", "header does not start with a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.UseNumber()
	if _, err := dec.Token(); err != nil {
		return nil, bad("", "invalid JSON header: %v", err)
	}
	h := &Header{}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, bad("", "invalid JSON header: %v", err)
		}
		name := tok.(string) // object keys are always strings
		if seen[name] {
			return nil, bad(name, "appears twice in the header")
		}
		seen[name] = true
		if name == "__metadata__" {
			if err := dec.Decode(&h.Metadata); err != nil {
				return nil, bad("", "__metadata__ must map strings to strings: %v", err)
			}
			continue
		}
		var ri rawInfo
		if err := dec.Decode(&ri); err != nil {
			return nil, bad(name, "invalid entry: %v", err)
		}
		info, err := checkInfo(name, ri)
		if err != nil {
			return nil, bad(name, "%v", err)
		}
		h.Tensors = append(h.Tensors, info)
	}
	if _, err := dec.Token(); err != nil {
		return nil, bad("", "invalid JSON header: %v", err)
	}
	if dec.More() {
		return nil, bad("", "invalid JSON header: data after the object")
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, bad("", "invalid JSON header: data after the object")
	}
	// The data must be covered exactly: sorted by offset, each tensor starts
	// where the previous one ends, the first at 0.
	slices.SortStableFunc(h.Tensors, func(a, b TensorInfo) int {
		return cmp.Or(cmp.Compare(a.Begin, b.Begin), cmp.Compare(a.End, b.End))
	})
	var end int64
	for _, t := range h.Tensors {
		switch {
		case t.Begin < end:
			return nil, bad(t.Name, "data [%d, %d) overlaps the previous tensor, which ends at %d", t.Begin, t.End, end)
		case t.Begin > end:
			return nil, bad(t.Name, "data starts at %d, leaving a gap after the previous tensor, which ends at %d", t.Begin, end)
		}
		end = t.End
	}
	return h, nil
}

func checkInfo(name string, ri rawInfo) (TensorInfo, error) {
	if ri.DType == nil || ri.Shape == nil || ri.DataOffsets == nil {
		return TensorInfo{}, errors.New("entry needs dtype, shape and data_offsets")
	}
	size, ok := elementSizes[*ri.DType]
	if !ok {
		return TensorInfo{}, fmt.Errorf("unknown dtype %q", *ri.DType)
	}
	offs := *ri.DataOffsets
	if len(offs) != 2 {
		return TensorInfo{}, fmt.Errorf("data_offsets has %d numbers, want 2", len(offs))
	}
	if offs[0] < 0 || offs[1] < offs[0] {
		return TensorInfo{}, fmt.Errorf("data_offsets [%d, %d] out of order", offs[0], offs[1])
	}
	info := TensorInfo{Name: name, DType: *ri.DType, Begin: offs[0], End: offs[1]}
	nbytes := uint64(size)
	for _, d := range *ri.Shape {
		if d < 0 || uint64(d) > math.MaxInt {
			return TensorInfo{}, fmt.Errorf("bad dimension %d in shape", d)
		}
		hi, lo := bits.Mul64(nbytes, uint64(d))
		if hi != 0 || lo > math.MaxInt64 {
			return TensorInfo{}, fmt.Errorf("shape %v is too large", *ri.Shape)
		}
		nbytes = lo
		info.Shape = append(info.Shape, int(d))
	}
	if info.Shape == nil {
		info.Shape = []int{}
	}
	if int64(nbytes) != info.Size() {
		return TensorInfo{}, fmt.Errorf("shape %v of %s needs %d bytes but data_offsets span %d", info.Shape, info.DType, nbytes, info.Size())
	}
	return info, nil
}
