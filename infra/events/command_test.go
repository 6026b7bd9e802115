package events

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/infra/provider"
	"github.com/relayfleet/relayfleet/internal/cli"
	"github.com/relayfleet/relayfleet/units"
)

// wantUsage fails t unless err is a cli usage error that is want.
func wantUsage(t *testing.T, err error, want string) {
	t.Helper()
	var ue *cli.UsageError
	if !errors.As(err, &ue) || err.Error() != want {
		t.Errorf("error %v, want the usage error %q", err, want)
	}
}

// errStack is a RunOptions.Stack that fails, saying where progress went.
var errStack = errors.New("no stack")

func TestRunOptionsOpen(t *testing.T) {
	ctx := context.Background()
	var progress io.Writer
	o := RunOptions{EventsFile: "../../inventories/lab-events.yaml", Now: "2026-12-05T19:00:00Z",
		Stack: func(p io.Writer) (*program.Stack, provider.Config, error) {
			progress = p
			return nil, provider.Config{}, errStack
		}}
	var stdout bytes.Buffer
	if _, _, err := o.Open(ctx, &stdout, false, nil); err != errStack || progress != &stdout {
		t.Errorf("Open: %v; progress to %v, want stdout", err, progress)
	}
	if _, _, err := o.Open(ctx, &stdout, true, nil); err != errStack || progress != io.Discard {
		t.Errorf("quiet Open: %v; progress to %v, want nowhere", err, progress)
	}
	progress = nil
	mine := cli.Usagef("flag --mine: bad")
	if _, _, err := o.Open(ctx, &stdout, false, func() error { return mine }); err != mine || progress != nil {
		t.Errorf("validate: %v, progress %v; want validate's error before the stack", err, progress)
	}
	bad := o
	bad.Now = "noon"
	_, _, err := bad.Open(ctx, &stdout, false, nil)
	wantUsage(t, err, `flag --now: want an RFC 3339 time such as 2026-12-05T19:00:00Z, got "noon"`)
	bad.EventsFile = ""
	_, _, err = bad.Open(ctx, &stdout, false, nil)
	wantUsage(t, err, "flag --events: required")
	if progress != nil || stdout.Len() != 0 {
		t.Errorf("bad flags: progress %v, stdout %q", progress, stdout.String())
	}
}

func TestRunBurstBadInput(t *testing.T) {
	o := RunOptions{EventsFile: "../../inventories/lab-events.yaml", Stack: func(io.Writer) (*program.Stack, provider.Config, error) {
		t.Error("the stack was made for bad input")
		return nil, provider.Config{}, errStack
	}}
	for _, tc := range []struct {
		b    Burst
		want string
	}{
		{Burst{Mode: Resize, Drain: -1}, "flag --event: required"},
		{Burst{Mode: Resize, Event: "e", Drain: time.Minute}, "flag --drain-time: resize drains for the event's drain time"},
		{Burst{Mode: ManualUp, Event: "e", Drain: 0}, "flag --drain-time: only burst down drains"},
	} {
		wantUsage(t, RunBurst(context.Background(), io.Discard, o, tc.b), tc.want)
	}
}

func TestStoreCommandsBadInput(t *testing.T) {
	ctx := context.Background()
	wantUsage(t, WriteReport(ctx, io.Discard, StoreOptions{}, "", false), "flag --event: required")
	wantUsage(t, WriteStatus(ctx, io.Discard, StoreOptions{BackendURL: "/srv/state"}, false),
		`flag --backend: want a URL such as file:///var/lib/relayfleet/state or s3://bucket, got "/srv/state"`)
	wantUsage(t, WriteReport(ctx, io.Discard, StoreOptions{BackendURL: "/srv/state"}, "e", true),
		`flag --backend: want a URL such as file:///var/lib/relayfleet/state or s3://bucket, got "/srv/state"`)
}

// TestInstall: Install says what it wrote, and InstallTimer's refusals
// name the flag behind the field, or the arguments after --.
func TestInstall(t *testing.T) {
	dir := t.TempDir()
	fleetBin := fakeExe(t, dir, "fleet", "exit 0\n")
	o := TimerOptions{Reconciler: units.Reconciler{Events: timerEventsFile, StateDir: dir, Fleet: fleetBin, Interval: time.Minute}, UnitDir: dir}
	var out bytes.Buffer
	if err := Install(context.Background(), &out, o); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"wrote " + filepath.Join(dir, units.ReconcilerService) + "\n", "not enabled (--no-enable)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	for _, tc := range []struct {
		change func(*TimerOptions)
		want   string
	}{
		{func(o *TimerOptions) { o.Events = "" }, "flag --events: required"},
		{func(o *TimerOptions) { o.Events = dir }, "flag --events: " + dir + " is a directory"},
		{func(o *TimerOptions) { o.UnitDir = filepath.Join(dir, "nope") }, "flag --unit-dir: stat"},
		{func(o *TimerOptions) { o.User = "bad user" }, `flag --user: "bad user": not a user name`},
		{func(o *TimerOptions) { o.ExtraArgs = []string{" "} }, `arguments after --: " ": empty or only whitespace`},
	} {
		bad := o
		tc.change(&bad)
		out.Reset()
		err := Install(context.Background(), &out, bad)
		var ue *cli.UsageError
		if !errors.As(err, &ue) || !strings.HasPrefix(err.Error(), tc.want) || out.Len() != 0 {
			t.Errorf("error %v, output %q; want a usage error starting %q", err, out.String(), tc.want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "nope")); err == nil {
		t.Error("made the unit dir")
	}
}
