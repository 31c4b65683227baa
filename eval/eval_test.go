package eval_test

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gokitchen/kitchen/backend"
	"github.com/gokitchen/kitchen/convert"
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/eval"
	"github.com/gokitchen/kitchen/op"
	"github.com/gokitchen/kitchen/safetensors"
	"github.com/gokitchen/kitchen/tensor"
)

const tiny = "../testdata/tiny-dit.safetensors"

// split writes the tensors of tiny into two shards in dir (the first
// shard's tensors, in file order, up to half of them), and returns the
// index's weight map.
func split(t *testing.T, dir string) map[string]string {
	t.Helper()
	f, err := safetensors.Open(tiny)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	weightMap := map[string]string{}
	half := len(f.Tensors) / 2
	for i, part := range [][]safetensors.TensorInfo{f.Tensors[:half], f.Tensors[half:]} {
		name := []string{"m-00001-of-00002.safetensors", "m-00002-of-00002.safetensors"}[i]
		var infos []safetensors.TensorInfo
		for _, ti := range part {
			infos = append(infos, safetensors.TensorInfo{Name: ti.Name, DType: ti.DType, Shape: ti.Shape})
			weightMap[ti.Name] = name
		}
		var buf bytes.Buffer
		w, err := safetensors.NewWriter(&buf, nil, infos)
		if err != nil {
			t.Fatal(err)
		}
		for _, ti := range part {
			b, err := f.Data(ti)
			if err != nil {
				t.Fatal(err)
			}
			if err := w.WriteTensor(ti.Name, b); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(dir, name), buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return weightMap
}

// TestShardedInputs: eval reads sharded checkpoints, through their index
// or their directory, on either side, and finds what it finds in the
// single files, layer for layer.
func TestShardedInputs(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	q := filepath.Join(dir, "q.safetensors")
	if _, err := convert.Quantize(ctx, tiny, q, convert.Options{ConvRot: 256}); err != nil {
		t.Fatal(err)
	}
	opts := eval.Options{Tokens: 8}
	want, err := eval.Run(ctx, tiny, q, opts)
	if err != nil {
		t.Fatal(err)
	}

	// The original in shards without an index; quantized, with one.
	orig := filepath.Join(dir, "orig")
	os.Mkdir(orig, 0o755)
	weightMap := split(t, orig)
	withIndex := filepath.Join(dir, "indexed")
	os.Mkdir(withIndex, 0o755)
	split(t, withIndex)
	idx, _ := json.Marshal(map[string]any{"weight_map": weightMap})
	origIndex := filepath.Join(withIndex, "m"+convert.IndexSuffix)
	if err := os.WriteFile(origIndex, idx, 0o644); err != nil {
		t.Fatal(err)
	}
	qdir := filepath.Join(dir, "qsharded")
	os.Mkdir(qdir, 0o755)
	qIndex := filepath.Join(qdir, "q"+convert.IndexSuffix)
	if _, err := convert.Quantize(ctx, origIndex, qIndex, convert.Options{ConvRot: 256}); err != nil {
		t.Fatal(err)
	}
	for _, pair := range [][2]string{{origIndex, qIndex}, {orig, qdir}, {tiny, qIndex}, {orig, q}, {withIndex, qdir}} {
		got, err := eval.Run(ctx, pair[0], pair[1], opts)
		if err != nil {
			t.Fatalf("%s against %s: %v", pair[1], pair[0], err)
		}
		if !reflect.DeepEqual(got.Layers, want.Layers) {
			t.Errorf("%s against %s: %+v, want %+v", pair[1], pair[0], got.Layers, want.Layers)
		}
	}

	// The quantized shards without their index: the same.
	qbare := filepath.Join(dir, "qbare")
	os.Mkdir(qbare, 0o755)
	shards, _ := filepath.Glob(filepath.Join(qdir, "*.safetensors"))
	if len(shards) < 2 {
		t.Fatalf("quantized shards %v", shards)
	}
	for _, s := range shards {
		b, _ := os.ReadFile(s)
		os.WriteFile(filepath.Join(qbare, filepath.Base(s)), b, 0o644)
	}
	if got, err := eval.Run(ctx, tiny, qbare, opts); err != nil || !reflect.DeepEqual(got.Layers, want.Layers) {
		t.Errorf("%s without its index: %v", qdir, err)
	}

	// A tensor in two files of a directory without an index is refused.
	dup := filepath.Join(dir, "dup")
	os.Mkdir(dup, 0o755)
	split(t, dup)
	b, _ := os.ReadFile(filepath.Join(dup, "m-00001-of-00002.safetensors"))
	os.WriteFile(filepath.Join(dup, "m-copy.safetensors"), b, 0o644)
	if _, err := eval.Run(ctx, dup, q, opts); err == nil || !strings.Contains(err.Error(), "is in both") {
		t.Errorf("duplicate tensors: %v", err)
	}
}

// TestLayerJSON: an error JSON cannot hold (an int8 layer whose output
// overflowed float32) is written as null; the other fields are as the
// struct's tags name them.
func TestLayerJSON(t *testing.T) {
	l := eval.Layer{Name: "b.0", N: 3, K: 4, Scales: "channel", ConvRot: 4, PlainError: math.Inf(1), OutlierError: 0.25}
	b, err := json.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"name":"b.0","n":3,"k":4,"scales":"channel","convrot_group":4,"plain_rel_error":null,"outlier_rel_error":0.25}`
	if string(b) != want {
		t.Errorf("got %s, want %s", b, want)
	}
	l.PlainError, l.OutlierError, l.ConvRot = 0.5, math.NaN(), 0
	if b, err = json.Marshal(eval.Report{Layers: []eval.Layer{l}}); err != nil || !strings.Contains(string(b), `"plain_rel_error":0.5,"outlier_rel_error":null}`) || strings.Contains(string(b), "convrot") {
		t.Errorf("got %s, %v", b, err)
	}
}

// TestSortWorstFirst: layers come largest error first, a NaN error (which
// compares neither less nor greater) with the infinite ones before all
// others, and equal errors in the file's order.
func TestSortWorstFirst(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	errs := [][2]float64{{0.1, 0}, {0.2, nan}, {0.3, 0.05}, {0.05, 0.4}, {inf, 0}, {0.3, 0}, {0, 0.01}}
	var layers []eval.Layer
	for i, e := range errs {
		layers = append(layers, eval.Layer{Name: string(rune('a' + i)), PlainError: e[0], OutlierError: e[1]})
	}
	eval.SortWorstFirst(layers)
	var got string
	for _, l := range layers {
		got += l.Name
	}
	if want := "bedcfag"; got != want {
		t.Errorf("order %s, want %s", got, want)
	}
}

// TestOptionsRefused: options no default stands for are refused with
// ErrOptions, naming the field, before the files are opened (they do not
// exist here).
func TestOptionsRefused(t *testing.T) {
	for _, o := range []eval.Options{
		{Tokens: -1}, {Tokens: eval.MaxTokens + 1}, {Tokens: math.MaxInt},
		{Outliers: -1}, {OutlierScale: -2}, {OutlierScale: math.NaN()}, {OutlierScale: math.Inf(1)},
	} {
		_, err := eval.Run(context.Background(), "no-such-orig", "no-such-quant", o)
		if !errors.Is(err, eval.ErrOptions) {
			t.Errorf("%+v: got %v, want ErrOptions", o, err)
		}
	}
	if _, err := eval.Run(context.Background(), "no-such-orig", "no-such-quant", eval.Options{Tokens: eval.MaxTokens}); errors.Is(err, eval.ErrOptions) || err == nil {
		t.Errorf("MaxTokens: got %v, want the missing file's error", err)
	}
	// An unknown backend is named before the files are read.
	var nf *backend.BackendNotFoundError
	if _, err := eval.Run(context.Background(), "no-such-orig", "no-such-quant", eval.Options{Backend: "nope"}); !errors.As(err, &nf) {
		t.Errorf("an unknown backend: got %v, want a BackendNotFoundError", err)
	}
}

// linearOnly is a backend with int8_linear alone, whose kernel records
// that it ran and fails; registered once, since the registry is global
// (go test -count=2 runs every test again).
var (
	linearOnlyRan  atomic.Bool
	linearOnlyOnce sync.Once
)

const linearOnly = "eval-test-linear-only"

// TestBackendOps: eval asks the backend, before it runs a layer, for the
// operations the checkpoint's layers need, and only those: a backend with
// int8_linear alone is refused, running nothing, for a checkpoint with
// ConvRot embedding tables (their weight errors dequantize through
// dequantize_int8_convrot_weight), and runs the layers of one without
// ConvRot (whose tables are summed on the host).
func TestBackendOps(t *testing.T) {
	linearOnlyOnce.Do(func() {
		backend.Register(backend.Backend{Name: linearOnly, Kind: backend.Reference, Caps: []backend.Capability{
			op.Int8Linear.Implement(backend.Constraints{}, func(context.Context, *op.LinearArgs) (op.Dequantized, error) {
				linearOnlyRan.Store(true)
				return op.Dequantized{}, errors.New("eval ran int8_linear")
			}),
		}})
	})
	ctx := context.Background()
	dir := t.TempDir()
	for _, c := range []struct {
		name    string
		group   int
		refused bool
	}{{"convrot", 64, true}, {"plain", 0, false}} {
		q := filepath.Join(dir, c.name+".safetensors")
		if _, err := convert.Quantize(ctx, tiny, q, convert.Options{ConvRot: c.group, Selection: convert.Selection{Embeddings: true}}); err != nil {
			t.Fatal(err)
		}
		linearOnlyRan.Store(false)
		_, err := eval.Run(ctx, tiny, q, eval.Options{Backend: linearOnly, Tokens: 4})
		var ni *backend.NotImplementedError
		ran := linearOnlyRan.Load()
		switch {
		case c.refused && (!errors.As(err, &ni) || ni.Op != op.DequantizeConvRotWeight.Name() || ran):
			t.Errorf("%s: got %v (int8_linear run: %v), want dequantize_int8_convrot_weight refused before anything runs", c.name, err, ran)
		case !c.refused && (err == nil || !strings.Contains(err.Error(), "eval ran int8_linear") || !ran):
			t.Errorf("%s: got %v (int8_linear run: %v), want the layers run", c.name, err, ran)
		}
	}
	// What each kind of layer asks of the backend, whatever the order of
	// the layers in the file.
	table, linear := "y_embedder.embedding_table", "blocks.0.attn.qkv"
	for _, c := range []struct {
		layers []convert.LayerReport
		ok     bool
	}{
		{nil, true},
		{[]convert.LayerReport{{Name: linear, ConvRot: 64}, {Name: table}}, true},
		{[]convert.LayerReport{{Name: linear}, {Name: linear, ConvRot: 16}, {Name: table, ConvRot: 64}}, false},
	} {
		if err := eval.HostOps(ctx, linearOnly, c.layers); (err == nil) != c.ok {
			t.Errorf("hostOps(%+v): %v, want ok %v", c.layers, err, c.ok)
		}
	}
	if err := eval.HostOps(ctx, "no-such-backend", nil); err == nil {
		t.Error("an unknown backend: no error")
	}
}

// TestReference: the parallel float64 reference gives the bits of the
// plain one (each row of x by each weight row, products in float64, summed
// in k's order, then the bias) for every weight dtype, with and without a
// bias, for row counts that are not multiples of four and weights whose
// rows do not share out evenly.
func TestReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, s := range [][3]int{{1, 7, 3}, {5, 64, 17}, {8, 33, 8}, {67, 129, 45}} {
		m, k, n := s[0], s[1], s[2]
		x := make([]float32, m*k)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		wv, bv := make([]float32, n*k), make([]float32, n)
		for i := range wv {
			wv[i] = float32(rng.NormFloat64() * 1e-2)
		}
		for i := range bv {
			bv[i] = float32(rng.NormFloat64())
		}
		for _, dt := range dtype.Floats() {
			w, err := tensor.FromFloat32(dt, wv, n, k)
			if err != nil {
				t.Fatal(err)
			}
			wr, _ := w.Float32s() // the weight as stored
			for _, b := range [][]float32{nil, bv} {
				got, err := eval.Reference(context.Background(), x, w, b, m)
				if err != nil {
					t.Fatal(err)
				}
				for i := range m {
					for j := range n {
						var want float64
						for p := range k {
							want += float64(x[i*k+p]) * float64(wr[j*k+p])
						}
						if b != nil {
							want += float64(b[j])
						}
						if got[i*n+j] != want {
							t.Fatalf("%dx%dx%d, %v, bias %v: [%d, %d] = %v, want %v", m, k, n, dt, b != nil, i, j, got[i*n+j], want)
						}
					}
				}
			}
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	w, _ := tensor.FromFloat32(dtype.Float32, make([]float32, 64*8), 64, 8)
	if _, err := eval.Reference(ctx, make([]float32, 8), w, nil, 1); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
}

// TestProgress: Progress is called once a layer, counting up to every
// layer of the report and the bytes of all their int8 weights.
func TestProgress(t *testing.T) {
	ctx := context.Background()
	q := quantizedTiny(t)
	var calls []convert.Progress
	rep, err := eval.Run(ctx, tiny, q, eval.Options{Tokens: 4, Progress: func(p convert.Progress) { calls = append(calls, p) }})
	if err != nil {
		t.Fatal(err)
	}
	var bytes int64
	names := map[string]bool{}
	for _, l := range rep.Layers {
		bytes += int64(l.N) * int64(l.K)
		names[l.Name] = true
	}
	if len(calls) != len(rep.Layers) {
		t.Fatalf("%d calls for %d layers", len(calls), len(rep.Layers))
	}
	for i, p := range calls {
		if p.TensorsDone != i+1 || p.TensorsTotal != len(rep.Layers) || p.BytesTotal != bytes || !names[p.Tensor] ||
			p.BytesDone <= 0 || i > 0 && p.BytesDone <= calls[i-1].BytesDone {
			t.Errorf("call %d: %+v (total bytes %d)", i, p, bytes)
		}
	}
	if last := calls[len(calls)-1]; last.BytesDone != bytes {
		t.Errorf("last call: %+v, want %d bytes done", last, bytes)
	}
}

// TestNilContext: a nil context is an error, not a panic.
func TestNilContext(t *testing.T) {
	var ctx context.Context
	if _, err := eval.Run(ctx, tiny, tiny, eval.Options{}); err == nil || !strings.Contains(err.Error(), "eval: nil context") {
		t.Errorf("got %v", err)
	}
}

// TestInclude: Include limits the layers to those it matches, and one that
// matches none is an error saying so.
func TestInclude(t *testing.T) {
	ctx := context.Background()
	q := quantizedTiny(t)
	rep, err := eval.Run(ctx, tiny, q, eval.Options{Tokens: 4, Include: regexp.MustCompile(`^blocks\.1\.`)})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Layers) != 5 {
		t.Errorf("%d layers, want the 5 of blocks.1", len(rep.Layers))
	}
	for _, l := range rep.Layers {
		if !strings.HasPrefix(l.Name, "blocks.1.") {
			t.Errorf("layer %s does not match", l.Name)
		}
	}
	if _, err := eval.Run(ctx, tiny, q, eval.Options{Include: regexp.MustCompile(`nothing`)}); err == nil || !strings.Contains(err.Error(), `no quantized layer of `+q+` matches "nothing"`) {
		t.Errorf("an Include that matches nothing: %v", err)
	}
}

// quantizedTiny quantizes the shipped tiny DiT with the defaults into the
// test's directory and returns the file's path.
func quantizedTiny(t *testing.T) string {
	t.Helper()
	q := filepath.Join(t.TempDir(), "q.safetensors")
	if _, err := convert.Quantize(context.Background(), tiny, q, convert.Options{}); err != nil {
		t.Fatal(err)
	}
	return q
}

// rewrite copies the safetensors file src to dst without the tensors drop
// says to drop, with metadata meta, and with the shapes in reshape
// (tensor name: new shape of as many elements) in place of theirs.
func rewrite(t *testing.T, src, dst string, meta map[string]string, drop func(name string) bool, reshape map[string][]int) {
	t.Helper()
	f, err := safetensors.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var infos, kept []safetensors.TensorInfo
	for _, ti := range f.Tensors {
		if !drop(ti.Name) {
			shape := ti.Shape
			if s, ok := reshape[ti.Name]; ok {
				shape = s
			}
			infos = append(infos, safetensors.TensorInfo{Name: ti.Name, DType: ti.DType, Shape: shape})
			kept = append(kept, ti)
		}
	}
	var buf bytes.Buffer
	w, err := safetensors.NewWriter(&buf, meta, infos)
	if err != nil {
		t.Fatal(err)
	}
	for _, ti := range kept {
		b, err := f.Data(ti)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.WriteTensor(ti.Name, b); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(dst, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestMetadataConfigs: eval reads a layer's config as ComfyUI and kitchen
// dequantize do: from _quantization_metadata when the file has no markers
// (the same report as with them), and it refuses a file whose metadata
// and markers disagree, rather than evaluate the layer as ComfyUI would
// not run it.
func TestMetadataConfigs(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	q := filepath.Join(dir, "q.safetensors")
	if _, err := convert.Quantize(ctx, tiny, q, convert.Options{ConvRot: 256}); err != nil {
		t.Fatal(err)
	}
	f, err := safetensors.Open(q)
	if err != nil {
		t.Fatal(err)
	}
	layers := map[string]any{}
	for _, ti := range f.Tensors {
		if p, ok := strings.CutSuffix(ti.Name, ".comfy_quant"); ok {
			b, err := f.Data(ti)
			if err != nil {
				t.Fatal(err)
			}
			layers[p] = json.RawMessage(bytes.Clone(b)) // the marker's config (ConvRot where K allows it)
		}
	}
	f.Close()
	conf, _ := json.Marshal(map[string]any{"layers": layers})
	metaOnly := filepath.Join(dir, "meta.safetensors")
	rewrite(t, q, metaOnly, map[string]string{"_quantization_metadata": string(conf)}, func(n string) bool { return strings.HasSuffix(n, ".comfy_quant") }, nil)
	want, err := eval.Run(ctx, tiny, q, eval.Options{Tokens: 8})
	if err != nil {
		t.Fatal(err)
	}
	got, err := eval.Run(ctx, tiny, metaOnly, eval.Options{Tokens: 8})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Layers) != len(want.Layers) {
		t.Fatalf("%d layers from the metadata, %d from the markers", len(got.Layers), len(want.Layers))
	}
	for i := range got.Layers {
		if got.Layers[i] != want.Layers[i] {
			t.Errorf("from the metadata %+v, from the markers %+v", got.Layers[i], want.Layers[i])
		}
	}
	// Markers kept, metadata saying no rotation: ComfyUI follows the
	// metadata, kitchen refuses the file.
	plain, _ := json.Marshal(map[string]any{"layers": map[string]any{"blocks.0.attn.qkv": map[string]any{"format": "int8_tensorwise"}}})
	conflict := filepath.Join(dir, "conflict.safetensors")
	rewrite(t, q, conflict, map[string]string{"_quantization_metadata": string(plain)}, func(string) bool { return false }, nil)
	if _, err := eval.Run(ctx, tiny, conflict, eval.Options{Tokens: 8}); err == nil || !strings.Contains(err.Error(), "ComfyUI would follow the metadata") {
		t.Errorf("markers and metadata that disagree: %v", err)
	}
}

// TestSVGHostileNames: the chart is well-formed XML whatever the layer
// names hold (markup, control characters, U+FFFE, great length), and a
// name cut to fit is whole in its tooltip.
func TestSVGHostileNames(t *testing.T) {
	long := strings.Repeat("block.", 500) + "end"
	names := []string{`a<b>&"c'`, "ctl\x01\x1b[31m.x", "bad\ufffe.y", "]]>", long, "ünï😀"}
	rep := &eval.Report{Tokens: 4}
	for i, n := range names {
		rep.Layers = append(rep.Layers, eval.Layer{Name: n, N: 2, K: 2, Scales: "channel", PlainError: float64(i) / 10, OutlierError: math.NaN()})
	}
	var b bytes.Buffer
	if err := rep.WriteSVG(&b); err != nil {
		t.Fatal(err)
	}
	d := xml.NewDecoder(&b)
	var titles []string
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "title" {
			var s string
			if err := d.DecodeElement(&s, &se); err != nil {
				t.Fatal(err)
			}
			titles = append(titles, s)
		}
	}
	if len(titles) != len(names) || !slices.Contains(titles, long+" (channel)") || !slices.Contains(titles, `a<b>&"c' (channel)`) {
		t.Errorf("tooltips %.200q", titles)
	}
}

// TestEmbeddingNote: a table whose scale is 1-D [N], which kitchen reads
// one a row but ComfyUI's Embedding broadcasts along the row, is measured
// as kitchen reads it (the same figure as with [N, 1]) and carries
// inspect's note saying so.
func TestEmbeddingNote(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	q := filepath.Join(dir, "q.safetensors")
	if _, err := convert.Quantize(ctx, tiny, q, convert.Options{Selection: convert.Selection{Embeddings: true}}); err != nil {
		t.Fatal(err)
	}
	const table = "y_embedder.embedding_table"
	flat := filepath.Join(dir, "flat.safetensors")
	rewrite(t, q, flat, nil, func(string) bool { return false }, map[string][]int{table + ".weight_scale": {1001}})
	opts := eval.Options{Tokens: 4, Include: regexp.MustCompile("embedding")}
	want, err := eval.Run(ctx, tiny, q, opts)
	if err != nil {
		t.Fatal(err)
	}
	got, err := eval.Run(ctx, tiny, flat, opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Layers) != 1 || len(want.Layers) != 1 || want.Layers[0].Note != "" || !strings.Contains(got.Layers[0].Note, "1-D [N] scale") ||
		got.Layers[0].PlainError != want.Layers[0].PlainError {
		t.Errorf("[N] scale: %+v; [N, 1]: %+v", got.Layers, want.Layers)
	}
}

// TestEmbeddingTable: an embedding table is looked up, not multiplied: its
// figure is the dequantized rows' relative error, the converter's weight
// error for it to the bit (the same sums, convert.WeightErrorSums), with or
// without ConvRot.
func TestEmbeddingTable(t *testing.T) {
	ctx := context.Background()
	for _, group := range []int{0, 64} {
		q := filepath.Join(t.TempDir(), "q.safetensors")
		sum, err := convert.Quantize(ctx, tiny, q, convert.Options{Selection: convert.Selection{Embeddings: true}, ConvRot: group})
		if err != nil {
			t.Fatal(err)
		}
		var want float64
		for _, l := range sum.Layers {
			if l.Name == "y_embedder.embedding_table" {
				want = l.RelRMSError
			}
		}
		rep, err := eval.Run(ctx, tiny, q, eval.Options{Tokens: 4, Include: regexp.MustCompile("embedding")})
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Layers) != 1 || want == 0 {
			t.Fatalf("group %d: layers %+v, converter's error %v", group, rep.Layers, want)
		}
		if l := rep.Layers[0]; !l.Embedding || l.PlainError != l.OutlierError || l.PlainError != want || l.ConvRot != group {
			t.Errorf("group %d: %+v, want an embedding at the converter's %v", group, l, want)
		}
	}
}
