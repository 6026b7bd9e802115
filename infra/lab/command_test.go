package lab

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/relayfleet/relayfleet/internal/cli"
)

func uid(n int) func() int { return func() int { return n } }

// usageError fails t unless err is a cli usage error containing want.
func usageError(t *testing.T, err error, want string) {
	t.Helper()
	var ue *cli.UsageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), want) {
		t.Errorf("error %v, want a usage error with %q", err, want)
	}
}

func streams() (*cli.IOStreams, *bytes.Buffer) {
	var out bytes.Buffer
	return &cli.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &out}, &out
}

func TestOpen(t *testing.T) {
	usageError(t, func() error { _, err := Open(Options{Geteuid: uid(1000)}, nil); return err }(), ErrNotRoot.Error())
	// Bad input is reported before the root check.
	usageError(t, func() error { _, err := Open(Options{Subnet: "10.0.0.0", Geteuid: uid(1000)}, nil); return err }(),
		`flag --subnet: "10.0.0.0": want an IPv4 prefix such as 10.231.77.0/24`)
	usageError(t, func() error {
		_, err := Open(Options{Bridge: "a-bridge-name-too-long", Geteuid: uid(0)}, nil)
		return err
	}(),
		"want at most 15 characters")
	dir := t.TempDir()
	l, err := Open(Options{Dir: dir, Subnet: "10.9.8.0/24", Geteuid: uid(0)}, nil)
	if err != nil || l.Dir() != dir || l.cfg.Subnet.String() != "10.9.8.0/24" || l.cfg.ImageDir != dir+"/images" {
		t.Errorf("Open: %v, %+v", err, l)
	}
}

func TestParseCount(t *testing.T) {
	for arg, want := range map[string]int{"1": 1, "200": 200, "0": 0, "201": 0, "x": 0, "": 0} {
		n, err := ParseCount(arg)
		if n != want || (want == 0) != (err != nil) {
			t.Errorf("ParseCount(%q) = %d, %v; want %d", arg, n, err, want)
		}
		if err != nil {
			usageError(t, err, `want the number of boxes (1-200), got "`+arg+`"`)
		}
	}
}

func TestCommandsBadInput(t *testing.T) {
	ctx := context.Background()
	ios, out := streams()
	user := Options{Dir: t.TempDir(), Geteuid: uid(1000)}
	usageError(t, UpBoxes(ctx, user, "0", "small", ios), "want the number of boxes")
	usageError(t, UpBoxes(ctx, user, "2", "huge", ios), `flag --shape: want small or medium, got "huge"`)
	usageError(t, UpBoxes(ctx, user, "2", "medium", ios), ErrNotRoot.Error())
	usageError(t, DownBoxes(ctx, user, ios), ErrNotRoot.Error())
	usageError(t, ShowStatus(ctx, user, true, ios), ErrNotRoot.Error())
	usageError(t, SSH(ctx, user, "Box_1", []string{"true"}, ios), `box name "Box_1"`)
	usageError(t, SSH(ctx, user, "box1", []string{"true"}, ios), ErrNotRoot.Error())
	root := Options{Dir: t.TempDir(), Geteuid: uid(0)}
	usageError(t, SSH(ctx, root, "box1", []string{"true"}, ios), `no box "box1" (fleet lab status lists them)`)
	if out.Len() != 0 {
		t.Errorf("bad input wrote %q", out)
	}
}

func TestShowStatusEmpty(t *testing.T) {
	ios, out := streams()
	o := Options{Dir: t.TempDir(), Geteuid: uid(0)} // reading an empty state directory needs no privilege
	if err := ShowStatus(context.Background(), o, true, ios); err != nil || out.String() != "[]\n" {
		t.Errorf("--json: %v, %q; want []", err, out)
	}
	out.Reset()
	if err := ShowStatus(context.Background(), o, false, ios); err != nil || !strings.Contains(out.String(), "no lab boxes") {
		t.Errorf("table: %v, %q", err, out)
	}
}

func TestCommandStdin(t *testing.T) {
	r := strings.NewReader("x")
	if got := commandStdin(r); got != r {
		t.Errorf("a reader: %v", got)
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	if got := commandStdin(null); got != nil {
		t.Errorf("/dev/null: %v, want nil", got)
	}
	f, err := os.CreateTemp(t.TempDir(), "in")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if got := commandStdin(f); got != f {
		t.Errorf("a file: %v", got)
	}
}
