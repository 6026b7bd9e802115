package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/infra/lease"
	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/internal/testutil"
)

// TestSecretAndRevokeTakeTheLease: fleet secret set and fleet token
// revoke take the fleet's lease, as up and converge do: while another
// command holds it, each is refused in one line naming the holder (at
// once, or after --wait, having said whom it waits for), and nothing is
// written; once it is released, the lease is theirs to take.
func TestSecretAndRevokeTakeTheLease(t *testing.T) {
	dir := t.TempDir()
	inv := filepath.Join(dir, "fleet.yaml")
	testutil.WriteFile(t, inv, []byte("version: 1\nname: lkcmd\nsteady:\n  - {name: a, provider: lab, shape: small, count: 1}\n"), 0o644)
	state := filepath.Join(dir, "state")
	ctx := context.Background()
	l, err := lease.Open(ctx, "file://"+filepath.Join(state, "backend"), "lkcmd")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	held, err := l.Take(ctx, lease.Self("fleet up"), 0)
	if err != nil {
		t.Fatal(err)
	}
	base := []string{"--inventory", inv, "--state-dir", state}
	for _, tc := range []struct {
		name, in, cmd string
		args          []string
	}{
		{"secret set", "hcloud-secret-value\n", "fleet secret set", []string{"secret", "set", "hcloud-token"}},
		{"secret set --wait", "hcloud-secret-value\n", "fleet secret set", []string{"secret", "set", "hcloud-token", "--wait", "1s"}},
		{"token revoke", "", "fleet token revoke", []string{"token", "revoke", "--id", "tok-1"}},
		{"token revoke --wait", "", "fleet token revoke", []string{"token", "revoke", "--id", "tok-1", "--wait", "1s"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			out, errOut, code := fleetIn(t, strings.NewReader(tc.in), append(tc.args, base...)...)
			lines := strings.Split(strings.TrimSpace(errOut), "\n")
			last := lines[len(lines)-1]
			if code != exitFailure || out != "" || !strings.HasPrefix(last, tc.cmd+": fleet lkcmd is locked by \"fleet up\" by ") || !strings.Contains(last, "fleet unlock") {
				t.Fatalf("exit %d, stdout %q, stderr %q: want %d, refused naming the holder", code, out, errOut, exitFailure)
			}
			if strings.Contains(errOut, "hcloud-secret-value") {
				t.Errorf("the secret was echoed: %q", errOut)
			}
			if strings.Contains(tc.name, "--wait") {
				if len(lines) != 2 || !strings.HasPrefix(lines[0], "waiting for fleet lkcmd's lease, held by \"fleet up\"") || time.Since(start) < time.Second {
					t.Errorf("with --wait 1s: stderr %q after %s: want a waiting line, then the refusal after 1s", errOut, time.Since(start))
				}
			} else if len(lines) != 1 {
				t.Errorf("stderr %q: want one line", errOut)
			}
			if st, err := l.Read(ctx); err != nil || st.Token != held.Token() || st.Holder.Command != "fleet up" {
				t.Errorf("lease after the refusal: %+v, %v; want fleet up's still", st, err)
			}
		})
	}
	// Released, the lease is taken by the next command (which then goes
	// on to its stack; no Pulumi CLI here: it stops there, the lease given
	// back).
	held.Release()
	t.Setenv(program.PulumiEnv, filepath.Join(dir, "no-pulumi"))
	_, errOut, code := fleetIn(t, strings.NewReader("hcloud-secret-value\n"), append([]string{"secret", "set", "hcloud-token"}, base...)...)
	if code == 0 || strings.Contains(errOut, "is locked by") || !strings.Contains(errOut, "no-pulumi") {
		t.Errorf("secret set after the release: exit %d, %q: want it past the lease, stopped for want of the Pulumi CLI", code, errOut)
	}
	st, err := l.Read(ctx)
	if err != nil || st.Token <= held.Token() || st.Holder.Command != "fleet secret set" || !st.Free(time.Now()) {
		t.Errorf("lease after secret set: %+v, %v: want taken by fleet secret set, then released", st, err)
	}
}
