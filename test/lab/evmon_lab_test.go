//go:build lab && monitor

package labtest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/infra/lab"
	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/monitoring"
	"github.com/relayfleet/relayfleet/test/systest"
)

// Its lab is its own.
const (
	evmonLabDir = "/var/lib/relayfleet/lab-evmon"
	evmonBridge = "rfevm0"
	evmonSubnet = "10.231.121.0/24"
)

// TestEventsExporterLab: Debian's Prometheus scrapes fleet events
// exporter (a process, as the installed unit runs it) through the job
// fleet monitor --events-exporter writes. A burst box of event show
// exists on the lab backend, labelled as the reconciler labels them, and
// runs no relay: it answers nothing. The event ended a minute ago (its
// destroy-by, end plus drain, just past). fleet events reconcile runs
// once (its heartbeat: a success), then never again, as a timer that
// stopped. Both ReconcilerStale and BurstBoxPastEventEnd fire within 2
// minutes of that run; one EVMON line gives the seconds each took.
func TestEventsExporterLab(t *testing.T) {
	prom := testutil.Require(t, "prometheus", "prometheus")
	if os.Geteuid() != 0 {
		t.Fatal("lab: root is needed for lab boxes")
	}
	pulumi, err := program.FindPulumi("")
	if err != nil {
		t.Fatalf("%v (make pulumi)", err)
	}
	l, err := lab.New(lab.Config{Dir: evmonLabDir, ImageDir: labImages(), Bridge: evmonBridge, Subnet: mustPrefix(t, evmonSubnet), Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	clear := func() {
		bs, _ := l.List(context.Background(), nil)
		for _, b := range bs {
			if err := l.Delete(context.Background(), b.Name); err != nil {
				t.Errorf("delete %s: %v", b.Name, err)
			}
		}
		l.Cleanup(context.Background())
	}
	clear()
	t.Cleanup(clear)
	box := "evm-show-1" // lab names: 11 characters at most
	if _, err := l.Create(ctx, lab.Spec{Name: box, Shape: lab.Small, Labels: map[string]string{"fleet": "evmon", "tier": "burst", "event": "show"}}); err != nil {
		t.Fatal(err)
	}

	_, relayBin := systest.Build(t)
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	evPath := filepath.Join(dir, "events.yaml")
	testutil.WriteFile(t, filepath.Join(dir, "evmon.yaml"), []byte(`version: 1
name: evmon
steady:
  - name: evmon-steady
    provider: lab
    shape: small
    count: 1
    processes: 1
    base_port: 4443
`), 0o644)
	// The event ended two minutes ago, with a one-minute drain and no
	// overrun (max_overrun 0s): its destroy-by has passed.
	end := time.Now().UTC().Add(-2 * time.Minute).Truncate(time.Second)
	start := end.Add(-30 * time.Minute)
	testutil.WriteFile(t, evPath, fmt.Appendf(nil, `version: 1
fleet: evmon.yaml
events:
  - name: show
    start: %s
    end: %s
    peak_listeners: 10000
    broadcast: live/show
    burst:
      provider: lab
      shape: small
      max: 1
    lead_time: 10m
    drain_time: 1m
    max_overrun: 0s
`, start.Format(time.RFC3339), end.Format(time.RFC3339)), 0o644)
	common := append([]string{"--events", evPath, "--state-dir", state, "--pulumi", pulumi}, systest.LabFlags(evmonLabDir, labImages(), evmonBridge, evmonSubnet)...)

	// The one reconcile, for a time before the event (so it leaves the
	// box alone): a success, on the wall clock.
	out, errOut, code := fleet(t, append([]string{"events", "reconcile", "--relay-binary", relayBin, "--now", start.Add(-time.Hour).Format(time.RFC3339)}, common...)...)
	if code != 0 {
		t.Fatalf("fleet events reconcile: exit %d\n%s%s", code, out, errOut)
	}
	stopped := time.Now()

	exporterAddr := freeAddr(t)
	fleetBin, _ := systest.Build(t)
	testutil.StartLog(t, filepath.Join(dir, "exporter.log"), exec.CommandContext(ctx, fleetBin,
		append([]string{"events", "exporter", "--listen", exporterAddr, "--list-every", "5s", "--stale-after", "20s"}, common...)...))
	var metrics string
	poll(t, ctx, 60*time.Second, "the exporter lists the box", func() (bool, string) {
		resp, err := http.Get("http://" + exporterAddr + "/metrics")
		if err != nil {
			return false, err.Error()
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		metrics = string(body)
		return strings.Contains(metrics, `relayfleet_burst_box{backend="lab",box="`+box+`",event="show",fleet="evmon"} 1`), metrics
	})
	for _, want := range []string{`relayfleet_event_in_file{event="show",fleet="evmon"} 1`, `relayfleet_burst_list_ok{backend="lab",fleet="evmon"} 1`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("exporter metrics lack %s:\n%s", want, metrics)
		}
	}
	if strings.Contains(metrics, "relayfleet_events_reconcile_last_success_timestamp_seconds{fleet=\"evmon\"} 0\n") {
		t.Fatalf("the reconcile left no heartbeat:\n%s", metrics)
	}

	// fleet monitor's files, with the exporter's job; no stack is up.
	if err := os.MkdirAll(filepath.Join(state, program.HostsDir), 0o700); err != nil {
		t.Fatal(err)
	}
	mon := filepath.Join(dir, "monitor")
	if out, errOut, code := fleet(t, "monitor", "--out", mon, "--events", evPath, "--state-dir", state,
		"--events-exporter", exporterAddr, "--scrape-interval", "2s", "--evaluation-interval", "2s"); code != 0 {
		t.Fatalf("fleet monitor: exit %d\n%s%s", code, out, errOut)
	}
	promAddr := freeAddr(t)
	testutil.StartLog(t, filepath.Join(dir, "prometheus.log"), exec.CommandContext(ctx, prom, "--config.file="+filepath.Join(mon, monitoring.ConfigFile),
		"--storage.tsdb.path="+filepath.Join(dir, "tsdb"), "--web.listen-address="+promAddr))

	type alert struct {
		Labels map[string]string `json:"labels"`
		State  string            `json:"state"`
	}
	fired := map[string]time.Duration{}
	poll(t, ctx, 2*time.Minute-time.Since(stopped), "ReconcilerStale and BurstBoxPastEventEnd firing", func() (bool, string) {
		var d struct {
			Alerts []alert `json:"alerts"`
		}
		if err := promGet(promAddr, "/api/v1/alerts", nil, &d); err != nil {
			return false, err.Error()
		}
		for _, a := range d.Alerts {
			name := a.Labels["alertname"]
			if a.State != "firing" || fired[name] != 0 {
				continue
			}
			if (name == "ReconcilerStale" && a.Labels["fleet"] == "evmon") || (name == "BurstBoxPastEventEnd" && a.Labels["box"] == box && a.Labels["event"] == "show") {
				fired[name] = time.Since(stopped)
			}
		}
		return fired["ReconcilerStale"] != 0 && fired["BurstBoxPastEventEnd"] != 0, fmt.Sprintf("%+v", d.Alerts)
	})
	fmt.Printf("EVMON ReconcilerStale %.0fs BurstBoxPastEventEnd %.0fs after the last reconcile (threshold 20s, box answering nothing)\n",
		fired["ReconcilerStale"].Seconds(), fired["BurstBoxPastEventEnd"].Seconds())
}
