// Package strictjson reads JSON the way the readers kitchen's files meet
// read it, and refuses what they would read differently: the safetensors
// reference reader (Rust, serde_json) and ComfyUI (Python's json module).
// Object keys match exactly (encoding/json matches struct fields without
// regard to case), a key repeated in any object is an error (serde refuses
// a repeated struct field, while maps and Python keep the last: refusing
// is the one reading on which all agree), strings must be valid UTF-8 with
// no lone surrogate escapes, and nesting deeper than MaxDepth is refused,
// as serde_json refuses it.
//
// A Scanner walks one JSON text in place, without copying it, so a header
// of 100 MB costs its decoded strings and nothing more.
package strictjson

import (
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// MaxDepth is the deepest nesting of arrays and objects accepted: serde_json's
// default recursion limit.
const MaxDepth = 128

// SyntaxError is malformed or refused JSON, at a byte offset of the text.
type SyntaxError struct {
	Offset int
	Msg    string
}

func (e *SyntaxError) Error() string { return fmt.Sprintf("%s at byte %d", e.Msg, e.Offset) }

// Scanner reads one JSON text.
type Scanner struct {
	data  []byte
	pos   int
	depth int
	buf   []byte // scratch for strings with escapes
}

// NewScanner returns a Scanner at the start of data.
func NewScanner(data []byte) *Scanner { return &Scanner{data: data} }

func (s *Scanner) fail(format string, a ...any) error {
	return &SyntaxError{Offset: s.pos, Msg: fmt.Sprintf(format, a...)}
}

func (s *Scanner) skipSpace() {
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

// Peek skips white space and returns the next byte, or 0 at the end.
func (s *Scanner) Peek() byte {
	s.skipSpace()
	if s.pos < len(s.data) {
		return s.data[s.pos]
	}
	return 0
}

func (s *Scanner) expect(c byte) error {
	if s.Peek() != c {
		return s.unexpected(fmt.Sprintf("%q", c))
	}
	s.pos++
	return nil
}

func (s *Scanner) unexpected(want string) error {
	if s.pos >= len(s.data) {
		return s.fail("unexpected end of JSON, want %s", want)
	}
	return s.fail("unexpected %q, want %s", s.data[s.pos], want)
}

// End checks that nothing but white space follows.
func (s *Scanner) End() error {
	if s.skipSpace(); s.pos < len(s.data) {
		return s.fail("data after the JSON value")
	}
	return nil
}

// Null consumes a null if one is next and reports whether it did.
func (s *Scanner) Null() (bool, error) {
	if s.Peek() != 'n' {
		return false, nil
	}
	return true, s.literal("null")
}

func (s *Scanner) literal(lit string) error {
	if len(s.data)-s.pos < len(lit) || string(s.data[s.pos:s.pos+len(lit)]) != lit {
		return s.fail("invalid literal, want %s", lit)
	}
	s.pos += len(lit)
	return nil
}

// Bool reads true or false.
func (s *Scanner) Bool() (bool, error) {
	switch s.Peek() {
	case 't':
		return true, s.literal("true")
	case 'f':
		return false, s.literal("false")
	}
	return false, s.unexpected("true or false")
}

// String reads a string.
func (s *Scanner) String() (string, error) {
	b, err := s.stringBytes()
	return string(b), err
}

// stringBytes reads a string and returns its decoded bytes, which alias
// the text or the scratch buffer: valid until the next call.
func (s *Scanner) stringBytes() ([]byte, error) {
	if s.Peek() != '"' {
		return nil, s.unexpected("a string")
	}
	s.pos++
	start := s.pos
	// The fast path: no escapes.
	for s.pos < len(s.data) {
		c := s.data[s.pos]
		switch {
		case c == '"':
			b := s.data[start:s.pos]
			s.pos++
			if !utf8.Valid(b) {
				return nil, &SyntaxError{Offset: start, Msg: "string is not valid UTF-8"}
			}
			return b, nil
		case c == '\\':
			s.buf = append(s.buf[:0], s.data[start:s.pos]...)
			return s.escaped(start)
		case c < 0x20:
			return nil, s.fail("control character %#x in string", c)
		}
		s.pos++
	}
	return nil, s.fail("unterminated string")
}

// escaped continues a string that holds escapes, decoding into s.buf.
func (s *Scanner) escaped(start int) ([]byte, error) {
	for s.pos < len(s.data) {
		c := s.data[s.pos]
		switch {
		case c == '"':
			s.pos++
			if !utf8.Valid(s.buf) {
				return nil, &SyntaxError{Offset: start, Msg: "string is not valid UTF-8"}
			}
			return s.buf, nil
		case c < 0x20:
			return nil, s.fail("control character %#x in string", c)
		case c != '\\':
			s.buf = append(s.buf, c)
			s.pos++
			continue
		}
		if s.pos+1 >= len(s.data) {
			return nil, s.fail("unterminated string")
		}
		e := s.data[s.pos+1]
		s.pos += 2
		switch e {
		case '"', '\\', '/':
			s.buf = append(s.buf, e)
		case 'b':
			s.buf = append(s.buf, '\b')
		case 'f':
			s.buf = append(s.buf, '\f')
		case 'n':
			s.buf = append(s.buf, '\n')
		case 'r':
			s.buf = append(s.buf, '\r')
		case 't':
			s.buf = append(s.buf, '\t')
		case 'u':
			r, err := s.hex4()
			if err != nil {
				return nil, err
			}
			if utf16.IsSurrogate(r) {
				// A surrogate must be the first of a pair.
				if r >= 0xdc00 || s.pos+1 >= len(s.data) || s.data[s.pos] != '\\' || s.data[s.pos+1] != 'u' {
					return nil, s.fail("lone surrogate %U in string", r)
				}
				s.pos += 2
				r2, err := s.hex4()
				if err != nil {
					return nil, err
				}
				if r = utf16.DecodeRune(r, r2); r == utf8.RuneError {
					return nil, s.fail("lone surrogate in string")
				}
			}
			s.buf = utf8.AppendRune(s.buf, r)
		default:
			return nil, s.fail("invalid escape \\%c in string", e)
		}
	}
	return nil, s.fail("unterminated string")
}

func (s *Scanner) hex4() (rune, error) {
	if len(s.data)-s.pos < 4 {
		return 0, s.fail("short \\u escape")
	}
	var r rune
	for _, c := range s.data[s.pos : s.pos+4] {
		var v byte
		switch {
		case '0' <= c && c <= '9':
			v = c - '0'
		case 'a' <= c && c <= 'f':
			v = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			v = c - 'A' + 10
		default:
			return 0, s.fail("invalid \\u escape")
		}
		r = r<<4 | rune(v)
	}
	s.pos += 4
	return r, nil
}

// number reads a number and returns its text, with whether it has a
// fraction or an exponent.
func (s *Scanner) number() (text []byte, integer bool, err error) {
	s.skipSpace()
	start := s.pos
	digits := func() int {
		n := 0
		for s.pos < len(s.data) && '0' <= s.data[s.pos] && s.data[s.pos] <= '9' {
			s.pos++
			n++
		}
		return n
	}
	if s.pos < len(s.data) && s.data[s.pos] == '-' {
		s.pos++
	}
	switch {
	case s.pos < len(s.data) && s.data[s.pos] == '0':
		s.pos++
	case digits() == 0:
		return nil, false, s.unexpected("a number")
	}
	integer = true
	if s.pos < len(s.data) && s.data[s.pos] == '.' {
		s.pos++
		if digits() == 0 {
			return nil, false, s.fail("invalid number")
		}
		integer = false
	}
	if s.pos < len(s.data) && (s.data[s.pos] == 'e' || s.data[s.pos] == 'E') {
		s.pos++
		if s.pos < len(s.data) && (s.data[s.pos] == '+' || s.data[s.pos] == '-') {
			s.pos++
		}
		if digits() == 0 {
			return nil, false, s.fail("invalid number")
		}
		integer = false
	}
	return s.data[start:s.pos], integer, nil
}

// Uint reads a non-negative integer written without a fraction or an
// exponent (the reader of a usize accepts nothing else) that fits an
// int64.
func (s *Scanner) Uint() (int64, error) {
	start := s.Peek()
	text, integer, err := s.number()
	switch {
	case err != nil:
		return 0, err
	case start == '-':
		return 0, s.fail("negative number %s", text)
	case !integer:
		return 0, s.fail("%s is not an integer", text)
	}
	v, err := strconv.ParseInt(string(text), 10, 64)
	if err != nil {
		return 0, s.fail("number %s is too large", text)
	}
	return v, nil
}

func (s *Scanner) enter() error {
	if s.depth++; s.depth > MaxDepth {
		return s.fail("nesting deeper than %d levels", MaxDepth)
	}
	return nil
}

// Members reads an object, calling each with every key in turn, the
// Scanner at the member's value, which each must consume. It does not look
// for repeated keys: the caller must (Object does).
func (s *Scanner) Members(each func(key string) error) error {
	if err := s.expect('{'); err != nil {
		return err
	}
	if err := s.enter(); err != nil {
		return err
	}
	if s.Peek() == '}' {
		s.pos++
		s.depth--
		return nil
	}
	for {
		key, err := s.String()
		if err != nil {
			return err
		}
		if err := s.expect(':'); err != nil {
			return err
		}
		if err := each(key); err != nil {
			return err
		}
		switch s.Peek() {
		case ',':
			s.pos++
		case '}':
			s.pos++
			s.depth--
			return nil
		default:
			return s.unexpected(`"," or "}"`)
		}
	}
}

// Object is Members, refusing a key that appears twice.
func (s *Scanner) Object(each func(key string) error) error {
	var seen keySet
	return s.Members(func(key string) error {
		if seen.add(key) {
			return s.fail("key %q appears twice in an object", key)
		}
		return each(key)
	})
}

// keySet is a set of an object's keys: a list while it is short, then a
// map.
type keySet struct {
	list []string
	m    map[string]struct{}
}

// add adds key and reports whether it was already there.
func (k *keySet) add(key string) bool {
	if k.m != nil {
		_, dup := k.m[key]
		k.m[key] = struct{}{}
		return dup
	}
	for _, x := range k.list {
		if x == key {
			return true
		}
	}
	if k.list = append(k.list, key); len(k.list) > 16 {
		k.m = make(map[string]struct{}, 2*len(k.list))
		for _, x := range k.list {
			k.m[x] = struct{}{}
		}
		k.list = nil
	}
	return false
}

// Array reads an array, calling each with the index of every element, the
// Scanner at the element, which each must consume.
func (s *Scanner) Array(each func(i int) error) error {
	if err := s.expect('['); err != nil {
		return err
	}
	if err := s.enter(); err != nil {
		return err
	}
	if s.Peek() == ']' {
		s.pos++
		s.depth--
		return nil
	}
	for i := 0; ; i++ {
		if err := each(i); err != nil {
			return err
		}
		switch s.Peek() {
		case ',':
			s.pos++
		case ']':
			s.pos++
			s.depth--
			return nil
		default:
			return s.unexpected(`"," or "]"`)
		}
	}
}

// Skip reads a value of any kind, checking it as Value does, and drops it.
func (s *Scanner) Skip() error {
	switch s.Peek() {
	case '{':
		return s.Object(func(string) error { return s.Skip() })
	case '[':
		return s.Array(func(int) error { return s.Skip() })
	case '"':
		_, err := s.stringBytes()
		return err
	case 't', 'f':
		_, err := s.Bool()
		return err
	case 'n':
		_, err := s.Null()
		return err
	}
	_, _, err := s.number()
	return err
}

// Value reads a value of any kind: an object as a map[string]any, an array
// as []any, a number as a json.Number (its text, so no precision is
// lost), a string, a bool or nil.
func (s *Scanner) Value() (any, error) {
	switch s.Peek() {
	case '{':
		m := map[string]any{}
		err := s.Object(func(key string) error {
			v, err := s.Value()
			m[key] = v
			return err
		})
		return m, err
	case '[':
		a := []any{}
		err := s.Array(func(int) error {
			v, err := s.Value()
			a = append(a, v)
			return err
		})
		return a, err
	case '"':
		return s.String()
	case 't', 'f':
		return s.Bool()
	case 'n':
		_, err := s.Null()
		return nil, err
	}
	text, _, err := s.number()
	return json.Number(text), err
}

// Decode reads data, which must be one JSON value and nothing else but
// white space, as Value does.
func Decode(data []byte) (any, error) {
	s := NewScanner(data)
	v, err := s.Value()
	if err == nil {
		err = s.End()
	}
	if err != nil {
		return nil, err
	}
	return v, nil
}
