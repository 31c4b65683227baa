// Package comfyquant reads and writes the markers by which ComfyUI knows a
// quantized layer: the `P.comfy_quant` tensor (UTF-8 JSON bytes, uint8)
// beside a layer's `P.weight` and `P.weight_scale`, and the
// `_quantization_metadata` entry of a checkpoint's `__metadata__` that
// ComfyUI rebuilds markers from.
//
// Encode writes exactly what ComfyUI's own save path writes (Python's
// json.dumps of the config, keys in ComfyUI's order), so kitchen's files
// hold the same bytes as ComfyUI's. Parse reads every variant ComfyUI
// reads (flat keys, convrot keys nested under "params", the legacy
// "per_row" key) and refuses, rather than ignores, what it does not
// understand: an unknown format, a key that could change the math, a
// repeated key, a value of the wrong type.
package comfyquant

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/gokitchen/kitchen/internal/strictjson"
	"github.com/gokitchen/kitchen/quant"
)

// Int8Tensorwise is the format of ComfyUI's int8 layers (per-tensor or,
// by the scale's shape, per-channel scales; ConvRot when the marker says
// so).
const Int8Tensorwise = "int8_tensorwise"

// DefaultGroup is the ConvRot group size when a marker names none.
const DefaultGroup = 256

// Suffixes of the tensors of a quantized layer P.
const (
	MarkerSuffix = ".comfy_quant"
	ScaleSuffix  = ".weight_scale"
	WeightSuffix = ".weight"
)

// MetadataKey is the `__metadata__` entry ComfyUI rebuilds markers from.
const MetadataKey = "_quantization_metadata"

// ErrMarker is wrapped by every error about a marker's contents.
var ErrMarker = errors.New("comfyquant: bad quantization marker")

// Config is one layer's quantization, as a marker states it.
type Config struct {
	// Format is the quantization format; kitchen reads and writes
	// Int8Tensorwise.
	Format string
	// FullPrecisionMatMul asks ComfyUI to dequantize the weight before
	// the product instead of running the int8 matmul. It does not change
	// the stored numbers.
	FullPrecisionMatMul bool
	// ConvRot marks a weight quantized after a ConvRot rotation of its
	// input dimension in groups of Group.
	ConvRot bool
	Group   int
}

// RotationGroup returns the config's ConvRot group size, or 0 when it has no
// rotation.
func (c Config) RotationGroup() int {
	if !c.ConvRot {
		return 0
	}
	return c.Group
}

// Encode returns the marker bytes ComfyUI writes for c: Python's
// json.dumps of the config dict, built in ComfyUI's key order.
func Encode(c Config) []byte {
	return []byte(encodeObject(c))
}

func encodeObject(c Config) string {
	var b strings.Builder
	b.WriteString(`{"format": `)
	b.WriteString(pyString(c.Format))
	if c.FullPrecisionMatMul {
		b.WriteString(`, "full_precision_matrix_mult": true`)
	}
	if c.ConvRot {
		fmt.Fprintf(&b, `, "convrot": true, "convrot_groupsize": %d`, c.Group)
	}
	b.WriteString("}")
	return b.String()
}

// pyString is Python's json.dumps of a string (ensure_ascii: every
// non-ASCII character escaped as \uXXXX, surrogate pairs beyond the BMP).
func pyString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\b':
			b.WriteString(`\b`)
		case r == '\f':
			b.WriteString(`\f`)
		case r < 0x20:
			fmt.Fprintf(&b, `\u%04x`, r)
		case r < 0x80:
			b.WriteRune(r)
		case r < 0x10000:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			r -= 0x10000
			fmt.Fprintf(&b, `\u%04x\u%04x`, 0xd800+(r>>10), 0xdc00+(r&0x3ff))
		}
	}
	b.WriteByte('"')
	return b.String()
}

// ignored are the keys ComfyUI ignores that do not change the numbers:
// the legacy "per_row" (the scale's shape decides) and bookkeeping.
var ignored = []string{"per_row", "orig_dtype", "format_version"}

// Parse reads a marker. It accepts every variant ComfyUI reads and refuses
// what ComfyUI would read differently or kitchen does not understand.
func Parse(b []byte) (Config, error) {
	v, err := strictjson.Decode(b)
	if err != nil {
		return Config{}, fmt.Errorf("%w: %w", ErrMarker, err)
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return Config{}, fmt.Errorf("%w: not a JSON object", ErrMarker)
	}
	return parseConfig(obj)
}

func parseConfig(obj map[string]any) (Config, error) {
	var c Config
	f, ok := obj["format"].(string)
	if !ok {
		return c, fmt.Errorf("%w: no \"format\" string", ErrMarker)
	}
	if f != Int8Tensorwise {
		return c, fmt.Errorf("%w: format %q: kitchen reads only %q", ErrMarker, f, Int8Tensorwise)
	}
	c.Format = f
	var params map[string]any
	for key, val := range obj {
		var err error
		switch key {
		case "format":
		case "full_precision_matrix_mult":
			c.FullPrecisionMatMul, err = boolean(key, val)
		case "convrot", "convrot_groupsize":
		case "params":
			if params, ok = val.(map[string]any); !ok {
				err = fmt.Errorf("%w: \"params\" is not an object", ErrMarker)
			}
		default:
			if !slices.Contains(ignored, key) {
				err = fmt.Errorf("%w: key %q is not understood", ErrMarker, key)
			}
		}
		if err != nil {
			return Config{}, err
		}
	}
	for key := range params {
		if key != "convrot" && key != "convrot_groupsize" && !slices.Contains(ignored, key) {
			return Config{}, fmt.Errorf("%w: key \"params\".%q is not understood", ErrMarker, key)
		}
	}
	// A flat key wins over one under "params", as in ComfyUI.
	lookup := func(key string) (any, bool) {
		if v, ok := obj[key]; ok {
			return v, true
		}
		v, ok := params[key]
		return v, ok
	}
	if v, ok := lookup("convrot"); ok {
		var err error
		if c.ConvRot, err = boolean("convrot", v); err != nil {
			return Config{}, err
		}
	}
	c.Group = DefaultGroup
	if v, ok := lookup("convrot_groupsize"); ok {
		n, isNum := v.(json.Number)
		g, err := strconv.Atoi(string(n))
		if !isNum || err != nil {
			return Config{}, fmt.Errorf("%w: convrot_groupsize %v is not an integer", ErrMarker, v)
		}
		c.Group = g
	}
	if c.ConvRot && !quant.ValidGroup(c.Group) {
		return Config{}, fmt.Errorf("%w: convrot_groupsize %d is not a power of 4 of at least 4", ErrMarker, c.Group)
	}
	return c, nil
}

// boolean reads a JSON boolean. ComfyUI tests some keys for truth, so that
// the string "false" would turn them on: kitchen refuses anything but true
// and false.
func boolean(key string, v any) (bool, error) {
	b, ok := v.(bool)
	if !ok {
		return false, fmt.Errorf("%w: %q is %v, want true or false", ErrMarker, key, v)
	}
	return b, nil
}

// ParseMetadata reads a `_quantization_metadata` value: a JSON object whose
// "layers" maps layer names (used verbatim) to configs.
func ParseMetadata(s string) (map[string]Config, error) {
	v, err := strictjson.Decode([]byte(s))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrMarker, MetadataKey, err)
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%w: %s is not a JSON object", ErrMarker, MetadataKey)
	}
	layers, ok := obj["layers"].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%w: %s has no \"layers\" object", ErrMarker, MetadataKey)
	}
	out := make(map[string]Config, len(layers))
	for name, conf := range layers {
		m, ok := conf.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%w: %s: layer %q is not an object", ErrMarker, MetadataKey, name)
		}
		c, err := parseConfig(m)
		if err != nil {
			return nil, fmt.Errorf("%s: layer %q: %w", MetadataKey, name, err)
		}
		out[name] = c
	}
	return out, nil
}

// EncodeMetadata returns a `_quantization_metadata` value for the layers,
// in Python's json.dumps form with the layers sorted by name:
// {"format_version": "1.0", "layers": {name: config, ...}}.
func EncodeMetadata(layers map[string]Config) string {
	names := make([]string, 0, len(layers))
	for n := range layers {
		names = append(names, n)
	}
	slices.Sort(names)
	var b strings.Builder
	b.WriteString(`{"format_version": "1.0", "layers": {`)
	for i, n := range names {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(pyString(n))
		b.WriteString(": ")
		b.WriteString(encodeObject(layers[n]))
	}
	b.WriteString("}}")
	return b.String()
}

// RawFormat returns a marker's "format" string, as ComfyUI's
// conf.get("format") sees it, or "" if the marker is not a JSON object
// with a string "format": for reports on markers that Parse refuses.
func RawFormat(b []byte) string {
	v, err := strictjson.Decode(b)
	if err != nil {
		return ""
	}
	obj, _ := v.(map[string]any)
	f, _ := obj["format"].(string)
	return f
}

// NestedConvRot reports whether a marker turns ConvRot on only under
// "params". ComfyUI's int8 Linear reads that, but its int8 Embedding reads
// only the flat keys, so it would load such a table without undoing the
// rotation.
func NestedConvRot(b []byte) bool {
	v, err := strictjson.Decode(b)
	if err != nil {
		return false
	}
	obj, _ := v.(map[string]any)
	if _, flat := obj["convrot"]; flat {
		return false
	}
	params, _ := obj["params"].(map[string]any)
	on, _ := params["convrot"].(bool)
	return on
}
