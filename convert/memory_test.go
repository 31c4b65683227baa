//go:build linux && !race

// The race detector's shadow memory would dominate the measurement, so
// this test runs in the non-race pass of CI (-tags purego).

package convert_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/gokitchen/kitchen/convert"
	"github.com/gokitchen/kitchen/safetensors"
)

// The README's memory bound for `kitchen quantize`: peak RSS stays under a
// fixed allowance, plus twice the largest tensor, plus a little for each
// tensor's entry in the plan and the headers, whatever the file's size.
const (
	rssAllowance = 64 << 20
	perTensor    = 1 << 10
)

func TestMain(m *testing.M) {
	// As a child process, convert and exit, so the parent can read this
	// process's peak memory alone.
	if in := os.Getenv("KITCHEN_TEST_CONVERT_IN"); in != "" {
		if _, err := convert.Quantize(context.Background(), in, os.Getenv("KITCHEN_TEST_CONVERT_OUT"), convert.Options{}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestMemoryBound converts checkpoints several times larger than the bound
// in a child process and checks the child's peak resident set: one of large
// tensors, and one of many small ones (where pages shared by neighbouring
// tensors, and pages the kernel maps around each fault, must not pile up).
func TestMemoryBound(t *testing.T) {
	if testing.Short() {
		t.Skip("writes files of a few hundred MiB")
	}
	for _, c := range []struct {
		name  string
		count int
		shape []int // bfloat16
	}{
		{"large tensors", 96, []int{1024, 2048}},  // 4 MiB each, 384 MiB
		{"small tensors", 11000, []int{128, 128}}, // 32 KiB each, 344 MiB
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			in := filepath.Join(dir, "big.safetensors")
			tensorBytes := writeBig(t, in, c.count, c.shape)
			bound := int64(rssAllowance + 2*tensorBytes + perTensor*c.count)
			if st, _ := os.Stat(in); st.Size() < 3*bound {
				t.Fatalf("test file of %d bytes is not several times the %d-byte bound", st.Size(), bound)
			}
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), "KITCHEN_TEST_CONVERT_IN="+in, "KITCHEN_TEST_CONVERT_OUT="+filepath.Join(dir, "out.safetensors"))
			if out, err := cmd.CombinedOutput(); err != nil {
				if errors.Is(err, syscall.ENOEXEC) {
					t.Skip("cannot re-execute the test binary here (under user-mode emulation?)")
				}
				t.Fatalf("child: %v\n%s", err, out)
			}
			peak := int64(cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss) * 1024 // Linux reports KiB
			st, _ := os.Stat(in)
			t.Logf("converted %d MiB with a peak RSS of %.1f MiB (bound %.1f MiB)", st.Size()>>20, float64(peak)/(1<<20), float64(bound)/(1<<20))
			if peak > bound {
				t.Errorf("peak RSS %d bytes exceeds the bound of %d", peak, bound)
			}
			f, err := safetensors.Open(filepath.Join(dir, "out.safetensors"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if len(f.Tensors) != 3*c.count {
				t.Errorf("output holds %d tensors, want %d", len(f.Tensors), 3*c.count)
			}
		})
	}
}

// writeBig writes count bfloat16 weights of the given shape and returns
// the size of one.
func writeBig(t *testing.T, path string, count int, shape []int) int {
	t.Helper()
	var infos []safetensors.TensorInfo
	for i := range count {
		infos = append(infos, safetensors.TensorInfo{Name: fmt.Sprintf("blocks.%d.linear.weight", i), DType: "BF16", Shape: shape})
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	bw := bufio.NewWriterSize(f, 1<<20)
	w, err := safetensors.NewWriter(bw, nil, infos)
	if err != nil {
		t.Fatal(err)
	}
	// One block of finite bfloat16 values, varied per tensor by its first
	// element: realistic enough for the kernels, quick to write.
	data := make([]byte, 2*shape[0]*shape[1])
	x := uint32(1)
	for i := 0; i < len(data); i += 2 {
		x = x*1664525 + 1013904223
		data[i], data[i+1] = byte(x>>8), byte(x>>24)&0x3f|0x80*byte(x>>31) // exponent below 0x7f: finite
	}
	for i, ti := range infos {
		data[0] = byte(i)
		if err := w.WriteTensor(ti.Name, data); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	if err := bw.Flush(); err != nil {
		t.Fatal(err)
	}
	return len(data)
}
