package convert

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

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
func readIndex(path string) (*index, []string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	var idx index
	if err := json.Unmarshal(data, &idx); err != nil {
		return nil, nil, fmt.Errorf("%s: invalid index: %w", path, err)
	}
	if len(idx.WeightMap) == 0 {
		return nil, nil, fmt.Errorf("%s: invalid index: empty weight_map", path)
	}
	var shards []string
	for name, shard := range idx.WeightMap {
		if shard == "" || filepath.Base(shard) != shard {
			return nil, nil, fmt.Errorf("%s: invalid index: tensor %q names shard %q, want a file name beside the index", path, name, shard)
		}
		if !slices.Contains(shards, shard) {
			shards = append(shards, shard)
		}
	}
	slices.Sort(shards)
	return &idx, shards, nil
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
	dir := filepath.Dir(in)
	var inputs []string
	for _, s := range shards {
		inputs = append(inputs, filepath.Join(dir, s))
	}
	if !opts.DryRun {
		for _, o := range append([]string{out}, outShards...) {
			if err := checkOutput(o, opts.Force, append(inputs, in)...); err != nil {
				return err
			}
		}
	}
	var jobs []*job
	defer func() {
		for _, j := range jobs {
			j.f.Close()
		}
	}()
	for i, shard := range inputs {
		f, err := safetensors.Open(shard)
		if err != nil {
			return err
		}
		jobs = append(jobs, &job{in: shard, out: outShards[i], f: f})
		// The index must describe the shard exactly.
		for _, t := range f.Tensors {
			if idx.WeightMap[t.Name] != shards[i] {
				return fmt.Errorf("%s: shard %s holds tensor %q, which the index places in %q", in, shards[i], t.Name, idx.WeightMap[t.Name])
			}
		}
	}
	names := make(map[string]bool, len(idx.WeightMap))
	for name := range idx.WeightMap {
		names[name] = true
	}
	for _, j := range jobs {
		units, err := plan(j.f, opts, names)
		if err != nil {
			return err
		}
		j.units = units
	}
	for name, shard := range idx.WeightMap {
		i := slices.Index(shards, shard)
		if _, ok := jobs[i].f.Tensor(name); !ok {
			return fmt.Errorf("%s: the index places tensor %q in %s, which does not hold it", in, name, shard)
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
