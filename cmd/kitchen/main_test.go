package main

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gokitchen/kitchen/backend"
	"github.com/gokitchen/kitchen/op"
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
	for _, want := range []string{"BACKEND", "eager", "reference", "available", op.DequantizeDType.Name(), "ascend"} {
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
	gemm := []string{op.MMInt8.Name(), op.Int8Linear.Name()}
	for _, o := range backend.Ops() {
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
	if err != nil || !strings.Contains(text, "11 quantized, 26 copied") || !strings.Contains(text, "backend: cpu") {
		t.Fatalf("quantize: %q %v", text, err)
	}
	if _, err := runCLI(t, "quantize", "../../testdata/tiny-dit.safetensors", "-o", out); err == nil || !strings.Contains(err.Error(), "--force") {
		t.Errorf("existing output: %v", err)
	}
	text, err = runCLI(t, "quantize", "../../testdata/tiny-dit.safetensors", "-o", out, "--force", "--per-channel", "--json", "--backend", "eager")
	var sum struct {
		Quantized int      `json:"quantized"`
		BytesOut  int64    `json:"bytes_out"`
		Backends  []string `json:"backends"`
	}
	if err != nil || json.Unmarshal([]byte(text), &sum) != nil || sum.Quantized != 11 || len(sum.Backends) != 1 || sum.Backends[0] != "eager" {
		t.Errorf("--json --backend eager: %q %v", text, err)
	}
	text, err = runCLI(t, "quantize", "../../testdata/tiny-dit.safetensors", "-o", filepath.Join(dir, "x.safetensors"), "--dry-run", "--exclude", "mlp")
	if err != nil || !strings.Contains(text, "7 to quantize") || !strings.Contains(text, "matches --exclude") {
		t.Errorf("--dry-run: %q %v", text, err)
	}
	text, err = runCLI(t, "inspect", out, "--json")
	var rep struct {
		Formats map[string]int `json:"formats"`
	}
	if err != nil || json.Unmarshal([]byte(text), &rep) != nil || rep.Formats["int8_tensorwise"] != 11 {
		t.Errorf("inspect --json: %q %v", text, err)
	}
	text, err = runCLI(t, "inspect", out)
	if err != nil || !strings.Contains(text, "int8_tensorwise (per row)") || !strings.Contains(text, "quantized: int8_tensorwise 11 layers") {
		t.Errorf("inspect: %q %v", text, err)
	}
	back := filepath.Join(dir, "back.safetensors")
	text, err = runCLI(t, "dequantize", out, "-o", back, "--dtype", "fp16")
	if err != nil || !strings.Contains(text, "11 dequantized") {
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
}
