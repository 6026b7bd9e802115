package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/relayfleet/relayfleet/internal/testutil"
)

func TestStackCommandsBadInput(t *testing.T) {
	dir := t.TempDir()
	notELF := filepath.Join(dir, "relay")
	testutil.WriteFile(t, notELF, []byte("#!/bin/sh\n"), 0o755)
	lab := "../../inventories/lab.yaml"
	usageErrors(t, []usageCase{
		{"up without inventory", []string{"up"}, "fleet up: flag --inventory: required\n"},
		{"preview without inventory", []string{"preview"}, "fleet preview: flag --inventory: required\n"},
		{"destroy without inventory", []string{"destroy"}, "fleet destroy: flag --inventory: required\n"},
		{"missing inventory", []string{"up", "--inventory", filepath.Join(dir, "nope.yaml")}, "fleet up: " + filepath.Join(dir, "nope.yaml") + ": no such file\n"},
		{"bad stack", []string{"up", "--inventory", lab, "--stack", "a b"}, "fleet up: flag --stack: want letters, digits, '-', '_' or '.', got \"a b\"\n"},
		{"bad backend", []string{"destroy", "--inventory", lab, "--backend", "/tmp/x"}, "fleet destroy: flag --backend: want a URL such as file:///var/lib/relayfleet/state or s3://bucket, got \"/tmp/x\"\n"},
		{"bad subnet", []string{"preview", "--inventory", lab, "--lab-subnet", "10.1.2.3"}, "fleet preview: flag --lab-subnet: want a CIDR, got \"10.1.2.3\"\n"},
		{"not a relay", []string{"up", "--inventory", lab, "--relay-binary", notELF}, "fleet up: flag --relay-binary: " + notELF + " is not a Linux executable\n"},
		{"unknown flag", []string{"destroy", "--inventory", lab, "--relay-binary", notELF}, "fleet destroy: flag --relay-binary: unknown flag\n"},
	})
}

func TestStackCommandsNeedPulumi(t *testing.T) {
	exe, _ := os.Executable()
	missing := filepath.Join(t.TempDir(), "pulumi")
	out, errOut, code := fleet(t, "up", "--inventory", "../../inventories/lab.yaml", "--relay-binary", exe, "--pulumi", missing, "--state-dir", t.TempDir())
	if code != 2 || out != "" || !strings.HasPrefix(errOut, "fleet up: flag --pulumi: no Pulumi CLI") || strings.Count(errOut, "\n") != 1 {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

func TestStackCommandsListed(t *testing.T) {
	out, _, _ := fleet(t, "help")
	for _, c := range []string{"up", "preview", "destroy"} {
		if !strings.Contains(out, "\n  "+c+" ") {
			t.Errorf("help does not list %s:\n%s", c, out)
		}
	}
}
