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
	usageErrors(t, []usageCase{
		{"no inventory", []string{"converge"}, "fleet converge: flag --inventory: required\n"},
		{"missing inventory", []string{"converge", "--inventory", filepath.Join(dir, "nope.yaml")}, "fleet converge: " + filepath.Join(dir, "nope.yaml") + ": no such file\n"},
		{"bad parallel", []string{"converge", "--inventory", "x", "--parallel", "0"}, "fleet converge: flag --parallel: 0 is out of range: want 1 to 1024\n"},
		{"not a binary", []string{"converge", "--inventory", "../../inventories/lab.yaml", "--relay-binary", notELF}, "fleet converge: flag --relay-binary: " + notELF + " is not a Linux executable\n"},
	})
}
