// Package convbench measures `kitchen quantize` on a checkpoint against,
// in the same run, the time this machine takes to read the input and to
// write and sync a file of the output's size: a conversion can be no
// faster than the longer of the two, so the ratio to it is the figure to
// compare across machines (see `kitchen bench --convert`). Where reads
// and writes share the disk's bandwidth, the conversion is bound by doing
// both at once, which a round times as well: the input read while a file
// of the output's size is written and synced.
package convbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/gokitchen/kitchen/convert"
)

// Config says what to measure.
type Config struct {
	// Input is the checkpoint: a .safetensors file, or a sharded
	// checkpoint's index (*.safetensors.index.json), whose shards are
	// read for the floor and converted to a sharded output.
	Input string
	// Dir holds the temporary outputs (default: the input's directory);
	// the write floor is measured there too.
	Dir string
	// Runs is the number of rounds (default 3); each converts once and
	// measures both floors once.
	Runs int
	// Options are the conversion's options (Force and DryRun are set here).
	Options convert.Options
}

// Round is one round's times, in seconds.
type Round struct {
	Convert float64 `json:"convert_s"`
	// Read is reading the input through the page cache; ReadDirect is
	// reading it with O_DIRECT in 8 MiB pieces, as the converter reads
	// large tensors on Linux (0 where that is not available).
	Read       float64 `json:"read_s"`
	ReadDirect float64 `json:"read_direct_s,omitempty"`
	// Write is writing the output's size through the page cache and
	// syncing it (as dd conv=fsync does); WriteDirect is writing it with
	// O_DIRECT, as the converter does on Linux, and syncing it (0 where
	// that is not available).
	Write       float64 `json:"write_sync_s"`
	WriteDirect float64 `json:"write_direct_sync_s,omitempty"`
	// ReadWrite is reading the input while writing and syncing the
	// output's size, each the faster way, both at once: what a
	// conversion must do, on a disk whose reads and writes may share its
	// bandwidth (then it takes about Read plus the write, not the longer).
	ReadWrite float64 `json:"read_write_s"`
	// Ratio is Convert over the longer of the faster read and the faster
	// write; RatioBuffered over the longer of Read and Write (the page
	// cache both ways); RatioConcurrent over ReadWrite.
	Ratio           float64 `json:"ratio"`
	RatioBuffered   float64 `json:"ratio_buffered"`
	RatioConcurrent float64 `json:"ratio_concurrent"`
}

// Result is a measurement; its JSON form is what `kitchen bench --convert
// --json` prints.
type Result struct {
	Input       string `json:"input"`
	InputBytes  int64  `json:"input_bytes"`
	OutputBytes int64  `json:"output_bytes"`
	Dir         string `json:"dir"`
	// Cold says whether the input was dropped from the page cache before
	// each read and each conversion (posix_fadvise DONTNEED); ColdNote says
	// why not, where not.
	Cold     bool    `json:"cold"`
	ColdNote string  `json:"cold_note,omitempty"`
	Rounds   []Round `json:"rounds"`
	// The medians over the rounds.
	ConvertSeconds     float64 `json:"convert_s"`
	ReadSeconds        float64 `json:"read_s"`
	ReadDirectSeconds  float64 `json:"read_direct_s,omitempty"`
	WriteSeconds       float64 `json:"write_sync_s"`
	WriteDirectSeconds float64 `json:"write_direct_sync_s,omitempty"`
	ReadWriteSeconds   float64 `json:"read_write_s"`
	Ratio              float64 `json:"ratio"`
	RatioBuffered      float64 `json:"ratio_buffered"`
	RatioConcurrent    float64 `json:"ratio_concurrent"`
}

// Run converts cfg.Input cfg.Runs times to a temporary output and, in each
// round, times reading the input and writing and syncing a file of the
// output's size. Every temporary file is removed.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if cfg.Runs <= 0 {
		cfg.Runs = 3
	}
	in, err := convert.InputPath(cfg.Input) // a directory: its index, as quantize reads it
	if err != nil {
		return nil, err
	}
	cfg.Input = in
	if cfg.Dir == "" {
		// Beside the input, where a real conversion writes, rather than
		// in a temporary directory that may be memory (tmpfs), which would
		// time RAM and hold a whole output in it.
		cfg.Dir = filepath.Dir(cfg.Input)
	}
	files, err := inputFiles(ctx, cfg.Input)
	if err != nil {
		return nil, err
	}
	res := &Result{Input: cfg.Input, Dir: cfg.Dir}
	for _, f := range files {
		st, err := os.Stat(f)
		if err != nil {
			return nil, err
		}
		res.InputBytes += st.Size()
	}
	res.Cold, res.ColdNote = true, ""
	if err := dropCaches(files); err != nil {
		res.Cold, res.ColdNote = false, "input read warm: "+err.Error()
	}
	// The outputs (a sharded input converts to an index and its shards)
	// and the write floor's file go in a directory of the bench's own,
	// made afresh in cfg.Dir and removed whole: nothing else in cfg.Dir is
	// named, matched or touched.
	work, err := os.MkdirTemp(cfg.Dir, "kitchen-bench-")
	if err != nil {
		return nil, fmt.Errorf("bench --convert: %w", err)
	}
	defer os.RemoveAll(work)
	outDir := filepath.Join(work, "out")
	out := filepath.Join(outDir, "convert.safetensors")
	if strings.HasSuffix(cfg.Input, convert.IndexSuffix) {
		out = filepath.Join(outDir, "convert"+convert.IndexSuffix)
	}
	floor := filepath.Join(work, "write-floor")
	opts := cfg.Options
	opts.Force, opts.DryRun, opts.Progress = true, false, nil
	for range cfg.Runs {
		var r Round
		if r.Read, err = timeRead(files, res.Cold); err != nil {
			return nil, err
		}
		if r.ReadDirect, err = timeReadDirect(files); err != nil {
			return nil, err
		}
		if res.Cold {
			if err := dropCaches(files); err != nil {
				return nil, err
			}
		}
		if err := os.Mkdir(outDir, 0o755); err != nil {
			return nil, fmt.Errorf("bench --convert: making the directory this round converts into: %w", err)
		}
		start := time.Now()
		sum, err := convert.Quantize(ctx, cfg.Input, out, opts)
		if err != nil {
			return nil, err
		}
		r.Convert = time.Since(start).Seconds()
		res.OutputBytes = sum.BytesOut
		if err := os.RemoveAll(outDir); err != nil {
			return nil, err
		}
		if r.Write, err = timeWrite(ctx, floor, sum.BytesOut); err != nil {
			return nil, err
		}
		if r.WriteDirect, err = timeWriteDirect(floor, sum.BytesOut); err != nil {
			return nil, err
		}
		write, direct := r.Write, r.WriteDirect > 0 && r.WriteDirect < r.Write
		if direct {
			write = r.WriteDirect
		}
		read, readDirect := r.Read, r.ReadDirect > 0 && r.ReadDirect < r.Read
		if readDirect {
			read = r.ReadDirect
		}
		if r.ReadWrite, err = timeReadWrite(ctx, files, res.Cold, readDirect, floor, sum.BytesOut, direct); err != nil {
			return nil, err
		}
		r.Ratio = r.Convert / max(read, write)
		r.RatioBuffered = r.Convert / max(r.Read, r.Write)
		r.RatioConcurrent = r.Convert / r.ReadWrite
		res.Rounds = append(res.Rounds, r)
	}
	med := func(f func(Round) float64) float64 {
		v := make([]float64, len(res.Rounds))
		for i, r := range res.Rounds {
			v[i] = f(r)
		}
		slices.Sort(v)
		if n := len(v); n%2 == 0 {
			return (v[n/2-1] + v[n/2]) / 2
		}
		return v[len(v)/2]
	}
	res.ConvertSeconds = med(func(r Round) float64 { return r.Convert })
	res.ReadSeconds = med(func(r Round) float64 { return r.Read })
	res.ReadDirectSeconds = med(func(r Round) float64 { return r.ReadDirect })
	res.WriteSeconds = med(func(r Round) float64 { return r.Write })
	res.WriteDirectSeconds = med(func(r Round) float64 { return r.WriteDirect })
	res.ReadWriteSeconds = med(func(r Round) float64 { return r.ReadWrite })
	res.Ratio = med(func(r Round) float64 { return r.Ratio })
	res.RatioBuffered = med(func(r Round) float64 { return r.RatioBuffered })
	res.RatioConcurrent = med(func(r Round) float64 { return r.RatioConcurrent })
	return res, nil
}

// inputFiles returns the files a conversion of input reads: the file, or
// an index's shards.
func inputFiles(ctx context.Context, input string) ([]string, error) {
	if !strings.HasSuffix(input, convert.IndexSuffix) {
		return []string{input}, nil
	}
	c, err := convert.OpenCheckpoint(ctx, input)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	files := make([]string, len(c.Files))
	for i, f := range c.Files {
		files[i] = f.Path
	}
	return files, nil
}

// dropCaches drops each file from the page cache.
func dropCaches(files []string) error {
	for _, f := range files {
		if err := dropCache(f); err != nil {
			return err
		}
	}
	return nil
}

// timeRead reads the files through, after dropping them from the page
// cache if cold.
func timeRead(files []string, cold bool) (float64, error) {
	if cold {
		if err := dropCaches(files); err != nil {
			return 0, err
		}
	}
	buf := make([]byte, 8<<20)
	var total time.Duration
	for _, path := range files {
		f, err := os.Open(path)
		if err != nil {
			return 0, err
		}
		start := time.Now()
		for {
			_, err := f.Read(buf)
			if err == io.EOF {
				break
			}
			if err != nil {
				f.Close()
				return 0, err
			}
		}
		total += time.Since(start)
		f.Close()
	}
	return total.Seconds(), nil
}

// timeReadWrite reads the files (cold, if so; with O_DIRECT if
// readDirect) while writing and syncing n bytes to a new file at path
// (with O_DIRECT if direct, else through the page cache), and returns the
// time until both are done.
func timeReadWrite(ctx context.Context, files []string, cold, readDirect bool, path string, n int64, direct bool) (float64, error) {
	if cold {
		// Before the clock starts, as timeRead's own drop is.
		if err := dropCaches(files); err != nil {
			return 0, err
		}
	}
	start := time.Now()
	var werr error
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		if direct {
			_, werr = timeWriteDirect(path, n)
		} else {
			_, werr = timeWrite(ctx, path, n)
		}
	}()
	var rerr error
	if readDirect {
		_, rerr = timeReadDirect(files)
	} else {
		_, rerr = timeRead(files, false)
	}
	<-wrote
	return time.Since(start).Seconds(), errors.Join(rerr, werr)
}

// timeWrite writes n bytes to a new file at path through the page cache
// and syncs it (as dd conv=fsync does), then removes it.
func timeWrite(ctx context.Context, path string, n int64) (float64, error) {
	buf := make([]byte, 4<<20)
	fill(buf)
	f, done, err := floorFile(path)
	if err != nil {
		return 0, err
	}
	defer done()
	start := time.Now()
	for left := n; left > 0; left -= min(left, int64(len(buf))) {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		if _, err := f.Write(buf[:min(left, int64(len(buf)))]); err != nil {
			return 0, err
		}
	}
	if err := f.Sync(); err != nil {
		return 0, err
	}
	return time.Since(start).Seconds(), nil
}

// floorFile creates the file a write floor is measured on, and returns it
// with the function that closes and removes it.
func floorFile(path string) (*os.File, func(), error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, nil, err
	}
	return f, func() { f.Close(); os.Remove(path) }, nil
}

// fill fills b with random bytes, so that no file system can store them
// cheaply.
func fill(b []byte) { rand.NewChaCha8([32]byte{}).Read(b) }

// WriteText prints the result for people.
func (r *Result) WriteText(w io.Writer) error {
	temp := "cold (dropped from the page cache first)"
	if !r.Cold {
		temp = r.ColdNote
	}
	fmt.Fprintf(w, "%s: %.1f MB in, %.1f MB out; input %s; outputs in %s\n", r.Input, float64(r.InputBytes)/1e6, float64(r.OutputBytes)/1e6, temp, r.Dir)
	fmt.Fprintf(w, "%-6s %10s %10s %12s %14s %14s %12s %8s %10s %10s\n", "round", "convert s", "read s", "direct read s", "write+sync s", "direct+sync s", "both at once", "ratio", "ratio buf", "ratio both")
	row := func(name string, x Round) {
		fmt.Fprintf(w, "%-6s %10.2f %10.2f %12.2f %14.2f %14.2f %12.2f %8.2f %10.2f %10.2f\n", name, x.Convert, x.Read, x.ReadDirect, x.Write, x.WriteDirect, x.ReadWrite, x.Ratio, x.RatioBuffered, x.RatioConcurrent)
	}
	for i, x := range r.Rounds {
		row(fmt.Sprint(i+1), x)
	}
	row("median", Round{Convert: r.ConvertSeconds, Read: r.ReadSeconds, ReadDirect: r.ReadDirectSeconds, Write: r.WriteSeconds, WriteDirect: r.WriteDirectSeconds,
		ReadWrite: r.ReadWriteSeconds, Ratio: r.Ratio, RatioBuffered: r.RatioBuffered, RatioConcurrent: r.RatioConcurrent})
	_, err := fmt.Fprintln(w, "ratio: the conversion over the longer of reading the input and writing+syncing the output (each the faster way),\n"+
		"same round; ratio buf: the same through the page cache both ways (direct 0: no O_DIRECT here);\n"+
		"both at once: reading the input while writing+syncing the output (each the faster way); ratio both: the conversion over it")
	return err
}
