package loadtest

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/internal/cli"
	"github.com/relayfleet/relayfleet/inventories"
	"github.com/relayfleet/relayfleet/provision"
)

// fakeFleet is a steady stack of boxes that answer every command with
// their systemctl list-units lines.
type fakeFleet struct{ boxes map[string]string }

func (fakeFleet) AuthKeys(context.Context, bool) (string, []provision.AuthKey, error) {
	return "k\n", []provision.AuthKey{{Seed: make([]byte, 32)}}, nil
}

func (f fakeFleet) SteadyTargets(context.Context) ([]provision.Target, func(), error) {
	var ts []provision.Target
	for _, name := range []string{"lab-1", "lab-2"} {
		ts = append(ts, provision.Target{Host: provision.Host{Name: name, Address: "127.0.0.1"}, Run: unitsRunner(f.boxes[name])})
	}
	return ts, func() {}, nil
}

type unitsRunner string

func (u unitsRunner) Run(context.Context, string, io.Reader) ([]byte, error) { return []byte(u), nil }

// TestRunRefuses: fleet loadtest checks its flags, then the box it names
// among the steady stack's and the relay processes it runs, before any
// load; each refusal is one line, a usage error when a flag is wrong.
func TestRunRefuses(t *testing.T) {
	dir := t.TempDir()
	inv := filepath.Join(dir, "fleet.yaml")
	lab, err := os.ReadFile("../../inventories/lab.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(inv, lab, 0o644); err != nil {
		t.Fatal(err)
	}
	relay := filepath.Join(dir, "relay")
	if err := os.WriteFile(relay, []byte("\x7fELF\x02\x01\x01not run"), 0o755); err != nil {
		t.Fatal(err)
	}
	two := "relay@4443.service loaded active running relay\nrelay@4444.service loaded active running relay\n"
	fleet := fakeFleet{boxes: map[string]string{"lab-1": two, "lab-2": ""}}
	opts := func(target, steps string) Options {
		return Options{Inventory: inv, Target: target, Steps: steps, StepDuration: time.Second, Ramp: 10, RelayBinary: relay, Out: io.Discard,
			Open: func(*inventories.Fleet) (Fleet, error) { return fleet, nil },
			Sign: func([]byte, string, string, bool, bool, time.Duration) (string, error) { return "token", nil }}
	}
	for _, tc := range []struct {
		name  string
		o     Options
		want  string
		usage bool
	}{
		{"no target", opts("", "100,200,300"), "flag --target: required (BOX or BOX:PORT)", true},
		{"no inventory", func() Options { o := opts("lab-1", "100,200,300"); o.Inventory = ""; return o }(), "flag --inventory: required", true},
		{"bad steps", opts("lab-1", "100"), "flag --steps: want at least 3 listener counts to fit a curve, got 1", true},
		{"no such box", opts("nope", "100,200,300"), `flag --target: no box "nope" among the steady stack's hosts (fleet hosts lists them; boxes: lab-1, lab-2)`, true},
		{"no such process", opts("lab-1:4500", "100,200,300"), "flag --target: lab-1 has no active relay@4500.service (active: relay@4443.service, relay@4444.service)", true},
		{"no process", opts("lab-2", "100,200,300"), "lab-2 has no active relay process; converge it first (fleet converge --inventory " + inv + ")", false},
		{"fewer listeners than processes", opts("lab-1", "1,2,3"), "flag --steps: 1 listeners cannot be spread over 2 relay processes", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Run(context.Background(), tc.o)
			var ue *cli.UsageError
			if err == nil || err.Error() != tc.want || errors.As(err, &ue) != tc.usage {
				t.Errorf("Run: %v (usage error: %v); want %q (usage error: %v)", err, errors.As(err, &ue), tc.want, tc.usage)
			}
		})
	}
	// The stack is opened after the fleet file loads: a stack that does
	// not open ends it.
	o := opts("lab-1", "100,200,300")
	o.Open = func(*inventories.Fleet) (Fleet, error) { return nil, errors.New("stack lab: no such stack") }
	if err := Run(context.Background(), o); err == nil || err.Error() != "stack lab: no such stack" {
		t.Errorf("Run with a stack that does not open: %v", err)
	}
}
