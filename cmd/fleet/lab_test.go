package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/relayfleet/relayfleet/infra/lab"
)

func asUser(t *testing.T, uid int) {
	t.Helper()
	old := geteuid
	geteuid = func() int { return uid }
	t.Cleanup(func() { geteuid = old })
}

func TestLabNeedsRoot(t *testing.T) {
	asUser(t, 1000)
	t.Setenv("RELAYFLEET_LAB_DIR", t.TempDir())
	for _, args := range [][]string{
		{"lab", "up", "2"},
		{"lab", "down"},
		{"lab", "status", "--json"},
		{"lab", "ssh", "box1", "--", "true"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			out, errOut, code := fleet(t, args...)
			want := "fleet " + strings.Join(args[:2], " ") + ": root is needed to run lab boxes (systemd-nspawn, bridges, cgroups)\n"
			if code != exitUsage || errOut != want || out != "" {
				t.Errorf("exit %d, stderr %q, stdout %q; want exit 2 and %q", code, errOut, out, want)
			}
		})
	}
}

func TestLabUsageErrors(t *testing.T) {
	asUser(t, 1000) // bad input is reported before the root check
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"lab"}, "want a subcommand: cloud, down, ssh, status or up"},
		{[]string{"lab", "frob"}, `unknown subcommand "frob"`},
		{[]string{"lab", "up"}, "want the number of boxes"},
		{[]string{"lab", "up", "x"}, `want the number of boxes (1-200), got "x"`},
		{[]string{"lab", "up", "0"}, "want the number of boxes"},
		{[]string{"lab", "up", "--shape", "small"}, "want the number of boxes: fleet lab up N"},
		{[]string{"lab", "up", "201"}, `want the number of boxes (1-200), got "201"`},
		{[]string{"lab", "up", "2", "--shape", "huge"}, `flag --shape: want small or medium, got "huge"`},
		{[]string{"lab", "up", "2", "3"}, `unexpected argument "3"`},
		{[]string{"lab", "down", "now"}, `unexpected argument "now"`},
		{[]string{"lab", "status", "--yaml"}, "flag --yaml: unknown flag"},
		{[]string{"lab", "ssh"}, "want a box"},
		{[]string{"lab", "ssh", "Box_1", "--", "true"}, `box name "Box_1"`},
		{[]string{"lab", "ssh", "box1", "box2", "--", "true"}, `unexpected argument "box2"`},
		{[]string{"lab", "ssh", "--", "true"}, "want a box"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			// Errors name the command: fleet lab up, or fleet lab for
			// a missing or unknown subcommand.
			prefix := "fleet " + strings.Join(tc.args[:min(2, len(tc.args))], " ") + ": "
			if len(tc.args) < 2 || tc.args[1] == "frob" {
				prefix = "fleet lab: "
			}
			out, errOut, code := fleet(t, tc.args...)
			if code != exitUsage || !strings.HasPrefix(errOut, prefix) || !strings.Contains(errOut, tc.want) || strings.Count(errOut, "\n") != 1 || out != "" {
				t.Errorf("exit %d, stderr %q, stdout %q; want exit 2 and one line with %q", code, errOut, out, tc.want)
			}
		})
	}
}

func TestLabHelp(t *testing.T) {
	for _, args := range [][]string{{"lab", "-h"}, {"lab", "up", "-h"}, {"lab", "status", "-h"}} {
		out, errOut, code := fleet(t, args...)
		if code != exitOK || errOut != "" || !strings.Contains(out, "usage: fleet lab") {
			t.Errorf("%v: exit %d, stderr %q, stdout %q", args, code, errOut, out)
		}
	}
	out, _, _ := fleet(t, "help")
	if !strings.Contains(out, "  lab ") {
		t.Errorf("fleet help does not list lab:\n%s", out)
	}
}

func TestLabStatusEmpty(t *testing.T) {
	asUser(t, 0) // reading an empty state directory needs no privilege
	dir := t.TempDir()
	out, errOut, code := fleet(t, "lab", "status", "--dir", dir)
	if code != exitOK || errOut != "" || !strings.Contains(out, "no lab boxes") {
		t.Errorf("exit %d, stderr %q, stdout %q", code, errOut, out)
	}
	out, _, code = fleet(t, "lab", "status", "--json", "--dir", dir)
	var boxes []lab.BoxStatus
	if code != exitOK || json.Unmarshal([]byte(out), &boxes) != nil || boxes == nil || len(boxes) != 0 {
		t.Errorf("--json: exit %d, %q; want []", code, out)
	}
}
