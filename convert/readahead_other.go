//go:build !unix

package convert

import "github.com/gokitchen/kitchen/safetensors"

// willNeed does nothing: without memory mapping, reading a tensor is
// reading it into memory, which the producer does when it gets to it,
// while the writer writes the tensors before.
func willNeed(*safetensors.File, safetensors.TensorInfo) {}
