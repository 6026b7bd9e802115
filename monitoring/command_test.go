package monitoring

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/internal/cli"
	"github.com/relayfleet/relayfleet/inventories"
)

func TestDirFrom(t *testing.T) {
	t.Setenv(DirEnv, "")
	if got := DirFrom(""); got != "" {
		t.Errorf("nothing set: %q", got)
	}
	t.Setenv(DirEnv, "/env")
	if got := DirFrom(""); got != "/env" {
		t.Errorf("env: %q", got)
	}
	if got := DirFrom("/flag"); got != "/flag" {
		t.Errorf("flag: %q", got)
	}
}

func TestWriteDir(t *testing.T) {
	ctx := context.Background()
	state := t.TempDir()
	if _, err := program.SetStackHosts(state, "lab", []program.HostEntry{{Name: "lab-1", Address: "10.0.0.1", Ports: []int{4443}}}); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "mon")
	var stdout strings.Builder
	if err := WriteDir(ctx, &stdout, CommandOptions{Out: out, StateDir: state, Routers: []string{"10.0.0.1:8080"}, ScrapeInterval: 1e9}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stdout.String(), "1 relay targets from stacks lab, 1 routers") {
		t.Fatalf("stdout: %s", stdout.String())
	}
	for _, f := range []string{RelayTargetsFile, RouterTargetsFile, RulesFile, FleetRulesFile, ConfigFile, DashboardFile} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Error(err)
		}
	}

	// --inventory: the fleet's hosts come from FleetHosts, even with no
	// stack in the state dir.
	var asked string
	empty := t.TempDir()
	o := CommandOptions{Out: out, StateDir: empty, Inventory: inventories.Embedded(inventories.LabFile),
		FleetHosts: func(_ context.Context, f *inventories.Fleet, stateDir string) (map[string][]program.HostEntry, error) {
			asked = f.Name + " " + stateDir
			return map[string][]program.HostEntry{f.Name: {{Name: "b1", Address: "10.0.0.2", Ports: []int{4443, 4444}}}}, nil
		}}
	stdout.Reset()
	if err := WriteDir(ctx, &stdout, o); err != nil {
		t.Fatal(err)
	}
	if asked != "lab "+empty || !strings.Contains(stdout.String(), "2 relay targets from stacks lab,") {
		t.Errorf("FleetHosts asked for %q; stdout %s", asked, stdout.String())
	}

	for _, c := range []struct {
		o    CommandOptions
		want string
	}{
		{CommandOptions{}, "flag --out: required"},
		{CommandOptions{Out: out, StateDir: state, Inventory: "a", EventsFile: "b"}, "flag --events: give --inventory or --events"},
		{CommandOptions{Out: out, StateDir: state, Routers: []string{"nohost"}}, `flag --router: router "nohost": want HOST:PORT`},
		{CommandOptions{Out: out, StateDir: state, EventsExporter: "9479"}, `flag --events-exporter: want HOST:PORT (fleet events install prints it), got "9479"`},
		{CommandOptions{Out: out, StateDir: state, ScrapeInterval: 1000500e3}, "flag --scrape-interval: want a positive whole number of milliseconds"},
		{CommandOptions{Out: out, StateDir: state, EvaluationInterval: 1000500e3}, "flag --evaluation-interval: want a positive whole number of milliseconds"},
		{CommandOptions{Out: out, StateDir: filepath.Join(state, "none")}, "flag --state-dir: "},
	} {
		var ue *cli.UsageError
		if err := WriteDir(ctx, &stdout, c.o); !errors.As(err, &ue) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want a usage error with %q", c.o, err, c.want)
		}
	}
}
