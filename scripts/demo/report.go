package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"sort"
	"strings"

	"github.com/relayfleet/relayfleet/internal/plot"
)

// report writes report.md and the pictures, and prints the summary.
func (d *demo) report(context.Context) error {
	d.mu.Lock()
	samples := append([]sample(nil), d.samples...)
	marks := append([]mark(nil), d.marks...)
	loads := d.loads
	d.mu.Unlock()
	if len(samples) == 0 {
		return fmt.Errorf("no samples to report")
	}
	var b strings.Builder
	host, _ := os.Hostname()
	fmt.Fprintf(&b, "# relayfleet demo report\n\nOn %s (%s). Steady listeners %d, event listeners %d.\n\n", host, machine(), d.listeners, d.eventListeners)

	fmt.Fprintf(&b, "## Steps\n\n| step | seconds |\n|---|---:|\n")
	for _, s := range d.steps {
		fmt.Fprintf(&b, "| %s | %.1f |\n", s.Name, s.Seconds)
	}

	// Per process: peak listeners, peak memory against the ceiling, CPU.
	type agg struct {
		peak            int64
		mem, budget     int64
		cpuSum, cpuPeak float64
		n               int
	}
	procs := map[string]*agg{}
	for _, s := range samples {
		for k, p := range s.Procs {
			a := procs[k]
			if a == nil {
				a = &agg{}
				procs[k] = a
			}
			a.peak = max(a.peak, p.Listeners)
			if p.MemUsed > a.mem {
				a.mem, a.budget = p.MemUsed, p.MemBudget
			}
			a.cpuSum += p.CPU
			a.cpuPeak = max(a.cpuPeak, p.CPU)
			a.n++
		}
	}
	keys := sortedKeys(procs)
	fmt.Fprintf(&b, "\n## Relay processes\n\n| process | peak listeners | peak memory | ceiling | share | mean CPU | peak CPU |\n|---|---:|---:|---:|---:|---:|---:|\n")
	for _, k := range keys {
		a := procs[k]
		share := 0.0
		if a.budget > 0 {
			share = float64(a.mem) / float64(a.budget) * 100
		}
		fmt.Fprintf(&b, "| %s | %d | %.1f MiB | %.0f MiB | %.1f%% | %.1f%% | %.1f%% |\n", k, a.peak, mib(a.mem), mib(a.budget), share, a.cpuSum/float64(a.n)*100, a.cpuPeak*100)
	}

	fmt.Fprintf(&b, "\n## Listeners (as the load generator saw them)\n\n%s", loadTableHeader)
	for _, name := range sortedKeys(loads) {
		b.WriteString(loads[name].row(name))
	}
	b.WriteString(loadTableNote)

	fmt.Fprintf(&b, "\n## Timeline\n\n")
	for _, m := range marks {
		fmt.Fprintf(&b, "- t+%.0fs %s\n", m.At.Seconds(), m.Label)
	}

	// Pictures.
	pm := make([]plot.Mark, 0, len(marks))
	for _, m := range marks {
		pm = append(pm, plot.Mark{X: m.At.Seconds(), Label: m.Label})
	}
	boxes := map[string]bool{}
	for _, s := range samples {
		for _, p := range s.Procs {
			boxes[p.Box] = true
		}
	}
	var lis, cpu []plot.Series
	for _, box := range sortedKeys(boxes) {
		ls := plot.Series{Name: box}
		cs := plot.Series{Name: box}
		for _, s := range samples {
			var n int64
			var c float64
			seen := false
			for _, p := range s.Procs {
				if p.Box == box {
					n += p.Listeners
					c += p.CPU
					seen = true
				}
			}
			y, yc := float64(n), c*100
			if !seen {
				y, yc = math.NaN(), math.NaN()
			}
			ls.X, ls.Y = append(ls.X, s.At.Seconds()), append(ls.Y, y)
			cs.X, cs.Y = append(cs.X, s.At.Seconds()), append(cs.Y, yc)
		}
		lis, cpu = append(lis, ls), append(cpu, cs)
	}
	listeners := plot.Chart{Title: "Listeners per box", XLabel: "time", YLabel: "listeners", Series: lis, XTime: true, Marks: pm}
	cpuChart := plot.Chart{Title: "Relay CPU per box", XLabel: "time", YLabel: "% of a core", Series: cpu, XTime: true, Marks: pm}
	// The load curve: every sample's listeners against the relays' CPU.
	type pt struct{ x, y float64 }
	var pts []pt
	for _, s := range samples {
		var c float64
		for _, p := range s.Procs {
			c += p.CPU
		}
		if s.total() > 0 {
			pts = append(pts, pt{float64(s.total()), c * 100})
		}
	}
	sort.Slice(pts, func(i, j int) bool { return pts[i].x < pts[j].x })
	curve := plot.Series{Name: "all relay processes"}
	for _, p := range pts {
		curve.X, curve.Y = append(curve.X, p.x), append(curve.Y, p.y)
	}
	load := plot.Chart{Title: "Load curve", XLabel: "listeners", YLabel: "% of a core", Series: []plot.Series{curve}}
	for name, c := range map[string]plot.Chart{"listeners.svg": listeners, "cpu.svg": cpuChart, "load-curve.svg": load} {
		svg, err := c.SVG()
		if err != nil {
			return err
		}
		if err := os.WriteFile(d.path("report", name), svg, 0o644); err != nil {
			return err
		}
	}
	fmt.Fprintf(&b, "\n## Pictures\n\n![listeners](listeners.svg)\n\n![cpu](cpu.svg)\n\n![load curve](load-curve.svg)\n")
	fmt.Fprintf(&b, "\nSamples: once a second, listeners and memory from each relay's /stats, CPU from /proc on this host. Every command the demo ran, with its output: ../logs/commands.log\n")
	if err := os.WriteFile(d.path("report", "report.md"), []byte(b.String()), 0o644); err != nil {
		return err
	}
	// The summary on the terminal: the tables.
	for _, line := range strings.Split(b.String(), "\n") {
		if strings.HasPrefix(line, "|") || strings.HasPrefix(line, "##") {
			d.say("    %s", line)
		}
	}
	d.say("    pictures: %s, %s, %s", d.path("report", "listeners.svg"), d.path("report", "cpu.svg"), d.path("report", "load-curve.svg"))
	return nil
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func machine() string {
	data, _ := os.ReadFile("/proc/cpuinfo")
	model, n := "", 0
	for _, l := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(l, "model name") {
			n++
			if _, v, ok := strings.Cut(l, ":"); ok {
				model = strings.TrimSpace(v)
			}
		}
	}
	return fmt.Sprintf("%d cores, %s", n, model)
}
