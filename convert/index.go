package convert

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gokitchen/kitchen/internal/strictjson"
	"github.com/gokitchen/kitchen/safetensors"
)

// IndexSuffix ends the name of a sharded checkpoint's index file.
const IndexSuffix = ".safetensors.index.json"

func isIndex(path string) bool { return strings.HasSuffix(path, IndexSuffix) }

// index is a sharded checkpoint's index: which shard holds each tensor.
type index struct {
	Metadata  map[string]any    `json:"metadata,omitempty"`
	WeightMap map[string]string `json:"weight_map"`
}

// readIndex reads an index and returns it with its shard files in order.
// The JSON is read as strictly as a safetensors header (strictjson): keys
// match exactly and none may repeat, so that no reader of the index can
// find another shard for a tensor than kitchen does.
func readIndex(path string) (*index, []string, error) {
	f, _, err := safetensors.OpenRegular(path)
	if err != nil {
		return nil, nil, err
	}
	data, err := io.ReadAll(f)
	f.Close()
	if err != nil {
		return nil, nil, err
	}
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%s: invalid index: %s", path, fmt.Sprintf(format, a...))
	}
	s := strictjson.NewScanner(data)
	if s.Peek() != '{' {
		return nil, nil, bad("not a JSON object")
	}
	var idx index
	err = s.Object(func(key string) error {
		switch key {
		case "weight_map":
			if s.Peek() != '{' {
				return bad("weight_map is not an object")
			}
			idx.WeightMap = map[string]string{}
			return s.Object(func(name string) error {
				if s.Peek() != '"' {
					return bad("tensor %q: the shard is not a string", name)
				}
				shard, err := s.String()
				idx.WeightMap[name] = shard
				return err
			})
		case "metadata":
			v, err := s.Value()
			if err != nil {
				return err
			}
			m, ok := v.(map[string]any)
			if v != nil && !ok {
				return bad("metadata is not an object")
			}
			idx.Metadata = m
			return nil
		}
		return s.Skip()
	})
	if err == nil {
		err = s.End()
	}
	var syn *strictjson.SyntaxError
	switch {
	case errors.As(err, &syn):
		return nil, nil, bad("%v", err)
	case err != nil:
		return nil, nil, err
	case len(idx.WeightMap) == 0:
		return nil, nil, bad("empty or missing weight_map")
	}
	var shards []string
	seen := map[string]bool{}
	for name, shard := range idx.WeightMap {
		if shard == "" || filepath.Base(shard) != shard || shard == "." || shard == ".." {
			return nil, nil, bad("tensor %q names shard %q, want a file name beside the index", name, shard)
		}
		if !seen[shard] {
			seen[shard] = true
			shards = append(shards, shard)
		}
	}
	slices.Sort(shards)
	return &idx, shards, nil
}

// openShards opens the shards of the index at path (as readIndex returned
// them), checking that the index describes them exactly: every tensor of a
// shard is placed in that shard, and every tensor placed in a shard is
// there (so no tensor is in two shards, and none is missing). On error it
// closes what it opened.
func openShards(ctx context.Context, path string, idx *index, shards []string) ([]*safetensors.File, error) {
	dir := filepath.Dir(path)
	var files []*safetensors.File
	fail := func(err error) ([]*safetensors.File, error) {
		for _, f := range files {
			f.Close()
		}
		return nil, err
	}
	for _, shard := range shards {
		f, err := safetensors.OpenContext(ctx, filepath.Join(dir, shard))
		if err != nil {
			// err names the shard (safetensors.OpenContext names the file in every error).
			return fail(fmt.Errorf("%s lists a shard that cannot be opened: %w", path, err))
		}
		files = append(files, f)
		for _, t := range f.Tensors {
			if where, ok := idx.WeightMap[t.Name]; where != shard {
				if !ok {
					return fail(fmt.Errorf("%s: shard %s holds tensor %q, which the index does not list", path, shard, t.Name))
				}
				return fail(fmt.Errorf("%s: shard %s holds tensor %q, which the index places in %s", path, shard, t.Name, where))
			}
		}
	}
	for name, shard := range idx.WeightMap {
		i, _ := slices.BinarySearch(shards, shard)
		if _, ok := files[i].Tensor(name); !ok {
			return fail(fmt.Errorf("%s: the index places tensor %q in %s, which does not hold it", path, name, shard))
		}
	}
	return files, nil
}

// shardNames names the output shards after the output index:
// DIR/NAME.safetensors.index.json gets DIR/NAME-00001-of-0000N.safetensors.
func shardNames(out string, n int) ([]string, error) {
	if !strings.HasSuffix(out, IndexSuffix) {
		return nil, fmt.Errorf("%s: the output of a sharded checkpoint must be an index named *%s", out, IndexSuffix)
	}
	stem := strings.TrimSuffix(out, IndexSuffix)
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%05d-of-%05d.safetensors", stem, i+1, n)
	}
	return names, nil
}

// convertIndex converts every shard of a sharded checkpoint and writes a
// matching index for the output.
func convertIndex(ctx context.Context, in, out string, opts Options, plan planner, sum *Summary) error {
	idx, shards, err := readIndex(in)
	if err != nil {
		return err
	}
	outShards, err := shardNames(out, len(shards))
	if err != nil {
		return err
	}
	if !opts.DryRun {
		inputs := []string{in}
		for _, s := range shards {
			inputs = append(inputs, filepath.Join(filepath.Dir(in), s))
		}
		for _, o := range append([]string{out}, outShards...) {
			if err := checkOutput(o, opts.Force, inputs...); err != nil {
				return err
			}
		}
	}
	files, err := openShards(ctx, in, idx, shards)
	if err != nil {
		return err
	}
	defer (&Checkpoint{Path: in, Files: files}).Close()
	// openShards checked every shard's tensors against the index.
	shardOf := func(name string) (string, bool) {
		shard, ok := idx.WeightMap[name]
		return shard, ok
	}
	var jobs []*job
	for i, f := range files {
		jobs = append(jobs, &job{in: f.Path, out: outShards[i], f: f})
	}
	for _, j := range jobs {
		if j.units, j.meta, err = plan(j.f, opts, shardOf); err != nil {
			return err
		}
	}
	writeIndex := func() (string, []byte, error) {
		outIdx := index{Metadata: map[string]any{}, WeightMap: map[string]string{}}
		for k, v := range idx.Metadata {
			outIdx.Metadata[k] = v
		}
		var total int64
		for i, j := range jobs {
			for _, t := range j.layout {
				if prev, ok := outIdx.WeightMap[t.Name]; ok {
					return "", nil, fmt.Errorf("%s: tensor %q would be in both %s and %s", out, t.Name, prev, filepath.Base(outShards[i]))
				}
				outIdx.WeightMap[t.Name] = filepath.Base(outShards[i])
				total += t.Size()
			}
		}
		outIdx.Metadata["total_size"] = total
		data, err := json.MarshalIndent(outIdx, "", "  ")
		return out, append(data, '\n'), err
	}
	return run(ctx, opts, sum, jobs, writeIndex)
}
