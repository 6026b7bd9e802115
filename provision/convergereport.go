package provision

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/relayfleet/relayfleet/internal/text"
	"github.com/relayfleet/relayfleet/inventories"
	"github.com/relayfleet/relayfleet/sysctl"
)

// WriteConvergeText writes fleet converge's result as text: each host's
// changes and sysctl keys, then a table and a summary line; check says
// the changes were only found, not made.
func WriteConvergeText(w io.Writer, rs []HostResult, check bool) {
	for _, r := range rs {
		fmt.Fprintln(w)
		if r.Err != nil {
			fmt.Fprintf(w, "== %s: FAILED after %.1fs: %s\n", r.Host, r.Elapsed.Seconds(), text.OneLine(r.Err))
			if r.Report == nil {
				continue
			}
		}
		rep := r.Report
		procs := ""
		if r.Facts.Cores > 0 {
			procs = fmt.Sprintf(" (%d cores, %s)", r.Facts.Cores, inventories.Bytes(r.Facts.RAM).IEC())
		}
		switch {
		case r.Err != nil:
		case len(rep.Changes) == 0:
			fmt.Fprintf(w, "== %s%s: converged, nothing to change (%.1fs)\n", r.Host, procs, r.Elapsed.Seconds())
		case check:
			fmt.Fprintf(w, "== %s%s: %s to make\n", r.Host, procs, text.Plural(len(rep.Changes), "change", "changes"))
		default:
			fmt.Fprintf(w, "== %s%s: %s applied in %.1fs\n", r.Host, procs, text.Plural(len(rep.Changes), "change", "changes"), r.Elapsed.Seconds())
		}
		for _, c := range rep.Changes {
			fmt.Fprintf(w, "   %s\n", c)
		}
		for _, s := range rep.Sysctl {
			fmt.Fprintf(w, "   sysctl %s = %s: %s%s\n", s.Key, s.Want, s.Status, sysctlNote(s))
		}
		if len(rep.Sysctl) == 0 && len(rep.Refused) > 0 {
			keys := make([]string, 0, len(rep.Refused))
			for k := range rep.Refused {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			fmt.Fprintf(w, "   sysctl not applied (this kernel refuses them, as inside a container): %s\n", strings.Join(keys, ", "))
		}
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "HOST\tRESULT\tCHANGES\tRESTARTED\tRELEASE\tSECONDS")
	for _, r := range rs {
		result, n, restarted, release := "converged", 0, 0, ""
		if r.Report != nil {
			n, restarted, release = len(r.Report.Changes), len(r.Report.Restarted), text.ShortSHA(r.Report.Release)
		}
		switch {
		case r.Err != nil:
			result = "FAILED"
		case n > 0 && check:
			result = "would change"
		case n > 0:
			result = "changed"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%.1f\n", r.Host, result, n, restarted, release, r.Elapsed.Seconds())
	}
	tw.Flush()
	tally := TallyResults(rs)
	fmt.Fprintf(w, "\nsummary: %s: %d changed, %d unchanged, %d failed\n", text.Plural(len(rs), "host", "hosts"), tally.Changed, tally.Unchanged, tally.Failed)
}

// sysctlNote says why a sysctl key kept the kernel's value.
func sysctlNote(s sysctl.Result) string {
	if s.Status == sysctl.NotApplied {
		got := s.After
		if got == "" {
			got = "no such key"
		}
		return fmt.Sprintf(" (the kernel keeps %s: read-only here, as inside a container)", got)
	}
	return ""
}

// hostJSON is one host's result in fleet converge --json.
type hostJSON struct {
	Event     string            `json:"event"`
	Host      string            `json:"host"`
	Cores     int               `json:"cores"`
	RAMBytes  int64             `json:"ram_bytes"`
	Changes   []string          `json:"changes"`
	Sysctl    []sysctlJSON      `json:"sysctl"`
	Refused   map[string]string `json:"sysctl_refused"`
	Restarted []string          `json:"restarted"`
	Release   string            `json:"release"`
	Seconds   float64           `json:"seconds"`
	Error     string            `json:"error,omitempty"`
}

// sysctlJSON is one sysctl key in hostJSON.
type sysctlJSON struct {
	Key    string `json:"key"`
	Want   string `json:"want"`
	Before string `json:"before"`
	After  string `json:"after"`
	Status string `json:"status"`
}

// WriteConvergeJSON writes fleet converge's result as JSON lines: one
// per host, then a summary.
func WriteConvergeJSON(enc *json.Encoder, rs []HostResult) error {
	for _, r := range rs {
		h := hostJSON{Event: "result", Host: r.Host, Cores: r.Facts.Cores, RAMBytes: r.Facts.RAM, Seconds: r.Elapsed.Seconds(), Changes: []string{}, Sysctl: []sysctlJSON{}, Restarted: []string{}}
		if r.Err != nil {
			h.Error = text.OneLine(r.Err)
		}
		if rep := r.Report; rep != nil {
			for _, c := range rep.Changes {
				h.Changes = append(h.Changes, c.String())
			}
			for _, s := range rep.Sysctl {
				h.Sysctl = append(h.Sysctl, sysctlJSON{s.Key, s.Want, s.Before, s.After, string(s.Status)})
			}
			h.Refused = rep.Refused
			h.Restarted = append(h.Restarted, rep.Restarted...)
			h.Release = rep.Release
		}
		if err := enc.Encode(h); err != nil {
			return err
		}
	}
	tally := TallyResults(rs)
	return enc.Encode(map[string]any{"event": "summary", "hosts": len(rs), "changed": tally.Changed, "unchanged": tally.Unchanged, "failed": tally.Failed})
}
