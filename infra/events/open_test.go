package events

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/infra/provider"
	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/provision"
)

const labEventsFile = "../../inventories/lab-events.yaml"

func TestOpenMissingFile(t *testing.T) {
	_, err := Open(context.Background(), Options{EventsFile: "nope.yaml"})
	if err == nil || !strings.Contains(err.Error(), "nope.yaml") {
		t.Fatalf("Open of a missing events file: %v", err)
	}
}

// TestOpen builds the reconciler of the lab's events file: the files
// read, the state dir's default, the lease's default, the stacks keyed
// with the fleet's stack, Pulumi's progress and the log where the options
// say.
func TestOpen(t *testing.T) {
	pulumiCLI, err := program.FindPulumi("")
	if err != nil {
		testutil.Skipf(t, "%v (make pulumi)", err)
	}
	t.Setenv(program.PassphraseEnv, "")
	state := t.TempDir()
	t.Setenv(program.StateDirEnv, state)
	var progress, log bytes.Buffer
	// The fleet has no release yet: the build given is its first, and
	// every burst box runs it.
	relay := filepath.Join(t.TempDir(), "relay")
	if err := os.WriteFile(relay, []byte("\x7fELF a relay"), 0o755); err != nil {
		t.Fatal(err)
	}
	r, err := Open(context.Background(), Options{
		EventsFile: labEventsFile, RelayBinary: relay,
		Stack: program.Stack{Pulumi: pulumiCLI, Progress: &progress},
		Log:   slog.New(slog.NewTextHandler(&log, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, ok := r.Events.Event("lab-show"); !ok || r.Fleet == nil || r.Catalogue == nil || r.Calibration == nil {
		t.Fatalf("files not read: %+v", r)
	}
	if want := provision.Digest([]byte("\x7fELF a relay")); r.StateDir != state || r.Release != want {
		t.Errorf("state dir %q, release %q; want %q, %s", r.StateDir, r.Release, state, want)
	}
	if !strings.Contains(log.String(), "first release") {
		t.Errorf("the log does not say the build became the fleet's first release:\n%s", log.String())
	}
	if s, ok := r.Store.(*PulumiStore); !ok || s.TTL != DefaultLeaseTTL || s.Fleet != r.Fleet.Name {
		t.Errorf("store %#v: want a PulumiStore of fleet %s with the default lease", r.Store, r.Fleet.Name)
	}
	ks, ok := r.Stacks.(*KeyedStacks)
	if !ok {
		t.Fatalf("stacks are a %T", r.Stacks)
	}
	if tpl := ks.Template; tpl.Fleet != r.Fleet || tpl.Catalogue != r.Catalogue || tpl.StateDir != state || tpl.Progress != &progress {
		t.Errorf("stack template %+v", tpl)
	}
	if fs := ks.FleetStack; fs.Name != r.Fleet.Name || fs.Burst != nil || fs.Secrets != nil {
		t.Errorf("fleet stack %+v", fs)
	}
	if _, ok := r.Probe.(*SSHProbe); !ok || r.Backends == nil || r.SteadyHosts == nil {
		t.Errorf("probe %T, backends %v, steady hosts %v", r.Probe, r.Backends != nil, r.SteadyHosts != nil)
	}
	r.Log.Info("a log line")
	if !strings.Contains(log.String(), "a log line") {
		t.Errorf("log got %q", log.String())
	}
}

// TestOpenFromRecords: Open of an events file that no longer parses
// fails, unless FromRecords (fleet events reconcile): then it builds a
// Reconciler without events, its FileErr the parse error, for the fleet
// the last good read of that file named, its records in the same store.
// A file that never parsed in this state dir says so.
func TestOpenFromRecords(t *testing.T) {
	pulumiCLI, err := program.FindPulumi("")
	if err != nil {
		testutil.Skipf(t, "%v (make pulumi)", err)
	}
	t.Setenv(program.PassphraseEnv, "")
	state, dir := t.TempDir(), t.TempDir()
	for _, f := range []string{"lab-events.yaml", "lab.yaml", "providers.yaml"} {
		data, err := os.ReadFile(filepath.Join("../../inventories", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	evPath := filepath.Join(dir, "lab-events.yaml")
	relay := filepath.Join(t.TempDir(), "relay")
	if err := os.WriteFile(relay, []byte("\x7fELF a relay"), 0o755); err != nil {
		t.Fatal(err)
	}
	opts := Options{EventsFile: evPath, RelayBinary: relay, FromRecords: true,
		Stack: program.Stack{Pulumi: pulumiCLI, StateDir: state, Progress: io.Discard}}
	// Never read here: nothing says which fleet's records to look at,
	// and there are none; the parse error alone.
	if err := os.WriteFile(evPath, []byte("version: 1\nfleet: lab.yaml\nevents: [\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r, err := Open(context.Background(), opts); err == nil || r != nil || !strings.Contains(err.Error(), "not valid YAML") {
		t.Fatalf("Open of a file never read in this state dir: %v, want its parse error", err)
	}
	good, _ := os.ReadFile("../../inventories/lab-events.yaml")
	if err := os.WriteFile(evPath, good, 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := Open(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	fleet := r.Fleet.Name
	// The file breaks.
	bad := strings.Replace(string(good), "end: 2026-12-01T21:00:00Z", "end: tomorrow", 1)
	if err := os.WriteFile(evPath, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	opts.FromRecords = false
	if _, err := Open(context.Background(), opts); err == nil || !strings.Contains(err.Error(), "tomorrow") {
		t.Fatalf("Open of a broken file: %v, want its parse error", err)
	}
	opts.FromRecords = true
	r, err = Open(context.Background(), opts)
	if err != nil {
		t.Fatalf("Open FromRecords of a broken file: %v", err)
	}
	defer r.Close()
	if r.Events != nil || r.FileErr == nil || !strings.Contains(r.FileErr.Error(), "tomorrow") {
		t.Errorf("events %v, file error %v: want none and the parse error", r.Events, r.FileErr)
	}
	if s, ok := r.Store.(*PulumiStore); !ok || r.Fleet.Name != fleet || s.Fleet != fleet || r.Catalogue == nil {
		t.Errorf("fleet %q, store %#v, catalogue %v: want fleet %s's records and the providers file beside", r.Fleet.Name, r.Store, r.Catalogue != nil, fleet)
	}
	// fleet events reconcile: the run goes through (the lease taken, the
	// records read), logs the invalid file and ends with its error,
	// naming the file.
	var out bytes.Buffer
	err = RunReconcile(context.Background(), &out, RunOptions{EventsFile: evPath, Now: "2026-12-01T22:00:00Z", RelayBinary: relay,
		Stack: func(io.Writer) (*program.Stack, provider.Config, error) { return &opts.Stack, provider.Config{}, nil }}, false)
	if err == nil || !strings.Contains(err.Error(), evPath) || !strings.Contains(err.Error(), "tomorrow") {
		t.Errorf("reconcile with the broken file: %v, want an error naming %s and its parse error", err, evPath)
	}
	if !strings.Contains(out.String(), "action=events-file-invalid") {
		t.Errorf("reconcile's log does not report the invalid file:\n%s", out.String())
	}
}
