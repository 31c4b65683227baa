package convert

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// testChunk is the O_DIRECT staging size on Linux (directChunk), the
// size of the writes that must line up.
const testChunk = 8 << 20

// TestSinks streams bytes through each sink in writes of every size, with
// ranges behind the stream written again (far behind, inside the last
// staged chunk, and across its start), and checks the file holds exactly
// what was written.
func TestSinks(t *testing.T) {
	for _, direct := range []bool{true, false} {
		f, err := os.Create(filepath.Join(t.TempDir(), "out"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		directIO = direct
		s := newSink(f)
		directIO = true
		if _, buffered := s.(*bufferedSink); buffered == direct {
			t.Logf("direct %v: got a %T (no O_DIRECT here?)", direct, s)
		}
		r := rand.New(rand.NewPCG(1, 2))
		var want []byte
		for len(want) < 3*testChunk+12345 {
			p := make([]byte, r.IntN(3<<20)+1)
			for i := range p {
				p[i] = byte(r.Uint32())
			}
			if _, err := s.Write(p); err != nil {
				t.Fatal(err)
			}
			want = append(want, p...)
			if err := s.settle(); err != nil {
				t.Fatal(err)
			}
			for _, at := range []int{r.IntN(len(want)), len(want) - 1, max(0, len(want)%testChunk-5)} {
				patch := bytes.Repeat([]byte{byte(at)}, min(len(want)-at, 10+r.IntN(9000)))
				if _, err := s.WriteAt(patch, int64(at)); err != nil {
					t.Fatal(err)
				}
				copy(want[at:], patch)
			}
		}
		if _, ok := s.(*bufferedSink); !ok {
			if _, err := s.WriteAt([]byte{1, 2}, int64(len(want)-1)); err == nil {
				t.Error("a write past the stream's end was taken")
			}
		}
		if err := s.finish(); err != nil {
			t.Fatal(err)
		}
		if err := s.close(); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(f.Name())
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("direct %v (%T): the file differs from what was written (%d bytes, want %d)", direct, s, len(got), len(want))
		}
	}
}

// TestBufferedPathSameBytes: the page-cache path writes what the direct
// path writes.
func TestBufferedPathSameBytes(t *testing.T) {
	dir := t.TempDir()
	var outs [2][]byte
	for i, direct := range []bool{true, false} {
		directIO = direct
		out := filepath.Join(dir, "out.safetensors")
		_, err := Quantize(context.Background(), "../testdata/tiny-dit.safetensors", out, Options{ConvRot: 256, Force: true})
		directIO = true
		if err != nil {
			t.Fatal(err)
		}
		if outs[i], err = os.ReadFile(out); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(outs[0], outs[1]) || len(outs[0]) == 0 {
		t.Error("the buffered and direct paths wrote different files")
	}
}
