package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
)

// Layout assigns contiguous data offsets to tensors in the order given
// (their Begin and End are overwritten) and checks each one's size against
// its dtype and shape.
func Layout(tensors []TensorInfo) ([]TensorInfo, error) {
	out := slices.Clone(tensors)
	var off int64
	seen := map[string]bool{}
	for i := range out {
		t := &out[i]
		if t.Name == "" || t.Name == "__metadata__" || seen[t.Name] {
			return nil, fmt.Errorf("safetensors: bad or duplicate tensor name %q", t.Name)
		}
		seen[t.Name] = true
		size, ok := elementSizes[t.DType]
		if !ok {
			return nil, fmt.Errorf("safetensors: tensor %q: unknown dtype %q", t.Name, t.DType)
		}
		n := int64(size)
		for _, d := range t.Shape {
			if d < 0 || (d > 0 && n > math.MaxInt64/int64(d)) {
				return nil, fmt.Errorf("safetensors: tensor %q: bad shape %v", t.Name, t.Shape)
			}
			n *= int64(d)
		}
		t.Begin, t.End = off, off+n
		off = t.End
	}
	return out, nil
}

// EncodeHeader returns the 8-byte length and the JSON header for tensors
// already laid out, metadata first and tensors in data order, padded with
// spaces so the data starts at a multiple of 8.
func EncodeHeader(metadata map[string]string, tensors []TensorInfo) ([]byte, error) {
	var b bytes.Buffer
	b.Write(make([]byte, 8))
	b.WriteByte('{')
	sep := ""
	if len(metadata) > 0 {
		m, err := json.Marshal(metadata)
		if err != nil {
			return nil, err
		}
		b.WriteString(`"__metadata__":`)
		b.Write(m)
		sep = ","
	}
	for _, t := range tensors {
		name, _ := json.Marshal(t.Name)
		shape := t.Shape
		if shape == nil {
			shape = []int{}
		}
		entry, err := json.Marshal(struct {
			DType       string   `json:"dtype"`
			Shape       []int    `json:"shape"`
			DataOffsets [2]int64 `json:"data_offsets"`
		}{t.DType, shape, [2]int64{t.Begin, t.End}})
		if err != nil {
			return nil, err
		}
		b.WriteString(sep)
		b.Write(name)
		b.WriteByte(':')
		b.Write(entry)
		sep = ","
	}
	b.WriteByte('}')
	for b.Len()%8 != 0 {
		b.WriteByte(' ')
	}
	out := b.Bytes()
	binary.LittleEndian.PutUint64(out, uint64(len(out)-8))
	return out, nil
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

// NewWriter lays out the tensors in the order given, writes the header and
// returns a Writer that expects their data in that order.
func NewWriter(w io.Writer, metadata map[string]string, tensors []TensorInfo) (*Writer, error) {
	laid, err := Layout(tensors)
	if err != nil {
		return nil, err
	}
	hdr, err := EncodeHeader(metadata, laid)
	if err != nil {
		return nil, err
	}
	if _, err := w.Write(hdr); err != nil {
		return nil, err
	}
	return &Writer{w: w, tensors: laid, n: int64(len(hdr))}, nil
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
