package eval

import (
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"strings"
)

// WriteSVG draws the report as a horizontal bar chart: per layer, worst
// first, its relative output error on plain activations and with outlier
// channels, on a shared linear scale.
func (r *Report) WriteSVG(w io.Writer) error {
	const (
		left, bar, gap, width = 320, 9, 6, 420
	)
	top := 56
	height := top + len(r.Layers)*(2*bar+gap) + 30
	maxErr := 0.0
	for _, l := range r.Layers {
		maxErr = max(maxErr, l.Worst())
	}
	if maxErr == 0 || math.IsNaN(maxErr) || math.IsInf(maxErr, 0) {
		maxErr = 1
	}
	px := func(e float64) float64 {
		if math.IsNaN(e) || math.IsInf(e, 0) {
			return width
		}
		return e / maxErr * width
	}
	var err error
	p := func(format string, a ...any) {
		if err == nil {
			_, err = fmt.Fprintf(w, format, a...)
		}
	}
	p(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", left+width+90, height)
	p(`<rect width="100%%" height="100%%" fill="white"/>` + "\n")
	p(`<text x="8" y="18" font-size="13">Relative output error of each int8 layer (%d tokens), worst first</text>`+"\n", r.Tokens)
	p(`<rect x="8" y="30" width="10" height="10" fill="#4878a8"/><text x="22" y="39">plain activations</text>` + "\n")
	p(`<rect x="140" y="30" width="10" height="10" fill="#d9822b"/><text x="154" y="39">with outlier channels</text>` + "\n")
	y := top
	for _, l := range r.Layers {
		label := l.Name
		if l.Embedding {
			label += " embedding"
		}
		if l.ConvRot > 0 {
			label += fmt.Sprintf(" (ConvRot %d)", l.ConvRot)
		} else {
			label += " (" + l.Scales + ")"
		}
		// A long label is cut to fit left of the bars; the whole one is
		// the text's tooltip.
		shown := label
		if r := []rune(label); len(r) > maxLabel {
			shown = "…" + string(r[len(r)-maxLabel+1:])
		}
		p(`<text x="%d" y="%d" text-anchor="end"><title>%s</title>%s</text>`+"\n", left-6, y+bar+3, xmlText(label), xmlText(shown))
		p(`<rect x="%d" y="%d" width="%.1f" height="%d" fill="#4878a8"/>`+"\n", left, y, px(l.PlainError), bar)
		p(`<text x="%.1f" y="%d">%.4f</text>`+"\n", float64(left)+px(l.PlainError)+4, y+bar-1, l.PlainError)
		p(`<rect x="%d" y="%d" width="%.1f" height="%d" fill="#d9822b"/>`+"\n", left, y+bar, px(l.OutlierError), bar)
		p(`<text x="%.1f" y="%d">%.4f</text>`+"\n", float64(left)+px(l.OutlierError)+4, y+2*bar-1, l.OutlierError)
		y += 2*bar + gap
	}
	p("</svg>\n")
	return err
}

// maxLabel is the most characters of a layer's label the chart shows.
const maxLabel = 52

// xmlText escapes s for XML character data: markup characters as
// entities, and characters XML does not allow (control characters, U+FFFE)
// replaced, so that no tensor name makes the file unreadable.
func xmlText(s string) string {
	var b strings.Builder
	xml.EscapeText(&b, []byte(s)) // writes to a Builder: cannot fail
	return b.String()
}
