package safetensors_test

import (
	"fmt"

	"github.com/gokitchen/kitchen/safetensors"
)

func ExampleOpen() {
	f, err := safetensors.Open("../testdata/tiny-dit.safetensors")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer f.Close()
	t, _ := f.Tensor("blocks.0.attn.qkv.weight")
	data, _ := f.Data(t)
	fmt.Println(len(f.Tensors), "tensors;", t.DType, t.Shape, len(data), "bytes")
	f.Release(t) // drop its pages from memory
	// Output: 37 tensors; BF16 [576 192] 221184 bytes
}
