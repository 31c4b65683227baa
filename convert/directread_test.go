package convert

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/safetensors"
)

// readDirectly makes the converter read every tensor directly, through a
// ring of one page beyond the largest unit (so that it wraps, and regions
// cross its end, all the time), for the rest of the test; it returns false
// where direct reads are not available.
func readDirectly(t *testing.T) bool {
	t.Helper()
	minBefore, aheadBefore := directMin, directAhead
	directMin, directAhead = 1, directAlign
	t.Cleanup(func() { directMin, directAhead = minBefore, aheadBefore })
	f, err := safetensors.Open("../testdata/tiny-dit.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	df, err := openDirect(f)
	if err != nil {
		t.Logf("no direct reads here: %v", err)
		return false
	}
	df.close()
	return true
}

// mixedFile writes a checkpoint of tensors of many sizes and dtypes, none
// of them starting on a page boundary, with layers large enough to be
// quantized in several chunks of rows.
func mixedFile(t *testing.T, path string) {
	t.Helper()
	r := rand.New(rand.NewPCG(3, 4))
	type spec struct {
		name, dt string
		shape    []int
	}
	specs := []spec{
		{"blocks.0.attn.weight", "BF16", []int{768, 640}},
		{"blocks.0.attn.bias", "BF16", []int{767}},
		{"blocks.0.mlp.weight", "F32", []int{3000, 1024}}, // three chunks
		{"blocks.0.norm.weight", "F16", []int{33}},
		{"blocks.1.attn.weight", "F16", []int{512, 256}},
		{"blocks.1.mlp.weight", "BF16", []int{4099, 512}},
		{"pos_embed", "F32", []int{1, 1001, 7}},
		{"blocks.1.mlp.bias", "F32", []int{4099}},
	}
	var infos []safetensors.TensorInfo
	for _, s := range specs {
		infos = append(infos, safetensors.TensorInfo{Name: s.name, DType: s.dt, Shape: s.shape})
	}
	var buf bytes.Buffer
	w, err := safetensors.NewWriter(&buf, map[string]string{"note": "direct reads"}, infos)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range specs {
		n := 1
		for _, d := range s.shape {
			n *= d
		}
		var b []byte
		for range n {
			v := float32(r.NormFloat64() * 0.05)
			switch s.dt {
			case "F32":
				b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
			case "BF16":
				b = binary.LittleEndian.AppendUint16(b, dtype.BFloat16FromFloat32(v))
			default:
				b = binary.LittleEndian.AppendUint16(b, dtype.Float16FromFloat32(v))
			}
		}
		if err := w.WriteTensor(s.name, b); err != nil {
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

// mixedDirect writes mixedFile in a new directory and returns its path,
// with every tensor read directly for the rest of the test (see
// readDirectly); it skips the test where direct reads are not available.
func mixedDirect(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "mixed.safetensors")
	mixedFile(t, path)
	if !readDirectly(t) {
		t.Skip("O_DIRECT is not available here")
	}
	return path
}

// copyUnits writes mixedFile, opens it, and returns units copying each of
// its tensors, times times over, in order; it skips the test where direct
// reads are not available.
func copyUnits(t *testing.T, times int) (path string, f *safetensors.File, units []unit, ord []int32) {
	t.Helper()
	path = mixedDirect(t)
	f, err := safetensors.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	for range times {
		for i := range f.Tensors {
			units = append(units, copyUnit(i, ""))
			ord = append(ord, int32(len(units)-1))
		}
	}
	return path, f, units, ord
}

// TestDirectReadSameBytes: converting with every tensor read directly (a
// ring that wraps at every unit) writes the same bytes as reading through
// the mapping, for quantizing (row-wise, per-tensor, ConvRot) and
// dequantizing (to bfloat16 and float32).
func TestDirectReadSameBytes(t *testing.T) {
	mixed := mixedDirect(t)
	dir := filepath.Dir(mixed)
	ctx := context.Background()
	convert := func(direct bool, name string, run func(out string) error) []byte {
		t.Helper()
		directRead = direct
		defer func() { directRead = true }()
		before := directUnits.Load()
		out := filepath.Join(dir, fmt.Sprintf("%s-%v.safetensors", name, direct))
		if err := run(out); err != nil {
			t.Fatalf("%s, direct %v: %v", name, direct, err)
		}
		if read := directUnits.Load() - before; (read > 0) != direct {
			t.Fatalf("%s, direct %v: %d units read directly", name, direct, read)
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, in := range []string{"../testdata/tiny-dit.safetensors", mixed} {
		for _, opts := range []Options{{}, {PerTensor: true}, {ConvRot: 64}} {
			opts.Force = true
			opts.Selection.MinElements = 1
			name := fmt.Sprintf("%s %+v", filepath.Base(in), opts)
			var outs [2][]byte
			for i, direct := range []bool{true, false} {
				outs[i] = convert(direct, fmt.Sprintf("q%d", i), func(out string) error {
					_, err := Quantize(ctx, in, out, opts)
					return err
				})
			}
			if !bytes.Equal(outs[0], outs[1]) {
				t.Fatalf("%s: read directly, the output differs", name)
			}
			q := filepath.Join(dir, "q.safetensors")
			if err := os.WriteFile(q, outs[1], 0o644); err != nil {
				t.Fatal(err)
			}
			for _, dt := range []dtype.DType{dtype.BFloat16, dtype.Float32} {
				for i, direct := range []bool{true, false} {
					outs[i] = convert(direct, fmt.Sprintf("d%d", i), func(out string) error {
						_, err := Dequantize(ctx, q, out, Options{OutDType: dt, Force: true})
						return err
					})
				}
				if !bytes.Equal(outs[0], outs[1]) {
					t.Fatalf("%s, dequantized to %v: read directly, the output differs", name, dt)
				}
			}
		}
	}
}

// TestDirectReadShrunkFile: a file cut short after it was opened is an
// error naming the tensor, not the ring's stale bytes passed off as it.
func TestDirectReadShrunkFile(t *testing.T) {
	path, f, units, ord := copyUnits(t, 1)
	last := f.Tensors[len(f.Tensors)-1]
	if err := os.Truncate(path, f.DataStart+last.Begin+last.Size()/2); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := startDirect(ctx, f, units, ord)
	if r == nil {
		t.Fatal("no direct reader")
	}
	defer r.close()
	for k := range ord {
		d, err := r.take(ctx, k)
		if err == nil {
			err = r.await(ctx, d, -1)
		}
		if k < len(ord)-1 {
			if err != nil {
				t.Fatalf("tensor %d: %v", k, err)
			}
			r.release(d)
			continue
		}
		if !errors.Is(err, io.ErrUnexpectedEOF) || !bytes.Contains([]byte(err.Error()), []byte(last.Name)) {
			t.Fatalf("the cut tensor: got %v, want io.ErrUnexpectedEOF naming %q", err, last.Name)
		}
	}
}

// TestDirectReadCancel: a conversion interrupted while the reader is ahead
// of it stops and leaves no file (and returns only once the reader's
// goroutine has ended: the conversion waits for it before unmapping).
func TestDirectReadCancel(t *testing.T) {
	in := mixedDirect(t)
	dir := filepath.Dir(in)
	for stop := 1; stop <= 4; stop++ {
		ctx, cancel := context.WithCancel(context.Background())
		opts := Options{Force: true, Selection: Selection{MinElements: 1}, Progress: func(p Progress) {
			if p.TensorsDone == stop {
				cancel()
			}
		}}
		_, err := Quantize(ctx, in, filepath.Join(dir, "out.safetensors"), opts)
		cancel()
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("stopped after %d tensors: got %v", stop, err)
		}
		if _, err := os.Stat(filepath.Join(dir, "out.safetensors")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("stopped after %d tensors: the output exists (%v)", stop, err)
		}
	}
}

// TestDirectRing: however the consumer paces itself, each unit's bytes
// are the file's from the time they are read until the consumer frees
// them, while the reader wraps its ring of one page beyond the largest
// unit around them.
func TestDirectRing(t *testing.T) {
	_, f, units, ord := copyUnits(t, 3) // the ring wraps over itself
	ctx := context.Background()
	r := startDirect(ctx, f, units, ord)
	if r == nil {
		t.Fatal("no direct reader")
	}
	defer r.close()
	rng := rand.New(rand.NewPCG(5, 6))
	for k, i := range ord {
		want, err := f.Data(f.Tensors[units[i].in])
		if err != nil {
			t.Fatal(err)
		}
		d, err := r.take(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		got := d.in
		for done := 0; done < len(want); {
			end := min(len(want), done+1+rng.IntN(3<<20))
			if err := r.await(ctx, d, d.inSkip+int64(end)); err != nil {
				t.Fatal(err)
			}
			if rng.IntN(3) == 0 {
				time.Sleep(5 * time.Millisecond) // the reader runs ahead
			}
			if !bytes.Equal(got[done:end], want[done:end]) {
				t.Fatalf("unit %d (%s): bytes [%d, %d) are not the file's", k, f.Tensors[units[i].in].Name, done, end)
			}
			r.free(d, d.inSkip+int64(end))
			done = end
		}
		r.release(d)
	}
}
