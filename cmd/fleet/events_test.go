package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/relayfleet/relayfleet/infra/events"
	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/internal/testutil"
)

func TestEventsBadInput(t *testing.T) {
	exe, _ := os.Executable()
	ev := "../../inventories/lab-events.yaml"
	usageErrors(t, []usageCase{
		{"no subcommand", []string{"events"}, "fleet events: want a subcommand: exporter, install, reconcile, report or status\n"},
		{"unknown subcommand", []string{"events", "sync"}, "fleet events: unknown subcommand \"sync\" (want exporter, install, reconcile, report or status)\n"},
		{"no events file", []string{"events", "reconcile"}, "fleet events reconcile: flag --events: required\n"},
		{"bad now", []string{"events", "reconcile", "--events", ev, "--now", "noon"}, "fleet events reconcile: flag --now: want an RFC 3339 time such as 2026-12-05T19:00:00Z, got \"noon\"\n"},
		{"missing file", []string{"events", "reconcile", "--events", "nope.yaml", "--relay-binary", exe}, "fleet events reconcile: nope.yaml: no such file\n"},
		{"burst without mode", []string{"burst"}, "fleet burst: want a subcommand: down, resize or up\n"},
		{"burst unknown mode", []string{"burst", "sideways"}, "fleet burst: unknown subcommand \"sideways\" (want down, resize or up)\n"},
		{"resize without event", []string{"burst", "resize", "--events", ev, "--relay-binary", exe}, "fleet burst resize: flag --event: required\n"},
		{"drain time on resize", []string{"burst", "resize", "--events", ev, "--relay-binary", exe, "--event", "lab-show", "--drain-time", "1m"}, "fleet burst resize: flag --drain-time: resize drains for the event's drain time\n"},
		{"burst without event", []string{"burst", "up", "--events", ev, "--relay-binary", exe}, "fleet burst up: flag --event: required\n"},
		{"drain time on up", []string{"burst", "up", "--events", ev, "--relay-binary", exe, "--event", "lab-show", "--drain-time", "1m"}, "fleet burst up: flag --drain-time: only burst down drains\n"},
		{"report without event", []string{"events", "report"}, "fleet events report: flag --event: required\n"},
		{"short lease", []string{"events", "reconcile", "--events", ev, "--lease-ttl", "5s"}, "fleet events reconcile: flag --lease-ttl: 5s is out of range: want 30s to 1h\n"},
		{"long lease", []string{"burst", "up", "--events", ev, "--event", "lab-show", "--lease-ttl", "2h"}, "fleet burst up: flag --lease-ttl: 2h0m0s is out of range: want 30s to 1h\n"},
		{"exporter without events", []string{"events", "exporter", "--listen", "127.0.0.1:0"}, "fleet events exporter: flag --events: required\n"},
		{"exporter without listen", []string{"events", "exporter", "--events", ev}, "fleet events exporter: flag --listen: required (HOST:PORT for /metrics)\n"},
		{"exporter listen not host:port", []string{"events", "exporter", "--events", ev, "--listen", "9479"}, "fleet events exporter: flag --listen: want HOST:PORT, got \"9479\"\n"},
		{"exporter lists too often", []string{"events", "exporter", "--events", ev, "--listen", ":0", "--list-every", "1s"}, "fleet events exporter: flag --list-every: 1s is out of range: want 5s to 1h\n"},
		{"status backend not a URL", []string{"events", "status", "--backend", "/srv/state"}, "fleet events status: flag --backend: want a URL such as file:///var/lib/relayfleet/state or s3://bucket, got \"/srv/state\"\n"},
	})
}

// TestEventsReconcileBeforeTheLeadTime runs the real command with a clock
// before the event: it records the event as scheduled, in the Pulumi
// backend (through the real Pulumi CLI) and the state dir's cache, and
// runs no Pulumi program.
func TestEventsReconcileBeforeTheLeadTime(t *testing.T) {
	exe, _ := os.Executable()
	cli, err := program.FindPulumi("")
	if err != nil {
		testutil.Skipf(t, "%v (make pulumi)", err)
	}
	t.Setenv(program.PassphraseEnv, "")
	state := t.TempDir()
	out, errOut, code := fleet(t, "events", "reconcile", "--events", "../../inventories/lab-events.yaml",
		"--now", "2026-11-30T00:00:00Z", "--state-dir", state, "--relay-binary", exe, "--pulumi", cli)
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"event=lab-show action=scheduled", "lab-show  scheduled  0      up at 2026-12-01T19:50:00Z (in 43h50m0s)"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if _, err := os.Stat(filepath.Join(state, "cache", "events", "lab-show.json")); err != nil {
		t.Errorf("no record in the cache: %v", err)
	}
	// status reads the backend, not the cache.
	if err := os.RemoveAll(filepath.Join(state, "cache")); err != nil {
		t.Fatal(err)
	}
	out, _, code = fleet(t, "events", "status", "--state-dir", state, "--pulumi", cli)
	if code != 0 || !strings.Contains(out, "lab-show  scheduled") {
		t.Errorf("status exit %d:\n%s", code, out)
	}
	_, errOut, code = fleet(t, "events", "report", "--event", "lab-show", "--state-dir", state, "--pulumi", cli)
	if code != 1 || !strings.Contains(errOut, "its report is written once its boxes are gone") {
		t.Errorf("report of a scheduled event: exit %d, %q", code, errOut)
	}
}

// TestEventsReconcileJSON: with --json, reconcile prints only JSON: each
// event's phase, boxes and next step, and the actions this run took.
func TestEventsReconcileJSON(t *testing.T) {
	exe, _ := os.Executable()
	// The records live in the Pulumi backend: the real CLI keeps them.
	pulumiCLI, err := program.FindPulumi("")
	if err != nil {
		testutil.Skipf(t, "%v (make pulumi)", err)
	}
	t.Setenv(program.PassphraseEnv, "")
	state := t.TempDir()
	args := []string{"events", "reconcile", "--events", "../../inventories/lab-events.yaml",
		"--state-dir", state, "--relay-binary", exe, "--pulumi", pulumiCLI, "--json"}
	decode := func(out string) []events.Outcome {
		t.Helper()
		dec := json.NewDecoder(strings.NewReader(out))
		dec.DisallowUnknownFields()
		var got []events.Outcome
		if err := dec.Decode(&got); err != nil || dec.More() {
			t.Fatalf("stdout is not one JSON document (%v):\n%s", err, out)
		}
		return got
	}
	out, errOut, code := fleet(t, append(args, "--now", "2026-11-30T00:00:00Z")...)
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	got := decode(out)
	if len(got) != 1 || got[0].Event != "lab-show" || got[0].Phase != events.Scheduled || got[0].Boxes != 0 ||
		got[0].Next != "up at 2026-12-01T19:50:00Z (in 43h50m0s)" || got[0].Error != "" ||
		len(got[0].Actions) != 1 || got[0].Actions[0].Action != "scheduled" {
		t.Fatalf("reconcile --json: %+v", got)
	}
	// A second run an hour later: the first run's actions are not this one's.
	out, _, code = fleet(t, append(args, "--now", "2026-11-30T01:00:00Z")...)
	if got := decode(out); code != 0 || len(got) != 1 || got[0].Phase != events.Scheduled || got[0].Next != "up at 2026-12-01T19:50:00Z (in 42h50m0s)" {
		t.Fatalf("second run: exit %d, %+v", code, got)
	} else {
		for _, a := range got[0].Actions {
			if !a.At.Equal(time.Date(2026, 11, 30, 1, 0, 0, 0, time.UTC)) {
				t.Errorf("action %+v is not this run's", a)
			}
		}
	}
}

// TestEventsReconcileJSONKeepsPulumiOffStdout: with --json, what Pulumi
// prints while it brings an event's stack up (its progress) does not go
// to stdout, which holds only the JSON.
func TestEventsReconcileJSONKeepsPulumiOffStdout(t *testing.T) {
	exe, _ := os.Executable()
	pulumiCLI, err := program.FindPulumi("")
	if err != nil {
		testutil.Skipf(t, "%v (make pulumi)", err)
	}
	t.Setenv(program.PassphraseEnv, "")
	var stdout bytes.Buffer
	var e eventsFlags
	fs := pflag.NewFlagSet("reconcile", pflag.ContinueOnError)
	e.add(fs)
	if err := fs.Parse([]string{"--events", "../../inventories/lab-events.yaml",
		"--state-dir", t.TempDir(), "--relay-binary", exe, "--pulumi", pulumiCLI}); err != nil {
		t.Fatal(err)
	}
	o := e.options()
	r, _, err := o.Open(context.Background(), &stdout, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ks, ok := r.Stacks.(*events.KeyedStacks)
	if !ok {
		t.Fatalf("stacks are a %T", r.Stacks)
	}
	fmt.Fprintln(ks.Template.Progress, "Updating (demo-event-demo-show):")
	r.Log.Info("a log line")
	if stdout.Len() != 0 {
		t.Fatalf("stdout got %q", stdout.String())
	}
}
