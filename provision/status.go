package provision

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"

	"github.com/relayfleet/relayfleet/internal/text"
	"github.com/relayfleet/relayfleet/relay/wire"
	"github.com/relayfleet/relayfleet/sysctl"
)

// ProcessStatus is one relay process as systemd and its /stats see it.
type ProcessStatus struct {
	Unit   string `json:"unit"`
	Active string `json:"active"`
	// Listeners are the subscribers the relay serves now.
	Listeners int64 `json:"listeners"`
	// Sessions are its open sessions (listeners, publishers, links).
	Sessions int64 `json:"sessions"`
	// Headroom is how many more listeners it admits (from /stats).
	Headroom  int   `json:"headroom"`
	Admitting bool  `json:"admitting"`
	Draining  bool  `json:"draining"`
	MemoryCur int64 `json:"memory_bytes"`
	MemoryMax int64 `json:"memory_max_bytes"`
	Restarts  int   `json:"restarts"`
	// Drops are the datagrams the kernel dropped at the process's UDP
	// socket since it started (its receive buffer full).
	Drops int64 `json:"udp_drops"`
	// Upstream is the upstream URL the process pulls from now, when its
	// /stats says (an "upstream" field); empty otherwise.
	Upstream string `json:"upstream,omitempty"`
	// Error says why /stats could not be read.
	Error string `json:"error,omitempty"`
	// Release is what the process runs (Releases.Running): a release's
	// SHA-256, an executable's path, or "" with no process.
	Release string `json:"release"`
	// Stale: it runs another release than the box's current one (a
	// rollout was cut off); fleet converge or a re-run of the rollout
	// moves it.
	Stale bool `json:"stale"`
	// Heartbeat is what a probe through the process heard of the fleet
	// heartbeat (ProbeHeartbeats); nil when not probed.
	Heartbeat *Heartbeat `json:"heartbeat,omitempty"`
}

// Heartbeat is one probe of the fleet heartbeat through a process: the
// groups heard of those due in the window, or why it could not listen.
type Heartbeat struct {
	Groups int    `json:"groups"`
	Due    int    `json:"due"`
	Error  string `json:"error,omitempty"`
}

// Passes says the process passed on most (80%) of the groups due.
func (h *Heartbeat) Passes() bool {
	return h != nil && h.Error == "" && float64(h.Groups) >= 0.8*float64(h.Due)
}

// BoxStatus is one box's relays, release and sysctl drift.
type BoxStatus struct {
	Release   string          `json:"release"`
	Processes []ProcessStatus `json:"processes"`
	// SysctlDrift lists keys whose value no longer meets the profile
	// (and that the kernel does take).
	SysctlDrift []string `json:"sysctl_drift"`
	// SysctlRefused lists keys this kernel refuses (inside a container).
	SysctlRefused []string `json:"sysctl_refused"`
}

// Status reads a box's relay processes (systemd's view and each one's
// /stats, asked from the box itself), its release and its sysctl drift.
func Status(ctx context.Context, run Runner, prof sysctl.Profile, rel Releases) (BoxStatus, error) {
	var st BoxStatus
	insts, err := run.Run(ctx, "systemctl list-units --type=service --all --plain --no-legend --no-pager 'relay@*.service' | awk '{print $1}'", nil)
	if err != nil {
		return st, fmt.Errorf("status: %w", err)
	}
	for _, u := range strings.Fields(string(insts)) {
		if !strings.HasPrefix(u, "relay@") {
			continue
		}
		st.Processes = append(st.Processes, processStatus(ctx, run, u))
	}
	sort.Slice(st.Processes, func(i, j int) bool { return st.Processes[i].Unit < st.Processes[j].Unit })
	if st.Release, _, err = rel.Current(ctx, run); err != nil {
		return st, err
	}
	units := make([]string, len(st.Processes))
	for i, p := range st.Processes {
		units[i] = p.Unit
	}
	runs, err := rel.Running(ctx, run, units)
	if err != nil {
		return st, err
	}
	for i := range st.Processes {
		p := &st.Processes[i]
		p.Release = runs[p.Unit]
		p.Stale = p.Release != "" && p.Release != st.Release
	}
	vals, err := ReadSysctl(ctx, run, prof)
	if err != nil {
		return st, err
	}
	refused, err := ReadRefused(ctx, run)
	if err != nil {
		return st, err
	}
	for _, s := range prof.Settings {
		switch {
		case s.Satisfied(vals[s.Key]):
		case refused[s.Key] == s.Value:
			st.SysctlRefused = append(st.SysctlRefused, s.Key)
		default:
			st.SysctlDrift = append(st.SysctlDrift, fmt.Sprintf("%s = %s, want %s", s.Key, orNone(vals[s.Key]), s.Value))
		}
	}
	return st, nil
}

func processStatus(ctx context.Context, run Runner, unit string) ProcessStatus {
	p := ProcessStatus{Unit: unit}
	out, err := run.Run(ctx, fmt.Sprintf("systemctl show -p ActiveState -p MemoryCurrent -p MemoryMax -p NRestarts %s\necho '== stats'\n%s",
		text.ShellQuote(unit), onBox(unit, "GET", "/stats", `sed '1,/^\r$/d'`)), nil)
	props, stats, _ := strings.Cut(string(out), "== stats\n")
	for line := range strings.SplitSeq(props, "\n") {
		k, v, _ := strings.Cut(line, "=")
		n, _ := strconv.ParseInt(v, 10, 64)
		switch k {
		case "ActiveState":
			p.Active = v
		case "MemoryCurrent":
			p.MemoryCur = n
		case "MemoryMax":
			p.MemoryMax = n
		case "NRestarts":
			p.Restarts = int(n)
		}
	}
	doc, jerr := wire.ParseStats([]byte(stats))
	if jerr != nil {
		if err != nil {
			p.Error = err.Error()
		} else {
			p.Error = "no /stats answer"
		}
		return p
	}
	p.Sessions = int64(doc.Sessions)
	p.Listeners, p.Headroom, p.Admitting, p.Draining = doc.Subscribers, doc.Headroom, doc.Admitting, doc.Draining
	p.Drops = doc.UDPDrops
	p.Upstream = statsUpstream([]byte(stats))
	return p
}

// statsUpstream is the upstream a relay's /stats says it pulls from now:
// of its "upstreams" (relay/wire.Upstream: url, connected, tracks), the
// one most of its pulled tracks come from; "" when it pulls nothing (an
// origin, an edge without listeners, a relay that does not say). A query
// or user part (where a token could ride) is dropped: the status is
// printed.
func statsUpstream(stats []byte) string {
	return redactURL(rawStatsUpstream(stats))
}

// redactURL is raw without its user and query parts.
func redactURL(raw string) string {
	if raw == "" {
		return ""
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	u.User, u.RawQuery, u.ForceQuery = nil, "", false
	return u.String()
}

func rawStatsUpstream(stats []byte) string {
	var doc struct {
		Upstreams []struct {
			URL    string `json:"url"`
			Tracks int    `json:"tracks"`
		} `json:"upstreams"`
	}
	if json.Unmarshal(stats, &doc) != nil {
		return ""
	}
	best, most := "", 0
	for _, u := range doc.Upstreams {
		if u.Tracks > most {
			best, most = u.URL, u.Tracks
		}
	}
	return best
}
