package eval_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/gokitchen/kitchen/convert"
	"github.com/gokitchen/kitchen/eval"
)

func ExampleRun() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	// Quantize the shipped tiny DiT twice: per channel, and with ConvRot.
	orig := "../testdata/tiny-dit.safetensors"
	for name, opts := range map[string]convert.Options{"channel": {}, "convrot": {ConvRot: 256}} {
		q := filepath.Join(dir, name+".safetensors")
		if _, err := convert.Quantize(ctx, orig, q, opts); err != nil {
			fmt.Println(err)
			return
		}
	}
	for _, name := range []string{"channel", "convrot"} {
		rep, err := eval.Run(ctx, orig, filepath.Join(dir, name+".safetensors"), eval.Options{Tokens: 16})
		if err != nil {
			fmt.Println(err)
			return
		}
		worst := rep.Layers[0] // worst first
		fmt.Printf("%s: %d layers, worst %s, with outlier channels %.3f\n", name, len(rep.Layers), worst.Name, worst.OutlierError)
	}
	// ConvRot spreads the outlier channels over each group of 256 (64
	// where K is 192), so their error shrinks.

	// Output:
	// channel: 10 layers, worst blocks.1.mlp.fc2, with outlier channels 0.051
	// convrot: 10 layers, worst blocks.0.mlp.fc2, with outlier channels 0.011
}
