package plot

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/relayfleet/relayfleet/internal/testutil"
)

// golden compares got with testdata/name; go test -update ./internal/plot
// rewrites the golden files.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	testutil.Golden(t, filepath.Join("testdata", name), got)
}

// timeChart is listeners and CPU over a 5-minute run, with an event mark
// and a gap (NaN) in the CPU samples.
func timeChart() Chart {
	var xs, listeners, cpu []float64
	for i := 0; i <= 20; i++ {
		x := float64(i * 15)
		xs = append(xs, x)
		l := math.Min(float64(i)*600, 9000)
		listeners = append(listeners, l)
		c := 5 + l/9000*78
		if i == 7 {
			c = math.NaN()
		}
		cpu = append(cpu, c)
	}
	return Chart{
		Title:  "Listeners & CPU <demo>",
		XLabel: "time",
		YLabel: "count / %",
		XTime:  true,
		Series: []Series{
			{Name: "listeners", X: xs, Y: listeners},
			{Name: "CPU %", X: xs, Y: cpu},
		},
		Marks: []Mark{{X: 120, Label: "event starts"}},
	}
}

// loadCurve is listeners against CPU, RSS and drops, 12 points.
func loadCurve() Chart {
	var xs, cpu, rss, drops []float64
	for i := 1; i <= 12; i++ {
		x := float64(i * 1000)
		xs = append(xs, x)
		cpu = append(cpu, 3+float64(i)*6.5)
		rss = append(rss, 40+float64(i)*4.25)
		d := 0.0
		if i > 9 {
			d = float64((i - 9) * (i - 9) * 3)
		}
		drops = append(drops, d)
	}
	return Chart{
		Title:  "Load curve",
		XLabel: "listeners",
		YLabel: "CPU % / RSS MiB / drops",
		Series: []Series{
			{Name: "CPU %", X: xs, Y: cpu},
			{Name: "RSS MiB", X: xs, Y: rss},
			{Name: "drops/s", X: xs, Y: drops},
		},
	}
}

func TestGolden(t *testing.T) {
	for _, tc := range []struct {
		name   string
		render func() ([]byte, error)
	}{
		{"time.svg", timeChart().SVG},
		{"load-curve.svg", loadCurve().SVG},
		{"stack.svg", func() ([]byte, error) { return Stack(timeChart(), loadCurve()) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.render()
			if err != nil {
				t.Fatal(err)
			}
			wellFormed(t, got)
			again, _ := tc.render()
			if !bytes.Equal(got, again) {
				t.Error("two renderings differ")
			}
			golden(t, tc.name, got)
		})
	}
}

// wellFormed reads the document to EOF with encoding/xml.
func wellFormed(t *testing.T, doc []byte) {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(doc))
	depth := 0
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v\n%s", err, doc)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			if depth == 0 && (tok.Name.Local != "svg" || tok.Name.Space != "http://www.w3.org/2000/svg") {
				t.Errorf("root is %v, want svg in the SVG namespace", tok.Name)
			}
			depth++
		case xml.EndElement:
			depth--
		case xml.ProcInst:
			t.Errorf("unexpected processing instruction %s", tok.Target)
		}
	}
	if !bytes.HasPrefix(doc, []byte("<svg ")) || !bytes.Contains(doc[:200], []byte("viewBox=")) {
		t.Errorf("document does not start with an <svg ... viewBox=...> root:\n%.200s", doc)
	}
}

func TestPolylinePerSeries(t *testing.T) {
	c := loadCurve()
	c.Series = append(c.Series, Series{Name: "empty"})
	out, err := c.SVG()
	if err != nil {
		t.Fatal(err)
	}
	wellFormed(t, out)
	if n := bytes.Count(out, []byte("<polyline")); n != 3 {
		t.Errorf("%d polylines, want 3 (one per non-empty series)", n)
	}
	// 12 points each: small circles on every point.
	if n := bytes.Count(out, []byte("<circle")); n != 36 {
		t.Errorf("%d circles, want 36", n)
	}
	// Over 30 points: no circles.
	var xs, ys []float64
	for i := range 31 {
		xs, ys = append(xs, float64(i)), append(ys, float64(i*i))
	}
	out, err = Chart{Series: []Series{{Name: "many", X: xs, Y: ys}}}.SVG()
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(out, []byte("<circle")) || bytes.Count(out, []byte("<polyline")) != 1 {
		t.Errorf("31 points: want one polyline and no circles:\n%s", out)
	}
}

func TestNaNBreaksLine(t *testing.T) {
	nan := math.NaN()
	out, err := Chart{Series: []Series{{Name: "gappy", X: []float64{0, 1, 2, 3, 4}, Y: []float64{1, 2, nan, 3, 4}}}}.SVG()
	if err != nil {
		t.Fatal(err)
	}
	wellFormed(t, out)
	if n := bytes.Count(out, []byte("<polyline")); n != 2 {
		t.Errorf("%d polylines, want 2 (the NaN splits the line)", n)
	}
	if bytes.Contains(out, []byte("NaN")) || bytes.Contains(out, []byte("Inf")) {
		t.Errorf("NaN leaked into the output:\n%s", out)
	}
}

func TestEscaping(t *testing.T) {
	evil := `a&b <c> "d" 'e'`
	c := Chart{
		Title:  evil,
		XLabel: evil,
		YLabel: evil,
		Series: []Series{{Name: evil, X: []float64{0, 1}, Y: []float64{1, 2}}},
		Marks:  []Mark{{X: 0.5, Label: evil}},
	}
	out, err := c.SVG()
	if err != nil {
		t.Fatal(err)
	}
	wellFormed(t, out)
	if bytes.Contains(out, []byte(evil)) || bytes.Contains(out, []byte("<c>")) {
		t.Errorf("unescaped text in output:\n%s", out)
	}
	want := "a&amp;b &lt;c&gt; &quot;d&quot; &apos;e&apos;"
	if n := bytes.Count(out, []byte(want)); n != 5 {
		t.Errorf("escaped text appears %d times, want 5 (title, x label, y label, legend, mark):\n%s", n, out)
	}
	// The decoder gives the original text back.
	d := xml.NewDecoder(bytes.NewReader(out))
	found := 0
	for {
		tok, err := d.Token()
		if err != nil {
			break
		}
		if cd, ok := tok.(xml.CharData); ok && string(cd) == evil {
			found++
		}
	}
	if found != 5 {
		t.Errorf("decoded the original text %d times, want 5", found)
	}
	// Control characters XML cannot carry are replaced, not emitted.
	out, err = Chart{Title: "bell\x07"}.SVG()
	if err != nil {
		t.Fatal(err)
	}
	wellFormed(t, out)
}

func TestMismatchedLengths(t *testing.T) {
	c := Chart{Series: []Series{
		{Name: "ok", X: []float64{1, 2}, Y: []float64{1, 2}},
		{Name: "lopsided", X: []float64{1, 2, 3}, Y: []float64{1, 2}},
	}}
	_, err := c.SVG()
	if err == nil || !strings.Contains(err.Error(), "lopsided") {
		t.Errorf("SVG: err = %v, want an error naming the series", err)
	}
	_, err = Stack(loadCurve(), c)
	if err == nil || !strings.Contains(err.Error(), "lopsided") {
		t.Errorf("Stack: err = %v, want an error naming the series", err)
	}
	if _, err := Stack(); err == nil {
		t.Error("Stack(): want an error")
	}
}

func TestNoData(t *testing.T) {
	nan := math.NaN()
	for name, c := range map[string]Chart{
		"no series": {Title: "empty"},
		"all empty": {Title: "empty", Series: []Series{{Name: "a"}, {Name: "b", X: []float64{}, Y: []float64{}}}},
		"all NaN":   {Series: []Series{{Name: "a", X: []float64{1, 2}, Y: []float64{nan, nan}}}},
	} {
		out, err := c.SVG()
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		wellFormed(t, out)
		if !bytes.Contains(out, []byte(">no data<")) {
			t.Errorf("%s: no \"no data\" text:\n%s", name, out)
		}
		if bytes.Contains(out, []byte("<polyline")) {
			t.Errorf("%s: has a polyline", name)
		}
	}
}

func TestDegenerateRanges(t *testing.T) {
	for name, s := range map[string]Series{
		"single point":  {X: []float64{5}, Y: []float64{7}},
		"single zero":   {X: []float64{0}, Y: []float64{0}},
		"all equal":     {X: []float64{1, 2, 3}, Y: []float64{4, 4, 4}},
		"same x":        {X: []float64{3, 3}, Y: []float64{1, 2}},
		"negative flat": {X: []float64{0, 1}, Y: []float64{-3, -3}},
		"negative":      {X: []float64{0, 1, 2}, Y: []float64{-5, 2, 10}},
		"tiny":          {X: []float64{0, 1e-6}, Y: []float64{1e-9, 2e-9}},
		"huge":          {X: []float64{0, 1e12}, Y: []float64{1e15, 3e15}},
	} {
		for _, xtime := range []bool{false, true} {
			out, err := Chart{Series: []Series{s}, XTime: xtime}.SVG()
			if err != nil {
				t.Errorf("%s: %v", name, err)
				continue
			}
			wellFormed(t, out)
			if bytes.Contains(out, []byte("NaN")) || bytes.Contains(out, []byte("Inf")) {
				t.Errorf("%s (xtime %v): NaN or Inf in output:\n%s", name, xtime, out)
			}
		}
	}
}

func TestFixedYRange(t *testing.T) {
	c := Chart{YMin: 0, YMax: 100, Series: []Series{{Name: "cpu", X: []float64{0, 1, 2}, Y: []float64{10, 150, 20}}}}
	out, err := c.SVG()
	if err != nil {
		t.Fatal(err)
	}
	wellFormed(t, out)
	if !bytes.Contains(out, []byte(">100<")) || bytes.Contains(out, []byte(">150<")) {
		t.Errorf("fixed 0..100 range: want a 100 tick and no 150 tick:\n%s", out)
	}
}

func checkTicks(t *testing.T, lo, hi float64, ts []float64) {
	t.Helper()
	if len(ts) < 4 || len(ts) > 7 {
		t.Errorf("%v..%v: %d ticks %v, want 4..7", lo, hi, len(ts), ts)
	}
	if len(ts) == 0 {
		return
	}
	if ts[0] > lo || ts[len(ts)-1] < hi {
		t.Errorf("%v..%v: ticks %v do not cover the range", lo, hi, ts)
	}
	for i := 1; i < len(ts); i++ {
		if !(ts[i] > ts[i-1]) {
			t.Errorf("%v..%v: ticks %v not increasing", lo, hi, ts)
		}
	}
	// The step is 1, 2, 2.5 or 5 x 10^n.
	step := ts[1] - ts[0]
	m := step / math.Pow(10, math.Floor(math.Log10(step)))
	nice := false
	for _, n := range []float64{1, 2, 2.5, 5, 10} {
		if math.Abs(m-n) < 1e-6 {
			nice = true
		}
	}
	if !nice {
		t.Errorf("%v..%v: step %v is not nice", lo, hi, step)
	}
}

func TestNiceTicks(t *testing.T) {
	got := niceTicks(0, 1234)
	want := []float64{0, 250, 500, 750, 1000, 1250}
	if len(got) != len(want) {
		t.Fatalf("niceTicks(0, 1234) = %v, want %v", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("niceTicks(0, 1234) = %v, want %v", got, want)
		}
	}
	for _, r := range [][2]float64{
		{0, 1}, {0, 7}, {0, 10}, {0, 99}, {0, 100}, {0, 101}, {0, 1234}, {0, 83},
		{-5, 10}, {-1234, -3}, {0.1, 0.35}, {0, 0.003}, {1e6, 1.5e6}, {0, 9000},
		{42, 43}, {0, 3e15}, {17, 999999},
	} {
		checkTicks(t, r[0], r[1], niceTicks(r[0], r[1]))
	}
	// 0.1 + 0.2 style float noise must not reach the labels.
	for _, v := range niceTicks(0, 0.7) {
		if s := formatNumber(v); len(s) > 4 {
			t.Errorf("tick %v formats as %q", v, s)
		}
	}
}

func TestTimeTicks(t *testing.T) {
	for _, tc := range []struct {
		lo, hi float64
		want   []string
	}{
		{0, 300, []string{"0s", "1m", "2m", "3m", "4m", "5m"}},
		{0, 90, []string{"0s", "30s", "1m", "1m30s"}},
		{0, 3600, []string{"0s", "15m", "30m", "45m", "1h"}},
	} {
		ts := ticks(tc.lo, tc.hi, true, true)
		var got []string
		for _, v := range ts {
			got = append(got, formatSeconds(v))
		}
		if strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("time ticks %v..%v = %v, want %v", tc.lo, tc.hi, got, tc.want)
		}
	}
	for v, want := range map[float64]string{
		0: "0s", 30: "30s", 120: "2m", 90: "1m30s", 3600: "1h", 5400: "1h30m", 0.5: "0.5s", -30: "-30s", 86400: "24h",
	} {
		if got := formatSeconds(v); got != want {
			t.Errorf("formatSeconds(%v) = %q, want %q", v, got, want)
		}
	}
	// A time chart carries the labels.
	out, err := timeChart().SVG()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []string{">0s<", ">1m<", ">5m<"} {
		if !bytes.Contains(out, []byte(l)) {
			t.Errorf("time chart lacks tick label %s", l)
		}
	}
}

func TestFormatNumber(t *testing.T) {
	for v, want := range map[float64]string{
		0: "0", 1200: "1.2k", 1500000: "1.5M", 1000: "1k", 1250: "1.25k", 250: "250",
		0.25: "0.25", 2.5e9: "2.5G", -1200: "-1.2k", 0.123456: "0.12", -0.001: "0", 999: "999",
	} {
		if got := formatNumber(v); got != want {
			t.Errorf("formatNumber(%v) = %q, want %q", v, got, want)
		}
	}
}

func TestStackSize(t *testing.T) {
	a := loadCurve()
	a.Height = 200
	b := timeChart()
	b.Width = 900
	out, err := Stack(a, b)
	if err != nil {
		t.Fatal(err)
	}
	wellFormed(t, out)
	if !bytes.HasPrefix(out, []byte(`<svg xmlns="http://www.w3.org/2000/svg" width="900" height="500" viewBox="0 0 900 500"`)) {
		t.Errorf("stack root: %.120s", out)
	}
	// Clip path ids are unique across the document.
	if bytes.Count(out, []byte(`id="plot0-area"`)) != 1 || bytes.Count(out, []byte(`id="plot1-area"`)) != 1 {
		t.Error("clip path ids collide")
	}
}

func TestMarks(t *testing.T) {
	c := Chart{
		Series: []Series{{Name: "a", X: []float64{0, 100}, Y: []float64{1, 2}}},
		Marks:  []Mark{{X: 10, Label: "start"}, {X: 99, Label: "near the right edge"}, {X: 500, Label: "outside"}, {X: math.NaN(), Label: "nan"}},
	}
	out, err := c.SVG()
	if err != nil {
		t.Fatal(err)
	}
	wellFormed(t, out)
	if n := bytes.Count(out, []byte(`stroke-dasharray="4 3"`)); n != 2 {
		t.Errorf("%d dashed mark lines, want 2 (marks outside the x range are skipped)", n)
	}
	if !bytes.Contains(out, []byte(`text-anchor="end">near the right edge<`)) {
		t.Errorf("label near the right edge is not anchored at its end:\n%s", out)
	}
	if bytes.Contains(out, []byte(">outside<")) || bytes.Contains(out, []byte(">nan<")) {
		t.Error("labels of skipped marks drawn")
	}
}
