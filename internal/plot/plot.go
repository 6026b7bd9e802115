// Package plot draws line charts as SVG, with nothing but the standard library.
//
// It draws the pictures of relayfleet's demo report and of `fleet loadtest`:
// listeners and CPU over time, and the load curve (listeners against CPU,
// RSS, drops). Output is deterministic (fixed float formatting, no map
// iteration), so it can be checked against golden files.
package plot

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// Series is one line of a chart.
type Series struct {
	Name string    // legend text
	X, Y []float64 // same length; NaN Y values break the line
}

// Chart is a line chart with one or more series.
type Chart struct {
	Title  string
	XLabel string
	YLabel string
	Series []Series
	// XTime formats X as seconds since the start: tick labels like "0s", "30s", "2m", "1m30s".
	XTime bool
	// YMin/YMax fix the y range when YMax > YMin; otherwise 0..max rounded up to a nice number (or min..max when data goes negative).
	YMin, YMax float64
	// Marks are vertical dashed lines with a short label at x (e.g. "event starts"), drawn in grey.
	Marks         []Mark
	Width, Height int // default 720 x 300
}

// Mark is a vertical dashed line at X with a short label.
type Mark struct {
	X     float64
	Label string
}

// Default chart size in pixels.
const (
	defaultWidth  = 720
	defaultHeight = 300
)

// palette is the fixed series colours, cycled past the eighth series.
var palette = []string{
	"#1f77b4", // blue
	"#ff7f0e", // orange
	"#2ca02c", // green
	"#d62728", // red
	"#9467bd", // purple
	"#8c564b", // brown
	"#e377c2", // pink
	"#17becf", // cyan
}

// Layout constants, in pixels.
const (
	marginLeft   = 64
	marginRight  = 20
	marginBottom = 44
	titleY       = 20
	legendRowH   = 16
	fontSize     = 11
	charW        = 6.5 // approximate width of one character at fontSize
	maxPoints    = 30  // series with at most this many points get circles
)

// SVG renders the chart as a standalone SVG document (with an XML declaration-free <svg xmlns=... viewBox=...> root).
func (c Chart) SVG() ([]byte, error) {
	w, h := c.size()
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="%d">`+"\n", w, h, w, h, fontSize)
	if err := c.render(&b, w, h, "plot0"); err != nil {
		return nil, err
	}
	b.WriteString("</svg>\n")
	return []byte(b.String()), nil
}

// Stack renders charts one above the other in one SVG document (each at its own size, same width = the widest).
//
// Each chart keeps its own height; narrower charts are laid out at the
// widest chart's width so that their plot areas line up.
func Stack(charts ...Chart) ([]byte, error) {
	if len(charts) == 0 {
		return nil, errors.New("plot: Stack of no charts")
	}
	width, total := 0, 0
	for _, c := range charts {
		w, h := c.size()
		width = max(width, w)
		total += h
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="%d">`+"\n", width, total, width, total, fontSize)
	y := 0
	for i, c := range charts {
		_, h := c.size()
		fmt.Fprintf(&b, `<svg x="0" y="%d" width="%d" height="%d" viewBox="0 0 %d %d">`+"\n", y, width, h, width, h)
		if err := c.render(&b, width, h, "plot"+strconv.Itoa(i)); err != nil {
			if c.Title != "" {
				return nil, fmt.Errorf("chart %d (%q): %w", i, c.Title, err)
			}
			return nil, fmt.Errorf("chart %d: %w", i, err)
		}
		b.WriteString("</svg>\n")
		y += h
	}
	b.WriteString("</svg>\n")
	return []byte(b.String()), nil
}

func (c Chart) size() (int, int) {
	w, h := c.Width, c.Height
	if w <= 0 {
		w = defaultWidth
	}
	if h <= 0 {
		h = defaultHeight
	}
	return w, h
}

// finite reports whether v is neither NaN nor infinite.
func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// render writes the chart's elements (no root) for a w x h area; id
// prefixes the element ids so that stacked charts do not collide.
func (c Chart) render(b *strings.Builder, w, h int, id string) error {
	for i, s := range c.Series {
		if len(s.X) != len(s.Y) {
			name := s.Name
			if name == "" {
				name = "#" + strconv.Itoa(i)
			}
			return fmt.Errorf("plot: series %q has %d x values and %d y values", name, len(s.X), len(s.Y))
		}
	}

	// Data extents over finite points.
	xmin, xmax := math.Inf(1), math.Inf(-1)
	ymin, ymax := math.Inf(1), math.Inf(-1)
	points := 0
	for _, s := range c.Series {
		for i := range s.X {
			if !finite(s.X[i]) || !finite(s.Y[i]) {
				continue
			}
			points++
			xmin, xmax = math.Min(xmin, s.X[i]), math.Max(xmax, s.X[i])
			ymin, ymax = math.Min(ymin, s.Y[i]), math.Max(ymax, s.Y[i])
		}
	}

	fmt.Fprintf(b, `<rect x="0" y="0" width="%d" height="%d" fill="#ffffff"/>`+"\n", w, h)
	if c.Title != "" {
		fmt.Fprintf(b, `<text x="%s" y="%d" text-anchor="middle" font-size="14" font-weight="bold">%s</text>`+"\n", f(float64(w)/2), titleY, esc(c.Title))
	}

	// Legend: rows of swatch + name under the title.
	legendTop := titleY + 12
	if c.Title == "" {
		legendTop = 8
	}
	rows := c.legend(b, w, legendTop, points > 0)
	top := legendTop + rows*legendRowH + 8
	if rows == 0 && c.Title == "" {
		top = 16
	}

	px0, px1 := float64(marginLeft), float64(w-marginRight)
	py0, py1 := float64(top), float64(h-marginBottom)
	if px1-px0 < 10 {
		px1 = px0 + 10
	}
	if py1-py0 < 10 {
		py1 = py0 + 10
	}

	// Axis labels.
	if c.XLabel != "" {
		fmt.Fprintf(b, `<text x="%s" y="%d" text-anchor="middle">%s</text>`+"\n", f((px0+px1)/2), h-8, esc(c.XLabel))
	}
	if c.YLabel != "" {
		cy := (py0 + py1) / 2
		fmt.Fprintf(b, `<text x="14" y="%s" text-anchor="middle" transform="rotate(-90 14 %s)">%s</text>`+"\n", f(cy), f(cy), esc(c.YLabel))
	}

	frame := func() {
		fmt.Fprintf(b, `<rect x="%s" y="%s" width="%s" height="%s" fill="none" stroke="#333333"/>`+"\n", f(px0), f(py0), f(px1-px0), f(py1-py0))
	}
	if points == 0 {
		frame()
		fmt.Fprintf(b, `<text x="%s" y="%s" text-anchor="middle" fill="#888888">no data</text>`+"\n", f((px0+px1)/2), f((py0+py1)/2))
		return nil
	}

	// Ranges and ticks.
	xlo, xhi := padRange(xmin, xmax, xmin >= 0)
	xt := ticks(xlo, xhi, c.XTime, true)
	xlo, xhi = xt[0], xt[len(xt)-1]

	var ylo, yhi float64
	var yt []float64
	if c.YMax > c.YMin {
		ylo, yhi = c.YMin, c.YMax
		yt = ticks(ylo, yhi, false, false)
	} else {
		lo, hi := ymin, ymax
		if lo >= 0 {
			lo = 0
		}
		lo, hi = padRange(lo, hi, lo >= 0)
		yt = ticks(lo, hi, false, true)
		ylo, yhi = yt[0], yt[len(yt)-1]
	}

	sx := func(x float64) float64 { return px0 + (x-xlo)/(xhi-xlo)*(px1-px0) }
	sy := func(y float64) float64 { return py1 - (y-ylo)/(yhi-ylo)*(py1-py0) }

	// Grid and tick labels.
	b.WriteString(`<g stroke="#e5e5e5" stroke-width="1">` + "\n")
	for _, t := range yt {
		fmt.Fprintf(b, `<line x1="%s" y1="%s" x2="%s" y2="%s"/>`+"\n", f(px0), f(sy(t)), f(px1), f(sy(t)))
	}
	for _, t := range xt {
		fmt.Fprintf(b, `<line x1="%s" y1="%s" x2="%s" y2="%s"/>`+"\n", f(sx(t)), f(py0), f(sx(t)), f(py1))
	}
	b.WriteString("</g>\n")
	b.WriteString(`<g fill="#333333">` + "\n")
	for _, t := range yt {
		fmt.Fprintf(b, `<text x="%s" y="%s" text-anchor="end">%s</text>`+"\n", f(px0-6), f(sy(t)+4), esc(formatNumber(t)))
	}
	for _, t := range xt {
		label := formatNumber(t)
		if c.XTime {
			label = formatSeconds(t)
		}
		fmt.Fprintf(b, `<text x="%s" y="%s" text-anchor="middle">%s</text>`+"\n", f(sx(t)), f(py1+16), esc(label))
	}
	b.WriteString("</g>\n")
	frame()

	// Data, clipped to the plot area (a fixed y range may cut it).
	fmt.Fprintf(b, `<clipPath id="%s-area"><rect x="%s" y="%s" width="%s" height="%s"/></clipPath>`+"\n", id, f(px0-3), f(py0-3), f(px1-px0+6), f(py1-py0+6))
	fmt.Fprintf(b, `<g clip-path="url(#%s-area)">`+"\n", id)
	for i, s := range c.Series {
		col := palette[i%len(palette)]
		var seg []string
		flush := func() {
			if len(seg) > 1 {
				fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="2" stroke-linejoin="round" points="%s"/>`+"\n", col, strings.Join(seg, " "))
			}
			seg = seg[:0]
		}
		for j := range s.X {
			if !finite(s.X[j]) || !finite(s.Y[j]) {
				flush()
				continue
			}
			seg = append(seg, f(sx(s.X[j]))+","+f(sy(s.Y[j])))
		}
		flush()
		if len(s.X) <= maxPoints {
			for j := range s.X {
				if finite(s.X[j]) && finite(s.Y[j]) {
					fmt.Fprintf(b, `<circle cx="%s" cy="%s" r="2.5" fill="%s"/>`+"\n", f(sx(s.X[j])), f(sy(s.Y[j])), col)
				}
			}
		}
	}
	b.WriteString("</g>\n")

	// Marks.
	for _, m := range c.Marks {
		if !finite(m.X) || m.X < xlo || m.X > xhi {
			continue
		}
		x := sx(m.X)
		fmt.Fprintf(b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#888888" stroke-width="1" stroke-dasharray="4 3"/>`+"\n", f(x), f(py0), f(x), f(py1))
		if m.Label != "" {
			// Near the right edge the label goes to the left of the line.
			if x+3+float64(len([]rune(m.Label)))*charW > px1 {
				fmt.Fprintf(b, `<text x="%s" y="%s" fill="#666666" font-size="10" text-anchor="end">%s</text>`+"\n", f(x-3), f(py0+11), esc(m.Label))
			} else {
				fmt.Fprintf(b, `<text x="%s" y="%s" fill="#666666" font-size="10">%s</text>`+"\n", f(x+3), f(py0+11), esc(m.Label))
			}
		}
	}
	return nil
}

// legend writes the legend rows starting at y=top and returns how many
// rows it used (0 when there are no named series or no data).
func (c Chart) legend(b *strings.Builder, w, top int, data bool) int {
	if !data || len(c.Series) == 0 {
		return 0
	}
	rows := 1
	x := float64(marginLeft)
	y := float64(top)
	for i, s := range c.Series {
		name := s.Name
		if name == "" {
			name = "series " + strconv.Itoa(i+1)
		}
		entry := 22 + float64(len([]rune(name)))*charW + 16
		if x > marginLeft && x+entry > float64(w-marginRight) {
			rows++
			x = marginLeft
			y += legendRowH
		}
		col := palette[i%len(palette)]
		fmt.Fprintf(b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s" stroke-width="3"/>`+"\n", f(x), f(y+6), f(x+16), f(y+6), col)
		fmt.Fprintf(b, `<text x="%s" y="%s">%s</text>`+"\n", f(x+22), f(y+10), esc(name))
		x += entry
	}
	return rows
}

// padRange widens a zero-width range so that scaling never divides by
// zero; nonNeg keeps the low end at or above zero.
func padRange(lo, hi float64, nonNeg bool) (float64, float64) {
	if hi > lo {
		return lo, hi
	}
	if lo == 0 {
		return 0, 1
	}
	d := math.Abs(lo) * 0.1
	lo, hi = lo-d, hi+d
	if nonNeg && lo < 0 {
		lo = 0
	}
	return lo, hi
}

// Tick count bounds.
const (
	minTicks = 4
	maxTicks = 6
)

// niceTicks returns 4 to 6 (at most 7) evenly spaced tick values whose step
// is 1, 2, 2.5 or 5 x 10^n, covering lo..hi: the first tick is at or below
// lo and the last at or above hi. hi must be greater than lo.
func niceTicks(lo, hi float64) []float64 { return ticks(lo, hi, false, true) }

// ticks picks a step from the candidates for lo..hi. With out set, ticks
// round the range outwards; otherwise they stay inside it.
func ticks(lo, hi float64, timeSteps bool, out bool) []float64 {
	if !(hi > lo) || !finite(lo) || !finite(hi) {
		lo, hi = padRange(lo, lo, false)
	}
	steps := numericSteps(hi - lo)
	if timeSteps {
		steps = timeStepsFor(steps)
	}
	span := func(step float64) (int64, int64) {
		const eps = 1e-9
		if out {
			return int64(math.Floor(lo/step + eps)), int64(math.Ceil(hi/step - eps))
		}
		return int64(math.Ceil(lo/step - eps)), int64(math.Floor(hi/step + eps))
	}
	chosen := steps[len(steps)-1]
	prevN := int64(-1)
	for i, s := range steps {
		a, z := span(s)
		n := z - a + 1
		if n <= maxTicks {
			chosen = s
			// Too few ticks with this step while the finer one gives 7:
			// take the 7.
			if n < minTicks && prevN == maxTicks+1 && i > 0 {
				chosen = steps[i-1]
			}
			break
		}
		prevN = n
	}
	a, z := span(chosen)
	if z < a { // fixed range narrower than any step: just the ends
		return []float64{lo, hi}
	}
	var t []float64
	for k := a; k <= z; k++ {
		v := float64(k) * chosen
		// Snap float noise (0.30000000000000004) onto the decimal grid.
		v = math.Round(v*1e9) / 1e9
		if v == 0 {
			v = 0 // no negative zero
		}
		t = append(t, v)
	}
	return t
}

// numericSteps returns ascending 1, 2, 2.5, 5 x 10^n steps around span.
func numericSteps(span float64) []float64 {
	e := int(math.Floor(math.Log10(span)))
	var s []float64
	for p := e - 2; p <= e+1; p++ {
		base := math.Pow(10, float64(p))
		for _, m := range []float64{1, 2, 2.5, 5} {
			s = append(s, m*base)
		}
	}
	return s
}

// clockSteps are the steps of a time axis between a second and a day.
var clockSteps = []float64{1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400}

// timeStepsFor replaces the numeric steps between 1s and a day with clock
// steps (10s, 15s, 30s, 1m, 2m, 5m, ...).
func timeStepsFor(numeric []float64) []float64 {
	var s []float64
	for _, v := range numeric {
		if v < 1 {
			s = append(s, v)
		}
	}
	s = append(s, clockSteps...)
	for _, v := range numeric {
		if v >= 2*86400 {
			s = append(s, v)
		}
	}
	sort.Float64s(s)
	return s
}

// formatNumber formats v compactly with at most 2 decimals: 1200 -> "1.2k",
// 1500000 -> "1.5M", 2e9 -> "2G", 0.25 -> "0.25".
func formatNumber(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 1e12:
		return trim(v/1e12) + "T"
	case a >= 1e9:
		return trim(v/1e9) + "G"
	case a >= 1e6:
		return trim(v/1e6) + "M"
	case a >= 1e3:
		return trim(v/1e3) + "k"
	}
	return trim(v)
}

// formatSeconds formats seconds as a compact duration: "0s", "30s", "2m",
// "1m30s", "1h", "1h30m"; fractions of a second as "0.5s".
func formatSeconds(v float64) string {
	r := math.Round(v*100) / 100
	if r != math.Trunc(r) || math.Abs(r) >= 1<<53 {
		return trim(v) + "s"
	}
	n := int64(r)
	if n == 0 {
		return "0s"
	}
	sign := ""
	if n < 0 {
		sign, n = "-", -n
	}
	h, m, s := n/3600, n/60%60, n%60
	var out strings.Builder
	out.WriteString(sign)
	if h > 0 {
		out.WriteString(strconv.FormatInt(h, 10) + "h")
	}
	if m > 0 {
		out.WriteString(strconv.FormatInt(m, 10) + "m")
	}
	if s > 0 {
		out.WriteString(strconv.FormatInt(s, 10) + "s")
	}
	return out.String()
}

// trim formats v with at most 2 decimals and no trailing zeros.
func trim(v float64) string {
	s := strconv.FormatFloat(v, 'f', 2, 64)
	s = strings.TrimRight(s, "0")
	s = strings.TrimSuffix(s, ".")
	if s == "-0" {
		s = "0"
	}
	return s
}

// f formats a coordinate: at most 2 decimals.
func f(v float64) string { return trim(v) }

// esc escapes text for XML character data and attribute values, and
// replaces characters XML cannot carry.
func esc(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '&':
			b.WriteString("&amp;")
		case r == '<':
			b.WriteString("&lt;")
		case r == '>':
			b.WriteString("&gt;")
		case r == '"':
			b.WriteString("&quot;")
		case r == '\'':
			b.WriteString("&apos;")
		case r == '\t' || r == '\n' || r == '\r':
			b.WriteByte(' ')
		case r < 0x20 || r == 0xFFFE || r == 0xFFFF || (r >= 0xD800 && r <= 0xDFFF):
			b.WriteRune('\uFFFD')
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}
