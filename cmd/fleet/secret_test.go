package main

import (
	"strings"
	"testing"
)

func TestSecretBadInput(t *testing.T) {
	old := stdin
	t.Cleanup(func() { stdin = old })
	for _, tc := range []struct {
		name, in string
		args     []string
		want     string
	}{
		{"no name", "", []string{"secret", "set"}, "fleet secret: want set NAME"},
		{"unknown name", "", []string{"secret", "set", "aws-token"}, `fleet secret: unknown secret "aws-token"`},
		{"no inventory", "tok\n", []string{"secret", "set", "hcloud-token"}, "fleet secret: flag --inventory: required"},
		{"empty", "\n", []string{"secret", "set", "hcloud-token", "--inventory", "../../inventories/lab.yaml"}, "fleet secret: stdin: empty hcloud-token"},
		{"spaces", "two words\n", []string{"secret", "set", "hcloud-token", "--inventory", "../../inventories/lab.yaml"}, "fleet secret: stdin: the hcloud-token has spaces"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdin = strings.NewReader(tc.in)
			out, errOut, code := fleet(t, tc.args...)
			if code != 2 || out != "" || !strings.HasPrefix(errOut, tc.want) || strings.Count(errOut, "\n") != 1 {
				t.Errorf("exit %d, stdout %q, stderr %q; want 2 and %q", code, out, errOut, tc.want)
			}
			if strings.Contains(errOut, "two words") {
				t.Errorf("the secret was echoed: %q", errOut)
			}
		})
	}
}
