//go:build amd64 && !purego

package cpu

import "testing"

// TestLinearPathQuads checks int8_linear's choice of layout where the
// panels hold quads (AVX512-VNNI): no dot path; the few-row path from
// dotMin rows.
func TestLinearPathQuads(t *testing.T) {
	defer func(i int, v bool) { impl, vnni = i, v }(impl, vnni)
	impl, vnni = implAVX512, true
	for _, c := range []struct{ m, want int }{{1, oneRow}, {8, oneRow}, {9, fewRows}, {16, fewRows}, {48, fewRows}, {96, fewRows}, {97, manyRows}} {
		if got := linearPath(c.m, 4096, false); got != c.want {
			t.Errorf("%d rows of 4096: path %d, want %d", c.m, got, c.want)
		}
	}
	vnni = false
	if got := linearPath(16, 4096, false); got != dotRows {
		t.Errorf("16 rows of 4096 without VNNI: path %d, want the dot path", got)
	}
}
