//go:build linux && !race

// The race detector's shadow memory would dominate the measurement, so
// this test runs in the non-race pass of CI (-tags purego).

package convert_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/gokitchen/kitchen/convert"
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/safetensors"
)

// The README's memory bound for `kitchen quantize` and `dequantize`: peak
// RSS stays under a fixed allowance, plus twice the largest tensor (input
// or output), plus twice the input's and the output's headers, plus a
// little for each tensor (its entries in the plan and the layout) and each
// metadata entry, whatever the file's size.
const (
	rssAllowance = 64 << 20
	perTensor    = 1 << 10
)

func TestMain(m *testing.M) {
	// As a child process, convert and exit, so the parent can read this
	// process's peak memory alone.
	if in := os.Getenv("KITCHEN_TEST_CONVERT_IN"); in != "" {
		out := os.Getenv("KITCHEN_TEST_CONVERT_OUT")
		if ns, _ := strconv.Atoi(os.Getenv("KITCHEN_TEST_SLOW_WRITER")); ns > 0 {
			convert.SlowWriter(ns)
		}
		opts := convert.Options{}
		opts.MinElements, _ = strconv.ParseInt(os.Getenv("KITCHEN_TEST_CONVERT_MIN"), 10, 64)
		opts.MinFeatures = int(opts.MinElements) // 1: layers of every size
		var err error
		if dt := os.Getenv("KITCHEN_TEST_DEQUANTIZE"); dt != "" {
			if opts.OutDType, err = dtype.Parse(dt); err == nil {
				_, err = convert.Dequantize(context.Background(), in, out, opts)
			}
		} else {
			_, err = convert.Quantize(context.Background(), in, out, opts)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		// The peak of this process's own memory: the rusage that the
		// parent gets counts, from before the exec, the parent's.
		status, err := os.ReadFile("/proc/self/status")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		for line := range strings.Lines(string(status)) {
			if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
				fmt.Print(strings.TrimSpace(rest))
			}
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestMemoryBound converts checkpoints several times larger than the bound's
// variable parts in a child process and checks the child's peak resident
// set: large tensors; many small ones (where pages shared by neighbouring
// tensors, and pages the kernel maps around each fault, must not pile up);
// and the hostile shapes of issue 12: a header of a 95 MB metadata value,
// one of 9,000 names of 10,000 characters, 10^6 tensors, 10^6 metadata
// entries, 160,000 layers whose quantized header nears the 100 MB limit,
// one int8 layer dequantized to float32 (the largest tensor is the
// output's), and int8 layers of two sizes alternating, dequantized to
// float32 (small pieces in flight while a large layer's buffer waits for
// the next); and the large tensors and the slow disk again with
// GOMAXPROCS = 16, since the bound holds whatever the number of cores.
func TestMemoryBound(t *testing.T) {
	if testing.Short() {
		t.Skip("writes files of a few hundred MiB")
	}
	for _, c := range []struct {
		name    string
		write   func(path string)
		min     int64  // --min-elements
		dequant string // dequantize to this dtype instead
		large   bool   // the file is several times the bound
		slow    bool   // the writer takes 10 ns a byte (100 MB/s), so the producer keeps the flow full
		procs   int    // the child's GOMAXPROCS, if set: the bound does not depend on the number of cores
	}{
		{name: "large tensors", write: func(p string) { writeBig(t, p, 96, []int{1024, 2048}, 0, nil) }, large: true}, // 4 MiB each, 384 MiB
		// The prefaulter maps up to a largest tensor ahead of the producer.
		{name: "48 MiB tensors", write: func(p string) { writeBig(t, p, 8, []int{8192, 3072}, 0, nil) }},               // 384 MiB
		{name: "small tensors", write: func(p string) { writeBig(t, p, 11000, []int{128, 128}, 0, nil) }, large: true}, // 32 KiB each, 344 MiB
		{name: "95 MB metadata", write: func(p string) {
			writeBig(t, p, 4, []int{1024, 2048}, 0, map[string]string{"big": strings.Repeat("m", 95_000_000)})
		}},
		{name: "9000 long names", write: func(p string) { writeBig(t, p, 9000, []int{4}, 10000, nil) }},
		{name: "a million tensors", write: func(p string) { writeBig(t, p, 1_000_000, []int{2}, 0, nil) }},
		{name: "a million metadata entries", write: func(p string) {
			meta := make(map[string]string, 1_000_000)
			for i := range 1_000_000 {
				meta[fmt.Sprintf("k%07d", i)] = "v"
			}
			writeBig(t, p, 4, []int{1024, 2048}, 0, meta)
		}},
		{name: "160000 quantized layers", write: func(p string) { writeBig(t, p, 160_000, []int{16, 16}, 110, nil) }, min: 1},
		{name: "int8 to float32", write: func(p string) { writeInt8Layer(t, p, 8192, 16384) }, dequant: "fp32"},
		// Layers of 4 and 20 MiB as float32 alternating: the list of
		// output buffers holds up to the flow's budget of small ones while
		// its slot keeps a large one.
		{name: "int8 to float32, small and large alternating", write: func(p string) {
			var names []string
			var rows []int
			for i := range 20 {
				names, rows = append(names, fmt.Sprintf("blocks.%02d.a", i)), append(rows, []int{512, 2560}[i%2])
			}
			writeInt8Layers(t, p, 2048, names, rows)
		}, dequant: "fp32"},
		// Layers growing to 48 MiB of int8, 96 MiB as bfloat16: each
		// output outgrows the last's buffer, which the garbage collector
		// has yet to take when the next is made, while the direct reader's
		// ring holds the largest input.
		{name: "int8 to bfloat16, growing layers", write: func(p string) {
			writeInt8Layers(t, p, 4096, []string{"blocks.0.a", "blocks.0.b", "blocks.0.c"}, []int{6144, 8192, 12288})
		}, dequant: "bf16"},
		{name: "slow disk", write: func(p string) { writeBig(t, p, 400, []int{512, 1024}, 0, nil) }, min: 1, slow: true}, // 1 MiB each, 400 MiB
		// The same on 16 Ps, whatever the machine's cores: memory that
		// grows with GOMAXPROCS (per-P caches holding buffers the producer
		// then allocates again) shows here on a 2-core CI runner too.
		{name: "large tensors on 16 Ps", write: func(p string) { writeBig(t, p, 96, []int{1024, 2048}, 0, nil) }, large: true, procs: 16},
		{name: "slow disk on 16 Ps", write: func(p string) { writeBig(t, p, 400, []int{512, 1024}, 0, nil) }, min: 1, slow: true, procs: 16},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			in, out := filepath.Join(dir, "big.safetensors"), filepath.Join(dir, "out.safetensors")
			c.write(in)
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), "KITCHEN_TEST_CONVERT_IN="+in, "KITCHEN_TEST_CONVERT_OUT="+out,
				"KITCHEN_TEST_CONVERT_MIN="+strconv.FormatInt(c.min, 10), "KITCHEN_TEST_DEQUANTIZE="+c.dequant)
			if c.slow {
				cmd.Env = append(cmd.Env, "KITCHEN_TEST_SLOW_WRITER=10")
			}
			if c.procs > 0 {
				cmd.Env = append(cmd.Env, "GOMAXPROCS="+strconv.Itoa(c.procs)) // the last value of a key counts
			}
			var stderr strings.Builder
			cmd.Stderr = &stderr
			hwm, err := cmd.Output()
			if err != nil {
				if errors.Is(err, syscall.ENOEXEC) {
					t.Skip("cannot re-execute the test binary here (under user-mode emulation?)")
				}
				t.Fatalf("child: %v\n%s", err, stderr.String())
			}
			kib, err := strconv.ParseInt(strings.TrimSuffix(string(hwm), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("child's VmHWM %q: %v", hwm, err)
			}
			peak := kib << 10
			fi, fo := open(t, in), open(t, out)
			largest := int64(0)
			for _, ti := range append(fi.Tensors, fo.Tensors...) {
				largest = max(largest, ti.Size())
			}
			headers := fi.DataStart + fo.DataStart
			bound := rssAllowance + 2*largest + 2*headers + perTensor*int64(len(fi.Tensors)+len(fi.Metadata))
			t.Logf("converted %d MiB (%d tensors, headers %d + %d MiB, largest tensor %d MiB) with a peak RSS of %.1f MiB (bound %.1f MiB)",
				fi.Size()>>20, len(fi.Tensors), fi.DataStart>>20, fo.DataStart>>20, largest>>20, float64(peak)/(1<<20), float64(bound)/(1<<20))
			if peak > bound {
				t.Errorf("peak RSS %d bytes exceeds the bound of %d", peak, bound)
			}
			if c.large && fi.Size() < 3*bound {
				t.Errorf("test file of %d bytes is not several times the %d-byte bound", fi.Size(), bound)
			}
		})
	}
}

// writeBig writes count bfloat16 tensors of the given shape, named
// blocks.N.linear.weight (with a name part of nameLen characters if
// nameLen > 0), and returns the size of one.
func writeBig(t *testing.T, path string, count int, shape []int, nameLen int, metadata map[string]string) int {
	t.Helper()
	long := strings.Repeat("x", nameLen)
	infos := make([]safetensors.TensorInfo, 0, count)
	for i := range count {
		name := fmt.Sprintf("blocks.%d.linear.weight", i)
		if nameLen > 0 {
			name = fmt.Sprintf("blocks.%d.%s.weight", i, long)
		}
		infos = append(infos, safetensors.TensorInfo{Name: name, DType: "BF16", Shape: shape})
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	bw := bufio.NewWriterSize(f, 1<<20)
	w, err := safetensors.NewWriter(bw, metadata, infos)
	if err != nil {
		t.Fatal(err)
	}
	// One block of finite bfloat16 values, varied per tensor by its first
	// element: realistic enough for the kernels, quick to write.
	n := 2
	for _, d := range shape {
		n *= d
	}
	data := make([]byte, n)
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

// writeInt8Layer writes one int8_tensorwise layer of rows x k.
func writeInt8Layer(t *testing.T, path string, rows, k int) {
	t.Helper()
	writeInt8Layers(t, path, k, []string{"l"}, []int{rows})
}

// writeInt8Layers writes int8_tensorwise layers of k columns, in order,
// with the given names and rows.
func writeInt8Layers(t *testing.T, path string, k int, names []string, rows []int) {
	t.Helper()
	blob := []byte(`{"format":"int8_tensorwise"}`)
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	bw := bufio.NewWriterSize(f, 1<<20)
	var infos []safetensors.TensorInfo
	for i, l := range names {
		infos = append(infos,
			safetensors.TensorInfo{Name: l + ".weight_scale", DType: "F32", Shape: []int{}},
			safetensors.TensorInfo{Name: l + ".weight", DType: "I8", Shape: []int{rows[i], k}},
			safetensors.TensorInfo{Name: l + ".comfy_quant", DType: "U8", Shape: []int{len(blob)}})
	}
	w, err := safetensors.NewWriter(bw, nil, infos)
	if err != nil {
		t.Fatal(err)
	}
	row := make([]byte, k)
	for i := range row {
		row[i] = byte(i * 7)
	}
	for i, l := range names {
		if err == nil {
			err = w.WriteTensor(l+".weight_scale", binary.LittleEndian.AppendUint32(nil, math.Float32bits(0.01)))
		}
		for range rows[i] {
			if err == nil {
				err = w.WriteTensor(l+".weight", row)
			}
		}
		if err == nil {
			err = w.WriteTensor(l+".comfy_quant", blob)
		}
	}
	if err == nil {
		err = w.Finish()
	}
	if err == nil {
		err = bw.Flush()
	}
	if err != nil {
		t.Fatal(err)
	}
}
