package convert_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/gokitchen/kitchen"
	"github.com/gokitchen/kitchen/backend"
	"github.com/gokitchen/kitchen/convert"
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/safetensors"
	"github.com/gokitchen/kitchen/tensor"
)

const tiny = "../testdata/tiny-dit.safetensors"

func open(t *testing.T, path string) *safetensors.File {
	t.Helper()
	f, err := safetensors.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func data(t *testing.T, f *safetensors.File, name string) (safetensors.TensorInfo, []byte) {
	t.Helper()
	ti, ok := f.Tensor(name)
	if !ok {
		t.Fatalf("%s: no tensor %q", f.Path, name)
	}
	b, err := f.Data(ti)
	if err != nil {
		t.Fatal(err)
	}
	return ti, b
}

func hashFile(t *testing.T, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

// checkQuantized checks an output against its input: every quantized layer
// holds exactly what the eager reference computes from the input weight
// (an independent path from the fused backend that wrote it), every other
// tensor is a byte-for-byte copy, the metadata is kept, and every tensor
// starts at an offset aligned to its element size.
func checkQuantized(t *testing.T, in, out string, perRow bool) (quantized int) {
	t.Helper()
	fi, fo := open(t, in), open(t, out)
	if !maps(fi.Metadata, fo.Metadata) {
		t.Errorf("metadata %v, want %v", fo.Metadata, fi.Metadata)
	}
	for _, to := range fo.Tensors {
		size, _ := safetensors.DTypeSize(to.DType)
		if (fo.DataStart+to.Begin)%int64(size) != 0 {
			t.Errorf("%s (%s) starts at unaligned offset %d", to.Name, to.DType, fo.DataStart+to.Begin)
		}
	}
	for _, ti := range fi.Tensors {
		_, inBytes := data(t, fi, ti.Name)
		base := strings.TrimSuffix(ti.Name, ".weight")
		cq, isQ := fo.Tensor(base + ".comfy_quant")
		if !isQ || !strings.HasSuffix(ti.Name, ".weight") {
			_, outBytes := data(t, fo, ti.Name)
			if !bytes.Equal(inBytes, outBytes) {
				t.Errorf("%s: copied tensor differs", ti.Name)
			}
			continue
		}
		quantized++
		_, blob := data(t, fo, cq.Name)
		var cfg map[string]any
		if err := json.Unmarshal(blob, &cfg); err != nil || cfg["format"] != "int8_tensorwise" || (cfg["per_row"] == true) != perRow {
			t.Errorf("%s: comfy_quant %q (%v)", cq.Name, blob, err)
		}
		if cq.DType != "U8" {
			t.Errorf("%s: dtype %s", cq.Name, cq.DType)
		}
		dt, _ := safetensors.KitchenDType(ti.DType)
		x, _ := tensor.FromBytes(dt, inBytes, ti.Shape...)
		var q, s *tensor.Tensor
		var err error
		if perRow {
			q, s, err = kitchen.QuantizeInt8Rowwise(context.Background(), x, kitchen.UsingBackend("eager"))
		} else {
			q, s, err = kitchen.QuantizeInt8Tensorwise(context.Background(), x, kitchen.UsingBackend("eager"))
		}
		if err != nil {
			t.Fatal(err)
		}
		wq, gotQ := data(t, fo, ti.Name)
		ws, gotS := data(t, fo, base+".weight_scale")
		wantQ, _ := q.Bytes()
		wantS, _ := s.Bytes()
		if wq.DType != "I8" || !slices.Equal(wq.Shape, ti.Shape) || !bytes.Equal(gotQ, wantQ) {
			t.Errorf("%s: int8 weight differs from eager", ti.Name)
		}
		if ws.DType != "F32" || !slices.Equal(ws.Shape, s.Shape()) || !bytes.Equal(gotS, wantS) {
			t.Errorf("%s: scale %v %v differs from eager %v", ws.Name, ws.DType, ws.Shape, s.Shape())
		}
	}
	return quantized
}

func maps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestQuantizeTiny(t *testing.T) {
	for _, perRow := range []bool{false, true} {
		out := filepath.Join(t.TempDir(), "out.safetensors")
		before := hashFile(t, tiny)
		sum, err := convert.Quantize(context.Background(), tiny, out, convert.Options{PerChannel: perRow})
		if err != nil {
			t.Fatal(err)
		}
		if hashFile(t, tiny) != before {
			t.Fatal("the input changed")
		}
		n := checkQuantized(t, tiny, out, perRow)
		if n != 11 || sum.Quantized != 11 || sum.Copied != 26 || !slices.Equal(sum.Backends, []string{"cpu"}) {
			t.Errorf("quantized %d; summary %+v", n, sum)
		}
		st, _ := os.Stat(out)
		if sum.BytesOut != st.Size() || st.Mode().Perm() != 0o644 {
			t.Errorf("summary says %d bytes, file has %d, mode %v", sum.BytesOut, st.Size(), st.Mode())
		}
	}
}

// TestRoundTrip quantizes and dequantizes, checking every element of every
// quantized weight against the error the contract allows: half a step, plus
// the input dtype's rounding of the quotient and of the scale.
func TestRoundTrip(t *testing.T) {
	dir := t.TempDir()
	q := filepath.Join(dir, "q.safetensors")
	if _, err := convert.Quantize(context.Background(), tiny, q, convert.Options{}); err != nil {
		t.Fatal(err)
	}
	for _, out := range []dtype.DType{dtype.Float32, dtype.BFloat16} {
		d := filepath.Join(dir, out.String()+".safetensors")
		sum, err := convert.Dequantize(context.Background(), q, d, convert.Options{OutDType: out})
		if err != nil {
			t.Fatal(err)
		}
		if sum.Dequantized != 11 {
			t.Errorf("dequantized %d layers", sum.Dequantized)
		}
		fi, fq, fd := open(t, tiny), open(t, q), open(t, d)
		if len(fd.Tensors) != len(fi.Tensors) {
			t.Fatalf("%d tensors after the round trip, want %d", len(fd.Tensors), len(fi.Tensors))
		}
		const u = 0x1p-8 // bfloat16's unit roundoff (8 significant bits)
		for _, ti := range fi.Tensors {
			base := strings.TrimSuffix(ti.Name, ".weight")
			if _, ok := fq.Tensor(base + ".comfy_quant"); !ok || base == ti.Name {
				// Not quantized: copied through both conversions unchanged.
				ci, xb := data(t, fi, ti.Name)
				co, yb := data(t, fd, ti.Name)
				if co.DType != ci.DType || !slices.Equal(co.Shape, ci.Shape) || !bytes.Equal(xb, yb) {
					t.Errorf("%s: copied as %s%v, %d bytes differ from the input's %s%v", ti.Name, co.DType, co.Shape, countDiff(xb, yb), ci.DType, ci.Shape)
				}
				continue
			}
			_, sb := data(t, fq, base+".weight_scale")
			s := float64(math.Float32frombits(binary.LittleEndian.Uint32(sb)))
			_, xb := data(t, fi, ti.Name)
			to, yb := data(t, fd, ti.Name)
			if to.DType != safetensors.Name(out) {
				t.Fatalf("%s: dtype %s", ti.Name, to.DType)
			}
			xt, _ := tensor.FromBytes(dtype.BFloat16, xb, ti.Shape...)
			yt, _ := tensor.FromBytes(out, yb, ti.Shape...)
			xs, _ := xt.Float32s()
			ys, _ := yt.Float32s()
			for i := range xs {
				x, y := float64(xs[i]), float64(ys[i])
				bound := 0.5*s + 2*math.Abs(x)*u + math.Abs(y)*0x1p-24
				if out == dtype.BFloat16 {
					bound += math.Abs(y) * u
				}
				if math.Abs(y-x) > bound {
					t.Fatalf("%s[%d]: %v came back as %v (scale %v, bound %v)", ti.Name, i, x, y, s, bound)
				}
			}
		}
	}
}

func TestRefusals(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out.safetensors")
	ctx := context.Background()
	if _, err := convert.Quantize(ctx, tiny, out, convert.Options{}); err != nil {
		t.Fatal(err)
	}
	h := hashFile(t, out)
	if _, err := convert.Quantize(ctx, tiny, out, convert.Options{}); !errors.Is(err, convert.ErrExists) {
		t.Errorf("existing output: %v", err)
	}
	if hashFile(t, out) != h {
		t.Error("refused run changed the existing output")
	}
	if _, err := convert.Quantize(ctx, tiny, out, convert.Options{Force: true, PerChannel: true}); err != nil {
		t.Errorf("--force: %v", err)
	}
	if _, err := convert.Quantize(ctx, out, filepath.Join(dir, "again.safetensors"), convert.Options{}); !errors.Is(err, convert.ErrAlreadyQuantized) {
		t.Errorf("quantizing a quantized file: %v", err)
	}
	link := filepath.Join(dir, "link.safetensors")
	if err := os.Symlink(out, link); err != nil {
		t.Fatal(err)
	}
	if _, err := convert.Dequantize(ctx, out, link, convert.Options{Force: true}); !errors.Is(err, convert.ErrSameFile) {
		t.Errorf("output is the input through a link: %v", err)
	}
	if _, err := convert.Dequantize(ctx, out, out, convert.Options{Force: true}); !errors.Is(err, convert.ErrSameFile) {
		t.Errorf("output is the input: %v", err)
	}
	assertOnly(t, dir, "link.safetensors", "out.safetensors")
}

// assertOnly checks that dir holds exactly the named files: no temporaries
// and no partial outputs.
func assertOnly(t *testing.T, dir string, names ...string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	slices.Sort(got)
	slices.Sort(names)
	if !slices.Equal(got, names) {
		t.Errorf("%s holds %v, want %v", dir, got, names)
	}
}

// writeFile writes a safetensors file with the given float32 tensors.
func writeFile(t *testing.T, path string, tensors map[string][]float32, shapes map[string][]int) {
	t.Helper()
	var infos []safetensors.TensorInfo
	var names []string
	for n := range tensors {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		infos = append(infos, safetensors.TensorInfo{Name: n, DType: "F32", Shape: shapes[n]})
	}
	var buf bytes.Buffer
	w, err := safetensors.NewWriter(&buf, nil, infos)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		var b []byte
		for _, v := range tensors[n] {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
		}
		if err := w.WriteTensor(n, b); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestNaNNamesTensorAndLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.safetensors")
	w := make([]float32, 64*64)
	w[5*64+3] = float32(math.NaN())
	writeFile(t, in, map[string][]float32{"a.weight": make([]float32, 64*64), "b.weight": w},
		map[string][]int{"a.weight": {64, 64}, "b.weight": {64, 64}})
	_, err := convert.Quantize(context.Background(), in, filepath.Join(dir, "out.safetensors"), convert.Options{Selection: convert.Selection{MinElements: 1}})
	var ae *backend.ArgError
	if !errors.As(err, &ae) || ae.Row != 5 || !strings.Contains(err.Error(), `tensor "b.weight"`) || !strings.Contains(err.Error(), in) {
		t.Fatalf("got %v, want NaN in row 5 of b.weight", err)
	}
	assertOnly(t, dir, "in.safetensors")
}

func TestCancelLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	opts := convert.Options{Progress: func(p convert.Progress) {
		calls++
		if p.TensorsDone == 3 {
			cancel()
		}
	}}
	_, err := convert.Quantize(ctx, tiny, filepath.Join(dir, "out.safetensors"), opts)
	if !errors.Is(err, context.Canceled) || calls != 3 {
		t.Fatalf("got %v after %d tensors", err, calls)
	}
	assertOnly(t, dir)
}

func TestSelection(t *testing.T) {
	ctx := context.Background()
	plan := func(opts convert.Options) map[string]convert.Action {
		opts.DryRun = true
		sum, err := convert.Quantize(ctx, tiny, filepath.Join(t.TempDir(), "x.safetensors"), opts)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]convert.Action{}
		for _, it := range sum.Plan {
			m[it.Name] = it.Action
		}
		return m
	}
	def := plan(convert.Options{})
	for name, want := range map[string]convert.Action{
		"blocks.0.attn.qkv.weight":           convert.ActionQuantize,
		"blocks.1.adaLN_modulation.1.weight": convert.ActionQuantize,
		"x_embedder.proj.weight":             convert.ActionCopy, // embedding
		"y_embedder.embedding_table.weight":  convert.ActionCopy,
		"blocks.0.norm1.weight":              convert.ActionCopy, // norm, 1-D
		"final_layer.linear.weight":          convert.ActionCopy, // small
		"blocks.0.attn.qkv.bias":             convert.ActionCopy,
		"pos_embed":                          convert.ActionCopy,
	} {
		if def[name] != want {
			t.Errorf("default: %s: %s, want %s", name, def[name], want)
		}
	}
	inc := plan(convert.Options{Selection: convert.Selection{Include: regexp.MustCompile(`embedder|final_layer\.linear`)}})
	if inc["x_embedder.proj.weight"] != convert.ActionQuantize || inc["final_layer.linear.weight"] != convert.ActionQuantize || inc["blocks.0.attn.qkv.weight"] != convert.ActionCopy {
		t.Errorf("--include: %v", inc)
	}
	exc := plan(convert.Options{Selection: convert.Selection{Exclude: regexp.MustCompile(`mlp`)}})
	if exc["blocks.0.mlp.fc1.weight"] != convert.ActionCopy || exc["blocks.0.attn.qkv.weight"] != convert.ActionQuantize {
		t.Errorf("--exclude: %v", exc)
	}
	dir := t.TempDir()
	if _, err := convert.Quantize(ctx, tiny, filepath.Join(dir, "x.safetensors"), convert.Options{DryRun: true}); err != nil {
		t.Fatal(err)
	}
	assertOnly(t, dir) // a dry run writes nothing
}

func TestEmptyWeightIsCopied(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.safetensors")
	writeFile(t, in, map[string][]float32{"e.weight": nil, "w.weight": make([]float32, 64)},
		map[string][]int{"e.weight": {0, 8}, "w.weight": {8, 8}})
	sum, err := convert.Quantize(context.Background(), in, filepath.Join(dir, "out.safetensors"),
		convert.Options{Selection: convert.Selection{Include: regexp.MustCompile(`weight`)}})
	if err != nil || sum.Quantized != 1 || sum.Plan[0].Reason != "empty" && sum.Plan[1].Reason != "empty" {
		t.Fatalf("%v %+v", err, sum)
	}
}

// TestNoReplaceRace makes the output appear while the conversion runs: the
// finished file must not replace it.
func TestNoReplaceRace(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out.safetensors")
	opts := convert.Options{Progress: func(p convert.Progress) {
		if p.TensorsDone == p.TensorsTotal {
			os.WriteFile(out, []byte("someone else's"), 0o644)
		}
	}}
	if _, err := convert.Quantize(context.Background(), tiny, out, opts); !errors.Is(err, convert.ErrExists) {
		t.Fatalf("got %v, want ErrExists", err)
	}
	if b, _ := os.ReadFile(out); string(b) != "someone else's" {
		t.Error("the file that appeared was replaced")
	}
	assertOnly(t, dir, "out.safetensors")
}

// TestSharded splits the tiny checkpoint into two shards with an index,
// converts the index, and checks the shards and the index written.
func TestSharded(t *testing.T) {
	dir := t.TempDir()
	src := open(t, tiny)
	weightMap := map[string]string{}
	var shards [2][]safetensors.TensorInfo
	for i, ti := range src.Tensors {
		s := i * 2 / len(src.Tensors)
		shards[s] = append(shards[s], safetensors.TensorInfo{Name: ti.Name, DType: ti.DType, Shape: ti.Shape})
		weightMap[ti.Name] = []string{"m-00001-of-00002.safetensors", "m-00002-of-00002.safetensors"}[s]
	}
	for s, infos := range shards {
		var buf bytes.Buffer
		w, err := safetensors.NewWriter(&buf, src.Metadata, infos)
		if err != nil {
			t.Fatal(err)
		}
		for _, ti := range infos {
			_, b := data(t, src, ti.Name)
			if err := w.WriteTensor(ti.Name, b); err != nil {
				t.Fatal(err)
			}
		}
		name := []string{"m-00001-of-00002.safetensors", "m-00002-of-00002.safetensors"}[s]
		if err := os.WriteFile(filepath.Join(dir, name), buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	idx, _ := json.Marshal(map[string]any{"metadata": map[string]any{"total_size": 1, "note": "kept"}, "weight_map": weightMap})
	in := filepath.Join(dir, "m.safetensors.index.json")
	if err := os.WriteFile(in, idx, 0o644); err != nil {
		t.Fatal(err)
	}
	outDir := t.TempDir()
	out := filepath.Join(outDir, "m-int8.safetensors.index.json")
	sum, err := convert.Quantize(context.Background(), in, out, convert.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Shards != 2 || sum.Quantized != 11 {
		t.Errorf("summary %+v", sum)
	}
	assertOnly(t, outDir, "m-int8.safetensors.index.json", "m-int8-00001-of-00002.safetensors", "m-int8-00002-of-00002.safetensors")
	var got struct {
		Metadata  map[string]any    `json:"metadata"`
		WeightMap map[string]string `json:"weight_map"`
	}
	b, _ := os.ReadFile(out)
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	var total int64
	for s := range 2 {
		path := filepath.Join(outDir, []string{"m-int8-00001-of-00002.safetensors", "m-int8-00002-of-00002.safetensors"}[s])
		checkQuantized(t, filepath.Join(dir, []string{"m-00001-of-00002.safetensors", "m-00002-of-00002.safetensors"}[s]), path, false)
		f := open(t, path)
		for _, ti := range f.Tensors {
			if got.WeightMap[ti.Name] != filepath.Base(path) {
				t.Errorf("index places %s in %q, it is in %s", ti.Name, got.WeightMap[ti.Name], filepath.Base(path))
			}
			total += ti.Size()
		}
	}
	if got.Metadata["note"] != "kept" || got.Metadata["total_size"] != float64(total) {
		t.Errorf("index metadata %v, want total_size %d", got.Metadata, total)
	}
	r, err := convert.Inspect(context.Background(), out)
	if err != nil || r.Formats["int8_tensorwise"] != 11 || len(r.Files) != 2 {
		t.Errorf("inspect of the output index: %v %+v", err, r)
	}
	// And back: dequantizing the sharded output restores every tensor name.
	back := filepath.Join(t.TempDir(), "m-bf16.safetensors.index.json")
	dsum, err := convert.Dequantize(context.Background(), out, back, convert.Options{})
	if err != nil || dsum.Dequantized != 11 || dsum.Shards != 2 {
		t.Fatalf("dequantize of the sharded output: %v %+v", err, dsum)
	}
	rb, err := convert.Inspect(context.Background(), back)
	if err != nil || len(rb.Tensors) != len(src.Tensors) || len(rb.Formats) != 0 || rb.DTypes["BF16"] != 36 {
		t.Errorf("round trip of the shards: %v %+v", err, rb)
	}
	// An index that names a tensor its shard lacks is refused.
	weightMap["ghost.weight"] = "m-00001-of-00002.safetensors"
	idx, _ = json.Marshal(map[string]any{"weight_map": weightMap})
	os.WriteFile(in, idx, 0o644)
	if _, err := convert.Quantize(context.Background(), in, filepath.Join(t.TempDir(), "x.safetensors.index.json"), convert.Options{}); err == nil || !strings.Contains(err.Error(), "ghost.weight") {
		t.Errorf("inconsistent index: %v", err)
	}
}

func TestInspect(t *testing.T) {
	r, err := convert.Inspect(context.Background(), tiny)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Tensors) != 37 || r.DTypes["BF16"] != 36 || len(r.Formats) != 0 || r.Metadata["model"] != "tiny-dit" {
		t.Errorf("report %+v", r)
	}
}

// TestTinyOutputGolden pins the bytes written for the shipped checkpoint.
// tools/checkint8/check_int8.py, an independent numpy implementation of the
// format and the contract, accepted exactly these files; a change to the
// layout, the header encoding or the numbers shows up here.
func TestTinyOutputGolden(t *testing.T) {
	for perRow, want := range map[bool]string{
		false: "2b47244f3c3d7e4fb9a0ba0d84d726ab0ffaadb37aea76b75ff385894cad9401",
		true:  "62810b75bab70ccaa8761e6ee134982d40c5fceb04c52bac2a07916db0629eaa",
	} {
		out := filepath.Join(t.TempDir(), "out.safetensors")
		if _, err := convert.Quantize(context.Background(), tiny, out, convert.Options{PerChannel: perRow}); err != nil {
			t.Fatal(err)
		}
		if got := hashFile(t, out); fmt.Sprintf("%x", got) != want {
			t.Errorf("per-row %v: sha256 %x, want %s", perRow, got, want)
		}
	}
}

// shard writes a safetensors file of float32 tensors for the sharded tests.
func shardFile(t *testing.T, dir, name string, tensors map[string][]float32, shapes map[string][]int) {
	t.Helper()
	writeFile(t, filepath.Join(dir, name), tensors, shapes)
}

func writeIndex(t *testing.T, path string, weightMap map[string]string) {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"weight_map": weightMap})
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestShardedNameCollision: a weight in one shard must not be quantized
// when its scale's name is taken in another shard.
func TestShardedNameCollision(t *testing.T) {
	dir := t.TempDir()
	big := make([]float32, 128*128)
	shardFile(t, dir, "a.safetensors", map[string][]float32{"x.weight": big}, map[string][]int{"x.weight": {128, 128}})
	shardFile(t, dir, "b.safetensors", map[string][]float32{"x.weight_scale": {1}}, map[string][]int{"x.weight_scale": {1}})
	in := filepath.Join(dir, "m.safetensors.index.json")
	writeIndex(t, in, map[string]string{"x.weight": "a.safetensors", "x.weight_scale": "b.safetensors"})
	out := filepath.Join(t.TempDir(), "o.safetensors.index.json")
	sum, err := convert.Quantize(context.Background(), in, out, convert.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Quantized != 0 || !strings.Contains(sum.Plan[0].Reason+sum.Plan[1].Reason, "already has x.weight_scale") {
		t.Errorf("collision not avoided: %+v", sum.Plan)
	}
}

// TestShardedFailureLeavesNothing: a NaN in the second shard aborts the
// conversion, and the first shard's finished output is removed too.
func TestShardedFailureLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	good, bad := make([]float32, 128*128), make([]float32, 128*128)
	bad[300] = float32(math.Inf(1))
	shardFile(t, dir, "a.safetensors", map[string][]float32{"a.weight": good}, map[string][]int{"a.weight": {128, 128}})
	shardFile(t, dir, "b.safetensors", map[string][]float32{"b.weight": bad}, map[string][]int{"b.weight": {128, 128}})
	in := filepath.Join(dir, "m.safetensors.index.json")
	writeIndex(t, in, map[string]string{"a.weight": "a.safetensors", "b.weight": "b.safetensors"})
	outDir := t.TempDir()
	_, err := convert.Quantize(context.Background(), in, filepath.Join(outDir, "o.safetensors.index.json"), convert.Options{})
	var ae *backend.ArgError
	if !errors.As(err, &ae) || ae.Row != 2 || !strings.Contains(err.Error(), "b.weight") {
		t.Fatalf("got %v, want infinity in row 2 of b.weight", err)
	}
	assertOnly(t, outDir)
}

// countDiff counts the bytes at which a and b differ (a length difference
// counts as that many).
func countDiff(a, b []byte) int {
	n := max(len(a), len(b)) - min(len(a), len(b))
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			n++
		}
	}
	return n
}
