package monitoring

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/inventories"
)

// promtool is the promtool binary, or a skip (a failure under CI=true).
func promtool(t *testing.T) string {
	t.Helper()
	return testutil.Require(t, "promtool", "prometheus")
}

func runPromtool(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command(promtool(t), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// testState is a state dir with a steady stack, an event's stack and
// another fleet's stack, and the event's record with its plan.
func testState(t *testing.T) (string, *inventories.Events) {
	t.Helper()
	dir := t.TempDir()
	hosts := map[string][]program.HostEntry{
		"f": {
			{Name: "f-steady-1", Group: "steady", Backend: "lab", Address: "10.0.0.1", Ports: []int{4443, 4444}},
			{Name: "f-steady-2", Group: "steady", Backend: "static", Address: "2001:db8::2", Ports: []int{4443}},
		},
		"f-event-final": {{Name: "f-final-1", Group: "burst", Backend: "hcloud", Address: "10.0.1.1", Ports: []int{4443}}},
		"g":             {{Name: "g-1", Group: "steady", Backend: "lab", Address: "10.0.9.1", Ports: []int{4443}}},
	}
	for stack, hs := range hosts {
		if _, err := program.SetStackHosts(dir, stack, hs); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "events"), 0o700); err != nil {
		t.Fatal(err)
	}
	rec := `{"event":"final","stack":"f-event-final","backend":"hcloud","phase":"up","pool":{},"stack_made":true,
		"plan":{"boxes":2,"window_hours":3,"currency":"EUR","cost":12.5,"overage":0.5},"box_seconds":0,"boxes":2,"remaining":0,"log":[]}`
	if err := os.WriteFile(filepath.Join(dir, "events", "final.json"), []byte(rec), 0o600); err != nil {
		t.Fatal(err)
	}
	end, _ := time.Parse(time.RFC3339, "2026-12-05T21:00:00Z")
	evs := &inventories.Events{Events: []inventories.Event{{
		Name: "final", End: inventories.Time{Time: end}, DrainTime: inventories.Duration(15 * time.Minute),
	}}}
	return dir, evs
}

func TestWriteTargetsAndRules(t *testing.T) {
	state, evs := testState(t)
	out := filepath.Join(t.TempDir(), "monitor")
	res, err := Write(out, Options{StateDir: state, Fleet: "f", Events: evs, Routers: []string{"10.0.0.1:8080"}, ScrapeInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if res.Relays != 4 || strings.Join(res.Stacks, ",") != "f,f-event-final" {
		t.Fatalf("result %+v, want 4 relay targets from stacks f and f-event-final (not g)", res)
	}
	var groups []Group
	data, err := os.ReadFile(filepath.Join(out, RelayTargetsFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &groups); err != nil {
		t.Fatal(err)
	}
	byTarget := map[string]map[string]string{}
	for _, g := range groups {
		for _, tg := range g.Targets {
			byTarget[tg] = g.Labels
		}
	}
	if l := byTarget["10.0.0.1:4444"]; l["stack"] != "f" || l["box"] != "f-steady-1" || l["port"] != "4444" || l["event"] != "" {
		t.Errorf("steady target labels %v", l)
	}
	if l := byTarget["[2001:db8::2]:4443"]; l["backend"] != "static" {
		t.Errorf("IPv6 target missing or mislabelled: %v", byTarget)
	}
	if l := byTarget["10.0.1.1:4443"]; l["event"] != "final" || l["event_end"] != "2026-12-05T21:00:00Z" || l["group"] != "burst" {
		t.Errorf("event target labels %v", l)
	}
	rules, err := os.ReadFile(filepath.Join(out, FleetRulesFile))
	if err != nil {
		t.Fatal(err)
	}
	// End + the default max overrun + drain time.
	destroyBy := end(t).Add(time.Hour + 15*time.Minute).Unix()
	for _, want := range []string{
		"record: relayfleet:sysctl_wanted\n        expr: vector(16777216)\n        labels:\n          key: \"net.core.rmem_max\"",
		"record: relayfleet:event_destroy_by_timestamp_seconds\n        expr: vector(" + strconv.FormatInt(destroyBy, 10) + ")\n        labels:\n          event: \"final\"",
		// (12.5 - 0.5) / (2 boxes * 3 h) = 2 per box-hour
		"record: relayfleet:event_box_price_per_hour\n        expr: vector(2)\n        labels:\n          event: \"final\"\n          currency: \"EUR\"",
	} {
		if !strings.Contains(string(rules), want) {
			t.Errorf("fleet rules lack\n%s\ngot:\n%s", want, rules)
		}
	}
	prov, _ := os.ReadFile(filepath.Join(out, GrafanaDashboards))
	if !strings.Contains(string(prov), "path: "+filepath.Join(out, "grafana/dashboards")+"\n") {
		t.Errorf("dashboard provisioning does not point at the written dashboard:\n%s", prov)
	}
	// Atomic writes leave no temporaries behind.
	_ = filepath.WalkDir(out, func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(p, ".tmp") {
			t.Errorf("temporary left: %s", p)
		}
		return nil
	})

	// Every stack when no fleet is named; a destroyed stack's targets go.
	if _, err := program.SetStackHosts(state, "f-event-final", nil); err != nil {
		t.Fatal(err)
	}
	res, err = Write(out, Options{StateDir: state})
	if err != nil {
		t.Fatal(err)
	}
	if res.Relays != 4 || strings.Join(res.Stacks, ",") != "f,g" {
		t.Fatalf("after the event's stack went: %+v, want stacks f,g with 4 targets", res)
	}

	runPromtool(t, "check", "rules", filepath.Join(out, RulesFile), filepath.Join(out, FleetRulesFile))
	runPromtool(t, "check", "config", filepath.Join(out, ConfigFile))
	if cfg, _ := os.ReadFile(filepath.Join(out, ConfigFile)); strings.Contains(string(cfg), HeartbeatJob) {
		t.Errorf("a heartbeat job without a prober:\n%s", cfg)
	}

	if cfg, _ := os.ReadFile(filepath.Join(out, ConfigFile)); strings.Contains(string(cfg), EventsJob) {
		t.Errorf("an events job without an exporter:\n%s", cfg)
	}

	// With a prober: a job that asks it for every relay target; with the
	// events exporter, a job that scrapes it.
	if _, err := Write(out, Options{StateDir: state, Prober: "127.0.0.1:9799", EventsExporter: "127.0.0.1:9479"}); err != nil {
		t.Fatal(err)
	}
	cfg, _ := os.ReadFile(filepath.Join(out, ConfigFile))
	for _, want := range []string{"job_name: " + HeartbeatJob + "\n    metrics_path: /probe\n", "scrape_timeout: 5s\n    file_sd_configs:\n      - files: [targets/relays.json]",
		"target_label: __param_target", "replacement: \"127.0.0.1:9799\"",
		"job_name: " + EventsJob + "\n    metrics_path: /metrics\n    static_configs:\n      - targets: [\"127.0.0.1:9479\"]\n"} {
		if !strings.Contains(string(cfg), want) {
			t.Errorf("prometheus.yml with a prober lacks %q:\n%s", want, cfg)
		}
	}
	runPromtool(t, "check", "config", filepath.Join(out, ConfigFile))
}

func end(t *testing.T) time.Time {
	e, err := time.Parse(time.RFC3339, "2026-12-05T21:00:00Z")
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestRouterTargetsCheckAddresses(t *testing.T) {
	for _, bad := range []string{"router", ":8080", "host:0", "host:http"} {
		if _, err := RouterTargets([]string{bad}); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("%q: %v, want an error naming it", bad, err)
		}
	}
}

// TestRulesPromtool: the rules pass promtool check rules, and the unit
// tests in testdata (each alert firing and not firing) pass.
func TestRulesPromtool(t *testing.T) {
	runPromtool(t, "check", "rules", "prometheus/relayfleet.rules.yml")
	tests, err := filepath.Glob("testdata/*.test.yml")
	if err != nil || len(tests) == 0 {
		t.Fatalf("no rule tests in testdata: %v", err)
	}
	runPromtool(t, append([]string{"test", "rules"}, tests...)...)
	// Every alert in the rules has a test that expects it to fire.
	for _, name := range alertNames(t) {
		found := false
		for _, f := range tests {
			data, _ := os.ReadFile(f)
			if strings.Contains(string(data), "alertname: "+name+"\n        exp_alerts:") {
				found = true
			}
		}
		if !found {
			t.Errorf("alert %s has no promtool test that expects it to fire", name)
		}
	}
}

func alertNames(t *testing.T) []string {
	var names []string
	for _, line := range strings.Split(string(Rules()), "\n") {
		if n, ok := strings.CutPrefix(strings.TrimSpace(line), "- alert: "); ok {
			names = append(names, n)
		}
	}
	if len(names) < 9 {
		t.Fatalf("only %d alerts found: %v", len(names), names)
	}
	return names
}

// TestRefreshKeepsToTheStacksAsked: after fleet monitor --inventory (fleet
// f), the refreshes fleet up and the reconciler make keep to f's stacks,
// keep the event_end labels when they have no events, and leave
// prometheus.yml (its intervals, its routers) alone.
func TestRefreshKeepsToTheStacksAsked(t *testing.T) {
	state, evs := testState(t)
	out := t.TempDir()
	if _, err := Write(out, Options{StateDir: state, Fleet: "f", Events: evs, Routers: []string{"10.0.0.1:8080"}, ScrapeInterval: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if _, err := program.SetStackHosts(state, "f", []program.HostEntry{{Name: "f-steady-1", Address: "10.0.0.1", Ports: []int{4443, 4444, 4445}}}); err != nil {
		t.Fatal(err)
	}
	res, err := Refresh(out, Options{StateDir: state})
	if err != nil {
		t.Fatal(err)
	}
	if res.Relays != 4 || strings.Join(res.Stacks, ",") != "f,f-event-final" {
		t.Fatalf("refresh: %+v, want f's 3 ports and the event's box (not stack g)", res)
	}
	data, _ := os.ReadFile(filepath.Join(out, RelayTargetsFile))
	if !strings.Contains(string(data), `"event_end": "2026-12-05T21:00:00Z"`) || !strings.Contains(string(data), "10.0.0.1:4445") {
		t.Errorf("refreshed targets lost the event's end or lack the new port:\n%s", data)
	}
	cfg, _ := os.ReadFile(filepath.Join(out, ConfigFile))
	routers, _ := os.ReadFile(filepath.Join(out, RouterTargetsFile))
	if !strings.Contains(string(cfg), "scrape_interval: 2s") || !strings.Contains(string(routers), "10.0.0.1:8080") {
		t.Errorf("refresh rewrote prometheus.yml or the routers:\n%s\n%s", cfg, routers)
	}
	// A directory fleet monitor never wrote gets everything, all stacks.
	fresh := t.TempDir()
	if res, err = Refresh(fresh, Options{StateDir: state}); err != nil || res.Relays != 5 {
		t.Fatalf("refresh of a new directory: %+v %v, want all 5 targets", res, err)
	}
	if _, err := os.Stat(filepath.Join(fresh, RulesFile)); err != nil {
		t.Fatal(err)
	}
}

// TestHostsGivenJoinTheStacks: hosts found otherwise (fleet status's way,
// for lab and static fleets) join the recorded stacks and replace a
// recorded stack of the same name.
func TestHostsGivenJoinTheStacks(t *testing.T) {
	state, _ := testState(t)
	groups, stacks, err := RelayTargets(Options{StateDir: state, Fleet: "f", Hosts: map[string][]program.HostEntry{
		"f": {{Name: "box-a", Group: "mon", Backend: "lab", Address: "10.231.93.11", Ports: []int{4443, 4444}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	var targets []string
	for _, g := range groups {
		targets = append(targets, g.Targets[0]+"/"+g.Labels["stack"]+"/"+g.Labels["box"])
	}
	want := "10.231.93.11:4443/f/box-a 10.231.93.11:4444/f/box-a 10.0.1.1:4443/f-event-final/f-final-1"
	if strings.Join(stacks, ",") != "f,f-event-final" || strings.Join(targets, " ") != want {
		t.Fatalf("stacks %v, targets %v; want %s", stacks, targets, want)
	}
}

// TestOriginTargets: the fleet's origin boxes are scrape targets, labelled
// tier="origin" (OriginDown and EdgesOnOneOrigin select them); an edge
// carries no tier; a box of a region carries region= (EdgesOnOneOrigin
// counts per region).
func TestOriginTargets(t *testing.T) {
	state := t.TempDir()
	if _, err := program.SetStackHosts(state, "f", []program.HostEntry{
		{Name: "origin-1", Group: "origin", Backend: "lab", Address: "10.0.0.1", Ports: []int{4443}, Tier: "origin"},
		{Name: "edge-1", Group: "edge", Backend: "lab", Address: "10.0.0.2", Ports: []int{4443}},
		{Name: "origin-us-1", Group: "origin-us", Backend: "lab", Address: "10.0.1.1", Ports: []int{4443}, Tier: "origin", Region: "us"},
	}); err != nil {
		t.Fatal(err)
	}
	groups, _, err := RelayTargets(Options{StateDir: state, Fleet: "f"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, g := range groups {
		got = append(got, g.Targets[0]+"/"+g.Labels["box"]+"/"+g.Labels["tier"]+"/"+g.Labels["region"])
	}
	if want := "10.0.0.1:4443/origin-1/origin/ 10.0.0.2:4443/edge-1// 10.0.1.1:4443/origin-us-1/origin/us"; strings.Join(got, " ") != want {
		t.Fatalf("targets %v, want %s", got, want)
	}
}
