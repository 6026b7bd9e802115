package main

import (
	"path/filepath"
	"testing"

	"github.com/relayfleet/relayfleet/internal/testutil"
)

func TestConvergeBadInput(t *testing.T) {
	dir := t.TempDir()
	notELF := filepath.Join(dir, "relay")
	testutil.WriteFile(t, notELF, []byte("#!/bin/sh\n"), 0o755)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no inventory", []string{"converge"}, "fleet converge: flag --inventory: required\n"},
		{"missing inventory", []string{"converge", "--inventory", filepath.Join(dir, "nope.yaml")}, "fleet converge: " + filepath.Join(dir, "nope.yaml") + ": no such file\n"},
		{"bad parallel", []string{"converge", "--inventory", "x", "--parallel", "0"}, "fleet converge: flag --parallel: 0 is out of range: want 1 to 1024\n"},
		{"not a binary", []string{"converge", "--inventory", "../../inventories/lab.yaml", "--relay-binary", notELF}, "fleet converge: flag --relay-binary: " + notELF + " is not a Linux executable\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, code := fleet(t, tc.args...)
			if code != 2 || out != "" || errOut != tc.want {
				t.Errorf("exit %d, stdout %q, stderr %q; want 2, nothing, %q", code, out, errOut, tc.want)
			}
		})
	}
}
