package provision

import (
	"fmt"
	"io"
	"net/url"
	"strings"
	"text/tabwriter"

	"github.com/relayfleet/relayfleet/internal/text"
	"github.com/relayfleet/relayfleet/inventories"
)

// BoxReport is one box in fleet status's output: its status, or why it
// could not be read.
type BoxReport struct {
	Host  string `json:"host"`
	Error string `json:"error,omitempty"`
	// Origin is the box's relay URL when it is one of the fleet's origin
	// boxes (Target.Origin), else empty.
	Origin string `json:"origin,omitempty"`
	// Region is the box's region in a fleet with regions, else empty.
	Region string `json:"region,omitempty"`
	BoxStatus
}

// WriteStatusText writes fleet status's table. DROPS (datagrams the
// kernel dropped at a process's UDP socket since it started) comes first
// when any process has dropped some, with a line saying how many did: the
// story's whole fault was that number, unwatched.
func WriteStatusText(stdout io.Writer, boxes []BoxReport) error {
	dropping := 0
	for _, b := range boxes {
		dropping += b.Dropping()
	}
	if dropping > 0 {
		fmt.Fprintf(stdout, "DROPS: %s dropped UDP datagrams at a full receive buffer (raise --udp-buffer / net.core.rmem_max, or add processes)\n\n", text.Plural(dropping, "relay process", "relay processes"))
	}
	var edges, origins []BoxReport
	for _, b := range boxes {
		if b.Origin != "" {
			origins = append(origins, b)
		} else {
			edges = append(edges, b)
		}
	}
	// Which origin each edge process pulls from, by name where it is one
	// of the origin boxes, when any process says (its /stats "upstream")
	// or the fleet has origin boxes.
	pulls := len(origins) > 0
	for _, b := range boxes {
		for _, p := range b.Processes {
			pulls = pulls || p.Upstream != ""
		}
	}
	if err := writeStatusTable(stdout, edges, dropping > 0, pulls, originNames(origins)); err != nil {
		return err
	}
	if len(origins) > 0 {
		fmt.Fprintf(stdout, "\nORIGINS (%s publishers publish to and the edges pull from)\n", text.Plural(len(origins), "box", "boxes"))
		// With regions, a region's origins pull from the publishers'
		// region's: which one, by name.
		originPulls := false
		for _, b := range origins {
			for _, p := range b.Processes {
				originPulls = originPulls || p.Upstream != ""
			}
		}
		if err := writeStatusTable(stdout, origins, dropping > 0, originPulls, originNames(origins)); err != nil {
			return err
		}
	}
	fmt.Fprintln(stdout)
	for _, b := range boxes {
		if b.Error != "" {
			fmt.Fprintf(stdout, "%s: FAILED: %s\n", b.Host, b.Error)
			continue
		}
		drift := "no sysctl drift"
		if len(b.SysctlDrift) > 0 {
			drift = "sysctl drift: " + strings.Join(b.SysctlDrift, "; ")
		}
		if len(b.SysctlRefused) > 0 {
			drift += fmt.Sprintf(" (%s refused by this kernel, as inside a container)", text.Plural(len(b.SysctlRefused), "key", "keys"))
		}
		fmt.Fprintf(stdout, "%s: release %s, %s, %s%s%s\n", b.Host, text.ShortSHA(b.Release), text.Plural(len(b.Processes), "process", "processes"), drift, leftBehind(b.BoxStatus), silent(b.BoxStatus))
	}
	return nil
}

// writeStatusTable writes one table of boxes' processes: DROPS first when
// dropping, else last; with pulls an UPSTREAM column, the origin each
// process pulls from (its name in names, by host:port, when it is one).
func writeStatusTable(stdout io.Writer, boxes []BoxReport, dropping, pulls bool, names map[string]string) error {
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	row := func(drops string, cols ...string) {
		if dropping {
			cols = append([]string{drops}, cols...)
		} else {
			cols = append(cols, drops)
		}
		fmt.Fprintln(tw, strings.Join(cols, "\t"))
	}
	probed := false
	for _, b := range boxes {
		for _, p := range b.Processes {
			probed = probed || p.Heartbeat != nil
		}
	}
	heartbeat := func(cols []string, p ProcessStatus) []string {
		if !probed {
			return cols
		}
		switch h := p.Heartbeat; {
		case h == nil:
			return append(cols, "-")
		case h.Error != "":
			return append(cols, "unheard")
		case !h.Passes():
			return append(cols, fmt.Sprintf("%d/%d SILENT", h.Groups, h.Due))
		default:
			return append(cols, fmt.Sprintf("%d/%d", h.Groups, h.Due))
		}
	}
	regions := false
	for _, b := range boxes {
		regions = regions || b.Region != ""
	}
	head := []string{"BOX", "PROCESS", "STATE", "LISTENERS", "HEADROOM", "MEMORY / CEILING", "RESTARTS", "RUNS"}
	if regions {
		head = append([]string{"REGION"}, head...)
	}
	if pulls {
		head = append(head, "UPSTREAM")
	}
	if probed {
		head = append(head, "HEARTBEAT")
	}
	row("DROPS", head...)
	for _, b := range boxes {
		for _, p := range b.Processes {
			state := p.Active
			switch {
			case p.Error != "":
				state += " (" + p.Error + ")"
			case p.Draining:
				state += ", draining"
			case !p.Admitting:
				state += ", refusing listeners"
			}
			cols := []string{b.Host, p.Unit, state, fmt.Sprint(p.Listeners), fmt.Sprint(p.Headroom),
				inventories.Bytes(p.MemoryCur).IEC() + " / " + inventories.Bytes(p.MemoryMax).IEC(), fmt.Sprint(p.Restarts), runsColumn(p)}
			if regions {
				cols = append([]string{orDash(b.Region)}, cols...)
			}
			if pulls {
				cols = append(cols, upstreamColumn(p.Upstream, names))
			}
			row(fmt.Sprint(p.Drops), heartbeat(cols, p)...)
		}
	}
	return tw.Flush()
}

// originNames maps each origin box's relay host:port to its name.
func originNames(origins []BoxReport) map[string]string {
	m := map[string]string{}
	for _, o := range origins {
		m[hostPort(o.Origin)] = o.Host
	}
	return m
}

// hostPort is a relay URL's HOST:PORT ("" when it has none).
func hostPort(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return u.Host
}

// upstreamColumn is the origin a process pulls from: the origin box's
// name, else the URL's host:port, else "-" (the process does not say).
func upstreamColumn(upstream string, names map[string]string) string {
	if upstream == "" {
		return "-"
	}
	hp := hostPort(upstream)
	if n, ok := names[hp]; ok && hp != "" {
		return n
	}
	if hp != "" {
		return hp
	}
	return upstream
}

// runsColumn is what a process runs: its release, marked STALE when it is
// not the box's current one (a rollout was cut off).
func runsColumn(p ProcessStatus) string {
	switch {
	case p.Release == "":
		return "-"
	case p.Stale:
		return text.ShortSHA(p.Release) + " STALE"
	}
	return text.ShortSHA(p.Release)
}

// leftBehind says how many processes run another release than current,
// or are draining, and what finishes the job.
func leftBehind(b BoxStatus) string {
	stale, draining := b.Behind()
	if stale == 0 && draining == 0 {
		return ""
	}
	return fmt.Sprintf("; %s not on the current release, %d draining (fleet converge or a re-run of fleet rollout finishes it)", text.Plural(stale, "process", "processes"), draining)
}

// silent says how many probed processes passed too little of the fleet
// heartbeat on: they answer /stats but would serve listeners silence.
func silent(b BoxStatus) string {
	n := 0
	for _, p := range b.Processes {
		if p.Heartbeat != nil && !p.Heartbeat.Passes() {
			n++
		}
	}
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("; %s not passing the fleet heartbeat on (no audio from the origin through it)", text.Plural(n, "process", "processes"))
}

// StatusReports are fleet status's boxes for statuses, with how many
// could not be read.
func StatusReports(statuses []HostStatus) (boxes []BoxReport, failed int) {
	boxes = make([]BoxReport, len(statuses))
	for i, st := range statuses {
		boxes[i] = BoxReport{Host: st.Host, Origin: st.Origin, Region: st.Region, BoxStatus: st.BoxStatus}
		if st.Err != nil {
			boxes[i].Error = text.OneLine(st.Err)
			failed++
		}
	}
	return boxes, failed
}

// orDash is s, or "-" for "".
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
