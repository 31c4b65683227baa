package safetensors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// file builds a safetensors file from a raw header and data.
func file(header string, data []byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	b = append(b, header...)
	return append(b, data...)
}

func parse(b []byte) (*Header, error) {
	return ReadHeader(bytes.NewReader(b), int64(len(b)), "test.safetensors")
}

func TestReadHeaderValid(t *testing.T) {
	hdr := `{"__metadata__":{"format":"pt"},"b":{"dtype":"BF16","shape":[2],"data_offsets":[4,8]},"a":{"dtype":"F32","shape":[],"data_offsets":[0,4]},"z":{"dtype":"I8","shape":[0,3],"data_offsets":[8,8]}}  `
	h, err := parse(file(hdr, make([]byte, 8)))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, ti := range h.Tensors {
		names = append(names, ti.Name)
	}
	if !slices.Equal(names, []string{"a", "b", "z"}) || h.Metadata["format"] != "pt" || h.DataStart != int64(8+len(hdr)) {
		t.Errorf("parsed %v %v %d", names, h.Metadata, h.DataStart)
	}
	if a, _ := h.Tensor("a"); a.Numel() != 1 || len(a.Shape) != 0 {
		t.Errorf("scalar tensor: %+v", a)
	}
}

func TestReadHeaderErrors(t *testing.T) {
	huge := binary.LittleEndian.AppendUint64(nil, MaxHeaderSize+1)
	huge = append(huge, make([]byte, 16)...)
	past := binary.LittleEndian.AppendUint64(nil, 1000)
	past = append(past, `{}`...)
	ok := func(entries string, data int) []byte { return file(`{`+entries+`}`, make([]byte, data)) }
	cases := []struct {
		name string
		file []byte
		want string
	}{
		{"short file", []byte{1, 2, 3}, "too short"},
		{"header over limit", huge, "over the 100000000-byte limit"},
		{"header past end", past, "runs past the end"},
		{"not JSON", file("{nope", nil), "invalid JSON"},
		{"not an object", file(`["a"]   `, nil), "does not start with a JSON object"},
		{"trailing data", file(`{} {}`, nil), "data after the object"},
		{"not UTF-8", file("{\"\xff\":1}", nil), "not valid UTF-8"},
		{"unknown dtype", ok(`"a":{"dtype":"F128","shape":[1],"data_offsets":[0,16]}`, 16), `unknown dtype "F128"`},
		{"missing field", ok(`"a":{"dtype":"F32","shape":[1]}`, 4), "needs dtype, shape and data_offsets"},
		{"offsets reversed", ok(`"a":{"dtype":"U8","shape":[2],"data_offsets":[2,0]}`, 2), "out of order"},
		{"three offsets", ok(`"a":{"dtype":"U8","shape":[2],"data_offsets":[0,1,2]}`, 2), "has 3 numbers"},
		{"negative offset", ok(`"a":{"dtype":"U8","shape":[0],"data_offsets":[-1,-1]}`, 0), "out of order"},
		{"size mismatch", ok(`"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}`, 8), "needs 12 bytes but data_offsets span 8"},
		{"negative dim", ok(`"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}`, 4), "bad dimension"},
		{"overflowing shape", ok(`"a":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,8]}`, 8), "too large"},
		{"overlap", ok(`"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}`, 6), "overlaps"},
		{"gap", ok(`"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[4,6]}`, 6), "leaving a gap"},
		{"past data", ok(`"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}`, 4), "tensors cover 8 bytes of data but the file holds 4"},
		{"extra data", ok(`"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}`, 4), "tensors cover 2 bytes"},
		{"duplicate", ok(`"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}`, 2), "appears twice"},
		{"bad metadata", ok(`"__metadata__":{"n":1}`, 0), "__metadata__ must map strings to strings"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := parse(c.file)
			var fe *FormatError
			if !errors.As(err, &fe) || !errors.Is(err, ErrFormat) {
				t.Fatalf("got %v, want a FormatError", err)
			}
			if !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "test.safetensors: ") {
				t.Errorf("error %q does not name the file and say %q", err, c.want)
			}
		})
	}
}

func TestWriteRead(t *testing.T) {
	tensors := []TensorInfo{
		{Name: "w", DType: "F32", Shape: []int{2, 3}},
		{Name: "empty", DType: "BF16", Shape: []int{0}},
		{Name: "q", DType: "I8", Shape: []int{5}},
		{Name: "scalar", DType: "F16", Shape: []int{}},
	}
	data := map[string][]byte{"w": bytes.Repeat([]byte{1}, 24), "q": {1, 2, 3, 4, 5}, "scalar": {7, 8}}
	var buf bytes.Buffer
	w, err := NewWriter(&buf, map[string]string{"k": "v"}, tensors)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WriteTensor("q", nil); err == nil {
		t.Error("writing out of order succeeded")
	}
	for _, ti := range tensors {
		if err := w.WriteTensor(ti.Name, data[ti.Name]); err != nil {
			t.Fatalf("%s: %v", ti.Name, err)
		}
	}
	if err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	if n := binary.LittleEndian.Uint64(b); (8+n)%8 != 0 {
		t.Errorf("header length %d does not pad the data start to 8", n)
	}
	path := filepath.Join(t.TempDir(), "x.safetensors")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Metadata["k"] != "v" || len(f.Tensors) != 4 {
		t.Fatalf("read back %+v", f.Header)
	}
	for _, ti := range f.Tensors {
		got, err := f.Data(ti)
		if err != nil || !bytes.Equal(got, data[ti.Name]) {
			t.Errorf("%s: %v %v", ti.Name, got, err)
		}
		f.Release(ti)
	}
	if w.Written() != int64(len(b)) {
		t.Errorf("Written %d, file %d", w.Written(), len(b))
	}
}

func TestWriterRejects(t *testing.T) {
	var buf bytes.Buffer
	if _, err := NewWriter(&buf, nil, []TensorInfo{{Name: "a", DType: "X", Shape: []int{1}}}); err == nil {
		t.Error("unknown dtype accepted")
	}
	if _, err := NewWriter(&buf, nil, []TensorInfo{{Name: "a", DType: "U8"}, {Name: "a", DType: "U8"}}); err == nil {
		t.Error("duplicate name accepted")
	}
	w, _ := NewWriter(&buf, nil, []TensorInfo{{Name: "a", DType: "U8", Shape: []int{2}}})
	if err := w.WriteTensor("a", []byte{1, 2, 3}); err == nil {
		t.Error("overlong data accepted")
	}
	if err := w.Finish(); err == nil {
		t.Error("Finish with a tensor unwritten succeeded")
	}
}

// FuzzReadHeader feeds arbitrary bytes to the parser: it must never panic,
// and whatever it accepts must describe data inside the file, contiguously.
func FuzzReadHeader(f *testing.F) {
	f.Add(file(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, make([]byte, 4)))
	f.Add(file(`{"__metadata__":{"a":"b"},"x":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]},"y":{"dtype":"I8","shape":[3],"data_offsets":[8,11]}}`, make([]byte, 11)))
	f.Add(file(`{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}}`, make([]byte, 6)))
	f.Add(file(`{}`, nil))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	f.Add(file(`{"a":{"dtype":"F64","shape":[9223372036854775807],"data_offsets":[0,8]}}`, make([]byte, 8)))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := parse(b)
		if err != nil {
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("error is not a FormatError: %v", err)
			}
			return
		}
		var end int64
		for _, ti := range h.Tensors {
			if ti.Begin != end || ti.End < ti.Begin {
				t.Fatalf("accepted non-contiguous data: %+v", h.Tensors)
			}
			size, _ := DTypeSize(ti.DType)
			if ti.Numel()*int64(size) != ti.Size() {
				t.Fatalf("accepted a size mismatch: %+v", ti)
			}
			end = ti.End
		}
		if h.DataStart+end != int64(len(b)) {
			t.Fatalf("accepted data of %d bytes in a file of %d", end, len(b)-int(h.DataStart))
		}
	})
}
