package convbench

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gokitchen/kitchen/convert"
	"github.com/gokitchen/kitchen/safetensors"
)

// TestRun measures a conversion of the shipped checkpoint: every time is
// positive (reading and writing at once too), the ratios are the
// conversion over the floors, the output's size is the converter's, and
// no temporary file is left.
func TestRun(t *testing.T) {
	// A directory whose name is a glob pattern, holding a file of its own
	// that a pattern built from the name would match: the bench leaves
	// both alone and nothing of its own behind.
	dir := filepath.Join(t.TempDir(), "run[1]*")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	theirs := filepath.Join(dir, "kitchen-bench-x.safetensors")
	if err := os.WriteFile(theirs, []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := Run(context.Background(), Config{Input: "../../testdata/tiny-dit.safetensors", Dir: dir, Runs: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rounds) != 2 || res.OutputBytes <= 0 || res.OutputBytes >= res.InputBytes {
		t.Fatalf("%+v", res)
	}
	for _, r := range res.Rounds {
		if r.Convert <= 0 || r.Read <= 0 || r.Write <= 0 || r.ReadWrite <= 0 || r.RatioBuffered != r.Convert/max(r.Read, r.Write) ||
			r.Ratio < r.RatioBuffered || r.RatioConcurrent != r.Convert/r.ReadWrite {
			t.Errorf("round %+v", r)
		}
	}
	if left, _ := os.ReadDir(dir); len(left) != 1 || left[0].Name() != filepath.Base(theirs) {
		t.Errorf("the directory holds %v, want only %s", left, filepath.Base(theirs))
	}
	var b bytes.Buffer
	if err := res.WriteText(&b); err != nil || !strings.Contains(b.String(), "median") {
		t.Errorf("%v: %s", err, b.String())
	}
}

// TestRunSharded measures a sharded checkpoint (an index and its one
// shard, the shipped checkpoint): the input's size is the shard's, the
// output is sharded too, and nothing is left behind.
func TestRunSharded(t *testing.T) {
	src, err := os.ReadFile("../../testdata/tiny-dit.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	in := t.TempDir()
	shard := "m-00001-of-00001.safetensors"
	if err := os.WriteFile(filepath.Join(in, shard), src, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := safetensors.Open(filepath.Join(in, shard))
	if err != nil {
		t.Fatal(err)
	}
	weights := map[string]string{}
	for _, ti := range f.Tensors {
		weights[ti.Name] = shard
	}
	f.Close()
	idx, _ := json.Marshal(map[string]any{"metadata": map[string]any{}, "weight_map": weights})
	index := filepath.Join(in, "m"+convert.IndexSuffix)
	if err := os.WriteFile(index, idx, 0o644); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	res, err := Run(context.Background(), Config{Input: index, Dir: dir, Runs: 1})
	if err != nil {
		t.Fatal(err)
	}
	if res.InputBytes != int64(len(src)) || res.OutputBytes <= 0 || res.Rounds[0].Read <= 0 {
		t.Fatalf("%+v", res)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("left behind: %v", left)
	}
	// The directory stands for its index, as for kitchen quantize.
	res, err = Run(context.Background(), Config{Input: in, Dir: dir, Runs: 1})
	if err != nil || res.Input != index || res.InputBytes != int64(len(src)) {
		t.Errorf("the directory as the input: %v, %+v", err, res)
	}
}
