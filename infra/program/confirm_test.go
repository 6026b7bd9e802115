package program

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func doomedBox(name, op string, listeners int64, err error, keys ...string) DoomedBox {
	return DoomedBox{Doomed: Doomed{Name: name, Op: op, Keys: keys}, Listeners: listeners, Err: err}
}

// TestConfirmUp: fleet up goes ahead by itself only when the boxes it
// replaces or destroys serve nobody; otherwise it needs --yes or a yes
// typed on a terminal, and without a terminal it refuses in one line.
func TestConfirmUp(t *testing.T) {
	serving := []DoomedBox{
		doomedBox("lab-steady-1", OpReplace, 3, nil, "shape"),
		doomedBox("lab-steady-2", OpReplace, 0, nil, "shape"),
	}
	for _, tc := range []struct {
		name     string
		boxes    []DoomedBox
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
		{"no listeners anywhere", []DoomedBox{doomedBox("a-1", OpDelete, 0, nil)}, false, false, "", ""},
		{"listeners unknown count as serving", []DoomedBox{doomedBox("a-1", OpDelete, 0, errors.New("ssh: no route"))}, false, false, "", "(a-1, 0 listeners)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			err := Confirm(&out, strings.NewReader(tc.typed), tc.terminal, tc.yes, tc.boxes, "up", "replace or destroy")
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
	Confirm(&out, strings.NewReader(""), false, false, serving, "up", "replace or destroy")
	if !strings.Contains(out.String(), "lab-steady-1") || !strings.Contains(out.String(), "replace (shape)") || !strings.Contains(out.String(), "3 listeners") {
		t.Errorf("listing:\n%s", out.String())
	}
}

// TestConfirmDestroy: fleet destroy shows the boxes it would destroy with
// their listeners and, when any serves listeners, asks on a terminal or
// needs --yes; without either it refuses in one line.
func TestConfirmDestroy(t *testing.T) {
	boxes := []DoomedBox{doomedBox("lab-s-a-1", OpDelete, 4, nil), doomedBox("lab-s-a-2", OpDelete, 0, nil)}
	var out bytes.Buffer
	err := Confirm(&out, strings.NewReader(""), false, false, boxes, "destroy", "destroy")
	if err == nil || err.Error() != "flag --yes: destroy would destroy 1 box serving listeners or whose listeners could not be read (lab-s-a-1, 4 listeners): confirm on a terminal or give --yes" {
		t.Fatalf("no terminal, no --yes: %v", err)
	}
	if !strings.Contains(out.String(), "destroy would destroy 2 boxes:") || !strings.Contains(out.String(), "lab-s-a-1") || !strings.Contains(out.String(), "4 listeners") {
		t.Errorf("listing:\n%s", out.String())
	}
	out.Reset()
	if err := Confirm(&out, strings.NewReader("yes\n"), true, false, boxes, "destroy", "destroy"); err != nil || !strings.Contains(out.String(), "Destroy 1 box serving listeners (lab-s-a-1)? Type yes") {
		t.Errorf("terminal, yes typed: %v\n%s", err, out.String())
	}
	if err := Confirm(&out, strings.NewReader("no\n"), true, false, boxes, "destroy", "destroy"); err == nil {
		t.Error("terminal, no typed: went ahead")
	}
	if err := Confirm(&out, strings.NewReader(""), false, true, boxes, "destroy", "destroy"); err != nil {
		t.Errorf("--yes: %v", err)
	}
}

// TestChangeSummary: operations in name order, or "no changes"; ports
// joined with commas.
func TestChangeSummary(t *testing.T) {
	if got := ChangeSummary(map[string]int{"same": 2, "create": 1}); got != "1 create, 2 same" {
		t.Errorf("ChangeSummary = %q", got)
	}
	if got := ChangeSummary(nil); got != "no changes" {
		t.Errorf("ChangeSummary(nil) = %q", got)
	}
	if got := ports([]int{4433, 4434}); got != "4433,4434" {
		t.Errorf("ports = %q", got)
	}
}
