package strictjson

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func TestDecode(t *testing.T) {
	for _, c := range []struct {
		in   string
		want any // nil with err set: refused
		err  string
	}{
		{`{"a":[1,-2.5e3,"x",true,false,null,{}]}`, map[string]any{"a": []any{json.Number("1"), json.Number("-2.5e3"), "x", true, false, nil, map[string]any{}}}, ""},
		{` "\u00e9\ud83d\ude00\/\b" `, "é\U0001F600/\b", ""},
		{`{"A":1,"a":2}`, map[string]any{"A": json.Number("1"), "a": json.Number("2")}, ""},
		{`{"a":1,"a":1}`, nil, `key "a" appears twice`},
		{`[{"x":{"y":1,"y":2}}]`, nil, `key "y" appears twice`},
		{strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth), nil, ""},
		{strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1), nil, "nesting deeper than 128"},
		{`"\ud800"`, nil, "lone surrogate"},
		{`"\udc00\ud800"`, nil, "lone surrogate"},
		{`"\ud800\u0041"`, nil, "lone surrogate"},
		{"\"\xff\"", nil, "not valid UTF-8"},
		{"\"a\x1fb\"", nil, "control character"},
		{`01`, nil, "data after"},
		{`1.`, nil, "invalid number"},
		{`-`, nil, "want a number"},
		{`NaN`, nil, "want a number"},
		{`{"a":1,}`, nil, "want a string"},
		{`[1,]`, nil, "want a number"},
		{`{"a" 1}`, nil, `want ':'`},
		{`"abc`, nil, "unterminated"},
		{`{} x`, nil, "data after"},
		{``, nil, "unexpected end"},
		{`tru`, nil, "invalid literal"},
	} {
		got, err := Decode([]byte(c.in))
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%q: got %v, %v; want an error saying %q", c.in, got, err, c.err)
		case c.err == "" && err != nil:
			t.Errorf("%q: %v", c.in, err)
		case c.err == "" && c.want != nil && !reflect.DeepEqual(got, c.want):
			t.Errorf("%q: got %#v, want %#v", c.in, got, c.want)
		}
	}
}

func TestUint(t *testing.T) {
	for in, want := range map[string]string{
		"0": "", "9223372036854775807": "", "9223372036854775808": "too large",
		"-1": "negative", "-0": "negative", "1.0": "not an integer", "1e2": "not an integer", "x": "want a number",
	} {
		_, err := NewScanner([]byte(in)).Uint()
		if (want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), want) {
			t.Errorf("Uint(%s): %v, want %q", in, err, want)
		}
	}
}

// FuzzDecode compares Decode with encoding/json: what Decode accepts,
// encoding/json accepts and reads alike; what encoding/json accepts and
// Decode refuses, it refuses for one of the reasons it gives on purpose.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"format":"int8_tensorwise","per_row":true}`,
		`{"format":"float8_e4m3fn","FORMAT":"int8_tensorwise"}`,
		`{"format":"a","format":"b"}`,
		`{"weight_map":{"a":"x.safetensors"},"metadata":{"total_size":1e3}}`,
		`[1, -0, 0.5e-3, "\u0000\ud83d\ude00", null, true]`,
		`"\ud800"`, "\"\xff\"", `{"a":{"b":{"c":[[]]}}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := Decode(b)
		valid := json.Valid(b)
		if err == nil {
			if !valid {
				t.Fatalf("accepted %q, which encoding/json refuses", b)
			}
			dec := json.NewDecoder(bytes.NewReader(b))
			dec.UseNumber()
			var want any
			if err := dec.Decode(&want); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%q: read %#v, encoding/json %#v", b, got, want)
			}
			return
		}
		if valid {
			for _, why := range []string{"appears twice", "nesting deeper", "lone surrogate", "not valid UTF-8"} {
				if strings.Contains(err.Error(), why) {
					return
				}
			}
			t.Fatalf("refused %q, which encoding/json accepts: %v", b, err)
		}
	})
}
