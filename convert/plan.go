// Package convert turns safetensors checkpoints into ComfyUI's
// int8_tensorwise format and back, streaming one tensor at a time through
// kitchen's dispatch, so memory follows the largest tensor, not the file.
//
// For each selected weight P.weight (2-D, float32/float16/bfloat16) the
// output holds P.weight as int8 of the same shape, P.weight_scale as float32
// (shape [N, 1], one scale per output row, by default; [] with PerTensor),
// and P.comfy_quant, the bytes ComfyUI itself writes for the layer's config
// (Python's json.dumps of {"format": "int8_tensorwise"}, with "convrot":
// true and "convrot_groupsize": G for a ConvRot layer), as uint8. Every
// other tensor and the header's __metadata__ are copied unchanged.
package convert

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/gokitchen/kitchen/comfyquant"
	"github.com/gokitchen/kitchen/safetensors"
)

// Suffixes of the tensors of a quantized layer.
const (
	weightSuffix = comfyquant.WeightSuffix
	scaleSuffix  = comfyquant.ScaleSuffix
	quantSuffix  = comfyquant.MarkerSuffix
)

// DefaultMinElements is the size below which weights are not quantized by
// default: the saving is negligible and small layers are the sensitive ones.
const DefaultMinElements = 16384

// DefaultMinFeatures is the smallest input or output width of a layer
// quantized by default (comfy-kitchen's own sample converter skips layers
// with in or out features under 64).
const DefaultMinFeatures = 64

// skipComponent matches one dot-separated component of the names of layers
// kept in full precision by default: embedders and normalisation layers,
// where int8 costs the most accuracy ("x_embedder", "t_embedder",
// "embed_tokens", "wte", "norm1", "layernorm", "ln_f", "pos_embed"), but
// not "adaLN_modulation".
var skipComponent = regexp.MustCompile(`(?i)^(.*embed.*|emb(_.*)?|wte|wpe|.*norm.*|ln(_.*|\d*)|pos(_.*)?|position.*)$`)

// embeddingModule matches the name of a module that is an embedding table
// (an nn.Embedding: "embed_tokens", "token_embedding", "embedding_table",
// "word_embeddings", "wte", "wpe", T5's "shared"), as opposed to an
// embedder built of linear layers ("x_embedder", "t_embedder.mlp.0").
var embeddingModule = regexp.MustCompile(`(?i)^(.*embedding.*|.*embed_tokens|wte|wpe|shared)$`)

// skippedComponent returns the first component of name that skipComponent
// matches, or "".
func skippedComponent(name string) string {
	for c := range strings.SplitSeq(name, ".") {
		if skipComponent.MatchString(c) {
			return c
		}
	}
	return ""
}

// IsEmbeddingTable reports whether the weight P.weight is an embedding
// table's, by the name of its module (P's last component), as Quantize
// tells them from linear layers (and ComfyUI loads them as Embedding
// modules).
func IsEmbeddingTable(name string) bool {
	base := strings.TrimSuffix(name, weightSuffix)
	return embeddingModule.MatchString(base[strings.LastIndexByte(base, '.')+1:])
}

// blockOf returns the repeated block a tensor sits in: its name up to the
// first numeric component that at least two more components follow
// ("blocks.3" in "blocks.3.attn.qkv.weight", "model.layers.0" in
// "model.layers.0.mlp.down_proj.weight"), or "". A numeric component right
// before the last one (".0.weight") indexes a layer of a Sequential (an
// embedder's MLP, say), not a block.
func blockOf(name string) string {
	parts := strings.Split(name, ".")
	for i := 0; i+2 < len(parts); i++ {
		if isNumber(parts[i]) {
			return strings.Join(parts[:i+1], ".")
		}
	}
	return ""
}

func isNumber(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// Selection decides which tensors to quantize.
type Selection struct {
	// Include, when set, replaces the default name and size rules: a 2-D
	// float .weight is quantized if its name matches.
	Include *regexp.Regexp
	// Exclude removes matching tensors from the selection.
	Exclude *regexp.Regexp
	// MinElements overrides DefaultMinElements when positive; 1 quantizes
	// weights of every size.
	MinElements int64
	// MinFeatures overrides DefaultMinFeatures when positive: a weight
	// with fewer rows or columns is not quantized by default; 1 for no
	// limit.
	MinFeatures int
	// Embeddings also quantizes embedding tables (see IsEmbeddingTable),
	// which ComfyUI's int8 Embedding loads.
	Embeddings bool
}

// decide returns whether to quantize t and why.
func (s Selection) decide(t safetensors.TensorInfo) (bool, string) {
	switch {
	case !strings.HasSuffix(t.Name, weightSuffix):
		return false, "not a .weight"
	case len(t.Shape) != 2:
		return false, fmt.Sprintf("rank %d, not 2-D", len(t.Shape))
	case t.DType != "F32" && t.DType != "F16" && t.DType != "BF16":
		return false, "dtype " + t.DType + " is not float32, float16 or bfloat16"
	case t.Numel() == 0:
		return false, "empty"
	case s.Exclude != nil && s.Exclude.MatchString(t.Name):
		return false, "matches --exclude"
	case s.Include != nil:
		if s.Include.MatchString(t.Name) {
			return true, "matches --include"
		}
		return false, "does not match --include"
	}
	what := "linear weight in repeated block " + blockOf(t.Name)
	switch {
	case IsEmbeddingTable(t.Name):
		if !s.Embeddings {
			return false, "embedding table (quantized with --embeddings)"
		}
		what = "embedding table (--embeddings)"
	case skippedComponent(t.Name) != "":
		return false, fmt.Sprintf("embedder or norm (%q)", skippedComponent(t.Name))
	case blockOf(t.Name) == "":
		return false, "outside the repeated blocks (input, output and global layers)"
	}
	minF := s.MinFeatures
	if minF <= 0 {
		minF = DefaultMinFeatures
	}
	minN := s.MinElements
	if minN <= 0 {
		minN = DefaultMinElements
	}
	switch {
	case t.Shape[0] < minF || t.Shape[1] < minF:
		return false, fmt.Sprintf("small (%d x %d: a side under %d)", t.Shape[0], t.Shape[1], minF)
	case t.Numel() < minN:
		return false, fmt.Sprintf("small (%d < %d elements)", t.Numel(), minN)
	}
	return true, what
}

// Action is what happens to one input tensor.
type Action string

// The actions.
const (
	ActionQuantize   Action = "quantize"
	ActionDequantize Action = "dequantize"
	ActionCopy       Action = "copy"
)

// Item is one input tensor in a plan.
type Item struct {
	Name   string `json:"name"`
	DType  string `json:"dtype"`
	Shape  []int  `json:"shape"`
	Bytes  int64  `json:"bytes"`
	Action Action `json:"action"`
	// Scales is "tensor" or "channel" for a quantized (or dequantized)
	// layer; ConvRot its rotation's group size (0: none).
	Scales  string `json:"scales,omitempty"`
	ConvRot int    `json:"convrot_group,omitempty"`
	// Reason says why a tensor is quantized, or copied.
	Reason string `json:"reason,omitempty"`
}
