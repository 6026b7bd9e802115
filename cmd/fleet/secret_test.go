package main

import (
	"os"
	"strings"
	"testing"
)

func TestSecretBadInput(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		args     []string
		want     string
	}{
		{"no name", "", []string{"secret", "set"}, "fleet secret set: want NAME"},
		{"unknown name", "", []string{"secret", "set", "aws-token"}, `fleet secret set: unknown secret "aws-token"`},
		{"no inventory", "tok\n", []string{"secret", "set", "hcloud-token"}, "fleet secret set: flag --inventory: required"},
		{"empty", "\n", []string{"secret", "set", "hcloud-token", "--inventory", "../../inventories/lab.yaml"}, "fleet secret set: stdin: empty hcloud-token"},
		{"spaces", "two words\n", []string{"secret", "set", "hcloud-token", "--inventory", "../../inventories/lab.yaml"}, "fleet secret set: stdin: the hcloud-token has spaces"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, code := fleetIn(t, strings.NewReader(tc.in), tc.args...)
			if code != 2 || out != "" || !strings.HasPrefix(errOut, tc.want) || strings.Count(errOut, "\n") != 1 {
				t.Errorf("exit %d, stdout %q, stderr %q; want 2 and %q", code, out, errOut, tc.want)
			}
			if strings.Contains(errOut, "two words") {
				t.Errorf("the secret was echoed: %q", errOut)
			}
		})
	}
}

// TestSecretFromDevNull: /dev/null is a character device but no terminal,
// so it is read (empty), not refused as a terminal.
func TestSecretFromDevNull(t *testing.T) {
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	_, errOut, code := fleetIn(t, null, "secret", "set", "hcloud-token", "--inventory", "../../inventories/lab.yaml")
	if want := "fleet secret set: stdin: empty hcloud-token\n"; code != exitUsage || errOut != want {
		t.Errorf("exit %d, stderr %q; want %d and %q", code, errOut, exitUsage, want)
	}
}
