package provision

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/relayfleet/relayfleet/internal/testutil"
)

// adminKeysRunner runs commands with bash on this machine, with HOME set to a
// directory of the test: ~/.ssh is that directory's .ssh.
type adminKeysRunner struct{ home string }

func (r adminKeysRunner) Run(ctx context.Context, cmd string, stdin io.Reader) ([]byte, error) {
	c := exec.CommandContext(ctx, "bash", "-c", cmd)
	c.Env = append(os.Environ(), "HOME="+r.home)
	c.Stdin = stdin
	return c.Output()
}

const (
	adminKeyOld = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl old-admin"
	adminKeyNew = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHnWQDVpEf0bIyYk3ss6qXaB1VyBd+uVmrv5x0dA8a7P new-admin"
)

func TestReplaceAuthorizedKeys(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("bash"); err != nil {
		testutil.Skipf(t, "no bash")
	}
	home := t.TempDir()
	run := adminKeysRunner{home}
	file := filepath.Join(home, ".ssh", "authorized_keys")
	ctx := t.Context()

	// A box without the file gets one, 0600 in a 0700 directory.
	if err := ReplaceAuthorizedKeys(ctx, run, []string{adminKeyOld}, nil); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(file); string(got) != adminKeyOld+"\n" {
		t.Fatalf("authorized_keys %q", got)
	}
	if st, _ := os.Stat(file); st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v", st.Mode())
	}
	if st, _ := os.Stat(filepath.Dir(file)); st.Mode().Perm() != 0o700 {
		t.Errorf(".ssh mode %v", st.Mode())
	}

	// The rotation: the new list replaces the old, duplicates dropped.
	verified := 0
	if err := ReplaceAuthorizedKeys(ctx, run, []string{adminKeyNew, " " + adminKeyNew}, func(context.Context) error {
		verified++
		if got, _ := os.ReadFile(file); string(got) != adminKeyNew+"\n" {
			t.Errorf("verify ran before the new file was in place: %q", got)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(file); string(got) != adminKeyNew+"\n" || verified != 1 {
		t.Fatalf("authorized_keys %q, verified %d times", got, verified)
	}
	if ents, _ := os.ReadDir(filepath.Dir(file)); len(ents) != 1 {
		t.Errorf("left behind: %v", ents)
	}

	// A fresh login that fails puts the old file back.
	err := ReplaceAuthorizedKeys(ctx, run, []string{adminKeyOld}, func(context.Context) error { return errors.New("ssh: unable to authenticate") })
	if err == nil || !strings.Contains(err.Error(), "old keys are back") || !strings.Contains(err.Error(), "unable to authenticate") {
		t.Fatalf("err %v", err)
	}
	if got, _ := os.ReadFile(file); string(got) != adminKeyNew+"\n" {
		t.Fatalf("after a failed login the file holds %q, want the old %q", got, adminKeyNew)
	}

	// Nothing to change: no write, no login.
	if err := ReplaceAuthorizedKeys(ctx, run, []string{adminKeyNew}, func(context.Context) error { t.Error("verify without a change"); return nil }); err != nil {
		t.Fatal(err)
	}
}

func TestRenderAuthorizedKeysRefusesBadInput(t *testing.T) {
	for _, keys := range [][]string{nil, {" "}, {"not a key"}, {adminKeyOld + "\n" + adminKeyNew}} {
		if _, err := RenderAuthorizedKeys(keys); err == nil {
			t.Errorf("%q accepted", keys)
		}
	}
}
