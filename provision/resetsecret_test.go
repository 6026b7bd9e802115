package provision

import (
	"bytes"
	"context"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/units"
)

// TestEnsureResetSecret: over real SSH, converge makes the box's reset
// secret once (32 bytes, 0600 root in a 0700 root directory), keeps it on
// every later run (the relays' reset keys must not change), tightens its
// modes if they drift without changing it, replaces a short one, and the
// secret never shows in a command or an answer.
func TestEnsureResetSecret(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		testutil.Skipf(t, "needs root: the secret is chowned to root")
	}
	f := newFixture(t, sshdOpts{})
	run := &recorder{Runner: f.pool.Runner(f.host)}
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "credentials")
	p := filepath.Join(dir, "reset-secret")
	state := func(want string) {
		t.Helper()
		if got, err := ProbeResetSecret(ctx, run, p); err != nil || got != want {
			t.Fatalf("ProbeResetSecret = %q, %v; want %q", got, err, want)
		}
	}
	ensure := func(wantCreated bool) []byte {
		t.Helper()
		created, err := EnsureResetSecret(ctx, run, p)
		if err != nil || created != wantCreated {
			t.Fatalf("EnsureResetSecret = %v, %v; want created %v", created, err, wantCreated)
		}
		for path, mode := range map[string]os.FileMode{dir: 0o700, p: 0o600} {
			st, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if st.Mode().Perm() != mode || st.Sys().(*syscall.Stat_t).Uid != 0 {
				t.Errorf("%s: mode %v uid %d, want %v root", path, st.Mode().Perm(), st.Sys().(*syscall.Stat_t).Uid, mode)
			}
		}
		data, err := os.ReadFile(p)
		if err != nil || len(data) != ResetSecretBytes {
			t.Fatalf("secret: %d bytes, %v; want %d", len(data), err, ResetSecretBytes)
		}
		state(SecretPrivate)
		return data
	}
	state(SecretAbsent)
	first := ensure(true)
	if bytes.Equal(first, make([]byte, ResetSecretBytes)) {
		t.Fatal("the secret is all zeros")
	}
	if again := ensure(false); !bytes.Equal(again, first) {
		t.Fatal("a second run changed the secret")
	}
	os.Chmod(p, 0o644)
	state(SecretOpen)
	if again := ensure(false); !bytes.Equal(again, first) {
		t.Fatal("tightening the modes changed the secret")
	}
	os.Chmod(dir, 0o755)
	state(SecretOpen)
	ensure(false)
	if err := os.WriteFile(p, []byte("short"), 0o600); err != nil {
		t.Fatal(err)
	}
	state(SecretAbsent)
	if again := ensure(true); bytes.Equal(again, first) {
		t.Fatal("a short secret was kept")
	}
	// No temporary file is left beside it.
	if m, _ := filepath.Glob(p + ".relayfleet.*"); len(m) > 0 {
		t.Errorf("temporary files left: %v", m)
	}
	log := run.log.String()
	for _, secret := range [][]byte{first, mustRead(t, p)} {
		if strings.Contains(log, string(secret)) || strings.Contains(log, hex.EncodeToString(secret)) {
			t.Errorf("the secret reached a command or its output:\n%s", log)
		}
	}
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestDiffResetSecret: a box without its reset secret gets one made, a
// box whose secret others may read gets it tightened, neither restarts a
// relay, and a box with its secret in place changes nothing.
func TestDiffResetSecret(t *testing.T) {
	plan, err := Desired(layout(2), "aaaa")
	if err != nil {
		t.Fatal(err)
	}
	if plan.State.ResetSecret != SecretPrivate {
		t.Fatalf("desired reset secret %q", plan.State.ResetSecret)
	}
	for have, want := range map[string]string{
		SecretAbsent:  "secret " + units.ResetSecretFile,
		SecretOpen:    "secret " + units.ResetSecretFile,
		SecretPrivate: "",
	} {
		actual := clone(plan.State)
		actual.ResetSecret = have
		if got := kinds(Diff(plan.State, actual)); got != want {
			t.Errorf("secret %s: Diff =\n%s\nwant\n%s", have, got, want)
		}
	}
}
