package safetensors

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gokitchen/kitchen/internal/strictjson"
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

// TestPackedDTypes: the packed dtypes of safetensors 0.6 (F4, F6_*) and
// the FNUZ float8 types are read, sized in bits, and written back.
func TestPackedDTypes(t *testing.T) {
	hdr := `{"a":{"dtype":"F4","shape":[3,2],"data_offsets":[0,3]},"b":{"dtype":"F6_E3M2","shape":[4],"data_offsets":[3,6]},"c":{"dtype":"F8_E4M3FNUZ","shape":[2],"data_offsets":[6,8]}}`
	h, err := parse(file(hdr, make([]byte, 8)))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []struct {
		name string
		size int64
	}{{"a", 3}, {"b", 3}, {"c", 2}} {
		if ti, ok := h.Tensor(want.name); !ok || ti.Size() != want.size {
			t.Errorf("%s: %+v", want.name, ti)
		}
	}
	var buf bytes.Buffer
	w, err := NewWriter(&buf, nil, []TensorInfo{{Name: "a", DType: "F4", Shape: []int{3, 2}}, {Name: "b", DType: "F6_E2M3", Shape: []int{4}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WriteTensor("a", []byte{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteTensor("b", []byte{4, 5, 6}); err != nil {
		t.Fatal(err)
	}
	if err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	back, err := parse(buf.Bytes())
	if err != nil || len(back.Tensors) != 2 || back.Tensors[1].Size() != 3 {
		t.Errorf("written back: %v %+v", err, back)
	}
	if _, err := NewWriter(io.Discard, nil, []TensorInfo{{Name: "a", DType: "F4", Shape: []int{3}}}); err == nil {
		t.Error("an F4 tensor of half a byte accepted by the writer")
	}
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
		{"trailing data", file(`{} {}`, nil), "data after the JSON value"},
		{"not UTF-8", file("{\"\xff\":1}", nil), "not valid UTF-8"},
		{"unknown dtype", ok(`"a":{"dtype":"F128","shape":[1],"data_offsets":[0,16]}`, 16), `unknown dtype "F128"`},
		{"missing field", ok(`"a":{"dtype":"F32","shape":[1]}`, 4), "needs dtype, shape and data_offsets"},
		{"offsets reversed", ok(`"a":{"dtype":"U8","shape":[2],"data_offsets":[2,0]}`, 2), "out of order"},
		{"three offsets", ok(`"a":{"dtype":"U8","shape":[2],"data_offsets":[0,1,2]}`, 2), "has 3 numbers"},
		{"negative offset", ok(`"a":{"dtype":"U8","shape":[0],"data_offsets":[-1,-1]}`, 0), "negative number -1"},
		{"offset not an integer", ok(`"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1.0]}`, 1), "1.0 is not an integer"},
		{"offset with exponent", ok(`"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1e0]}`, 1), "1e0 is not an integer"},
		{"offset too large", ok(`"a":{"dtype":"U8","shape":[1],"data_offsets":[0,99999999999999999999]}`, 1), "too large"},
		{"shape not an integer", ok(`"a":{"dtype":"U8","shape":[1.5],"data_offsets":[0,1]}`, 1), "bad dimension"},
		{"shape null", ok(`"a":{"dtype":"U8","shape":null,"data_offsets":[0,1]}`, 1), "invalid JSON header"},
		{"entry not an object", ok(`"a":[1]`, 0), "want an object"},
		// Issue 12: names match exactly, as in the reference reader (serde):
		// "DTYPE" is not "dtype", and is ignored as an unknown field.
		{"field names in capitals", ok(`"a":{"DTYPE":"U8","SHAPE":[1],"DATA_OFFSETS":[0,1]}`, 1), "needs dtype, shape and data_offsets"},
		{"repeated field", ok(`"a":{"dtype":"F32","dtype":"I8","shape":[1],"data_offsets":[0,4]}`, 4), `key "dtype" appears twice`},
		{"repeated shape", ok(`"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"shape":[1]}`, 1), `key "shape" appears twice`},
		{"repeated unknown field", ok(`"a":{"x":1,"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":2}`, 1), `key "x" appears twice`},
		{"repeated key deep in an unknown field", ok(`"a":{"x":[{"k":1,"k":2}],"dtype":"U8","shape":[1],"data_offsets":[0,1]}`, 1), `key "k" appears twice`},
		{"repeated metadata key", ok(`"__metadata__":{"k":"a","k":"b"}`, 0), `key "k" appears twice`},
		{"repeated metadata", ok(`"__metadata__":{},"__metadata__":{}`, 0), "appears twice"},
		{"nesting too deep", ok(`"a":{"x":`+strings.Repeat("[", 200)+strings.Repeat("]", 200)+`,"dtype":"U8","shape":[1],"data_offsets":[0,1]}`, 1), "nesting deeper than 128"},
		{"lone surrogate in a name", ok(`"\ud800":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}`, 1), "lone surrogate"},
		{"control character in a name", ok("\"a\x01\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}", 1), "control character"},
		{"dtype in lower case", ok(`"a":{"dtype":"f32","shape":[1],"data_offsets":[0,4]}`, 4), `unknown dtype "f32"`},
		{"leading zero", ok(`"a":{"dtype":"U8","shape":[01],"data_offsets":[0,1]}`, 1), "invalid JSON header"},
		{"NaN literal", ok(`"a":{"x":NaN,"dtype":"U8","shape":[1],"data_offsets":[0,1]}`, 1), "invalid JSON header"},
		{"size mismatch", ok(`"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}`, 8), "needs 12 bytes but data_offsets span 8"},
		{"negative dim", ok(`"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}`, 4), "bad dimension"},
		{"overflowing shape", ok(`"a":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,8]}`, 8), "too large"},
		{"overlap", ok(`"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}`, 6), "overlaps"},
		{"gap", ok(`"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[4,6]}`, 6), "leaving a gap"},
		{"past data", ok(`"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}`, 4), "tensors cover 8 bytes of data but the file holds 4"},
		{"extra data", ok(`"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}`, 4), "tensors cover 2 bytes"},
		{"duplicate", ok(`"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}`, 2), "appears twice"},
		{"bad metadata", ok(`"__metadata__":{"n":1}`, 0), "__metadata__ must map strings to strings"},
		{"F4 in half a byte", ok(`"a":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}`, 2), "shape [3] of F4 is not a whole number of bytes"},
		{"F6 in a byte and a half", ok(`"a":{"dtype":"F6_E2M3","shape":[2],"data_offsets":[0,2]}`, 2), "not a whole number of bytes"},
		{"F4 of the wrong span", ok(`"a":{"dtype":"F4","shape":[4],"data_offsets":[0,4]}`, 4), "needs 2 bytes but data_offsets span 4"},
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

// TestReadHeaderKeepsCause checks that a header problem the JSON reader
// found (a number that is no count, invalid JSON) wraps the reader's error
// beside ErrFormat.
func TestReadHeaderKeepsCause(t *testing.T) {
	for _, entry := range []string{
		`"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}`,
		`"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1.0]}`,
		`"a":{"dtype":"U8","shape":null,"data_offsets":[0,1]}`,
	} {
		_, err := parse(file(`{`+entry+`}`, make([]byte, 1)))
		var syn *strictjson.SyntaxError
		if !errors.Is(err, ErrFormat) || !errors.As(err, &syn) {
			t.Errorf("%s: %v; want ErrFormat wrapping a *strictjson.SyntaxError", entry, err)
		}
	}
}

// TestReadHeaderAsReference checks the header readings on which Go's
// encoding/json and the reference reader (serde_json into the reference's
// structs) differ (issue 12): kitchen must read what the reference reads.
func TestReadHeaderAsReference(t *testing.T) {
	for _, c := range []struct {
		name, header string
		data         int
		dtype        string
		shape        []int
		metadata     map[string]string
	}{
		// encoding/json matched "DTYPE" and "SHAPE" to the fields and kept
		// the last: I8 [4]. The reference ignores them: F32 [1].
		{"capitals ignored", `{"w":{"dtype":"F32","DTYPE":"I8","shape":[1],"SHAPE":[4],"data_offsets":[0,4]}}`, 4, "F32", []int{1}, nil},
		{"unknown fields ignored", `{"w":{"dtype":"U8","shape":[2],"data_offsets":[0,2],"extra":{"a":[1,2,{"b":null}]}}}`, 2, "U8", []int{2}, nil},
		{"null metadata", `{"__metadata__":null,"w":{"dtype":"U8","shape":[],"data_offsets":[0,1]}}`, 1, "U8", []int{}, nil},
		{"escapes", `{"__metadata__":{"k\u00e9":"\ud83d\ude00\n"},"w\/x":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, 1, "U8", []int{1}, map[string]string{"k\u00e9": "\U0001F600\n"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			h, err := parse(file(c.header, make([]byte, c.data)))
			if err != nil {
				t.Fatal(err)
			}
			if len(h.Tensors) != 1 || h.Tensors[0].DType != c.dtype || !slices.Equal(h.Tensors[0].Shape, c.shape) {
				t.Errorf("read %+v, want %s %v", h.Tensors, c.dtype, c.shape)
			}
			if c.metadata != nil && !maps.Equal(h.Metadata, c.metadata) {
				t.Errorf("metadata %q, want %q", h.Metadata, c.metadata)
			}
		})
	}
}

// TestOpenNotRegular checks that Open refuses what is not a regular file
// at once, naming what it is; a named pipe used to block Open forever.
func TestOpenNotRegular(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "pipe.safetensors")
	if err := mkfifo(fifo); err != nil {
		t.Skip("no named pipes here:", err)
	}
	for _, c := range []struct{ path, want string }{{fifo, "a named pipe (FIFO), not a regular file"}, {dir, "a directory"}} {
		done := make(chan error, 1)
		go func() {
			f, err := Open(c.path)
			if err == nil {
				f.Close()
			}
			done <- err
		}()
		select {
		case err := <-done:
			var fe *FormatError
			if !errors.As(err, &fe) || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), c.path+": ") {
				t.Errorf("Open(%s): %v, want a FormatError saying %q", c.path, err, c.want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("Open(%s) blocks", c.path)
		}
	}
}

// TestOpenContextCancelled checks that reading a long header stops when
// the context ends, with an error that names the file as every other
// error of OpenContext does.
func TestOpenContextCancelled(t *testing.T) {
	var infos []TensorInfo
	for i := range 10000 {
		infos = append(infos, TensorInfo{Name: fmt.Sprint("t", i), DType: "U8", Shape: []int{0}})
	}
	var buf bytes.Buffer
	if _, err := NewWriter(&buf, nil, infos); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "x.safetensors")
	if err := os.WriteFile(path, buf.Bytes(), 0o666); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := OpenContext(ctx, path); !errors.Is(err, context.Canceled) || !strings.HasPrefix(err.Error(), path+": ") {
		t.Errorf("OpenContext with a cancelled context: %v", err)
	}
	var none context.Context
	if _, err := OpenContext(none, path); err == nil || !strings.Contains(err.Error(), "nil context") {
		t.Errorf("OpenContext with a nil context: %v", err)
	}
	f, err := Open(path)
	if err != nil || len(f.Tensors) != 10000 {
		t.Fatalf("Open: %v", err)
	}
	f.Close()
}

// TestHeaderLimit checks that the writer refuses a header over the limit
// that every reader enforces, before writing anything.
func TestHeaderLimit(t *testing.T) {
	var buf bytes.Buffer
	meta := map[string]string{"k": strings.Repeat("x", MaxHeaderSize)}
	_, err := NewWriter(&buf, meta, []TensorInfo{{Name: "a", DType: "U8", Shape: []int{1}}})
	var he *HeaderSizeError
	if !errors.As(err, &he) || !errors.Is(err, ErrHeaderTooLarge) || he.Size <= MaxHeaderSize || buf.Len() != 0 {
		t.Fatalf("got %v with %d bytes written, want a HeaderSizeError and nothing written", err, buf.Len())
	}
	laid, _ := Layout([]TensorInfo{{Name: "a", DType: "U8", Shape: []int{1}}})
	if n := HeaderSize(meta, laid); n != he.Size {
		t.Errorf("HeaderSize %d, the error's %d", n, he.Size)
	}
	if raceOn {
		return // the rest takes a minute under the race detector
	}
	meta["k"] = strings.Repeat("x", MaxHeaderSize-100)
	if _, err := NewWriter(&buf, meta, nil); err != nil {
		t.Errorf("a header just under the limit: %v", err)
	}
	h, err := parse(buf.Bytes())
	if err != nil || len(h.Metadata["k"]) != MaxHeaderSize-100 {
		t.Errorf("read back: %v", err)
	}
}

// TestEncodeHeaderAsJSON checks the streaming header encoder against
// encoding/json on strings that need escaping, strings longer than the
// encoder's parts (with a multi-byte character across each boundary), and
// the empty name.
func TestEncodeHeaderAsJSON(t *testing.T) {
	long := strings.Repeat("é", 40000) + "<&>" + strings.Repeat("\u2028x", 30000)
	names := []string{"", "a\"b\\c", "<script>&", "\x00\x1f\b\f\n\r\t", "\u2028\u2029", "\xff\xfe", "日本", long}
	meta := map[string]string{"z": long, "a": "\x1b[2J", "": ""}
	var tensors []TensorInfo
	for i, n := range names {
		tensors = append(tensors, TensorInfo{Name: n, DType: "U8", Shape: []int{i, 1}})
	}
	laid, err := Layout(tensors)
	if err != nil {
		t.Fatal(err)
	}
	got, err := EncodeHeader(meta, laid)
	if err != nil {
		t.Fatal(err)
	}
	// What the encoder replaced: json.Marshal of each part.
	var want bytes.Buffer
	want.Write(make([]byte, 8))
	m, _ := json.Marshal(meta)
	want.WriteString(`{"__metadata__":` + string(m))
	for _, ti := range laid {
		name, _ := json.Marshal(ti.Name)
		entry, _ := json.Marshal(struct {
			DType       string   `json:"dtype"`
			Shape       []int    `json:"shape"`
			DataOffsets [2]int64 `json:"data_offsets"`
		}{ti.DType, ti.Shape, [2]int64{ti.Begin, ti.End}})
		want.WriteString("," + string(name) + ":" + string(entry))
	}
	want.WriteByte('}')
	for want.Len()%8 != 0 {
		want.WriteByte(' ')
	}
	binary.LittleEndian.PutUint64(want.Bytes(), uint64(want.Len()-8))
	if !bytes.Equal(got, want.Bytes()) {
		i := 0
		for i < min(len(got), want.Len()) && got[i] == want.Bytes()[i] {
			i++
		}
		t.Fatalf("header differs from encoding/json's at byte %d of %d/%d: %q vs %q", i, len(got), want.Len(), got[i:min(i+40, len(got))], want.Bytes()[i:min(i+40, want.Len())])
	}
	if n := HeaderSize(meta, laid); n != int64(len(got)-8) {
		t.Errorf("HeaderSize %d, header %d", n, len(got)-8)
	}
	// Valid UTF-8 names come back as they were.
	h, err := parse(append(got, make([]byte, laid[len(laid)-1].End)...))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if _, ok := h.Tensor(n); !ok && utf8.ValidString(n) {
			t.Errorf("name %q not read back", n)
		}
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
	if _, err := NewWriter(&buf, nil, []TensorInfo{{Name: "b", DType: "U8"}, {Name: "a", DType: "U8"}, {Name: "b", DType: "U8"}}); err == nil {
		t.Error("duplicate name apart accepted")
	}
	if _, err := NewWriter(&buf, nil, []TensorInfo{{Name: "__metadata__", DType: "U8"}}); err == nil {
		t.Error("a tensor named __metadata__ accepted")
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
	// Issue 12: the readings on which encoding/json and the reference
	// differ, and what the reference refuses.
	f.Add(file(`{"w":{"dtype":"F32","DTYPE":"I8","shape":[1],"SHAPE":[4],"data_offsets":[0,4]}}`, make([]byte, 4)))
	f.Add(file(`{"w":{"dtype":"F32","dtype":"I8","shape":[1],"data_offsets":[0,4]}}`, make([]byte, 4)))
	f.Add(file(`{"__metadata__":{"k":"a","k":"b"},"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":[{"y":1}]}}`, make([]byte, 1)))
	f.Add(file(`{"\ud800":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"":{"dtype":"U8","shape":[],"data_offsets":[1,2]}}`, make([]byte, 2)))
	f.Add(file(`{"__metadata__":null,"w":{"dtype":"U8","shape":[1.0],"data_offsets":[0,1e0]}}`, make([]byte, 1)))
	f.Add(file(`{"p":{"dtype":"F4","shape":[2,3],"data_offsets":[0,3]},"q":{"dtype":"F6_E2M3","shape":[4],"data_offsets":[3,6]}}`, make([]byte, 6)))
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
			if n, ok := TensorBytes(ti.DType, ti.Shape); !ok || n != ti.Size() {
				t.Fatalf("accepted a size mismatch: %+v", ti)
			}
			end = ti.End
		}
		if h.DataStart+end != int64(len(b)) {
			t.Fatalf("accepted data of %d bytes in a file of %d", end, len(b)-int(h.DataStart))
		}
		// What is accepted is written back as it was read.
		hdr, err := EncodeHeader(h.Metadata, h.Tensors)
		if err != nil {
			t.Fatalf("encoding what was read: %v", err)
		}
		h2, err := parse(append(hdr, b[h.DataStart:]...))
		if err != nil {
			t.Fatalf("reading back what was written: %v", err)
		}
		if !maps.Equal(h.Metadata, h2.Metadata) || !slices.EqualFunc(h.Tensors, h2.Tensors, func(a, b TensorInfo) bool {
			return a.Name == b.Name && a.DType == b.DType && slices.Equal(a.Shape, b.Shape) && a.Begin == b.Begin && a.End == b.End
		}) {
			t.Fatalf("read back %+v %v, want %+v %v", h2.Tensors, h2.Metadata, h.Tensors, h.Metadata)
		}
	})
}
