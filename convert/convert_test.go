package convert_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"reflect"
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

// mode is how a test quantized: one scale per tensor, or per row and
// ConvRot up to a group size (0: none).
type mode struct {
	perTensor bool
	convrot   int
}

func (m mode) options() convert.Options {
	return convert.Options{PerTensor: m.perTensor, ConvRot: m.convrot}
}

// group is the ConvRot group a layer of input width k gets: the largest
// power of 4, at most m.convrot, dividing k.
func (m mode) group(k int) int {
	for g := m.convrot; g >= 4; g /= 4 {
		if k%g == 0 {
			return g
		}
	}
	return 0
}

// checkQuantized checks an output against its input: every quantized layer
// holds exactly what the eager reference computes from the input weight
// (an independent path from the fused backend that wrote it) and the marker
// bytes ComfyUI writes (Python's json.dumps, no padding), every other
// tensor is a byte-for-byte copy, the metadata is kept, every tensor starts
// at an offset aligned to its element size, and the markers come last.
func checkQuantized(t *testing.T, in, out string, m mode) (quantized int) {
	t.Helper()
	fi, fo := open(t, in), open(t, out)
	if !maps(fi.Metadata, fo.Metadata) {
		t.Errorf("metadata %v, want %v", fo.Metadata, fi.Metadata)
	}
	firstMarker, lastData := int64(math.MaxInt64), int64(0)
	for _, to := range fo.Tensors {
		size, _ := safetensors.DTypeSize(to.DType)
		if (fo.DataStart+to.Begin)%int64(size) != 0 {
			t.Errorf("%s (%s) starts at unaligned offset %d", to.Name, to.DType, fo.DataStart+to.Begin)
		}
		if strings.HasSuffix(to.Name, ".comfy_quant") {
			firstMarker = min(firstMarker, to.Begin)
		} else {
			lastData = max(lastData, to.End)
		}
	}
	if firstMarker < lastData {
		t.Errorf("a marker starts at %d, before the end of the other tensors at %d", firstMarker, lastData)
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
		g := m.group(ti.Shape[1])
		want := `{"format": "int8_tensorwise"}`
		if g > 0 {
			want = fmt.Sprintf(`{"format": "int8_tensorwise", "convrot": true, "convrot_groupsize": %d}`, g)
		}
		if _, blob := data(t, fo, cq.Name); cq.DType != "U8" || string(blob) != want {
			t.Errorf("%s: %s %q, want U8 %q", cq.Name, cq.DType, blob, want)
		}
		dt, _ := safetensors.KitchenDType(ti.DType)
		x, _ := tensor.FromBytes(dt, inBytes, ti.Shape...)
		var q, s *tensor.Tensor
		var err error
		eager := kitchen.UsingBackend("eager")
		switch {
		case g > 0:
			q, s, err = kitchen.QuantizeInt8ConvRotWeight(context.Background(), x, eager, kitchen.WithConvRotGroup(g))
		case m.perTensor:
			q, s, err = kitchen.QuantizeInt8Tensorwise(context.Background(), x, eager)
		default:
			q, s, err = kitchen.QuantizeInt8Rowwise(context.Background(), x, eager)
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
		wantShape := []int{ti.Shape[0], 1}
		if m.perTensor {
			wantShape = []int{}
		}
		if ws.DType != "F32" || !slices.Equal(ws.Shape, wantShape) || !bytes.Equal(gotS, wantS) {
			t.Errorf("%s: scale %v %v differs from eager's %v, or is not %v", ws.Name, ws.DType, ws.Shape, s.Shape(), wantShape)
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
	for _, c := range []struct {
		mode
		embeddings bool
		want       int
	}{
		{mode{}, false, 10},
		{mode{perTensor: true}, false, 10},
		{mode{convrot: 256}, false, 10},
		{mode{convrot: 16}, true, 11}, // and y_embedder.embedding_table
	} {
		out := filepath.Join(t.TempDir(), "out.safetensors")
		before := hashFile(t, tiny)
		opts := c.options()
		opts.Embeddings = c.embeddings
		sum, err := convert.Quantize(context.Background(), tiny, out, opts)
		if err != nil {
			t.Fatal(err)
		}
		if hashFile(t, tiny) != before {
			t.Fatal("the input changed")
		}
		n := checkQuantized(t, tiny, out, c.mode)
		if n != c.want || sum.Quantized != c.want || sum.Copied != 37-c.want || !slices.Equal(sum.Backends, []string{"cpu"}) {
			t.Errorf("%+v: quantized %d; summary %+v", c, n, sum)
		}
		st, _ := os.Stat(out)
		if sum.BytesOut != st.Size() || st.Mode().Perm() != 0o644 {
			t.Errorf("summary says %d bytes, file has %d, mode %v", sum.BytesOut, st.Size(), st.Mode())
		}
		// Each layer's weight error, in input order, as the plan says.
		var planned []string
		for _, it := range sum.Plan {
			if it.Action == convert.ActionQuantize {
				planned = append(planned, strings.TrimSuffix(it.Name, ".weight"))
				if it.Scales != map[bool]string{true: "tensor", false: "channel"}[c.perTensor] || it.ConvRot != c.group(it.Shape[1]) {
					t.Errorf("%+v: plan item %+v", c, it)
				}
			}
		}
		var got []string
		for _, l := range sum.Layers {
			got = append(got, l.Name)
			if !(l.RelRMSError > 0.001 && l.RelRMSError < 0.02) || l.SNR == nil || math.Abs(*l.SNR+20*math.Log10(l.RelRMSError)) > 1e-9 {
				t.Errorf("%+v: %s: relative error %v, SNR %v", c, l.Name, l.RelRMSError, l.SNR)
			}
		}
		if !slices.Equal(got, planned) {
			t.Errorf("%+v: weight errors for %v, want %v", c, got, planned)
		}
	}
}

// TestWeightError checks the reported error against one computed here
// from the output's own q and scale, for a layer of each kind.
func TestWeightError(t *testing.T) {
	for _, m := range []mode{{}, {perTensor: true}, {convrot: 256}} {
		out := filepath.Join(t.TempDir(), "out.safetensors")
		sum, err := convert.Quantize(context.Background(), tiny, out, m.options())
		if err != nil {
			t.Fatal(err)
		}
		fi, fo := open(t, tiny), open(t, out)
		for _, l := range sum.Layers {
			wi, xb := data(t, fi, l.Name+".weight")
			_, qb := data(t, fo, l.Name+".weight")
			ws, sb := data(t, fo, l.Name+".weight_scale")
			n, k := wi.Shape[0], wi.Shape[1]
			var diff, norm float64
			for r := range n {
				s := math.Float32frombits(binary.LittleEndian.Uint32(sb))
				if ws.Numel() > 1 {
					s = math.Float32frombits(binary.LittleEndian.Uint32(sb[4*r:]))
				}
				row := make([]float32, k)
				for i := range row {
					row[i] = float32(int8(qb[r*k+i])) * s
				}
				if g := m.group(k); g > 0 {
					row = rotateMatrix(row, g)
				}
				for i, v := range row {
					x := float64(dtype.Load(xb, dtype.BFloat16, r*k+i))
					diff += (float64(v) - x) * (float64(v) - x)
					norm += x * x
				}
			}
			// The rotation here multiplies by the matrix, in float64: the
			// same within float32 rounding.
			if want := math.Sqrt(diff / norm); math.Abs(l.RelRMSError-want) > 1e-6*want {
				t.Errorf("%+v: %s: relative error %v, want %v", m, l.Name, l.RelRMSError, want)
			}
		}
	}
}

// rotateMatrix multiplies each group of g values of v by the normalized
// regular Hadamard matrix, built as the contract states it, in float64.
func rotateMatrix(v []float32, g int) []float32 {
	h := [][]float64{{1}}
	for len(h) < g {
		h4 := [4][4]float64{{1, 1, 1, -1}, {1, 1, -1, 1}, {1, -1, 1, 1}, {-1, 1, 1, 1}}
		n := len(h)
		k := make([][]float64, 4*n)
		for i := range k {
			k[i] = make([]float64, 4*n)
			for j := range k[i] {
				k[i][j] = h[i/4][j/4] * h4[i%4][j%4]
			}
		}
		h = k
	}
	out := make([]float32, len(v))
	for start := 0; start < len(v); start += g {
		for j := range g {
			var s float64
			for i := range g {
				s += float64(v[start+i]) * h[i][j]
			}
			out[start+j] = float32(s / math.Sqrt(float64(g)))
		}
	}
	return out
}

// TestRoundTrip quantizes and dequantizes, checking every element of every
// quantized weight against the error the contract allows: half a step, plus
// the input dtype's rounding of the quotient and of the scale; for ConvRot,
// every row's error norm against the same bound over the row (the rotation
// is orthogonal, but the int8 values are rounded after it).
func TestRoundTrip(t *testing.T) {
	for _, m := range []mode{{}, {perTensor: true}, {convrot: 256}} {
		dir := t.TempDir()
		q := filepath.Join(dir, "q.safetensors")
		if _, err := convert.Quantize(context.Background(), tiny, q, m.options()); err != nil {
			t.Fatal(err)
		}
		for _, out := range []dtype.DType{dtype.Float32, dtype.BFloat16} {
			d := filepath.Join(dir, out.String()+".safetensors")
			sum, err := convert.Dequantize(context.Background(), q, d, convert.Options{OutDType: out})
			if err != nil {
				t.Fatal(err)
			}
			if sum.Dequantized != 10 {
				t.Errorf("dequantized %d layers", sum.Dequantized)
			}
			fi, fq, fd := open(t, tiny), open(t, q), open(t, d)
			if len(fd.Tensors) != len(fi.Tensors) || !maps(fd.Metadata, fi.Metadata) {
				t.Fatalf("%d tensors and metadata %v after the round trip, want %d and %v", len(fd.Tensors), fd.Metadata, len(fi.Tensors), fi.Metadata)
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
				ws, sb := data(t, fq, base+".weight_scale")
				_, xb := data(t, fi, ti.Name)
				to, yb := data(t, fd, ti.Name)
				if to.DType != safetensors.Name(out) {
					t.Fatalf("%s: dtype %s", ti.Name, to.DType)
				}
				xt, _ := tensor.FromBytes(dtype.BFloat16, xb, ti.Shape...)
				yt, _ := tensor.FromBytes(out, yb, ti.Shape...)
				xs, _ := xt.Float32s()
				ys, _ := yt.Float32s()
				k := ti.Shape[1]
				for r := range ti.Shape[0] {
					s := float64(math.Float32frombits(binary.LittleEndian.Uint32(sb)))
					if ws.Numel() > 1 {
						s = float64(math.Float32frombits(binary.LittleEndian.Uint32(sb[4*r:])))
					}
					var e2, b2 float64
					for i := r * k; i < (r+1)*k; i++ {
						x, y := float64(xs[i]), float64(ys[i])
						bound := 0.5*s + 2*math.Abs(x)*u + math.Abs(y)*0x1p-24
						if out == dtype.BFloat16 {
							bound += math.Abs(y) * u
						}
						if m.convrot == 0 && math.Abs(y-x) > bound {
							t.Fatalf("%+v: %s[%d]: %v came back as %v (scale %v, bound %v)", m, ti.Name, i, x, y, s, bound)
						}
						// For ConvRot: half a step, the rotated weight's
						// rounding to bfloat16 (at most 127 steps in size)
						// and the output's.
						e2 += (y - x) * (y - x)
						b := 0.5*s + 127*s*u + math.Abs(y)*0x1p-24
						if out == dtype.BFloat16 {
							b += math.Abs(y) * u
						}
						b2 += b * b
					}
					if e2 > b2 {
						t.Fatalf("%+v: %s row %d: error norm %v over the bound %v", m, ti.Name, r, math.Sqrt(e2), math.Sqrt(b2))
					}
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
	if _, err := convert.Quantize(ctx, tiny, out, convert.Options{Force: true, PerTensor: true}); err != nil {
		t.Errorf("--force: %v", err)
	}
	var aq *convert.AlreadyQuantizedError
	if _, err := convert.Quantize(ctx, out, filepath.Join(dir, "again.safetensors"), convert.Options{}); !errors.Is(err, convert.ErrAlreadyQuantized) ||
		!errors.As(err, &aq) || aq.Sign != convert.SignMarker || aq.Count != 10 || !strings.Contains(err.Error(), "comfy_quant marker") {
		t.Errorf("quantizing a quantized file: %v", err)
	}
	for _, c := range []struct {
		opts convert.Options
		want string
	}{
		{convert.Options{ConvRot: 512}, "not a power of 4"},
		{convert.Options{ConvRot: 2}, "not a power of 4"},
		{convert.Options{ConvRot: 256, PerTensor: true}, "exclude each other"},
	} {
		if _, err := convert.Quantize(ctx, tiny, filepath.Join(dir, "bad.safetensors"), c.opts); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error saying %q", c.opts, err, c.want)
		}
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
	writeFile(t, in, map[string][]float32{"blocks.0.a.weight": make([]float32, 64*64), "blocks.0.b.weight": w},
		map[string][]int{"blocks.0.a.weight": {64, 64}, "blocks.0.b.weight": {64, 64}})
	_, err := convert.Quantize(context.Background(), in, filepath.Join(dir, "out.safetensors"), convert.Options{Selection: convert.Selection{MinElements: 1}})
	var ae *backend.ArgError
	if !errors.As(err, &ae) || ae.Row != 5 || !strings.Contains(err.Error(), `tensor "blocks.0.b.weight"`) || !strings.Contains(err.Error(), in) {
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
	plan := func(opts convert.Options) map[string]convert.Item {
		opts.DryRun = true
		sum, err := convert.Quantize(ctx, tiny, filepath.Join(t.TempDir(), "x.safetensors"), opts)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]convert.Item{}
		for _, it := range sum.Plan {
			m[it.Name] = it
		}
		return m
	}
	def := plan(convert.Options{})
	for name, want := range map[string]struct {
		action convert.Action
		reason string
	}{
		"blocks.0.attn.qkv.weight":              {convert.ActionQuantize, "linear weight in repeated block blocks.0"},
		"blocks.1.adaLN_modulation.1.weight":    {convert.ActionQuantize, "linear weight in repeated block blocks.1"},
		"blocks.1.mlp.fc2.weight":               {convert.ActionQuantize, "linear weight in repeated block blocks.1"},
		"x_embedder.proj.weight":                {convert.ActionCopy, `embedder or norm ("x_embedder")`},
		"t_embedder.mlp.0.weight":               {convert.ActionCopy, `embedder or norm ("t_embedder")`},
		"y_embedder.embedding_table.weight":     {convert.ActionCopy, "embedding table (quantized with --embeddings)"},
		"blocks.0.norm1.weight":                 {convert.ActionCopy, "rank 1, not 2-D"},
		"final_layer.adaLN_modulation.1.weight": {convert.ActionCopy, "outside the repeated blocks (input, output and global layers)"},
		"final_layer.linear.weight":             {convert.ActionCopy, "outside the repeated blocks (input, output and global layers)"},
		"blocks.0.attn.qkv.bias":                {convert.ActionCopy, "not a .weight"},
		"pos_embed":                             {convert.ActionCopy, "not a .weight"},
	} {
		if it := def[name]; it.Action != want.action || it.Reason != want.reason {
			t.Errorf("default: %s: %s (%s), want %s (%s)", name, it.Action, it.Reason, want.action, want.reason)
		}
	}
	emb := plan(convert.Options{Selection: convert.Selection{Embeddings: true}, ConvRot: 256})
	if it := emb["y_embedder.embedding_table.weight"]; it.Action != convert.ActionQuantize || it.ConvRot != 64 || it.Scales != "channel" ||
		it.Reason != "embedding table (--embeddings); ConvRot 64: K = 192 is not a multiple of 256" {
		t.Errorf("--embeddings --convrot: %+v", it)
	}
	if it := emb["t_embedder.mlp.0.weight"]; it.Action != convert.ActionCopy {
		t.Errorf("--embeddings quantizes a linear layer of an embedder: %+v", it)
	}
	if it := emb["blocks.0.mlp.fc2.weight"]; it.ConvRot != 256 || it.Reason != "linear weight in repeated block blocks.0" {
		t.Errorf("--convrot: %+v", it)
	}
	inc := plan(convert.Options{Selection: convert.Selection{Include: regexp.MustCompile(`embedder|final_layer\.linear`)}})
	if inc["x_embedder.proj.weight"].Action != convert.ActionQuantize || inc["final_layer.linear.weight"].Action != convert.ActionQuantize || inc["blocks.0.attn.qkv.weight"].Action != convert.ActionCopy {
		t.Errorf("--include: %v", inc)
	}
	exc := plan(convert.Options{Selection: convert.Selection{Exclude: regexp.MustCompile(`mlp`)}})
	if exc["blocks.0.mlp.fc1.weight"].Action != convert.ActionCopy || exc["blocks.0.attn.qkv.weight"].Action != convert.ActionQuantize {
		t.Errorf("--exclude: %v", exc)
	}
	small := plan(convert.Options{Selection: convert.Selection{MinFeatures: 200}})
	if it := small["blocks.0.attn.proj.weight"]; it.Action != convert.ActionCopy || it.Reason != "small (192 x 192: a side under 200)" {
		t.Errorf("--min-features 200: %+v", it)
	}
	dir := t.TempDir()
	if _, err := convert.Quantize(ctx, tiny, filepath.Join(dir, "x.safetensors"), convert.Options{DryRun: true}); err != nil {
		t.Fatal(err)
	}
	assertOnly(t, dir) // a dry run writes nothing
}

// TestBlockRule checks the default rule on names of other architectures.
func TestBlockRule(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.safetensors")
	quantized := []string{
		"double_blocks.0.img_attn.qkv.weight", "single_blocks.3.linear1.weight", // Flux
		"layers.2.attention.qkv.weight", "noise_refiner.0.feed_forward.w1.weight", // Z-Image
		"model.layers.0.mlp.down_proj.weight", "encoder.block.1.layer.0.SelfAttention.q.weight",
		"input_blocks.1.1.transformer_blocks.0.attn1.to_q.weight", "0.attn.weight",
	}
	copied := []string{
		"img_in.weight", "txt_in.weight", "final_layer.linear.weight", "proj_out.weight", "lm_head.weight",
		"time_in.in_layer.weight", "cap_embedder.1.weight", "t_embedder.mlp.2.weight", "time_embed.0.weight",
		"model.embed_tokens.weight", "shared.weight", "blocks.0.norm1.linear.weight", "head.0.weight",
	}
	tensors, shapes := map[string][]float32{}, map[string][]int{}
	for _, n := range append(slices.Clone(quantized), copied...) {
		tensors[n], shapes[n] = make([]float32, 128*128), []int{128, 128}
	}
	writeFile(t, in, tensors, shapes)
	sum, err := convert.Quantize(context.Background(), in, filepath.Join(dir, "o.safetensors"), convert.Options{DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range sum.Plan {
		if want := slices.Contains(quantized, it.Name); (it.Action == convert.ActionQuantize) != want {
			t.Errorf("%s: %s (%s)", it.Name, it.Action, it.Reason)
		}
	}
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
	if sum.Shards != 2 || sum.Quantized != 10 || len(sum.Layers) != 10 {
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
		checkQuantized(t, filepath.Join(dir, []string{"m-00001-of-00002.safetensors", "m-00002-of-00002.safetensors"}[s]), path, mode{})
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
	if err != nil || r.Formats["int8_tensorwise"] != 10 || len(r.Layers) != 10 || len(r.Files) != 2 {
		t.Errorf("inspect of the output index: %v %+v", err, r)
	}
	// And back: dequantizing the sharded output restores every tensor name.
	back := filepath.Join(t.TempDir(), "m-bf16.safetensors.index.json")
	dsum, err := convert.Dequantize(context.Background(), out, back, convert.Options{})
	if err != nil || dsum.Dequantized != 10 || dsum.Shards != 2 {
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
	// A shard the index lists that is not there: the error names the
	// index and the shard, and is fs.ErrNotExist.
	weightMap["ghost.weight"] = "m-00003-of-00002.safetensors"
	idx, _ = json.Marshal(map[string]any{"weight_map": weightMap})
	os.WriteFile(in, idx, 0o644)
	_, err = convert.Quantize(context.Background(), in, filepath.Join(t.TempDir(), "x.safetensors.index.json"), convert.Options{})
	if !errors.Is(err, fs.ErrNotExist) || !strings.HasPrefix(err.Error(), in+" lists a shard that cannot be opened: ") ||
		strings.Count(err.Error(), "m-00003-of-00002.safetensors") != 1 {
		t.Errorf("a missing shard: %v", err)
	}
	// One that is there but is no safetensors file: named the same way,
	// by every reader of the index.
	if err := os.WriteFile(filepath.Join(dir, "m-00003-of-00002.safetensors"), []byte("not a checkpoint"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = convert.Quantize(context.Background(), in, filepath.Join(t.TempDir(), "x.safetensors.index.json"), convert.Options{})
	_, ierr := convert.Inspect(context.Background(), in)
	for _, err := range []error{err, ierr} {
		if !errors.Is(err, safetensors.ErrFormat) || !strings.HasPrefix(err.Error(), in+" lists a shard that cannot be opened: ") ||
			strings.Count(err.Error(), "m-00003-of-00002.safetensors") != 1 {
			t.Errorf("a shard that is not a checkpoint: %v", err)
		}
	}
}

func TestInspect(t *testing.T) {
	r, err := convert.Inspect(context.Background(), tiny)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Tensors) != 37 || r.DTypes["BF16"] != 36 || len(r.Formats) != 0 || len(r.Layers) != 0 || len(r.Problems) != 0 || r.Metadata["model"] != "tiny-dit" {
		t.Errorf("report %+v", r)
	}
}

// TestInspectCheckpoint: an open checkpoint's report holds its quantized
// layers (Inspect is OpenCheckpoint and InspectCheckpoint, so the two
// reports agree by construction; the layer count is what is checked), the
// checkpoint stays open for its tensors to be read, and a Checkpoint not
// made by OpenCheckpoint is refused.
func TestInspectCheckpoint(t *testing.T) {
	ctx := context.Background()
	q := filepath.Join(t.TempDir(), "q.safetensors")
	if _, err := convert.Quantize(ctx, tiny, q, convert.Options{ConvRot: 64, Selection: convert.Selection{Embeddings: true}}); err != nil {
		t.Fatal(err)
	}
	want, err := convert.Inspect(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	c, err := convert.OpenCheckpoint(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got, err := convert.InspectCheckpoint(ctx, c)
	if err != nil || !reflect.DeepEqual(got, want) || len(got.Layers) != 11 {
		t.Fatalf("got %v %+v, want %+v", err, got, want)
	}
	f, ti, ok := c.Tensor(got.Layers[0].Name + ".weight_scale")
	if !ok {
		t.Fatalf("no scale of %s", got.Layers[0].Name)
	}
	if _, err := f.Data(ti); err != nil {
		t.Errorf("the checkpoint after InspectCheckpoint: %v", err)
	}
	// One built by hand has no index of its tensors: refused, not read as
	// a checkpoint whose layers have lost their scales.
	for _, c := range []*convert.Checkpoint{nil, {Path: q, Files: c.Files}} {
		if _, err := convert.InspectCheckpoint(ctx, c); err == nil {
			t.Errorf("InspectCheckpoint of %+v: no error", c)
		}
	}
}

// TestTinyOutputGolden pins the bytes written for the shipped checkpoint.
// Independent numpy readers accepted exactly these files:
// tools/checkint8/check_int8.py (the format and the contract, for the
// per-channel and per-tensor files) and tools/checkcomfy/check_comfy.py
// (ComfyUI's loader logic, and ConvRot against a float32-matrix rotation,
// for all four). A change to the layout, the header encoding or the
// numbers shows up here.
func TestTinyOutputGolden(t *testing.T) {
	for _, c := range []struct {
		name string
		opts convert.Options
		want string
	}{
		{"per-channel (default)", convert.Options{}, "a8e65aa39ad85f2220489a91339da3ca8bb737745a9ae495b18d65ebfb674e52"},
		{"per-tensor", convert.Options{PerTensor: true}, "c1b5631083ce071a92055a777649e39ba043302958d1112674c157d9f5e359d5"},
		{"convrot", convert.Options{ConvRot: 256}, "381b6589ef96985ccb98918aabd5fe54a4113692c5f76e653f8013970fce424f"},
		{"convrot, embeddings", convert.Options{ConvRot: 256, Selection: convert.Selection{Embeddings: true}}, "d5c4f0c8ee5abd1700b6d99f1ad64f37cec08954c4b101911b676b8a70efe83d"},
	} {
		out := filepath.Join(t.TempDir(), "out.safetensors")
		if _, err := convert.Quantize(context.Background(), tiny, out, c.opts); err != nil {
			t.Fatal(err)
		}
		if got := hashFile(t, out); fmt.Sprintf("%x", got) != c.want {
			t.Errorf("%s: sha256 %x, want %s", c.name, got, c.want)
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
	shardFile(t, dir, "a.safetensors", map[string][]float32{"blocks.0.x.weight": big}, map[string][]int{"blocks.0.x.weight": {128, 128}})
	shardFile(t, dir, "b.safetensors", map[string][]float32{"blocks.0.x.weight_scale": {1}}, map[string][]int{"blocks.0.x.weight_scale": {1}})
	in := filepath.Join(dir, "m.safetensors.index.json")
	writeIndex(t, in, map[string]string{"blocks.0.x.weight": "a.safetensors", "blocks.0.x.weight_scale": "b.safetensors"})
	out := filepath.Join(t.TempDir(), "o.safetensors.index.json")
	sum, err := convert.Quantize(context.Background(), in, out, convert.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Quantized != 0 || !strings.Contains(sum.Plan[0].Reason+sum.Plan[1].Reason, "already has blocks.0.x.weight_scale") {
		t.Errorf("collision not avoided: %+v", sum.Plan)
	}
}

// TestShardedFailureLeavesNothing: a NaN in the second shard aborts the
// conversion, and the first shard's finished output is removed too.
func TestShardedFailureLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	good, bad := make([]float32, 128*128), make([]float32, 128*128)
	bad[300] = float32(math.Inf(1))
	shardFile(t, dir, "a.safetensors", map[string][]float32{"blocks.0.a.weight": good}, map[string][]int{"blocks.0.a.weight": {128, 128}})
	shardFile(t, dir, "b.safetensors", map[string][]float32{"blocks.1.b.weight": bad}, map[string][]int{"blocks.1.b.weight": {128, 128}})
	in := filepath.Join(dir, "m.safetensors.index.json")
	writeIndex(t, in, map[string]string{"blocks.0.a.weight": "a.safetensors", "blocks.1.b.weight": "b.safetensors"})
	outDir := t.TempDir()
	_, err := convert.Quantize(context.Background(), in, filepath.Join(outDir, "o.safetensors.index.json"), convert.Options{})
	var ae *backend.ArgError
	if !errors.As(err, &ae) || ae.Row != 2 || !strings.Contains(err.Error(), "blocks.1.b.weight") {
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
