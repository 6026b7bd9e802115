package main

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/internal/cli"
)

func doomed(name, op string, listeners int64, err error, keys ...string) program.DoomedBox {
	return program.DoomedBox{Doomed: program.Doomed{Name: name, Op: op, Keys: keys}, Listeners: listeners, Err: err}
}

// TestConfirmDoomed: fleet up goes ahead by itself only when the boxes it
// replaces or destroys serve nobody; otherwise it needs --yes or a yes
// typed on a terminal, and without a terminal it refuses in one line.
func TestConfirmDoomed(t *testing.T) {
	serving := []program.DoomedBox{
		doomed("lab-steady-1", program.OpReplace, 3, nil, "shape"),
		doomed("lab-steady-2", program.OpReplace, 0, nil, "shape"),
	}
	for _, tc := range []struct {
		name     string
		boxes    []program.DoomedBox
		terminal bool
		yes      bool
		typed    string
		wantErr  string // "" goes ahead
	}{
		{"no terminal, no --yes: refused", serving, false, false, "", "flag --yes: up would replace or destroy 1 box"},
		{"--yes", serving, false, true, "", ""},
		{"terminal, yes typed", serving, true, false, "yes\n", ""},
		{"terminal, y typed", serving, true, false, "y\n", ""},
		{"terminal, no typed", serving, true, false, "no\n", "not confirmed"},
		{"terminal, nothing typed", serving, true, false, "", "not confirmed"},
		{"no listeners anywhere", []program.DoomedBox{doomed("a-1", program.OpDelete, 0, nil)}, false, false, "", ""},
		{"listeners unknown count as serving", []program.DoomedBox{doomed("a-1", program.OpDelete, 0, errors.New("ssh: no route"))}, false, false, "", "(a-1, 0 listeners)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			err := confirmDoomed(&out, strings.NewReader(tc.typed), tc.terminal, tc.yes, tc.boxes)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("refused: %v\n%s", err, out.String())
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("err %v, want one containing %q\n%s", err, tc.wantErr, out.String())
			case err != nil && strings.Contains(err.Error(), "\n"):
				t.Fatalf("error is not one line: %q", err)
			}
			for _, b := range tc.boxes {
				if !strings.Contains(out.String(), b.Name) {
					t.Errorf("output does not show %s:\n%s", b.Name, out.String())
				}
			}
			if tc.boxes[0].Err == nil && !strings.Contains(out.String(), " listeners") {
				t.Errorf("output does not show the listeners:\n%s", out.String())
			}
			if asked := strings.Contains(out.String(), "Type yes"); asked != (tc.terminal && !tc.yes) {
				t.Errorf("asked %v:\n%s", asked, out.String())
			}
		})
	}
	var out bytes.Buffer
	confirmDoomed(&out, strings.NewReader(""), false, false, serving)
	if !strings.Contains(out.String(), "lab-steady-1") || !strings.Contains(out.String(), "replace (shape)") || !strings.Contains(out.String(), "3 listeners") {
		t.Errorf("listing:\n%s", out.String())
	}
}

// TestStdinTerminal: /dev/null (what a cron job or a pipeline gives) is a
// character device but no terminal: fleet up must not ask it.
func TestStdinTerminal(t *testing.T) {
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if (&cli.IOStreams{In: f}).InTerminal() {
		t.Fatal("/dev/null taken for a terminal")
	}
	if (&cli.IOStreams{In: strings.NewReader("yes\n")}).InTerminal() {
		t.Fatal("a reader taken for a terminal")
	}
}

// TestConfirmDestroy: fleet destroy shows the boxes it would destroy with
// their listeners and, when any serves listeners, asks on a terminal or
// needs --yes; without either it refuses in one line.
func TestConfirmDestroy(t *testing.T) {
	boxes := []program.DoomedBox{doomed("lab-s-a-1", program.OpDelete, 4, nil), doomed("lab-s-a-2", program.OpDelete, 0, nil)}
	var out bytes.Buffer
	err := confirmGoing(&out, strings.NewReader(""), false, false, boxes, "destroy", "destroy")
	if err == nil || err.Error() != "flag --yes: destroy would destroy 1 box serving listeners or whose listeners could not be read (lab-s-a-1, 4 listeners): confirm on a terminal or give --yes" {
		t.Fatalf("no terminal, no --yes: %v", err)
	}
	if !strings.Contains(out.String(), "destroy would destroy 2 boxes:") || !strings.Contains(out.String(), "lab-s-a-1") || !strings.Contains(out.String(), "4 listeners") {
		t.Errorf("listing:\n%s", out.String())
	}
	out.Reset()
	if err := confirmGoing(&out, strings.NewReader("yes\n"), true, false, boxes, "destroy", "destroy"); err != nil || !strings.Contains(out.String(), "Destroy 1 box serving listeners (lab-s-a-1)? Type yes") {
		t.Errorf("terminal, yes typed: %v\n%s", err, out.String())
	}
	if err := confirmGoing(&out, strings.NewReader("no\n"), true, false, boxes, "destroy", "destroy"); err == nil {
		t.Error("terminal, no typed: went ahead")
	}
	if err := confirmGoing(&out, strings.NewReader(""), false, true, boxes, "destroy", "destroy"); err != nil {
		t.Errorf("--yes: %v", err)
	}
}
