package provision

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/units"
)

func TestParseAuthKeys(t *testing.T) {
	k1, k2 := strings.Repeat("a", 43), strings.Repeat("b", 16)
	keys, err := ParseAuthKeys("# the fleet's keys\n\n" + k1 + "\n  " + k2 + "  until=2026-12-07T12:00:00Z \n")
	if err != nil {
		t.Fatal(err)
	}
	want := []AuthKey{{Secret: k1}, {Secret: k2, Until: time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)}}
	if fmt.Sprint(keys) != fmt.Sprint(want) {
		t.Errorf("keys = %v, want %v", keys, want)
	}
	if got := FormatAuthKeys(keys); got != k1+"\n"+k2+" until=2026-12-07T12:00:00Z\n" {
		t.Errorf("FormatAuthKeys = %q", got)
	}
	for text, msg := range map[string]string{
		"short\n":                            "line 1: the key is 5 bytes, want at least 16",
		"\n" + k1 + " until=tomorrow\n":      `line 2: until="tomorrow" is not an RFC 3339 time`,
		k1 + " expires=2026-12-07T12:00:00Z": `line 1: unknown attribute "expires"`,
	} {
		_, err := ParseAuthKeys(text)
		if err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("%q: err %v, want %s", text, err, msg)
		}
		if err != nil && strings.Contains(err.Error(), k1) {
			t.Errorf("the error shows the key: %v", err)
		}
	}
}

func TestRotateAuthKeys(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	first, _, err := RotateAuthKeys("", now, 24*time.Hour)
	if err != nil || len(first) != 1 || !first[0].Until.IsZero() || len(first[0].Secret) != 43 {
		t.Fatalf("first key: %v, %v", first, err)
	}
	text := FormatAuthKeys(first)
	second, until, err := RotateAuthKeys(text, now, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if len(second) != 2 || second[1].Secret != first[0].Secret || !second[1].Until.Equal(now.Add(24*time.Hour)) || !until.Equal(second[1].Until) {
		t.Fatalf("after rotation: %v (until %v)", second, until)
	}
	if second[0].Secret == first[0].Secret || !second[0].Until.IsZero() {
		t.Fatalf("the new key is not a fresh signing key: %v", second)
	}
	// Inside the overlap both verify; after it the old one is gone.
	if live, _ := ActiveAuthKeys(FormatAuthKeys(second), now.Add(time.Hour)); len(live) != 2 {
		t.Errorf("inside the overlap: %d keys", len(live))
	}
	live, err := ActiveAuthKeys(FormatAuthKeys(second), now.Add(25*time.Hour))
	if err != nil || len(live) != 1 || live[0].Secret != second[0].Secret {
		t.Errorf("after the overlap: %v, %v", live, err)
	}
	// A later rotation drops expired keys and caps the ones left.
	third, _, _ := RotateAuthKeys(FormatAuthKeys(second), now.Add(25*time.Hour), time.Hour)
	if len(third) != 2 || third[1].Secret != second[0].Secret {
		t.Errorf("third rotation: %v", third)
	}
	// No overlap: the old key stops at once.
	now0, _, _ := RotateAuthKeys(text, now, 0)
	if len(now0) != 1 {
		t.Errorf("rotation without overlap kept %d keys", len(now0))
	}
	if _, err := ActiveAuthKeys(strings.Repeat("c", 20)+" until=2020-01-01T00:00:00Z\n", now); !errors.Is(err, ErrNoAuthKey) {
		t.Errorf("all keys expired: err %v", err)
	}
	if first[0].ID() == second[0].ID() || len(first[0].ID()) != 12 || strings.Contains(first[0].Secret, first[0].ID()) {
		t.Errorf("key ids %s %s", first[0].ID(), second[0].ID())
	}
}

// TestDesiredAuth: the key file is part of the plan by hash, the relays
// load it as a credential, and a new key restarts every relay process.
func TestDesiredAuth(t *testing.T) {
	key := []byte(strings.Repeat("k", 43) + "\n")
	plan, err := DesiredAuth(layout(2), "aaaa", key)
	if err != nil {
		t.Fatal(err)
	}
	if plan.State.Files[units.CredentialFile] != Digest(key) || !bytes.Equal(plan.Content[units.CredentialFile], key) {
		t.Errorf("key file not planned: %v", plan.State.Files)
	}
	if !strings.Contains(string(plan.Content["/etc/systemd/system/relay@.service"]), "--auth-key %d/relay-auth") {
		t.Error("the template does not pass the credential")
	}
	rotated, _ := DesiredAuth(layout(2), "aaaa", []byte(strings.Repeat("n", 43)+"\n"+string(key)))
	got := kinds(Diff(rotated.State, clone(plan.State)))
	want := "file " + units.CredentialFile + "\nrestart relay@4443.service\nrestart relay@4444.service"
	if got != want {
		t.Errorf("rotation: Diff =\n%s\nwant\n%s", got, want)
	}
	for _, c := range Diff(rotated.State, HostState{}) {
		if s := c.String(); strings.Contains(s, string(key[:20])) || strings.Contains(s, Digest(key)) {
			t.Errorf("change %q shows the key or its hash", s)
		}
	}
	if _, err := DesiredAuth(layout(2), "aaaa", nil); !errors.Is(err, ErrNoAuthKey) {
		t.Errorf("no key: %v", err)
	}
	if _, err := DesiredAuth(layout(2), "aaaa", []byte("short\n")); err == nil {
		t.Error("a short key was planned")
	}
}

// recorder is a Runner that keeps every command and error text it saw.
type recorder struct {
	Runner
	mu  sync.Mutex
	log bytes.Buffer
}

func (r *recorder) Run(ctx context.Context, cmd string, stdin io.Reader) ([]byte, error) {
	out, err := r.Runner.Run(ctx, cmd, stdin)
	r.mu.Lock()
	defer r.mu.Unlock()
	fmt.Fprintf(&r.log, "$ %s\n%s\n", cmd, out)
	if err != nil {
		fmt.Fprintf(&r.log, "error: %v\n", err)
	}
	return out, err
}

// TestWritePrivate: over real SSH, the key file lands 0600 root in a 0700
// directory (tightened if it was open), it is rewritten when its mode
// drifts, and the key never shows in a command or an answer.
func TestWritePrivate(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		testutil.Skipf(t, "needs root: the key file is chowned to root")
	}
	f := newFixture(t, sshdOpts{})
	run := &recorder{Runner: f.pool.Runner(f.host)}
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "credentials")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "relay-auth")
	secret := "s3cr3t-" + strings.Repeat("x", 36)
	if err := writePrivate(ctx, run, path, []byte(secret+"\n")); err != nil {
		t.Fatal(err)
	}
	check := func() {
		t.Helper()
		for p, want := range map[string]os.FileMode{dir: 0o700, path: 0o600} {
			st, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			if st.Mode().Perm() != want || st.Sys().(*syscall.Stat_t).Uid != 0 {
				t.Errorf("%s: mode %v uid %d, want %v root", p, st.Mode().Perm(), st.Sys().(*syscall.Stat_t).Uid, want)
			}
		}
		if data, _ := os.ReadFile(path); string(data) != secret+"\n" {
			t.Errorf("key file holds %d bytes, not the key", len(data))
		}
	}
	check()
	if ok, err := isPrivate(ctx, run, path); err != nil || !ok {
		t.Errorf("isPrivate = %v, %v after writing", ok, err)
	}
	os.Chmod(path, 0o644)
	if ok, err := isPrivate(ctx, run, path); err != nil || ok {
		t.Errorf("isPrivate = %v, %v for a 0644 key file", ok, err)
	}
	if err := writePrivate(ctx, run, path, []byte(secret+"\n")); err != nil {
		t.Fatal(err)
	}
	check()
	if strings.Contains(run.log.String(), "s3cr3t") {
		t.Errorf("the key reached a command or its output:\n%s", run.log.String())
	}
}

// TestWriteKeys: the first key signs, a key with an end says when, and
// no line holds the secret.
func TestWriteKeys(t *testing.T) {
	keys := []AuthKey{{Secret: "s3cret-new"}, {Secret: "s3cret-old", Until: time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)}}
	var b strings.Builder
	WriteKeys(&b, keys)
	want := "key " + keys[0].ID() + "  signs and verifies, until rotated\nkey " + keys[1].ID() + "  verifies, until 2026-12-04T10:00:00Z\n"
	if b.String() != want || strings.Contains(b.String(), "s3cret") {
		t.Errorf("WriteKeys:\n%s\nwant:\n%s", b.String(), want)
	}
}
