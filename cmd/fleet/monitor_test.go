package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/monitoring"
)

func TestMonitorCommand(t *testing.T) {
	state := t.TempDir()
	if _, err := program.SetStackHosts(state, "lab", []program.HostEntry{{Name: "lab-1", Address: "10.0.0.1", Ports: []int{4443}}}); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "mon")
	var stdout, stderr strings.Builder
	code := run(context.Background(), []string{"monitor", "--out", out, "--state-dir", state, "--router", "10.0.0.1:8080", "--scrape-interval", "1s"}, &stdout, &stderr)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if !strings.Contains(stdout.String(), "1 relay targets from stacks lab, 1 routers") {
		t.Fatalf("stdout: %s", stdout.String())
	}
	for _, f := range []string{monitoring.RelayTargetsFile, monitoring.RouterTargetsFile, monitoring.RulesFile, monitoring.FleetRulesFile, monitoring.ConfigFile, monitoring.DashboardFile} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Error(err)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"monitor"}, "flag --out: required"},
		{[]string{"monitor", "--out", out, "--state-dir", state, "--inventory", "a", "--events", "b"}, "flag --events: give --inventory or --events"},
		{[]string{"monitor", "--out", out, "--state-dir", state, "--router", "nohost"}, `flag --router: router "nohost": want HOST:PORT`},
		{[]string{"monitor", "--out", out, "--state-dir", state, "--scrape-interval", "1000500us"}, "flag --scrape-interval: want a positive whole number of milliseconds"},
		{[]string{"monitor", "--out", out, "--state-dir", filepath.Join(state, "none")}, "flag --state-dir: "},
	} {
		stderr.Reset()
		if code := run(context.Background(), c.args, &stdout, &stderr); code != exitUsage || !strings.Contains(stderr.String(), c.want) || strings.Count(stderr.String(), "\n") != 1 {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and one line with %q", c.args, code, stderr.String(), c.want)
		}
	}
}
