// Package convert turns safetensors checkpoints into ComfyUI's
// int8_tensorwise format and back, streaming one tensor at a time through
// kitchen's dispatch, so memory follows the largest tensor, not the file.
//
// For each selected weight P.weight (2-D, float32/float16/bfloat16) the
// output holds P.weight as int8 of the same shape, P.weight_scale as float32
// (shape [] for one scale per tensor, [N, 1] per output row), and
// P.comfy_quant, the UTF-8 bytes of {"format": "int8_tensorwise"} (with
// "per_row": true for per-row scales) as uint8. Every other tensor and the
// header's __metadata__ are copied unchanged.
package convert

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/gokitchen/kitchen/internal/strictjson"
	"github.com/gokitchen/kitchen/safetensors"
)

// Format is the comfy_quant format this package writes and reads.
const Format = "int8_tensorwise"

// Suffixes of the tensors of a quantized layer.
const (
	weightSuffix = ".weight"
	scaleSuffix  = ".weight_scale"
	quantSuffix  = ".comfy_quant"
)

// DefaultMinElements is the size below which weights are not quantized by
// default: the saving is negligible and small layers are the sensitive ones.
const DefaultMinElements = 16384

// skipComponent matches one dot-separated component of the names of layers
// kept in full precision by default: embeddings and normalisation layers,
// where int8 costs the most accuracy ("x_embedder", "embed_tokens", "wte",
// "norm1", "layernorm", "ln_f", "pos_embed"), but not "adaLN_modulation".
var skipComponent = regexp.MustCompile(`(?i)^(.*embed.*|emb(_.*)?|wte|wpe|.*norm.*|ln(_.*|\d*)|pos(_.*)?|position.*)$`)

// defaultSkip reports whether a name has a component skipComponent matches.
func defaultSkip(name string) bool {
	for c := range strings.SplitSeq(name, ".") {
		if skipComponent.MatchString(c) {
			return true
		}
	}
	return false
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
}

// decide returns whether to quantize t, and why not.
func (s Selection) decide(t safetensors.TensorInfo) (bool, string) {
	switch {
	case !strings.HasSuffix(t.Name, weightSuffix):
		return false, "not a .weight"
	case len(t.Shape) != 2:
		return false, fmt.Sprintf("rank %d, not 2-D", len(t.Shape))
	case t.DType != "F32" && t.DType != "F16" && t.DType != "BF16":
		return false, "dtype " + t.DType + " is not a float type"
	case t.Numel() == 0:
		return false, "empty"
	case s.Exclude != nil && s.Exclude.MatchString(t.Name):
		return false, "matches --exclude"
	case s.Include != nil:
		if s.Include.MatchString(t.Name) {
			return true, ""
		}
		return false, "does not match --include"
	case defaultSkip(t.Name):
		return false, "embedding or norm layer"
	}
	minN := s.MinElements
	if minN <= 0 {
		minN = DefaultMinElements
	}
	if t.Numel() < minN {
		return false, fmt.Sprintf("small (%d < %d elements)", t.Numel(), minN)
	}
	return true, ""
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
	// Reason says why a tensor is copied rather than converted.
	Reason string `json:"reason,omitempty"`
}

// quantConfig is the JSON stored in P.comfy_quant.
type quantConfig struct {
	Format string `json:"format"`
	PerRow bool   `json:"per_row,omitempty"`
}

// quantBlob returns the comfy_quant bytes, padded with trailing spaces
// (still valid JSON) to make the layer's tensors end on a 4-byte boundary.
func quantBlob(perRow bool, before int64) []byte {
	b, _ := json.Marshal(quantConfig{Format: Format, PerRow: perRow})
	for (before+int64(len(b)))%4 != 0 {
		b = append(b, ' ')
	}
	return b
}

// parseQuantBlob reads a comfy_quant tensor's bytes as ComfyUI (Python's
// json) reads them, and refuses what it could read otherwise: keys match
// exactly ("FORMAT" is not "format"), a repeated key is an error (Python
// keeps the last), "format" must be there, a string, and "per_row" a
// bool; other keys are ignored.
func parseQuantBlob(b []byte) (quantConfig, error) {
	var c quantConfig
	s := strictjson.NewScanner(b)
	if s.Peek() != '{' {
		return c, errors.New("not a JSON object")
	}
	hasFormat := false
	err := s.Object(func(key string) error {
		var err error
		switch key {
		case "format":
			hasFormat = true
			c.Format, err = s.String()
		case "per_row":
			c.PerRow, err = s.Bool()
		default:
			err = s.Skip()
		}
		return err
	})
	if err == nil {
		err = s.End()
	}
	if err == nil && !hasFormat {
		err = errors.New(`no "format"`)
	}
	return c, err
}
