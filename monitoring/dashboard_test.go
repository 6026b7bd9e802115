package monitoring

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/relayfleet/relayfleet/infra/backend"
	"github.com/relayfleet/relayfleet/infra/events"
	"github.com/relayfleet/relayfleet/infra/events/exporter"
	"github.com/relayfleet/relayfleet/inventories"
	"github.com/relayfleet/relayfleet/relay"
	"github.com/relayfleet/relayfleet/relay/client"
	"github.com/relayfleet/relayfleet/relay/router"
)

// dashboard is the part of the Grafana JSON the tests read.
type dashboard struct {
	UID    string `json:"uid"`
	Panels []struct {
		Title      string `json:"title"`
		Datasource struct {
			UID string `json:"uid"`
		} `json:"datasource"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	var d dashboard
	if err := json.Unmarshal(Dashboard(), &d); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	return d
}

// dashboardExprs are the dashboard's queries with Grafana's range
// variables replaced by values, as Grafana sends them.
func dashboardExprs(t *testing.T) map[string]string {
	d := loadDashboard(t)
	out := map[string]string{}
	for _, p := range d.Panels {
		for i, tg := range p.Targets {
			e := strings.NewReplacer("$__range_s", "3600", "$__range", "1h", "$__rate_interval", "1m").Replace(tg.Expr)
			out[fmt.Sprintf("%s #%d", p.Title, i)] = e
		}
	}
	return out
}

var (
	reString   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	reMatchers = regexp.MustCompile(`\{[^}]*\}`)
	reRange    = regexp.MustCompile(`\[[^\]]*\]`)
	reGrouping = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	reIdent    = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*\s*\(?`)
	keywords   = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true,
		"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}
)

// metricNames are the metric names a PromQL expression selects: the
// identifiers left once strings, label matchers, ranges and grouping
// clauses are cut, less function calls and keywords.
func metricNames(expr string) []string {
	e := reString.ReplaceAllString(expr, `""`)
	e = reMatchers.ReplaceAllString(e, " ")
	e = reRange.ReplaceAllString(e, " ")
	e = reGrouping.ReplaceAllString(e, " ")
	var names []string
	for _, m := range reIdent.FindAllString(e, -1) {
		if strings.HasSuffix(m, "(") || keywords[strings.TrimSpace(m)] {
			continue
		}
		names = append(names, strings.TrimSpace(m))
	}
	return names
}

func TestMetricNames(t *testing.T) {
	got := metricNames(`avg_over_time(relayfleet:event_burst_boxes[1h]) * on (event) group_left (currency) relayfleet:event_box_price_per_hour * 3600 / 3600 and sum by (kind) (rate(relay_udp_send_errors_total{job="relayfleet-relay",kind=~"a|b"}[5m]))`)
	want := "relayfleet:event_burst_boxes relayfleet:event_box_price_per_hour relay_udp_send_errors_total"
	if strings.Join(got, " ") != want {
		t.Fatalf("metricNames = %v, want %s", got, want)
	}
}

// exported are the names a real relay's and router's /metrics serve, the rules
// record, and Prometheus's own (up, ALERTS).
func exported(t *testing.T) map[string]bool {
	t.Helper()
	r, err := relay.Start(context.Background(), relay.Config{Listen: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	resp, err := http.Get(fmt.Sprintf("http://%s/metrics", r.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	// The relay prober's, asked to hear this relay (an origin: it
	// publishes the heartbeat itself).
	prober := httptest.NewServer(&client.Prober{})
	defer prober.Close()
	presp, err := http.Get(prober.URL + "/probe?window=300ms&target=" + r.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	pbody, _ := io.ReadAll(presp.Body)
	presp.Body.Close()
	if !strings.Contains(string(pbody), "relayfleet_heartbeat_groups ") {
		t.Fatalf("the prober heard nothing of the relay:\n%s", pbody)
	}
	body = append(body, pbody...)
	relays := filepath.Join(t.TempDir(), "relays.json")
	if err := os.WriteFile(relays, []byte(`{"relays": []}`), 0o600); err != nil {
		t.Fatal(err)
	}
	rt, err := router.New(router.Options{File: relays, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	rt.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body = append(body, rec.Body.Bytes()...)
	body = append(body, eventsExporterMetrics(t)...)
	names := map[string]bool{"up": true, "ALERTS": true}
	for _, line := range strings.Split(string(body), "\n") {
		if n, ok := strings.CutPrefix(line, "# TYPE "); ok {
			names[strings.Fields(n)[0]] = true
		}
	}
	fleet, err := FleetRules(Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, text := range []string{string(Rules()), string(fleet),
		// What FleetRules records for events (it needs events to).
		"- record: relayfleet:event_destroy_by_timestamp_seconds\n- record: relayfleet:event_box_price_per_hour\n"} {
		for _, line := range strings.Split(text, "\n") {
			if n, ok := strings.CutPrefix(strings.TrimSpace(line), "- record: "); ok {
				names[n] = true
			}
		}
	}
	return names
}

// exporterStore and exporterBackend give fleet events exporter one event
// with a record, a heartbeat and a box, so that it serves every figure.
type exporterStore struct{}

func (exporterStore) Load(context.Context) (map[string]*events.Record, error) {
	return map[string]*events.Record{"show": {Event: "show", Backend: "lab", Phase: events.Up, Plan: &events.Sizing{Boxes: 1}}}, nil
}
func (exporterStore) LastBeat(context.Context) (events.Beat, error) {
	return events.Beat{Run: time.Unix(1, 0), OK: time.Unix(1, 0)}, nil
}
func (exporterStore) LeaseUntil(context.Context) (time.Time, error) { return time.Time{}, nil }

type exporterBackend struct{ backend.Backend }

func (exporterBackend) List(context.Context, map[string]string) ([]backend.Box, error) {
	return []backend.Box{{Name: "lab-show-lab-1", Labels: map[string]string{"event": "show"}}}, nil
}

// eventsExporterMetrics is what fleet events exporter serves.
func eventsExporterMetrics(t *testing.T) []byte {
	t.Helper()
	evs := &inventories.Events{Events: []inventories.Event{{Name: "show", Start: inventories.Time{Time: time.Unix(100, 0)},
		End: inventories.Time{Time: time.Unix(200, 0)}, Burst: inventories.Pool{Box: inventories.Box{Provider: "lab"}}}}}
	e := &exporter.Exporter{Fleet: "lab", Store: exporterStore{},
		ReadEvents: func() (*inventories.Events, error) { return evs, nil },
		Backends:   func(string) (backend.Backend, error) { return exporterBackend{}, nil }}
	if err := e.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	e.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if !strings.Contains(rec.Body.String(), "relayfleet_burst_box{") {
		t.Fatalf("the events exporter serves no box:\n%s", rec.Body)
	}
	return rec.Body.Bytes()
}

// TestDashboardUsesOnlyExportedMetrics: every query of the dashboard is
// valid PromQL (promtool checks it as a recording rule) and selects only
// metrics a relay serves or the rules record; every alert input exists too.
func TestDashboardUsesOnlyExportedMetrics(t *testing.T) {
	d := loadDashboard(t)
	if d.UID != "relayfleet" || len(d.Panels) < 10 {
		t.Fatalf("dashboard uid %q with %d panels", d.UID, len(d.Panels))
	}
	names := exported(t)
	exprs := dashboardExprs(t)
	keys := make([]string, 0, len(exprs))
	for k := range exprs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	for i, k := range keys {
		for _, n := range metricNames(exprs[k]) {
			if !names[n] {
				t.Errorf("panel %s: %s is neither served by the relay nor recorded by the rules", k, n)
			}
		}
		fmt.Fprintf(&rules, "      - record: dashboard:panel_%d\n        expr: %q\n", i, exprs[k])
	}
	var rf struct {
		Groups []struct {
			Rules []struct {
				Expr string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(Rules(), &rf); err != nil {
		t.Fatal(err)
	}
	nrules := 0
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			nrules++
			for _, n := range metricNames(r.Expr) {
				if !names[n] {
					t.Errorf("rule expr %s: %s is neither served by the relay nor recorded by the rules", r.Expr, n)
				}
			}
		}
	}
	if nrules < 17 {
		t.Fatalf("read %d rules, want 17 or more", nrules)
	}
	for _, p := range d.Panels {
		if p.Datasource.UID != "relayfleet-prometheus" {
			t.Errorf("panel %s: datasource %q, want relayfleet-prometheus (the provisioned one)", p.Title, p.Datasource.UID)
		}
	}
	f := filepath.Join(t.TempDir(), "dashboard.rules.yml")
	if err := os.WriteFile(f, []byte(rules.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	runPromtool(t, "check", "rules", f)
}
