package convert_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/gokitchen/kitchen/convert"
)

func ExampleQuantize() {
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, "tiny-dit-int8.safetensors")
	sum, err := convert.Quantize(context.Background(), "../testdata/tiny-dit.safetensors", out, convert.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(sum.Quantized, "quantized,", sum.Copied, "copied")

	r, _ := convert.Inspect(context.Background(), out)
	fmt.Println(r.Formats)
	// Output:
	// 10 quantized, 27 copied
	// map[int8_tensorwise:10]
}
