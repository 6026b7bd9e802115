//go:build lab

package labtest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/infra/lab"
	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/test/systest"
)

// TestEventsInstallUnderSystemd installs the reconciler's timer on a lab
// box (real systemd as PID 1) with fleet events install, then runs the
// service once through systemd: it reconciles the shipped lab events,
// moved a month ahead of the clock (the service reconciles at the box's
// time; the shipped file's dates passed on 2026-12-01 and failed this
// test during the event), so nothing is created, and records them. The
// events exporter's unit, installed beside it, serves that run's
// heartbeat.
func TestEventsInstallUnderSystemd(t *testing.T) {
	images := labImages()
	l, err := lab.New(lab.Config{Dir: filepath.Join(os.TempDir(), "relayfleet-timer-test"), ImageDir: images, Bridge: "rftimer0", Subnet: mustPrefix(t, "10.231.91.0/24"), Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	l.Cleanup(ctx)
	box, err := l.Create(ctx, lab.Spec{Name: "ops1", Shape: lab.Small})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Delete(context.Background(), box.Name); l.Cleanup(context.Background()) })

	fleetBin, relayBin := systest.Build(t)
	run := func(cmd string, stdin []byte) string {
		t.Helper()
		var out, errOut bytes.Buffer
		if err := l.Run(ctx, box.Name, cmd, bytes.NewReader(stdin), &out, &errOut); err != nil {
			t.Fatalf("%s: %v\n%s%s", cmd, err, out.String(), errOut.String())
		}
		return out.String()
	}
	// The reconciler keeps its records in the Pulumi backend: the box
	// gets the Pulumi CLI too (on the service's PATH).
	cli, err := program.FindPulumi("")
	if err != nil {
		t.Fatalf("%v (make pulumi)", err)
	}
	for name, src := range map[string]string{
		"/usr/local/bin/pulumi":           cli,
		"/usr/local/bin/fleet":            fleetBin,
		"/usr/local/bin/relay":            relayBin,
		"/etc/relayfleet/lab-events.yaml": "../../inventories/lab-events.yaml",
		"/etc/relayfleet/lab.yaml":        "../../inventories/lab.yaml",
	} {
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(name, "lab-events.yaml") {
			data = eventsAMonthAhead(t, data)
		}
		run("mkdir -p "+filepath.Dir(name)+" && cat > "+name+".tmp && chmod 755 "+name+".tmp && mv "+name+".tmp "+name, data)
	}
	// The exporter listens on the box's address, so this test reads it.
	exporterAddr := net.JoinHostPort(box.Address.String(), "9479")
	run("/usr/local/bin/fleet events install --events /etc/relayfleet/lab-events.yaml --state-dir /var/lib/relayfleet/state --exporter-listen "+exporterAddr+" > /tmp/install.log 2>&1; echo rc=$? >> /tmp/install.log", nil)
	out := run("cat /tmp/install.log", nil)
	if !strings.Contains(out, "relayfleet-events.timer") || !strings.Contains(out, "relayfleet-events-exporter.service: /metrics on http://"+exporterAddr) {
		t.Fatalf("install output:\n%s", out)
	}
	if got := strings.TrimSpace(run("systemctl is-active relayfleet-events.timer; systemctl is-enabled relayfleet-events.timer", nil)); got != "active\nenabled" {
		t.Fatalf("timer: %q, want active and enabled", got)
	}
	// Run the service now, as the timer would, and wait for it.
	run("systemctl start relayfleet-events.service", nil)
	var res string
	if !testutil.PollEvery(3*time.Minute, 500*time.Millisecond, func() bool {
		res = strings.TrimSpace(run("systemctl show -p Result --value relayfleet-events.service; systemctl show -p ExecMainStatus --value relayfleet-events.service", nil))
		return res == "success\n0"
	}) {
		t.Fatalf("service result %q\n%s", res, run("journalctl -u relayfleet-events.service --no-pager | tail -20", nil))
	}
	journal := run("journalctl -u relayfleet-events.service --no-pager", nil)
	if !strings.Contains(journal, "event=lab-show action=scheduled") {
		t.Errorf("the reconcile did not log the event:\n%s", journal)
	}
	run("test -s /var/lib/relayfleet/state/cache/events/lab-show.json", nil)
	if !strings.Contains(run("/usr/local/bin/fleet events status --state-dir /var/lib/relayfleet/state", nil), "lab-show  scheduled") {
		t.Error("fleet events status does not read the event's record from the backend")
	}
	// The exporter unit, hardened, reads the heartbeat that run left in
	// the Pulumi backend (it refreshes every minute: the first refresh may
	// precede the run).
	var metrics string
	if !testutil.PollEvery(90*time.Second, time.Second, func() bool {
		resp, err := http.Get("http://" + exporterAddr + "/metrics")
		if err != nil {
			return false
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		metrics = string(body)
		return strings.Contains(metrics, `relayfleet_events_reconcile_last_success_timestamp_seconds{fleet="lab"} 1.`) &&
			strings.Contains(metrics, `relayfleet_event_in_file{event="lab-show",fleet="lab"} 1`)
	}) {
		t.Fatalf("the exporter unit does not show the run's heartbeat:\n%s\n%s", metrics,
			run("systemctl status relayfleet-events-exporter.service --no-pager; journalctl -u relayfleet-events-exporter.service --no-pager | tail -20", nil))
	}
	next := run("systemctl list-timers relayfleet-events.timer --no-pager", nil)
	if !strings.Contains(next, "relayfleet-events.timer") {
		t.Errorf("list-timers:\n%s", next)
	}
}

// eventsAMonthAhead moves the one event of an events file to start 30
// days from now, keeping its length.
func eventsAMonthAhead(t *testing.T, data []byte) []byte {
	t.Helper()
	re := regexp.MustCompile(`(?m)^(\s+)start: (\S+)\n(\s+)end: (\S+)$`)
	m := re.FindSubmatch(data)
	if m == nil || len(re.FindAll(data, -1)) != 1 {
		t.Fatalf("want one event with start: and end: lines in:\n%s", data)
	}
	start, err1 := time.Parse(time.RFC3339, string(m[2]))
	end, err2 := time.Parse(time.RFC3339, string(m[4]))
	if err1 != nil || err2 != nil {
		t.Fatalf("event times %q, %q: %v %v", m[2], m[4], err1, err2)
	}
	newStart := time.Now().UTC().Add(30 * 24 * time.Hour).Truncate(time.Hour)
	return re.ReplaceAll(data, []byte(fmt.Sprintf("${1}start: %s\n${3}end: %s",
		newStart.Format(time.RFC3339), newStart.Add(end.Sub(start)).Format(time.RFC3339))))
}
