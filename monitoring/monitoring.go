package monitoring

import (
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/relayfleet/relayfleet/infra/events"
	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/internal/atomicfile"
	"github.com/relayfleet/relayfleet/inventories"
	"github.com/relayfleet/relayfleet/sysctl"
)

// Jobs, as the scrape config names them and the rules select them.
const (
	RelayJob     = "relayfleet-relay"
	RouterJob    = "relayfleet-router"
	HeartbeatJob = "relayfleet-heartbeat"
	// EventsJob scrapes fleet events exporter (Options.EventsExporter).
	EventsJob = "relayfleet-events"
)

// Files written under the output directory.
const (
	RelayTargetsFile  = "targets/relays.json"
	RouterTargetsFile = "targets/routers.json"
	RulesFile         = "rules/relayfleet.rules.yml"
	FleetRulesFile    = "rules/relayfleet-fleet.rules.yml"
	ConfigFile        = "prometheus.yml"
	DashboardFile     = "grafana/dashboards/relayfleet.json"
	GrafanaDashboards = "grafana/provisioning/dashboards/relayfleet.yaml"
	GrafanaDatasource = "grafana/provisioning/datasources/relayfleet.yaml"
	// SettingsFile keeps what fleet monitor was asked to watch, so that
	// Refresh keeps to the same stacks.
	SettingsFile = "relayfleet-monitor.json"
)

// settings are what SettingsFile keeps.
type settings struct {
	Fleet string `json:"fleet,omitempty"`
}

//go:embed prometheus/relayfleet.rules.yml grafana/relayfleet.json grafana/provisioning/*.yaml
var assets embed.FS

// Rules is the fixed rules file (recording rules and alerts).
func Rules() []byte { return mustAsset("prometheus/relayfleet.rules.yml") }

// Dashboard is the Grafana dashboard JSON.
func Dashboard() []byte { return mustAsset("grafana/relayfleet.json") }

func mustAsset(name string) []byte {
	b, err := assets.ReadFile(name)
	if err != nil {
		panic(err)
	}
	return b
}

// defaultDir is the output directory the shipped provisioning file names.
const defaultDir = "/var/lib/relayfleet/monitor/grafana/dashboards"

// Options say what to monitor and how often.
type Options struct {
	// StateDir holds the stacks' hosts (program.HostsDir) and the event
	// records.
	StateDir string
	// Fleet, when set, limits the targets to its stacks: the fleet's own
	// (named Fleet) and its events' (Fleet-event-NAME). Empty: every
	// stack in StateDir.
	Fleet string
	// Events, when set, gives each event's end and drain time: target
	// labels and each event's destroy-by time and box price (the
	// dashboard's cost panel; the alerts read the events exporter's).
	Events *inventories.Events
	// Hosts are stacks' hosts found otherwise (fleet monitor --inventory
	// reads lab and static boxes as fleet status does): they join those
	// in StateDir, replacing a stack of the same name.
	Hosts map[string][]program.HostEntry
	// Routers are HOST:PORT of the routers to scrape (their /metrics).
	Routers []string
	// Prober, when set, is the HOST:PORT of a relay prober: Prometheus
	// asks it to hear the fleet heartbeat through every relay target
	// (job HeartbeatJob, /probe?target=), and the RelaySilent alert fires
	// for a process that passes too little of it on.
	Prober string
	// EventsExporter, when set, is the HOST:PORT of fleet events exporter
	// (fleet events install runs it): job EventsJob, whose figures the
	// ReconcilerStale, BurstBoxPastEventEnd and EventUnderCapacity alerts
	// read.
	EventsExporter string
	// Profile is the sysctl profile the boxes should meet; its settings
	// become relayfleet:sysctl_wanted. Zero: sysctl.Relay().
	Profile sysctl.Profile
	// ScrapeInterval and EvaluationInterval go into prometheus.yml; 0
	// means 15s.
	ScrapeInterval, EvaluationInterval time.Duration
}

// Group is one file_sd target group.
type Group struct {
	Targets []string          `json:"targets"`
	Labels  map[string]string `json:"labels"`
}

// Result is what Write wrote.
type Result struct {
	Dir             string
	Relays, Routers int
	Stacks          []string
}

// Write writes the target files, the rules, prometheus.yml and the
// Grafana files under dir, each atomically.
func Write(dir string, o Options) (*Result, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("monitor: %w", err)
	}
	relays, stacks, err := RelayTargets(o)
	if err != nil {
		return nil, err
	}
	routers, err := RouterTargets(o.Routers)
	if err != nil {
		return nil, err
	}
	fleetRules, err := FleetRules(o)
	if err != nil {
		return nil, err
	}
	set, err := json.Marshal(settings{Fleet: o.Fleet})
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{
		SettingsFile:   append(set, '\n'),
		RulesFile:      Rules(),
		FleetRulesFile: fleetRules,
		ConfigFile:     Config(o),
		DashboardFile:  Dashboard(),
		GrafanaDashboards: []byte(strings.ReplaceAll(string(mustAsset("grafana/provisioning/dashboards.yaml")),
			defaultDir, filepath.Join(abs, filepath.Dir(DashboardFile)))),
		GrafanaDatasource: mustAsset("grafana/provisioning/datasources.yaml"),
	}
	for name, groups := range map[string][]Group{RelayTargetsFile: relays, RouterTargetsFile: routers} {
		data, err := json.MarshalIndent(groups, "", "  ")
		if err != nil {
			return nil, err
		}
		files[name] = append(data, '\n')
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		p := filepath.Join(dir, n)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return nil, fmt.Errorf("monitor: %w", err)
		}
		if err := atomicfile.Write(p, files[n], 0o644); err != nil {
			return nil, fmt.Errorf("monitor: %w", err)
		}
	}
	n := 0
	for _, g := range relays {
		n += len(g.Targets)
	}
	return &Result{Dir: dir, Relays: n, Routers: len(o.Routers), Stacks: stacks}, nil
}

// stackEvent is the event a stack's name says it belongs to.
func stackEvent(fleet, stack string) (string, bool) {
	if fleet != "" {
		return strings.CutPrefix(stack, events.StackName(fleet, ""))
	}
	i := strings.LastIndex(stack, "-event-")
	if i < 0 {
		return "", false
	}
	return stack[i+len("-event-"):], true
}

// RelayTargets reads the stacks' hosts and returns one target group per
// box: every relay port, labelled. It also returns the stacks read.
func RelayTargets(o Options) ([]Group, []string, error) {
	if o.StateDir == "" {
		return nil, nil, errors.New("monitor: no state directory")
	}
	entries, err := os.ReadDir(filepath.Join(o.StateDir, program.HostsDir))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, nil, fmt.Errorf("monitor: %w", err)
	}
	var stacks []string
	wanted := func(name string) bool {
		return o.Fleet == "" || name == o.Fleet || strings.HasPrefix(name, events.StackName(o.Fleet, ""))
	}
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || e.IsDir() || !wanted(name) || o.Hosts[name] != nil {
			continue
		}
		stacks = append(stacks, name)
	}
	for name := range o.Hosts {
		if wanted(name) {
			stacks = append(stacks, name)
		}
	}
	sort.Strings(stacks)
	groups := []Group{}
	for _, stack := range stacks {
		hosts, ok := o.Hosts[stack]
		if !ok {
			sh, err := program.ReadStackHosts(o.StateDir, stack)
			if err != nil {
				return nil, nil, fmt.Errorf("monitor: %w", err)
			}
			hosts = sh.Hosts
		}
		event, isEvent := stackEvent(o.Fleet, stack)
		for _, h := range hosts {
			if h.Address == "" || len(h.Ports) == 0 {
				continue
			}
			for _, port := range h.Ports {
				labels := map[string]string{
					"stack": stack, "box": h.Name, "group": h.Group, "backend": h.Backend, "port": strconv.Itoa(port),
				}
				if h.IsOrigin() {
					// The fleet's origins: OriginDown and
					// EdgesOnOneOrigin watch them.
					labels["tier"] = h.Tier
				}
				if h.Region != "" {
					// A fleet with regions: EdgesOnOneOrigin
					// counts each region's origins apart.
					labels["region"] = h.Region
				}
				if isEvent {
					labels["event"] = event
					if o.Events != nil {
						if ev, ok := o.Events.Event(event); ok {
							labels["event_end"] = ev.End.UTC().Format(time.RFC3339)
						}
					}
				}
				groups = append(groups, Group{Targets: []string{net.JoinHostPort(h.Address, strconv.Itoa(port))}, Labels: labels})
			}
		}
	}
	return groups, stacks, nil
}

// RouterTargets checks HOST:PORT addresses and makes their group.
func RouterTargets(addrs []string) ([]Group, error) {
	groups := []Group{}
	for _, a := range addrs {
		host, port, err := net.SplitHostPort(a)
		if err != nil || host == "" {
			return nil, fmt.Errorf("router %q: want HOST:PORT", a)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("router %q: port %q is not 1-65535", a, port)
		}
		groups = append(groups, Group{Targets: []string{a}, Labels: map[string]string{"router": a}})
	}
	return groups, nil
}

// FleetRules renders relayfleet-fleet.rules.yml: the sysctl profile as
// relayfleet:sysctl_wanted{key}, and for each event (with Options.Events
// and the reconciler's records) its destroy-by time (end plus drain) and
// its burst boxes' price per box-hour.
func FleetRules(o Options) ([]byte, error) {
	prof := o.Profile
	if len(prof.Settings) == 0 {
		prof = sysctl.Relay()
	}
	var b strings.Builder
	b.WriteString("# Written by fleet monitor: this fleet's own figures, which relayfleet.rules.yml\n")
	b.WriteString("# compares against. Prometheus re-reads rules on reload (SIGHUP or POST /-/reload).\n")
	b.WriteString("groups:\n  - name: relayfleet-fleet\n    rules:\n")
	n := 0
	rule := func(record string, value float64, labels ...string) {
		n++
		fmt.Fprintf(&b, "      - record: %s\n        expr: vector(%s)\n        labels:\n", record, strconv.FormatFloat(value, 'f', -1, 64))
		for i := 0; i+1 < len(labels); i += 2 {
			fmt.Fprintf(&b, "          %s: %s\n", labels[i], strconv.Quote(labels[i+1]))
		}
	}
	for _, s := range prof.Settings {
		v, err := strconv.ParseInt(s.Value, 10, 64)
		if err != nil || !s.AtLeast {
			continue // only floors compare as numbers
		}
		rule("relayfleet:sysctl_wanted", float64(v), "key", s.Key)
	}
	if o.Events != nil {
		recs := map[string]*events.Record{}
		if o.StateDir != "" {
			rs, err := events.Records(o.StateDir)
			if err != nil {
				return nil, fmt.Errorf("monitor: %w", err)
			}
			for _, r := range rs {
				recs[r.Event] = r
			}
		}
		for _, ev := range o.Events.Events {
			drain := ev.DrainTime.D()
			if drain == 0 {
				drain = inventories.DefaultDrainTime
			}
			// The latest its boxes may live: an end whose listeners the
			// steady fleet has no room for keeps them up to max_overrun,
			// then drains them.
			rule("relayfleet:event_destroy_by_timestamp_seconds", float64(ev.End.Add(ev.Overrun()+drain).Unix()), "event", ev.Name)
			if r := recs[ev.Name]; r != nil && r.Plan != nil && r.Plan.Boxes > 0 && r.Plan.WindowHours > 0 {
				price := (r.Plan.Cost - r.Plan.Overage) / (float64(r.Plan.Boxes) * r.Plan.WindowHours)
				if price > 0 {
					rule("relayfleet:event_box_price_per_hour", price, "event", ev.Name, "currency", r.Plan.Currency)
				}
			}
		}
	}
	if n == 0 {
		b.WriteString("      []\n")
	}
	return []byte(b.String()), nil
}

// Config is a prometheus.yml that scrapes the target files and loads the
// rules, relative to the output directory (run Prometheus with
// --config.file pointing there, or copy its jobs into your own).
func Config(o Options) []byte {
	si, ei := o.ScrapeInterval, o.EvaluationInterval
	if si <= 0 {
		si = 15 * time.Second
	}
	if ei <= 0 {
		ei = 15 * time.Second
	}
	return fmt.Appendf(nil, `# Written by fleet monitor. Targets come from the file_sd files beside it,
# which fleet up, fleet destroy and fleet events reconcile keep current
# (--monitor-dir); Prometheus re-reads them on change.
global:
  scrape_interval: %s
  evaluation_interval: %s
rule_files:
  - rules/*.rules.yml
scrape_configs:
  - job_name: %s
    metrics_path: /metrics
    file_sd_configs:
      - files: [targets/relays.json]
  - job_name: %s
    metrics_path: /metrics
    file_sd_configs:
      - files: [targets/routers.json]
%s%s`, promDuration(si), promDuration(ei), RelayJob, RouterJob, heartbeatJob(o.Prober), eventsJob(o.EventsExporter))
}

// eventsJob is the scrape job of fleet events exporter at addr (""
// without one).
func eventsJob(addr string) string {
	if addr == "" {
		return ""
	}
	return fmt.Sprintf(`  # fleet events exporter: the event reconciler's heartbeat and every
  # burst box the backends list by label, whether or not it answers.
  - job_name: %s
    metrics_path: /metrics
    static_configs:
      - targets: [%q]
`, EventsJob, addr)
}

// heartbeatJob is the scrape job that has the relay prober at prober hear
// the fleet heartbeat through every relay target ("" without a prober).
func heartbeatJob(prober string) string {
	if prober == "" {
		return ""
	}
	return fmt.Sprintf(`  # relay prober hears the fleet heartbeat through each relay process
  # (GET /probe?target=HOST:PORT), end to end from where it runs.
  - job_name: %s
    metrics_path: /probe
    # Each probe listens a second: its own interval and timeout.
    scrape_interval: 15s
    scrape_timeout: 5s
    file_sd_configs:
      - files: [targets/relays.json]
    relabel_configs:
      - source_labels: [__address__]
        target_label: __param_target
      - source_labels: [__param_target]
        target_label: instance
      - target_label: __address__
        replacement: %q
`, HeartbeatJob, prober)
}

// promDuration writes d as Prometheus reads durations (whole ms at least).
func promDuration(d time.Duration) string {
	if d%time.Second == 0 {
		return fmt.Sprintf("%ds", d/time.Second)
	}
	return fmt.Sprintf("%dms", d/time.Millisecond)
}

// Refresh keeps a monitor directory current after the stacks changed
// (fleet up, destroy, the event reconciler): it rewrites the relay
// targets, and the fleet's rules when o.Events is set. A directory fleet
// monitor never wrote gets everything (Write). Without o.Events, event
// targets keep the event_end label the previous file gave them. The
// stacks are those fleet monitor was asked for (its --inventory or
// --events fleet, or all); o.Fleet is ignored.
func Refresh(dir string, o Options) (*Result, error) {
	data, err := os.ReadFile(filepath.Join(dir, SettingsFile))
	if errors.Is(err, fs.ErrNotExist) {
		o.Fleet = ""
		return Write(dir, o)
	}
	if err != nil {
		return nil, fmt.Errorf("monitor: %w", err)
	}
	var set settings
	if err := json.Unmarshal(data, &set); err != nil {
		return nil, fmt.Errorf("monitor: %s: %w", filepath.Join(dir, SettingsFile), err)
	}
	o.Fleet = set.Fleet
	relays, stacks, err := RelayTargets(o)
	if err != nil {
		return nil, err
	}
	if o.Events == nil {
		keepEventEnds(filepath.Join(dir, RelayTargetsFile), relays)
	}
	if data, err = json.MarshalIndent(relays, "", "  "); err != nil {
		return nil, err
	}
	if err := atomicfile.Write(filepath.Join(dir, RelayTargetsFile), append(data, '\n'), 0o644); err != nil {
		return nil, fmt.Errorf("monitor: %w", err)
	}
	if o.Events != nil {
		rules, err := FleetRules(o)
		if err != nil {
			return nil, err
		}
		if err := atomicfile.Write(filepath.Join(dir, FleetRulesFile), rules, 0o644); err != nil {
			return nil, fmt.Errorf("monitor: %w", err)
		}
	}
	n := 0
	for _, g := range relays {
		n += len(g.Targets)
	}
	return &Result{Dir: dir, Relays: n, Stacks: stacks}, nil
}

// keepEventEnds copies event_end labels from the target file at path to
// groups of the same stack that lack one.
func keepEventEnds(path string, groups []Group) {
	data, err := os.ReadFile(path)
	if err != nil {
		return
	}
	var old []Group
	if json.Unmarshal(data, &old) != nil {
		return
	}
	ends := map[string]string{}
	for _, g := range old {
		if e := g.Labels["event_end"]; e != "" {
			ends[g.Labels["stack"]] = e
		}
	}
	for _, g := range groups {
		if e := ends[g.Labels["stack"]]; e != "" && g.Labels["event"] != "" && g.Labels["event_end"] == "" {
			g.Labels["event_end"] = e
		}
	}
}
