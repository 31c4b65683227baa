package convert_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gokitchen/kitchen/backend"
	"github.com/gokitchen/kitchen/convert"
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/safetensors"
)

// The hostile inputs of issue 12, each a case that failed before its fix.

// rawTensor is a tensor of any dtype, given as its bytes.
type rawTensor struct {
	name  string
	dtype string
	shape []int
	data  []byte
}

func writeRaw(t testing.TB, path string, meta map[string]string, tensors ...rawTensor) {
	t.Helper()
	var infos []safetensors.TensorInfo
	for _, r := range tensors {
		infos = append(infos, safetensors.TensorInfo{Name: r.name, DType: r.dtype, Shape: r.shape})
	}
	var buf bytes.Buffer
	w, err := safetensors.NewWriter(&buf, meta, infos)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range tensors {
		if err := w.WriteTensor(r.name, r.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func f32s(v ...float32) []byte {
	var b []byte
	for _, x := range v {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
	}
	return b
}

// int8Layer is the tensors of an int8_tensorwise layer P of rows x k with
// q = 1, 2, 3, ..., the given scale tensor and marker.
func int8Layer(p string, rows, k int, scale rawTensor, marker string) []rawTensor {
	q := make([]byte, rows*k)
	for i := range q {
		q[i] = byte(i%200 - 100)
	}
	scale.name = p + ".weight_scale"
	return []rawTensor{
		{p + ".weight", "I8", []int{rows, k}, q},
		scale,
		{p + ".comfy_quant", "U8", []int{len(marker)}, []byte(marker)},
	}
}

// Item 1: an output whose header would be over the 100 MB limit is refused
// before anything is written, with the numbers.
func TestHeaderOverLimitRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("writes a 36 MB header")
	}
	dir := t.TempDir()
	in := filepath.Join(dir, "in.safetensors")
	long := strings.Repeat("n", 30000)
	var tensors []rawTensor
	for i := range 1200 {
		tensors = append(tensors, rawTensor{fmt.Sprintf("b%d.%s.weight", i, long), "F32", []int{2, 2}, f32s(1, 2, 3, 4)})
	}
	writeRaw(t, in, nil, tensors...)
	out := filepath.Join(dir, "out.safetensors")
	for _, dry := range []bool{true, false} {
		_, err := convert.Quantize(context.Background(), in, out, convert.Options{DryRun: dry, Selection: convert.Selection{Include: regexp.MustCompile(`^b`)}})
		var he *safetensors.HeaderSizeError
		if !errors.As(err, &he) || he.Path != out || he.Size <= safetensors.MaxHeaderSize || !strings.Contains(err.Error(), "100000000") {
			t.Fatalf("dry run %v: got %v, want a HeaderSizeError naming %s", dry, err, out)
		}
	}
	assertOnly(t, dir, "in.safetensors")
	// Copied, the layers fit.
	if _, err := convert.Quantize(context.Background(), in, out, convert.Options{Selection: convert.Selection{Exclude: regexp.MustCompile(`^b`)}}); err != nil {
		t.Fatal(err)
	}
}

// Item 3: a named pipe as input fails at once.
func TestFIFOInputRefused(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "pipe.safetensors")
	if err := mkfifo(fifo); err != nil {
		t.Skip("no named pipes here:", err)
	}
	index := filepath.Join(dir, "pipe.safetensors.index.json")
	if err := mkfifo(index); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		run  func() error
	}{
		{"inspect", func() error { _, err := convert.Inspect(context.Background(), fifo); return err }},
		{"inspect an index", func() error { _, err := convert.Inspect(context.Background(), index); return err }},
		{"quantize", func() error {
			_, err := convert.Quantize(context.Background(), fifo, filepath.Join(dir, "o.safetensors"), convert.Options{})
			return err
		}},
		{"dequantize an index", func() error {
			_, err := convert.Dequantize(context.Background(), index, filepath.Join(dir, "o.safetensors.index.json"), convert.Options{})
			return err
		}},
	} {
		done := make(chan error, 1)
		go func() { done <- c.run() }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), "named pipe") {
				t.Errorf("%s: %v, want a named pipe refused", c.name, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s of a named pipe blocks", c.name)
		}
	}
}

// Item 4: a scale that is not a finite number > 0 is an error naming the
// scale tensor, and nothing is written.
func TestDequantizeBadScale(t *testing.T) {
	marker := `{"format":"int8_tensorwise"}`
	for _, c := range []struct {
		name  string
		scale rawTensor
	}{
		{"NaN", rawTensor{dtype: "F32", shape: []int{}, data: f32s(float32(math.NaN()))}},
		{"infinity", rawTensor{dtype: "F32", shape: []int{}, data: f32s(float32(math.Inf(1)))}},
		{"zero", rawTensor{dtype: "F32", shape: []int{}, data: f32s(0)}},
		{"negative", rawTensor{dtype: "F32", shape: []int{}, data: f32s(-0.5)}},
		{"a bad row", rawTensor{dtype: "F32", shape: []int{4, 1}, data: f32s(1, 2, -3, 4)}},
		{"bfloat16 zero", rawTensor{dtype: "BF16", shape: []int{}, data: []byte{0, 0}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			in := filepath.Join(dir, "in.safetensors")
			writeRaw(t, in, nil, int8Layer("blk", 4, 8, c.scale, marker)...)
			_, err := convert.Dequantize(context.Background(), in, filepath.Join(dir, "out.safetensors"), convert.Options{})
			var le *convert.LayerError
			if !errors.As(err, &le) || le.Layer != "blk" || !errors.Is(err, backend.ErrScale) || !strings.Contains(err.Error(), `"blk.weight_scale"`) {
				t.Fatalf("got %v, want a LayerError on blk, ErrScale naming blk.weight_scale", err)
			}
			// inspect says the same before anything is converted.
			sum, err := convert.Inspect(context.Background(), in)
			if err != nil {
				t.Fatal(err)
			}
			if ls := sum.Layers; len(ls) != 1 || !strings.Contains(ls[0].Problem, `"blk.weight_scale"`) {
				t.Errorf("inspect: %+v, want the scale's problem", ls)
			}
			assertOnly(t, dir, "in.safetensors")
		})
	}
}

// Item 5: an interrupt after the last tensor, during the final syncs,
// commits nothing.
func TestCancelBeforeCommit(t *testing.T) {
	for _, sharded := range []bool{false, true} {
		dir := t.TempDir()
		in := tiny
		out := filepath.Join(dir, "out.safetensors")
		if sharded {
			shardFile(t, dir, "a.safetensors", map[string][]float32{"blocks.0.a.weight": make([]float32, 128*128)}, map[string][]int{"blocks.0.a.weight": {128, 128}})
			shardFile(t, dir, "b.safetensors", map[string][]float32{"blocks.1.b.weight": make([]float32, 128*128)}, map[string][]int{"blocks.1.b.weight": {128, 128}})
			in = filepath.Join(dir, "m.safetensors.index.json")
			writeIndex(t, in, map[string]string{"blocks.0.a.weight": "a.safetensors", "blocks.1.b.weight": "b.safetensors"})
			out = filepath.Join(dir, "o.safetensors.index.json")
		}
		ctx, cancel := context.WithCancel(context.Background())
		opts := convert.Options{Progress: func(p convert.Progress) {
			if p.TensorsDone == p.TensorsTotal {
				cancel()
			}
		}}
		if _, err := convert.Quantize(ctx, in, out, opts); !errors.Is(err, context.Canceled) {
			t.Fatalf("sharded %v: got %v, want context.Canceled", sharded, err)
		}
		if sharded {
			assertOnly(t, dir, "a.safetensors", "b.safetensors", "m.safetensors.index.json")
		} else {
			assertOnly(t, dir)
		}
	}
}

// Item 5: temporary files that a killed run left behind are removed by the
// next run into the same output; those of a live run (locked), of other
// outputs, or not kitchen's are not.
func TestStaleTemporariesRemoved(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out.safetensors")
	for _, name := range []string{".out.safetensors.kitchen-tmp-123", ".out.safetensors.kitchen-tmp-9", ".other.safetensors.kitchen-tmp-5", ".out.safetensors.kitchen-tmp-x"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("partial"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	live, unlock := lockedFile(t, filepath.Join(dir, ".out.safetensors.kitchen-tmp-77"))
	defer unlock()
	sum, err := convert.Quantize(context.Background(), tiny, out, convert.Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{".other.safetensors.kitchen-tmp-5", ".out.safetensors.kitchen-tmp-x", "out.safetensors"}
	removed := []string{filepath.Join(dir, ".out.safetensors.kitchen-tmp-123"), filepath.Join(dir, ".out.safetensors.kitchen-tmp-9")}
	if live {
		want = append(want, ".out.safetensors.kitchen-tmp-77")
	} else {
		removed = []string{} // nothing can be told apart here
		want = append(want, ".out.safetensors.kitchen-tmp-123", ".out.safetensors.kitchen-tmp-9", ".out.safetensors.kitchen-tmp-77")
	}
	assertOnly(t, dir, want...)
	if fmt.Sprint(sum.RemovedTemporaries) != fmt.Sprint(removed) {
		t.Errorf("RemovedTemporaries %v, want %v", sum.RemovedTemporaries, removed)
	}
}

// Item 6: the comfy_quant marker is read as ComfyUI reads it: exact keys,
// no repeated key; what kitchen would not read is refused by dequantize
// and flagged, with the reason, by inspect.
func TestStrictMarker(t *testing.T) {
	scale := rawTensor{dtype: "F32", shape: []int{}, data: f32s(0.5)}
	for _, c := range []struct{ marker, want string }{
		{`{"format":"float8_e4m3fn","FORMAT":"int8_tensorwise"}`, `format "float8_e4m3fn": kitchen reads only "int8_tensorwise"`},
		{`{"FORMAT":"int8_tensorwise"}`, `no "format" string`},
		{`{"format":"float8_e4m3fn","format":"int8_tensorwise"}`, `key "format" appears twice`},
		{`{"format":"int8_tensorwise","convrot":"yes"}`, "want true or false"},
		{`{"format":"int8_tensorwise","convrot":true,"convrot_groupsize":3}`, "not a power of 4"},
		{`{"format":"int8_tensorwise","scale_dtype":"bf16"}`, `key "scale_dtype" is not understood`},
		{`{"format":"int8_tensorwise"} x`, "data after"},
		{`["int8_tensorwise"]`, "not a JSON object"},
	} {
		dir := t.TempDir()
		in := filepath.Join(dir, "in.safetensors")
		writeRaw(t, in, nil, int8Layer("blk", 2, 4, scale, c.marker)...)
		_, err := convert.Dequantize(context.Background(), in, filepath.Join(dir, "out.safetensors"), convert.Options{})
		var le *convert.LayerError
		if !errors.As(err, &le) || le.Layer != "blk" || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "blk.comfy_quant") {
			t.Errorf("marker %s: got %v, want a LayerError saying %q", c.marker, err, c.want)
		}
		r, err := convert.Inspect(context.Background(), in)
		if err != nil || len(r.Layers) != 1 || !strings.Contains(r.Layers[0].Problem, c.want) {
			t.Errorf("inspect of marker %s: %v %+v", c.marker, err, r)
		}
		assertOnly(t, dir, "in.safetensors")
	}
}

// Item 6 (and 9): the index is read strictly, and must describe its shards
// exactly, for inspect as for a conversion.
func TestStrictIndex(t *testing.T) {
	dir := t.TempDir()
	shardFile(t, dir, "a.safetensors", map[string][]float32{"a.weight": {1}, "c.weight": {1}}, map[string][]int{"a.weight": {1}, "c.weight": {1}})
	shardFile(t, dir, "b.safetensors", map[string][]float32{"b.weight": {1}, "c.weight": {1}}, map[string][]int{"b.weight": {1}, "c.weight": {1}})
	shardFile(t, dir, "e.safetensors", map[string][]float32{"e.weight": {1}}, map[string][]int{"e.weight": {1}})
	in := filepath.Join(dir, "m.safetensors.index.json")
	for _, c := range []struct{ index, want string }{
		{`{"WEIGHT_MAP":{"a.weight":"a.safetensors"}}`, "missing weight_map"},
		{`{"weight_map":{"a.weight":"a.safetensors","a.weight":"b.safetensors"}}`, `key "a.weight" appears twice`},
		{`{"weight_map":{"a.weight":"a.safetensors"},"weight_map":{}}`, `key "weight_map" appears twice`},
		{`{"weight_map":{"a.weight":1}}`, "not a string"},
		{`{"weight_map":{"a.weight":"../a.safetensors"}}`, "beside the index"},
		{`{"metadata":[],"weight_map":{"a.weight":"a.safetensors"}}`, "metadata is not an object"},
		// c.weight is in both shards; the index can place it in one only.
		{`{"weight_map":{"a.weight":"a.safetensors","b.weight":"b.safetensors","c.weight":"a.safetensors"}}`, `shard b.safetensors holds tensor "c.weight", which the index places in a.safetensors`},
		// c.weight missing from the index.
		{`{"weight_map":{"a.weight":"a.safetensors","b.weight":"b.safetensors"}}`, `holds tensor "c.weight", which the index does not list`},
		{`{"weight_map":{"e.weight":"e.safetensors","d.weight":"e.safetensors"}}`, `"d.weight" in e.safetensors, which does not hold it`},
	} {
		if err := os.WriteFile(in, []byte(c.index), 0o644); err != nil {
			t.Fatal(err)
		}
		for what, err := range map[string]error{
			"inspect": func() error { _, err := convert.Inspect(context.Background(), in); return err }(),
			"quantize": func() error {
				_, err := convert.Quantize(context.Background(), in, filepath.Join(t.TempDir(), "o.safetensors.index.json"), convert.Options{})
				return err
			}(),
		} {
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s of index %s: %v, want an error saying %q", what, c.index, err, c.want)
			}
		}
	}
}

// Item 7: dequantizing to float16 values past its range is an error naming
// the tensor, unless AllowInf.
func TestDequantizeOverflow(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.safetensors")
	scale := rawTensor{dtype: "F32", shape: []int{}, data: f32s(1e6 / 127)}
	writeRaw(t, in, nil, int8Layer("blk", 4, 8, scale, `{"format":"int8_tensorwise"}`)...)
	out := filepath.Join(dir, "out.safetensors")
	_, err := convert.Dequantize(context.Background(), in, out, convert.Options{OutDType: dtype.Float16})
	if !errors.Is(err, convert.ErrOverflow) || !strings.Contains(err.Error(), `"blk.weight"`) || !strings.Contains(err.Error(), "row 0, column 0") {
		t.Fatalf("got %v, want ErrOverflow naming blk.weight", err)
	}
	assertOnly(t, dir, "in.safetensors")
	for _, o := range []convert.Options{{OutDType: dtype.Float16, AllowInf: true}, {OutDType: dtype.BFloat16}} {
		if _, err := convert.Dequantize(context.Background(), in, out, o); err != nil {
			t.Fatalf("%+v: %v", o, err)
		}
		_, b := data(t, open(t, out), "blk.weight")
		infs := 0
		for i := range len(b) / 2 {
			if math.IsInf(float64(dtype.Load(b, o.OutDType, i)), 0) {
				infs++
			}
		}
		if want := map[bool]int{true: 32, false: 0}[o.AllowInf]; infs != want {
			t.Errorf("%+v: %d infinities, want %d", o, infs, want)
		}
		os.Remove(out)
	}
}

// TestDequantizeFloat32Overflow: an int8 layer whose scale times 127
// overflows float32 is refused at float32 too, without advice to choose a
// wider type, since there is none.
func TestDequantizeFloat32Overflow(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.safetensors")
	scale := rawTensor{dtype: "F32", shape: []int{}, data: f32s(math.MaxFloat32 / 64)}
	writeRaw(t, in, nil, int8Layer("blk", 4, 8, scale, `{"format":"int8_tensorwise"}`)...)
	_, err := convert.Dequantize(context.Background(), in, filepath.Join(dir, "out.safetensors"), convert.Options{OutDType: dtype.Float32})
	if !errors.Is(err, convert.ErrOverflow) || !strings.Contains(err.Error(), "--allow-inf") || strings.Contains(err.Error(), "dequantize to") {
		t.Fatalf("got %v, want ErrOverflow with only --allow-inf as the remedy", err)
	}
	assertOnly(t, dir, "in.safetensors")
}

// TestQuantizeOverflowRefused: a float32 weight with values within
// rounding of float32's largest gets a scale whose int8 values dequantize
// to infinity (127·fl(a/127) > a rounds up past the largest float32), which
// is what ComfyUI would load; quantize refuses it, naming the tensor and
// the row, and writes nothing. (Found by FuzzFiles.)
func TestQuantizeOverflowRefused(t *testing.T) {
	w := make([]float32, 4*8)
	for i := range w {
		w[i] = float32(i%5) - 2
	}
	w[2*8+5] = -math.MaxFloat32
	for _, perTensor := range []bool{false, true} {
		dir := t.TempDir()
		in := filepath.Join(dir, "in.safetensors")
		writeRaw(t, in, nil, rawTensor{"blocks.0.a.weight", "F32", []int{4, 8}, f32s(w...)}, rawTensor{"blocks.0.a.bias", "F32", []int{4}, f32s(1, 2, 3, 4)})
		opts := convert.Options{Selection: convert.Selection{MinElements: 1, MinFeatures: 1}, PerTensor: perTensor}
		_, err := convert.Quantize(context.Background(), in, filepath.Join(dir, "out.safetensors"), opts)
		if !errors.Is(err, convert.ErrOverflow) || !strings.Contains(err.Error(), `"blocks.0.a.weight"`) || !strings.Contains(err.Error(), "row 2 ") {
			t.Errorf("per tensor %v: got %v, want ErrOverflow naming blocks.0.a.weight and row 2", perTensor, err)
		}
		assertOnly(t, dir, "in.safetensors")
	}
	// The largest finite value that still quantizes: 127 times its scale
	// stays finite.
	w[2*8+5] = -math.MaxFloat32 / 2
	dir := t.TempDir()
	in := filepath.Join(dir, "in.safetensors")
	writeRaw(t, in, nil, rawTensor{"blocks.0.a.weight", "F32", []int{4, 8}, f32s(w...)})
	sum, err := convert.Quantize(context.Background(), in, filepath.Join(dir, "out.safetensors"), convert.Options{Selection: convert.Selection{MinElements: 1, MinFeatures: 1}})
	if err != nil || sum.Quantized != 1 {
		t.Fatalf("quantizing half of float32's largest: %v, %+v", err, sum)
	}
}

// Item 8: outputs, the index included, are created with mode 0666 less
// the umask, as os.Create makes files.
func TestOutputModeFollowsUmask(t *testing.T) {
	for _, umask := range []int{0o077, 0o022, 0o002} {
		old, ok := setUmask(umask)
		if !ok {
			t.Skip("no umask here")
		}
		dir := t.TempDir()
		shardFile(t, dir, "a.safetensors", map[string][]float32{"a.weight": {1}}, map[string][]int{"a.weight": {1}})
		in := filepath.Join(dir, "m.safetensors.index.json")
		writeIndex(t, in, map[string]string{"a.weight": "a.safetensors"})
		outDir := t.TempDir()
		out := filepath.Join(outDir, "o.safetensors.index.json")
		_, err := convert.Quantize(context.Background(), in, out, convert.Options{})
		setUmask(old)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"o.safetensors.index.json", "o-00001-of-00001.safetensors"} {
			st, err := os.Stat(filepath.Join(outDir, name))
			if err != nil {
				t.Fatal(err)
			}
			if want := os.FileMode(0o666 &^ umask); st.Mode().Perm() != want {
				t.Errorf("umask %03o: %s has mode %v, want %v", umask, name, st.Mode().Perm(), want)
			}
		}
	}
}

// Item 9: the smaller ones.

// An output name of 252 bytes: the temporary name must still fit in 255.
func TestLongOutputName(t *testing.T) {
	dir := t.TempDir()
	name := strings.Repeat("é", 120) + "x.safetensors" // 253 bytes
	out := filepath.Join(dir, name)
	if _, err := convert.Quantize(context.Background(), tiny, out, convert.Options{}); err != nil {
		t.Fatal(err)
	}
	assertOnly(t, dir, name)
}

// A tensor named "" is valid safetensors (the reference reads it) and is
// copied.
func TestEmptyTensorName(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.safetensors")
	writeRaw(t, in, nil, rawTensor{"", "F32", []int{1}, f32s(7)}, rawTensor{"blocks.0.w.weight", "F32", []int{128, 128}, f32s(make([]float32, 128*128)...)})
	out := filepath.Join(dir, "out.safetensors")
	sum, err := convert.Quantize(context.Background(), in, out, convert.Options{})
	if err != nil || sum.Quantized != 1 || sum.Copied != 1 {
		t.Fatalf("%v %+v", err, sum)
	}
	if _, b := data(t, open(t, out), ""); !bytes.Equal(b, f32s(7)) {
		t.Errorf("tensor \"\" holds %v", b)
	}
}

// A backend asked for by name must exist even when nothing is quantized.
func TestUnknownBackendRefused(t *testing.T) {
	dir := t.TempDir()
	_, err := convert.Quantize(context.Background(), tiny, filepath.Join(dir, "out.safetensors"),
		convert.Options{Backend: "nope", Selection: convert.Selection{Include: regexp.MustCompile(`^$`)}})
	var nf *backend.BackendNotFoundError
	if !errors.As(err, &nf) || nf.Name != "nope" {
		t.Fatalf("got %v, want BackendNotFoundError", err)
	}
	assertOnly(t, dir)
}

// A layer split across shards is named as such, not as a bad file.
func TestLayerSplitAcrossShards(t *testing.T) {
	dir := t.TempDir()
	layer := int8Layer("blk", 2, 4, rawTensor{dtype: "F32", shape: []int{}, data: f32s(0.5)}, `{"format":"int8_tensorwise"}`)
	writeRaw(t, filepath.Join(dir, "a.safetensors"), nil, layer[0], layer[2])
	writeRaw(t, filepath.Join(dir, "b.safetensors"), nil, layer[1])
	in := filepath.Join(dir, "m.safetensors.index.json")
	writeIndex(t, in, map[string]string{"blk.weight": "a.safetensors", "blk.comfy_quant": "a.safetensors", "blk.weight_scale": "b.safetensors"})
	_, err := convert.Dequantize(context.Background(), in, filepath.Join(t.TempDir(), "o.safetensors.index.json"), convert.Options{})
	var le *convert.LayerError
	if !errors.As(err, &le) || errors.Is(err, safetensors.ErrFormat) || !strings.Contains(err.Error(), `split across shards: "blk.weight_scale" is in b.safetensors`) {
		t.Fatalf("got %v, want a LayerError saying the layer is split", err)
	}
}

// A quantize summary says what it did.
func TestSummaryOperation(t *testing.T) {
	dir := t.TempDir()
	sum, err := convert.Quantize(context.Background(), tiny, filepath.Join(dir, "q.safetensors"), convert.Options{DryRun: true})
	if err != nil || sum.Operation != "quantize" {
		t.Errorf("%v %q", err, sum.Operation)
	}
	sum, err = convert.Dequantize(context.Background(), tiny, filepath.Join(dir, "d.safetensors"), convert.Options{DryRun: true})
	if err != nil || sum.Operation != "dequantize" {
		t.Errorf("%v %q", err, sum.Operation)
	}
}

// TestNilContext: a nil context is an error naming the call, not a panic
// deep inside it, as it is for kitchen's operations.
func TestNilContext(t *testing.T) {
	var ctx context.Context
	out := filepath.Join(t.TempDir(), "out.safetensors")
	const in = "../testdata/tiny-dit.safetensors"
	for name, call := range map[string]func() error{
		"quantize":   func() error { _, err := convert.Quantize(ctx, in, out, convert.Options{}); return err },
		"dequantize": func() error { _, err := convert.Dequantize(ctx, in, out, convert.Options{}); return err },
		"inspect":    func() error { _, err := convert.Inspect(ctx, in); return err },
		"OpenCheckpoint": func() error {
			_, err := convert.OpenCheckpoint(ctx, in)
			return err
		},
	} {
		if err := call(); err == nil || !strings.Contains(err.Error(), name+": nil context") {
			t.Errorf("%s: %v", name, err)
		}
	}
	assertOnly(t, filepath.Dir(out))
}

// TestOutputNames: an empty output path, or an index's name for the
// output of a single file (which would then be read as an index), is
// refused before anything is converted, and nothing is written.
func TestOutputNames(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.safetensors")
	writeRaw(t, in, nil, rawTensor{"blocks.0.a.weight", "F32", []int{2, 2}, f32s(1, 2, 3, 4)})
	ctx := context.Background()
	for _, c := range []struct{ out, want string }{
		{"", "quantize: no output path"},
		{filepath.Join(dir, "m.safetensors.index.json"), "the input " + in + " is a single file"},
	} {
		if _, err := convert.Quantize(ctx, in, c.out, convert.Options{}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("output %q: %v", c.out, err)
		}
		if _, err := convert.Dequantize(ctx, in, c.out, convert.Options{}); err == nil {
			t.Errorf("dequantize to %q: no error", c.out)
		}
	}
	assertOnly(t, dir, "in.safetensors")
	// A dry run needs no output.
	if _, err := convert.Quantize(ctx, in, "", convert.Options{DryRun: true}); err != nil {
		t.Errorf("dry run without an output: %v", err)
	}
}

// TestDirectoryInput: a directory holding one index stands for that index
// (quantize, dequantize, inspect); one with two is refused naming what to
// pass, and so is one with none, except by inspect, which reads its
// files as eval does.
func TestDirectoryInput(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	model := filepath.Join(dir, "model")
	os.Mkdir(model, 0o755)
	shardFile(t, model, "a.safetensors", map[string][]float32{"b.0.fc.weight": make([]float32, 64*64)}, map[string][]int{"b.0.fc.weight": {64, 64}})
	opts := convert.Options{Selection: convert.Selection{MinElements: 1, MinFeatures: 1}}
	// No index yet.
	if _, err := convert.Quantize(ctx, model, filepath.Join(dir, "x.safetensors"), opts); err == nil || !strings.Contains(err.Error(), "a directory with no *.safetensors.index.json") {
		t.Errorf("quantize of a directory without an index: %v", err)
	}
	if r, err := convert.Inspect(ctx, model); err != nil || len(r.Tensors) != 1 || len(r.Files) != 1 {
		t.Errorf("inspect of a directory without an index: %v", err)
	}
	writeIndex(t, filepath.Join(model, "m.safetensors.index.json"), map[string]string{"b.0.fc.weight": "a.safetensors"})
	r, err := convert.Inspect(ctx, model)
	if err != nil || len(r.Tensors) != 1 {
		t.Fatalf("inspect of a directory with an index: %v", err)
	}
	out := filepath.Join(dir, "q", "m.safetensors.index.json")
	os.Mkdir(filepath.Dir(out), 0o755)
	sum, err := convert.Quantize(ctx, model, out, opts)
	if err != nil || sum.Quantized != 1 || sum.Input != filepath.Join(model, "m.safetensors.index.json") {
		t.Fatalf("quantize of a directory: %+v, %v", sum, err)
	}
	if _, err := convert.Dequantize(ctx, filepath.Dir(out), filepath.Join(dir, "d.safetensors.index.json"), convert.Options{}); err != nil {
		t.Errorf("dequantize of a directory: %v", err)
	}
	writeIndex(t, filepath.Join(model, "n.safetensors.index.json"), map[string]string{"b.0.fc.weight": "a.safetensors"})
	if _, err := convert.Quantize(ctx, model, filepath.Join(dir, "x.safetensors.index.json"), opts); err == nil || !strings.Contains(err.Error(), "2 index files") {
		t.Errorf("quantize of a directory with two indexes: %v", err)
	}
}
