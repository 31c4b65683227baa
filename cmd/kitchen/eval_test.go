package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gokitchen/kitchen/eval"
)

// TestEval quantizes the shipped checkpoint and evaluates it: every
// quantized layer is listed, worst first, with errors an int8 layer should
// have (well under 10%), and the SVG is written.
func TestEval(t *testing.T) {
	dir := t.TempDir()
	q := filepath.Join(dir, "q.safetensors")
	if _, err := runCLI(t, "quantize", "../../testdata/tiny-dit.safetensors", "-o", q, "--quiet"); err != nil {
		t.Fatal(err)
	}
	svg := filepath.Join(dir, "e.svg")
	out, err := runCLI(t, "eval", "../../testdata/tiny-dit.safetensors", q, "--json", "--tokens", "16", "--svg", svg)
	if err != nil {
		t.Fatal(err)
	}
	var rep eval.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if len(rep.Layers) != 10 || rep.Tokens != 16 || rep.Seed != 1 || rep.Outliers != 4 || rep.OutlierScale != 50 {
		t.Fatalf("%d layers, %d tokens: %s", len(rep.Layers), rep.Tokens, out)
	}
	for i, l := range rep.Layers {
		if !(l.PlainError > 0 && l.PlainError < 0.1 && l.OutlierError > 0 && l.OutlierError < 0.2) {
			t.Errorf("%s: errors %v, %v", l.Name, l.PlainError, l.OutlierError)
		}
		if i > 0 && l.Worst() > rep.Layers[i-1].Worst() {
			t.Errorf("%s is listed after a better layer", l.Name)
		}
	}
	if b, err := os.ReadFile(svg); err != nil || !strings.HasPrefix(string(b), "<svg") || !strings.Contains(string(b), rep.Layers[0].Name) {
		t.Errorf("svg: %v %.80q", err, b)
	}
	// The text lists every layer, then the means over them.
	text, err := runCLI(t, "eval", "../../testdata/tiny-dit.safetensors", q, "--tokens", "16")
	if err != nil {
		t.Fatal(err)
	}
	var plain, outliers float64
	for _, l := range rep.Layers {
		plain, outliers = plain+l.PlainError, outliers+l.OutlierError
		if !strings.Contains(text, l.Name+" ") {
			t.Errorf("no line for %s in %s", l.Name, text)
		}
	}
	if want := fmt.Sprintf("%.5f  %.5f\n", plain/10, outliers/10); !strings.Contains(text, "(mean, linear layers)") || strings.Contains(text, "embedding tables") || !strings.Contains(text, want) {
		t.Errorf("no means %q in %s", want, text)
	}
	// --include narrows the layers; a bad expression is refused.
	if out, err := runCLI(t, "eval", "../../testdata/tiny-dit.safetensors", q, "--tokens", "4", "--include", `attn\.qkv`, "--json"); err != nil || strings.Count(out, `"name"`) != 2 {
		t.Errorf("--include: %v\n%s", err, out)
	}
	if _, err := runCLI(t, "eval", "../../testdata/tiny-dit.safetensors", q, "--include", "("); err == nil || !strings.Contains(err.Error(), "--include") {
		t.Errorf("--include '(': %v", err)
	}
	// Tokens out of range are refused before anything is read (the largest
	// once made a slice too long, a panic).
	for _, bad := range [][]string{{"--outliers", "0"}, {"--outlier-scale", "0"}, {"--outlier-scale", "NaN"}, {"--outlier-scale", "+Inf"}} {
		if _, err := runCLI(t, append([]string{"eval", "../../testdata/tiny-dit.safetensors", q}, bad...)...); err == nil || !strings.Contains(err.Error(), bad[0]+" must be") {
			t.Errorf("%v: %v", bad, err)
		}
	}
	for _, n := range []string{"0", "-5", "65537", "999999999999"} {
		if _, err := runCLI(t, "eval", "../../testdata/tiny-dit.safetensors", q, "--tokens", n); err == nil || !strings.Contains(err.Error(), "--tokens must be 1 to 65536, got "+n) {
			t.Errorf("--tokens %s: %v", n, err)
		}
	}
	// An SVG into a directory that does not exist is refused before the
	// run; a quantized file given as the original is named as such.
	if _, err := runCLI(t, "eval", "../../testdata/tiny-dit.safetensors", q, "--svg", filepath.Join(dir, "none", "e.svg")); err == nil || !strings.Contains(err.Error(), "is not a directory") {
		t.Errorf("--svg into a missing directory: %v", err)
	}
	if _, err := runCLI(t, "eval", "../../testdata/tiny-dit.safetensors", q, "--svg", dir); err == nil || !strings.Contains(err.Error(), "is not a regular file") {
		t.Errorf("--svg onto a directory: %v", err)
	}
	// The layer is named quoted, as a name from a file is in errors.
	if _, err := runCLI(t, "eval", q, q); err == nil || !regexp.MustCompile(`eval: "[a-z0-9_.]+": \.weight is int8 in `).MatchString(err.Error()) ||
		!strings.Contains(err.Error(), "the original must be the checkpoint before quantization") {
		t.Errorf("eval of a quantized file against itself: %v", err)
	}
	// The original is not a quantized checkpoint.
	if _, err := runCLI(t, "eval", q, "../../testdata/tiny-dit.safetensors"); err == nil || !strings.Contains(err.Error(), "not a quantized checkpoint") {
		t.Errorf("eval of an unquantized file: %v", err)
	}
}

// TestPrintEvalKinds: linear layers and embedding tables are averaged
// apart (an output error and a row error are different measures), and a
// layer's note is printed under the table.
func TestPrintEvalKinds(t *testing.T) {
	rep := &eval.Report{Original: "o", Tokens: 4, Layers: []eval.Layer{
		{Name: "a", N: 2, K: 2, Scales: "channel", PlainError: 0.01, OutlierError: 0.03},
		{Name: "b", N: 2, K: 2, Scales: "channel", PlainError: 0.03, OutlierError: 0.05},
		{Name: "emb", N: 2, K: 2, Scales: "channel", PlainError: 0.5, OutlierError: 0.5, Embedding: true, Note: "a 1-D [N] scale"},
	}}
	var b strings.Builder
	if err := printEval(&b, rep); err != nil {
		t.Fatal(err)
	}
	text := b.String()
	for _, want := range []string{"(mean, linear layers)", "0.02000  0.04000\n", "(mean, embedding tables)", "0.50000  0.50000\n", "note: emb: a 1-D [N] scale",
		"relative output error ||y_int8 - y|| / ||y||", "embedding tables: relative weight error ||w' - w|| / ||w||"} {
		if !strings.Contains(text, want) {
			t.Errorf("no %q in\n%s", want, text)
		}
	}
	// Without a table, the footer says nothing of weight errors.
	rep.Layers = rep.Layers[:2]
	b.Reset()
	if err := printEval(&b, rep); err != nil || strings.Contains(b.String(), "weight error") {
		t.Errorf("%v\n%s", err, b.String())
	}
}
