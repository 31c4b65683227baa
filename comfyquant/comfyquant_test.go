package comfyquant

import (
	"errors"
	"testing"

	"github.com/gokitchen/kitchen/internal/strictjson"
)

// The expected bytes are Python's json.dumps of the same dicts (python3 -c
// 'import json; print(json.dumps({...}))'), as ComfyUI writes them.
func TestEncodeMatchesPython(t *testing.T) {
	for _, c := range []struct {
		conf Config
		want string
	}{
		{Config{Format: Int8Tensorwise}, `{"format": "int8_tensorwise"}`},
		{Config{Format: Int8Tensorwise, ConvRot: true, Group: 256}, `{"format": "int8_tensorwise", "convrot": true, "convrot_groupsize": 256}`},
		{Config{Format: Int8Tensorwise, FullPrecisionMatMul: true, ConvRot: true, Group: 64},
			`{"format": "int8_tensorwise", "full_precision_matrix_mult": true, "convrot": true, "convrot_groupsize": 64}`},
	} {
		if got := string(Encode(c.conf)); got != c.want {
			t.Errorf("Encode(%+v) = %s, want %s", c.conf, got, c.want)
		}
	}
	if n := len(Encode(Config{Format: Int8Tensorwise, ConvRot: true, Group: 256})); n != 72 {
		t.Errorf("ConvRot marker is %d bytes, want 72", n)
	}
	got := EncodeMetadata(map[string]Config{
		"blocks.0.attn.q\u00e9": {Format: Int8Tensorwise},
		"b\U0001F600\n":         {Format: Int8Tensorwise, ConvRot: true, Group: 16},
	})
	// kitchen sorts the layers by name (bytes of UTF-8), the order in which
	// Python was given them here.
	want := `{"format_version": "1.0", "layers": {"blocks.0.attn.q\u00e9": {"format": "int8_tensorwise"}, "b\ud83d\ude00\n": {"format": "int8_tensorwise", "convrot": true, "convrot_groupsize": 16}}}`
	if got != want {
		t.Errorf("EncodeMetadata = %s\nwant %s", got, want)
	}
	layers, err := ParseMetadata(got)
	if err != nil || len(layers) != 2 || layers["b\U0001F600\n"].Group != 16 {
		t.Errorf("ParseMetadata(EncodeMetadata) = %v, %v", layers, err)
	}
}

func TestParse(t *testing.T) {
	for _, c := range []struct {
		marker string
		want   Config
	}{
		{`{"format": "int8_tensorwise"}`, Config{Format: Int8Tensorwise, Group: 256}},
		{`{"format":"int8_tensorwise","per_row":true}`, Config{Format: Int8Tensorwise, Group: 256}},
		{`{"format": "int8_tensorwise", "convrot": true, "convrot_groupsize": 64}`, Config{Format: Int8Tensorwise, ConvRot: true, Group: 64}},
		{`{"format": "int8_tensorwise", "convrot": true}`, Config{Format: Int8Tensorwise, ConvRot: true, Group: 256}},
		{`{"format": "int8_tensorwise", "params": {"convrot": true, "convrot_groupsize": 16}}`, Config{Format: Int8Tensorwise, ConvRot: true, Group: 16}},
		// A flat key wins over "params", as in ComfyUI.
		{`{"format": "int8_tensorwise", "convrot": false, "params": {"convrot": true}}`, Config{Format: Int8Tensorwise, Group: 256}},
		{`{"format": "int8_tensorwise", "full_precision_matrix_mult": true, "orig_dtype": "torch.bfloat16"}`, Config{Format: Int8Tensorwise, FullPrecisionMatMul: true, Group: 256}},
	} {
		got, err := Parse([]byte(c.marker))
		if err != nil || got != c.want {
			t.Errorf("Parse(%s) = %+v, %v; want %+v", c.marker, got, err, c.want)
		}
	}
}

func TestParseRefuses(t *testing.T) {
	for _, m := range []string{
		``,
		`[]`,
		`"int8_tensorwise"`,
		`{}`,
		`{"format": null}`,
		`{"format": "float8_e4m3fn"}`,
		`{"format": "INT8_TENSORWISE"}`,
		`{"FORMAT": "int8_tensorwise"}`,
		`{"format": "float8_e4m3fn", "FORMAT": "int8_tensorwise"}`,
		`{"format": "int8_tensorwise", "format": "int8_tensorwise"}`,
		`{"format": "int8_tensorwise", "convrot": "false"}`,
		`{"format": "int8_tensorwise", "convrot": 1}`,
		`{"format": "int8_tensorwise", "convrot": true, "convrot_groupsize": 512}`,
		`{"format": "int8_tensorwise", "convrot": true, "convrot_groupsize": 2.5}`,
		`{"format": "int8_tensorwise", "convrot": true, "convrot_groupsize": "256"}`,
		`{"format": "int8_tensorwise", "group_size": 64}`,
		`{"format": "int8_tensorwise", "num_experts": 8}`,
		`{"format": "int8_tensorwise", "params": {"scale_dtype": "bf16"}}`,
		`{"format": "int8_tensorwise", "params": 3}`,
		`{"format": "int8_tensorwise"} x`,
	} {
		if c, err := Parse([]byte(m)); !errors.Is(err, ErrMarker) {
			t.Errorf("Parse(%s) = %+v, %v; want an ErrMarker", m, c, err)
		}
	}
	for _, s := range []string{`{}`, `{"layers": []}`, `{"layers": {"a": "int8_tensorwise"}}`, `{"layers": {"a": {"format": "mxfp8"}}}`} {
		if _, err := ParseMetadata(s); !errors.Is(err, ErrMarker) {
			t.Errorf("ParseMetadata(%s): %v", s, err)
		}
	}
}

// TestParseKeepsCause checks that a marker or metadata value that is not
// JSON wraps the reader's own error beside ErrMarker, so that its offset
// can be read back.
func TestParseKeepsCause(t *testing.T) {
	var syn *strictjson.SyntaxError
	if _, err := Parse([]byte(`{"format": }`)); !errors.Is(err, ErrMarker) || !errors.As(err, &syn) {
		t.Errorf("Parse: %v; want ErrMarker wrapping a *strictjson.SyntaxError", err)
	}
	if _, err := ParseMetadata(`{"layers": `); !errors.Is(err, ErrMarker) || !errors.As(err, &syn) {
		t.Errorf("ParseMetadata: %v; want ErrMarker wrapping a *strictjson.SyntaxError", err)
	}
}

// FuzzParse checks that Parse never panics and that what it accepts
// encodes to a marker it reads back the same.
func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"format": "int8_tensorwise", "convrot": true, "convrot_groupsize": 64}`))
	f.Add([]byte(`{"format": "int8_tensorwise", "params": {"convrot": true}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := Parse(b)
		if err != nil {
			return
		}
		back, err := Parse(Encode(c))
		if !c.ConvRot {
			c.Group = DefaultGroup // not written without the rotation
		}
		if err != nil || back != c {
			t.Fatalf("Parse(Encode(%+v)) = %+v, %v", c, back, err)
		}
	})
}

func TestRawFormatAndNested(t *testing.T) {
	for _, c := range []struct {
		marker string
		format string
		nested bool
	}{
		{`{"format": "int8_tensorwise", "convrot": true}`, "int8_tensorwise", false},
		{`{"format": "int8_tensorwise", "params": {"convrot": true, "convrot_groupsize": 64}}`, "int8_tensorwise", true},
		// A flat key wins, as in ComfyUI: not nested.
		{`{"format": "int8_tensorwise", "convrot": false, "params": {"convrot": true}}`, "int8_tensorwise", false},
		{`{"format": "int8_tensorwise", "params": {"convrot": false}}`, "int8_tensorwise", false},
		{`{"format": "nvfp4", "num_experts": 8}`, "nvfp4", false},
		{`{"format": 3}`, "", false},
		{`["int8_tensorwise"]`, "", false},
		{`{"format": "int8_tensorwise"`, "", false},
	} {
		if f, n := RawFormat([]byte(c.marker)), NestedConvRot([]byte(c.marker)); f != c.format || n != c.nested {
			t.Errorf("%s: RawFormat %q, NestedConvRot %v; want %q, %v", c.marker, f, n, c.format, c.nested)
		}
	}
}
