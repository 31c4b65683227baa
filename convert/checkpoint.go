package convert

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gokitchen/kitchen/safetensors"
)

// Checkpoint is an open checkpoint of one or more safetensors files, for
// reading tensors by name wherever they are.
type Checkpoint struct {
	Path string
	// Files are the checkpoint's files: the file itself, or the shards in
	// the order of their names.
	Files []*safetensors.File
	where map[string]int // tensor name: index into Files
}

// OpenCheckpoint opens a checkpoint: a .safetensors file; a sharded
// checkpoint's index (*.safetensors.index.json), whose shards are checked
// against it as Quantize checks them; or a directory holding either one
// such index or, without one, the .safetensors files of a checkpoint,
// which must not hold the same tensor name twice.
func OpenCheckpoint(ctx context.Context, path string) (*Checkpoint, error) {
	if ctx == nil {
		return nil, errors.New("convert: OpenCheckpoint: nil context")
	}
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if st.IsDir() {
		return openDir(ctx, path)
	}
	c := &Checkpoint{Path: path}
	if isIndex(path) {
		idx, shards, err := readIndex(path)
		if err != nil {
			return nil, err
		}
		if c.Files, err = openShards(ctx, path, idx, shards); err != nil {
			return nil, err
		}
	} else {
		f, err := safetensors.OpenContext(ctx, path)
		if err != nil {
			return nil, err
		}
		c.Files = []*safetensors.File{f}
	}
	if err := c.mapNames(); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// dirContents lists a directory's sharded checkpoint indexes and
// .safetensors files, by name.
func dirContents(dir string) (indexes, files []string, err error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, err
	}
	for _, e := range entries {
		switch name := e.Name(); {
		case e.IsDir():
		case strings.HasSuffix(name, IndexSuffix):
			indexes = append(indexes, name)
		case strings.HasSuffix(name, ".safetensors"):
			files = append(files, name)
		}
	}
	if len(indexes) > 1 {
		return nil, nil, fmt.Errorf("%s: %d index files (%s): name the one to read", dir, len(indexes), strings.Join(indexes, ", "))
	}
	return indexes, files, nil
}

// InputPath is the file Quantize and Dequantize read for path:
// a directory stands for the one index it holds (an error if it holds
// none, or several); any other path comes back as it is, for its opener
// to judge.
func InputPath(path string) (string, error) {
	if st, err := os.Stat(path); err != nil || !st.IsDir() {
		return path, nil
	}
	indexes, files, err := dirContents(path)
	switch {
	case err != nil:
		return "", err
	case len(indexes) == 0:
		return "", fmt.Errorf("%s: a directory with no *%s: name the file to read (it holds %d .safetensors files)", path, IndexSuffix, len(files))
	}
	return filepath.Join(path, indexes[0]), nil
}

// openDir opens the checkpoint in a directory.
func openDir(ctx context.Context, dir string) (*Checkpoint, error) {
	indexes, files, err := dirContents(dir)
	switch {
	case err != nil:
		return nil, err
	case len(indexes) == 1:
		return OpenCheckpoint(ctx, filepath.Join(dir, indexes[0]))
	case len(files) == 0:
		return nil, fmt.Errorf("%s: no .safetensors files", dir)
	}
	slices.Sort(files)
	c := &Checkpoint{Path: dir}
	for _, name := range files {
		f, err := safetensors.OpenContext(ctx, filepath.Join(dir, name))
		if err != nil {
			c.Close()
			return nil, err
		}
		c.Files = append(c.Files, f)
	}
	if err := c.mapNames(); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// mapNames finds each tensor's file, refusing a name held by two.
func (c *Checkpoint) mapNames() error {
	c.where = map[string]int{}
	for i, f := range c.Files {
		for _, t := range f.Tensors {
			if j, ok := c.where[t.Name]; ok {
				return fmt.Errorf("%s: tensor %q is in both %s and %s", c.Path, t.Name, c.Files[j].Path, f.Path)
			}
			c.where[t.Name] = i
		}
	}
	return nil
}

// Tensor returns the file holding the named tensor, and the tensor.
func (c *Checkpoint) Tensor(name string) (*safetensors.File, safetensors.TensorInfo, bool) {
	i, ok := c.where[name]
	if !ok {
		return nil, safetensors.TensorInfo{}, false
	}
	t, _ := c.Files[i].Tensor(name)
	return c.Files[i], t, true
}

// shardOf names the file holding a tensor, as an index would.
func (c *Checkpoint) shardOf(name string) (string, bool) {
	i, ok := c.where[name]
	if !ok {
		return "", false
	}
	return filepath.Base(c.Files[i].Path), true
}

// Close closes every file.
func (c *Checkpoint) Close() error {
	var errs []error
	for _, f := range c.Files {
		errs = append(errs, f.Close())
	}
	return errors.Join(errs...)
}
