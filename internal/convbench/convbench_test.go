package convbench

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
)

// TestRun measures a conversion of the shipped checkpoint: every time is
// positive, the ratios are the conversion over the floors, the output's
// size is the converter's, and no temporary file is left.
func TestRun(t *testing.T) {
	dir := t.TempDir()
	res, err := Run(context.Background(), Config{Input: "../../testdata/tiny-dit.safetensors", Dir: dir, Runs: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rounds) != 2 || res.OutputBytes <= 0 || res.OutputBytes >= res.InputBytes {
		t.Fatalf("%+v", res)
	}
	for _, r := range res.Rounds {
		if r.Convert <= 0 || r.Read <= 0 || r.Write <= 0 || r.RatioBuffered != r.Convert/max(r.Read, r.Write) || r.Ratio < r.RatioBuffered {
			t.Errorf("round %+v", r)
		}
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("left behind: %v", left)
	}
	var b bytes.Buffer
	if err := res.WriteText(&b); err != nil || !strings.Contains(b.String(), "median") {
		t.Errorf("%v: %s", err, b.String())
	}
}
