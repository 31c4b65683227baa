package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gokitchen/kitchen/backend"
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/internal/bench"
	"github.com/gokitchen/kitchen/op"
	"github.com/gokitchen/kitchen/safetensors"
)

// runCLI runs the command line in-process and returns stdout and the error.
func runCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := newRoot()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

func TestBackendsJSON(t *testing.T) {
	out, err := runCLI(t, "backends", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var infos []backend.Info
	if err := json.Unmarshal([]byte(out), &infos); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	found := false
	for _, b := range infos {
		if b.Name == "eager" {
			found = b.Available && len(b.Capabilities) == len(backend.Ops())
		}
	}
	if !found {
		t.Errorf("eager missing or incomplete in %s", out)
	}
}

func TestBackendsTable(t *testing.T) {
	out, err := runCLI(t, "backends")
	if err != nil {
		t.Fatal(err)
	}
	wants := []string{"BACKEND", "eager", "reference", "available", op.DequantizeDType.Name()}
	if ascendBuilt {
		wants = append(wants, "ascend")
	}
	for _, want := range wants {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestVersion(t *testing.T) {
	out, err := runCLI(t, "version")
	if err != nil || !strings.HasPrefix(out, "kitchen ") || !strings.Contains(out, "go1.") {
		t.Errorf("version: %q %v", out, err)
	}
	if _, err := runCLI(t, "version", "extra"); err == nil {
		t.Error("version accepted an argument")
	}
}

// TestBenchJSON runs the benchmark on a tiny shape (rows of 256, so that
// every operation, ConvRot included, has a workload) and checks the shape of
// its JSON (the numbers are timings, so only their presence is checked).
func TestBenchJSON(t *testing.T) {
	out, err := runCLI(t, "bench", "--shape", "4,256", "--dtype", "fp16", "--warmup", "1", "--runs", "3", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Shape      []int   `json:"shape"`
		DType      string  `json:"dtype"`
		Runs       int     `json:"runs"`
		CopyGBPerS float64 `json:"copy_gb_per_s"`
		Ops        []struct {
			Op, Backend                           string
			MeanMs, MedianMs, FloorMs, RatioFloor float64
		} `json:"ops"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if res.DType != "fp16" || res.Runs != 3 || len(res.Shape) != 2 || res.CopyGBPerS <= 0 {
		t.Errorf("header: %+v", res)
	}
	seen := map[string]bool{}
	for _, o := range res.Ops {
		seen[o.Op+"/"+o.Backend] = true
	}
	// The products take an M,K,N shape; an operation declared without a
	// workload is not benchmarked.
	gemm := []string{op.MMInt8.Name(), op.Int8Linear.Name()}
	spec := &backend.Spec{Shape: []int{4, 256}, DType: dtype.Float16}
	for _, o := range backend.Ops() {
		if w, err := o.Workload(context.Background(), backend.Default, spec); w == nil && err == nil {
			continue
		}
		for _, b := range []string{"eager", "cpu"} {
			if !seen[o.Name()+"/"+b] && !slices.Contains(gemm, o.Name()) {
				t.Errorf("no entry for %s on %s in %s", o.Name(), b, out)
			}
		}
	}
	if _, err := runCLI(t, "bench", "--shape", "4,x"); err == nil {
		t.Error("bad --shape accepted")
	}
	if _, err := runCLI(t, "bench", "--device", "tpu"); err == nil {
		t.Error("unknown device accepted")
	}
}

func TestQuantizeCommands(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "tiny-int8.safetensors")
	text, err := runCLI(t, "quantize", "../../testdata/tiny-dit.safetensors", "-o", out)
	if err != nil || !strings.Contains(text, "10 quantized, 27 copied") || !strings.Contains(text, "backend: cpu") {
		t.Fatalf("quantize: %q %v", text, err)
	}
	// The five worst layers by weight error, worst first.
	if !strings.Contains(text, "worst 5 of 10 layers") || strings.Count(text, "channel") != 5 || !strings.Contains(text, " dB") {
		t.Errorf("summary: %q", text)
	}
	if _, err := runCLI(t, "quantize", "../../testdata/tiny-dit.safetensors", "-o", out); err == nil || !strings.Contains(err.Error(), "--force") {
		t.Errorf("existing output: %v", err)
	}
	// --per-channel is the default, still accepted.
	text, err = runCLI(t, "quantize", "../../testdata/tiny-dit.safetensors", "-o", out, "--force", "--per-channel", "--json", "--backend", "eager")
	var sum struct {
		Quantized int      `json:"quantized"`
		BytesOut  int64    `json:"bytes_out"`
		Backends  []string `json:"backends"`
		Layers    []struct {
			Name    string   `json:"name"`
			Scales  string   `json:"scales"`
			ConvRot int      `json:"convrot_group"`
			RelRMS  float64  `json:"rel_rms_error"`
			SNR     *float64 `json:"snr_db"`
		} `json:"layers"`
	}
	if err != nil || json.Unmarshal([]byte(text), &sum) != nil || sum.Quantized != 10 || len(sum.Backends) != 1 || sum.Backends[0] != "eager" {
		t.Errorf("--json --backend eager: %q %v", text, err)
	}
	if len(sum.Layers) != 10 || sum.Layers[0].Name != "blocks.0.attn.qkv" || sum.Layers[0].Scales != "channel" || !(sum.Layers[0].RelRMS > 0) || sum.Layers[0].SNR == nil {
		t.Errorf("--json layers: %+v", sum.Layers)
	}
	conv := filepath.Join(dir, "tiny-convrot.safetensors")
	text, err = runCLI(t, "quantize", "../../testdata/tiny-dit.safetensors", "-o", conv, "--convrot", "--json")
	if err != nil || json.Unmarshal([]byte(text), &sum) != nil || sum.Layers[0].ConvRot != 64 {
		t.Errorf("--convrot --json: %v %+v", err, sum.Layers)
	}
	text, err = runCLI(t, "quantize", "../../testdata/tiny-dit.safetensors", "-o", filepath.Join(dir, "x.safetensors"), "--dry-run", "--exclude", "mlp", "--convrot", "--convrot-group", "16", "--embeddings")
	for _, want := range []string{"7 to quantize", "matches --exclude", "channel ConvRot 16", "embedding table (--embeddings)", "outside the repeated blocks", `embedder or norm ("x_embedder")`} {
		if err != nil || !strings.Contains(text, want) {
			t.Errorf("--dry-run: no %q in %q %v", want, text, err)
		}
	}
	for _, bad := range [][]string{
		{"--per-tensor", "--per-channel"}, {"--per-tensor", "--convrot"}, {"--convrot-group", "64"}, {"--convrot", "--convrot-group", "32"},
		// A group of 0 once quantized without rotation, silently.
		{"--convrot", "--convrot-group", "0"}, {"--min-elements", "-1"}, {"--min-features", "-1"},
	} {
		if _, err := runCLI(t, append([]string{"quantize", "../../testdata/tiny-dit.safetensors", "-o", filepath.Join(dir, "y.safetensors")}, bad...)...); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
	text, err = runCLI(t, "inspect", out, "--json")
	var rep struct {
		Formats map[string]int `json:"formats"`
		Layers  []struct {
			Scales string `json:"scales"`
		} `json:"layers"`
	}
	if err != nil || json.Unmarshal([]byte(text), &rep) != nil || rep.Formats["int8_tensorwise"] != 10 || len(rep.Layers) != 10 || rep.Layers[0].Scales != "channel" {
		t.Errorf("inspect --json: %q %v", text, err)
	}
	text, err = runCLI(t, "inspect", conv)
	if err != nil || !strings.Contains(text, "int8_tensorwise channel ConvRot 256") || !strings.Contains(text, "quantized: int8_tensorwise 10 layers") ||
		!strings.Contains(text, "LAYER") || strings.Contains(text, "NO:") {
		t.Errorf("inspect: %q %v", text, err)
	}
	back := filepath.Join(dir, "back.safetensors")
	text, err = runCLI(t, "dequantize", conv, "-o", back, "--dtype", "fp16")
	if err != nil || !strings.Contains(text, "10 dequantized") {
		t.Errorf("dequantize: %q %v", text, err)
	}
	if _, err := runCLI(t, "quantize", "../../testdata/tiny-dit.safetensors"); err == nil {
		t.Error("quantize without -o succeeded")
	}
	if _, err := runCLI(t, "quantize", "../../testdata/tiny-dit.safetensors", "-o", filepath.Join(dir, "y.safetensors"), "--include", "("); err == nil {
		t.Error("bad --include accepted")
	}
	if _, err := runCLI(t, "quantize", "../../testdata/golden/int8.json", "-o", filepath.Join(dir, "z.safetensors")); err == nil || !strings.Contains(err.Error(), "invalid safetensors file") {
		t.Errorf("a JSON file as input: %v", err)
	}
	if _, err := runCLI(t, "quantize", conv, "-o", filepath.Join(dir, "z.safetensors")); err == nil || !strings.Contains(err.Error(), "already quantized: it holds a comfy_quant marker") {
		t.Errorf("a quantized file as input: %v", err)
	}
}

// TestInspectFlags: a layer kitchen would not load is flagged with the
// reason, and inspect still succeeds; dequantize refuses the file.
func TestInspectFlags(t *testing.T) {
	text, err := runCLI(t, "inspect", "../../testdata/convrot-ck.safetensors")
	if err != nil || strings.Count(text, "  yes") != 6 || strings.Contains(text, "NO:") {
		t.Errorf("inspect of the comfy-kitchen fixture: %q %v", text, err)
	}
	dir := t.TempDir()
	in := filepath.Join(dir, "in.safetensors")
	marker := []byte(`{"format": "int8_tensorwise", "convrot": true, "convrot_groupsize": 64}`)
	var buf bytes.Buffer
	w, err := safetensors.NewWriter(&buf, nil, []safetensors.TensorInfo{
		{Name: "blk.weight_scale", DType: "F32", Shape: []int{}},
		{Name: "blk.weight", DType: "I8", Shape: []int{2, 16}},
		{Name: "blk.comfy_quant", DType: "U8", Shape: []int{len(marker)}},
	})
	if err == nil {
		err = w.WriteTensor("blk.weight_scale", []byte{0, 0, 128, 63})
	}
	if err == nil {
		err = w.WriteTensor("blk.weight", make([]byte, 32))
	}
	if err == nil {
		err = w.WriteTensor("blk.comfy_quant", marker)
	}
	if err != nil || os.WriteFile(in, buf.Bytes(), 0o644) != nil {
		t.Fatal(err)
	}
	text, err = runCLI(t, "inspect", in)
	if err != nil || !strings.Contains(text, "NO: ConvRot group 64 does not divide K = 16") || !strings.Contains(text, "1 layer(s) kitchen would not load") {
		t.Errorf("inspect: %q %v", text, err)
	}
	if _, err := runCLI(t, "dequantize", in, "-o", filepath.Join(dir, "out.safetensors")); err == nil || !strings.Contains(err.Error(), `layer "blk": ConvRot group 64 does not divide K = 16`) {
		t.Errorf("dequantize: %v", err)
	}
}

// TestBenchGEMM times the matrix products on an M,K,N shape: GOPS are
// reported, and only the operations asked for run.
func TestBenchGEMM(t *testing.T) {
	out, err := runCLI(t, "bench", "--op", "mm_int8,int8_linear", "--shape", "3,64,8", "--warmup", "1", "--runs", "2", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Ops []struct {
			Op, Backend string
			GOPS        float64 `json:"gops"`
		} `json:"ops"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	seen := map[string]bool{}
	for _, o := range res.Ops {
		if o.GOPS <= 0 || (o.Op != "mm_int8" && o.Op != "int8_linear") {
			t.Errorf("entry %+v", o)
		}
		seen[o.Op+"/"+o.Backend] = true
	}
	for _, want := range []string{"mm_int8/cpu", "mm_int8/eager", "int8_linear/cpu", "int8_linear/eager"} {
		if !seen[want] {
			t.Errorf("no entry %s in %s", want, out)
		}
	}
	if _, err := runCLI(t, "bench", "--op", "int8_linear", "--shape", "64,64"); err == nil {
		t.Error("a 2-D shape for int8_linear was accepted")
	}
	// Settings out of range, or that --convert does not take, are refused
	// before anything runs.
	for _, c := range [][]string{
		{"--warmup", "-1", "--shape", "1,8,8", "--op", "mm_int8"},
		{"--shape", "9223372036854775807,2"},
		{"--convert", "../../testdata/tiny-dit.safetensors", "--runs", "0"},
		{"--convert", "../../testdata/tiny-dit.safetensors", "--shape", "1,2"},
	} {
		if out, err := runCLI(t, append([]string{"bench"}, c...)...); err == nil || out != "" {
			t.Errorf("bench %v: %v, printed %q", c, err, out)
		}
	}
}

// TestBenchShapes: a repeated --shape times each shape in turn, one JSON
// object (or table) each, in order; a bad one is refused before any runs.
func TestBenchShapes(t *testing.T) {
	args := []string{"bench", "--op", "mm_int8", "--backends", "cpu", "--shape", "2,32,8", "--shape", "3,64,8", "--warmup", "0", "--runs", "1"}
	out, err := runCLI(t, append(args, "--json")...)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(strings.NewReader(out))
	var shapes [][]int
	for dec.More() {
		var res struct {
			Shape []int `json:"shape"`
		}
		if err := dec.Decode(&res); err != nil {
			t.Fatalf("not a stream of JSON objects: %v\n%s", err, out)
		}
		shapes = append(shapes, res.Shape)
	}
	if want := [][]int{{2, 32, 8}, {3, 64, 8}}; !slices.EqualFunc(shapes, want, slices.Equal) {
		t.Errorf("shapes %v, want %v", shapes, want)
	}
	if out, err = runCLI(t, args...); err != nil || strings.Count(out, "cpu kernels") != 2 || !strings.Contains(out, "[2 32 8]") || !strings.Contains(out, "[3 64 8]") {
		t.Errorf("text: %v\n%s", err, out)
	}
	if out, err := runCLI(t, "bench", "--op", "mm_int8", "--shape", "2,32,8", "--shape", "3,x,8"); err == nil || out != "" {
		t.Errorf("a bad second shape: %v, printed %q", err, out)
	}
}

// TestPrintable: names and metadata from a file are printed on one line,
// their control characters escaped, so a name cannot forge rows of a
// table; error messages keep their own lines.
func TestPrintable(t *testing.T) {
	for in, want := range map[string]string{
		"blocks.0.attn":          "blocks.0.attn",
		"l\nx.weight  F32":       `l\nx.weight  F32`,
		"a\x1b[2Jb\r\x00":        `a\x1b[2Jb\r\x00`,
		"bad\xffutf8 \u202eevil": `bad\xffutf8 \u202eevil`,
		"ünïcode":                "ünïcode",
	} {
		if got := printable(in); got != want {
			t.Errorf("printable(%q) = %q, want %q", in, got, want)
		}
	}
	if got := printableLines("line one\nline\x1btwo"); got != "line one\nline\\x1btwo" {
		t.Errorf("printableLines = %q", got)
	}
}

// TestMessage: the library's "kitchen: " is said once, at the start,
// however deep the error that carries it.
func TestMessage(t *testing.T) {
	inner := &backend.ArgError{Op: "int8_linear", Param: "bias", Row: -1, Err: backend.ErrNil}
	for err, want := range map[error]string{
		inner: "kitchen: int8_linear: bias: missing",
		fmt.Errorf("eval: blocks.0.a: %w", inner):                "kitchen: eval: blocks.0.a: int8_linear: bias: missing",
		errors.New("plain"):                                      "kitchen: plain",
		errors.Join(errors.New("a"), fmt.Errorf("b: %w", inner)): "kitchen: a\nb: int8_linear: bias: missing",
		// Only the library's own prefix goes: not one in a path.
		fmt.Errorf("open /m/a: kitchen: b.safetensors: %w", fs.ErrNotExist): "kitchen: open /m/a: kitchen: b.safetensors: file does not exist",
	} {
		if got := message(err); got != want {
			t.Errorf("message(%v) = %q, want %q", err, got, want)
		}
	}
}

// TestBenchDeclinedLines: what backends refused is printed a line a
// backend and reason, naming its operations, not a line an operation.
func TestBenchDeclinedLines(t *testing.T) {
	r := &bench.Result{DType: "bfloat16", Shape: []int{4, 8}, Declined: []bench.Declined{
		{Op: "quantize_int8_rowwise", Backend: "cpu", Reason: "device: npu:0 not in [cpu]"},
		{Op: "embedding", Backend: "ascend", Reason: "not implemented"},
		{Op: "dequantize_int8", Backend: "cpu", Reason: "device: npu:0 not in [cpu]"},
	}}
	var b strings.Builder
	if err := printBench(&b, r); err != nil {
		t.Fatal(err)
	}
	text := b.String()
	for _, want := range []string{
		"declined by cpu, not timed: quantize_int8_rowwise, dequantize_int8 (device: npu:0 not in [cpu])\n",
		"declined by ascend, not timed: embedding (not implemented)\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("no %q in\n%s", want, text)
		}
	}
	if n := strings.Count(text, "declined"); n != 2 {
		t.Errorf("%d declined lines, want 2:\n%s", n, text)
	}
}
