package provision

import (
	"bytes"
	"context"
	"encoding/base64"
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

// fixedKey is an AuthKey whose seed is b repeated.
func fixedKey(b byte, link bool) AuthKey {
	return AuthKey{Seed: bytes.Repeat([]byte{b}, 32), Link: link}
}

// testBoxKeys is a relay key file (BoxKeyFile) of fixed keys.
func testBoxKeys() []byte {
	return []byte(BoxKeyFile([]AuthKey{fixedKey(1, false), fixedKey(2, true)}, time.Now()))
}

func TestParseAuthKeys(t *testing.T) {
	k1, k2 := fixedKey(1, false), fixedKey(2, true)
	k2.Until = time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	b1, b2 := base64.StdEncoding.EncodeToString(k1.Seed), base64.StdEncoding.EncodeToString(k2.Seed)
	keys, err := ParseAuthKeys("# the fleet's keys\n\ned25519-private:" + b1 + "\n  ed25519-link-private:" + b2 + "  until=2026-12-07T12:00:00Z \n")
	if err != nil {
		t.Fatal(err)
	}
	want := []AuthKey{k1, k2}
	if fmt.Sprint(keys) != fmt.Sprint(want) {
		t.Errorf("keys = %v, want %v", keys, want)
	}
	if got := FormatAuthKeys(keys); got != "ed25519-private:"+b1+"\ned25519-link-private:"+b2+" until=2026-12-07T12:00:00Z\n" {
		t.Errorf("FormatAuthKeys = %q", got)
	}
	for text, msg := range map[string]string{
		"ed25519-private:c2hvcnQ=\n":                              "line 1: ed25519-private: want the standard base64 of 32 bytes",
		"\ned25519-private:" + b1 + " until=tomorrow\n":           `line 2: until="tomorrow" is not an RFC 3339 time`,
		"ed25519-private:" + b1 + " expires=2026-12-07T12:00:00Z": `line 1: unknown attribute "expires"`,
		"ed25519-public:" + b1 + "\n":                             "key 1 is ed25519-public; the fleet's state keeps private keys",
		strings.Repeat("k", 43) + "\n":                            "line 1: " + ErrLegacyAuthKeys.Error(),
	} {
		_, err := ParseAuthKeys(text)
		if err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("%q: err %v, want %s", text, err, msg)
		}
		if err != nil && (strings.Contains(err.Error(), b1) || strings.Contains(err.Error(), "kkkk")) {
			t.Errorf("the error shows the key: %v", err)
		}
	}
	if _, err := ParseAuthKeys(strings.Repeat("k", 43) + "\n"); !errors.Is(err, ErrLegacyAuthKeys) {
		t.Errorf("HS256 state: err %v, want ErrLegacyAuthKeys", err)
	}
}

// TestBoxKeyFile: the file relays get holds the public halves and the
// first live link key, never a private signing key; CheckBoxKeyFile
// refuses one that does.
func TestBoxKeyFile(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	sign, link, oldSign, oldLink := fixedKey(1, false), fixedKey(2, true), fixedKey(3, false), fixedKey(4, true)
	oldSign.Until, oldLink.Until = now.Add(time.Hour), now.Add(time.Hour)
	keys := []AuthKey{sign, link, oldSign, oldLink}
	box := BoxKeyFile(keys, now)
	enc := func(b []byte) string { return base64.StdEncoding.EncodeToString(b) }
	want := "format:ed25519\n# the fleet's relay token keys, public halves: they verify and cannot sign\n" +
		"ed25519-public:" + enc(sign.Public()) + "\n" +
		"ed25519-link-public:" + enc(link.Public()) + "\n" +
		"ed25519-public:" + enc(oldSign.Public()) + " until=2026-11-30T13:00:00Z\n" +
		"ed25519-link-public:" + enc(oldLink.Public()) + " until=2026-11-30T13:00:00Z\n" +
		"ed25519-link-private:" + enc(link.Seed) + "\n"
	if box != want {
		t.Errorf("BoxKeyFile:\n%s\nwant\n%s", box, want)
	}
	for _, k := range []AuthKey{sign, oldSign, oldLink} {
		if strings.Contains(box, enc(k.Seed)) {
			t.Errorf("the box file holds the private half of key %s", k.ID())
		}
	}
	if err := CheckBoxKeyFile(box); err != nil {
		t.Errorf("CheckBoxKeyFile(BoxKeyFile): %v", err)
	}
	if pub := PublicKeyFile(keys); strings.Contains(pub, "private") || CheckBoxKeyFile(pub) != nil {
		t.Errorf("PublicKeyFile:\n%s", pub)
	}
	for text, msg := range map[string]string{
		box + FormatAuthKeys([]AuthKey{sign}):  "key 6 is a private signing key (ed25519-private), which never goes to a relay",
		strings.Repeat("k", 43) + "\n":         ErrLegacyAuthKeys.Error(),
		"format:ed25519\n":                     "no ed25519-public key",
		FormatAuthKeys([]AuthKey{link}) + "\n": "no ed25519-public key",
	} {
		if err := CheckBoxKeyFile(text); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("CheckBoxKeyFile: err %v, want %q", err, msg)
		}
	}
}

func TestRotateAuthKeys(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	first, _, legacy, err := RotateAuthKeys("", now, 24*time.Hour)
	if err != nil || len(first) != 2 || first[0].Link || !first[1].Link || !first[0].Until.IsZero() || len(first[0].Seed) != 32 || legacy {
		t.Fatalf("first keys: %v, %v", first, err)
	}
	text := FormatAuthKeys(first)
	second, until, _, err := RotateAuthKeys(text, now, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if len(second) != 4 || second[2].ID() != first[0].ID() || second[3].ID() != first[1].ID() || !second[2].Until.Equal(now.Add(24*time.Hour)) || !until.Equal(second[2].Until) {
		t.Fatalf("after rotation: %v (until %v)", second, until)
	}
	if second[0].ID() == first[0].ID() || second[1].ID() == first[1].ID() || !second[0].Until.IsZero() || second[0].Link || !second[1].Link {
		t.Fatalf("the new keys are not a fresh signing key and link key: %v", second)
	}
	// Inside the overlap all verify; after it the old ones are gone.
	if live, _ := ActiveAuthKeys(FormatAuthKeys(second), now.Add(time.Hour)); len(live) != 4 {
		t.Errorf("inside the overlap: %d keys", len(live))
	}
	live, err := ActiveAuthKeys(FormatAuthKeys(second), now.Add(25*time.Hour))
	if err != nil || len(live) != 2 || live[0].ID() != second[0].ID() {
		t.Errorf("after the overlap: %v, %v", live, err)
	}
	if s, err := SigningKey(second); err != nil || s.ID() != second[0].ID() {
		t.Errorf("SigningKey: %v, %v", s, err)
	}
	// A later rotation drops expired keys and caps the ones left.
	third, _, _, _ := RotateAuthKeys(FormatAuthKeys(second), now.Add(25*time.Hour), time.Hour)
	if len(third) != 4 || third[2].ID() != second[0].ID() {
		t.Errorf("third rotation: %v", third)
	}
	// No overlap: the old keys stop at once.
	now0, _, _, _ := RotateAuthKeys(text, now, 0)
	if len(now0) != 2 {
		t.Errorf("rotation without overlap kept %d keys", len(now0))
	}
	spent := fixedKey(9, false)
	spent.Until = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, err := ActiveAuthKeys(FormatAuthKeys([]AuthKey{spent}), now); !errors.Is(err, ErrNoAuthKey) {
		t.Errorf("all keys expired: err %v", err)
	}
	if first[0].ID() == second[0].ID() || len(first[0].ID()) != 12 || strings.Contains(base64.StdEncoding.EncodeToString(first[0].Seed), first[0].ID()) {
		t.Errorf("key ids %s %s", first[0].ID(), second[0].ID())
	}
	// State holding an earlier relayfleet's HS256 key: the rotation
	// drops it and says so.
	moved, _, legacy, err := RotateAuthKeys(strings.Repeat("k", 43)+"\n", now, 24*time.Hour)
	if err != nil || !legacy || len(moved) != 2 {
		t.Errorf("rotation of HS256 state: %v, legacy %v, %v", moved, legacy, err)
	}
}

// TestReadsEd25519KeyFiles: a build that knows the format line reads
// the fleet's key files; one before it does not.
func TestReadsEd25519KeyFiles(t *testing.T) {
	if !ReadsEd25519KeyFiles([]byte("\x7fELF...format:ed25519...")) || ReadsEd25519KeyFiles([]byte("\x7fELF...until=...")) {
		t.Error("ReadsEd25519KeyFiles")
	}
}

// TestDesiredAuth: the key file is part of the plan by hash, the relays
// load it as a credential, and a new key restarts every relay process.
func TestDesiredAuth(t *testing.T) {
	key := testBoxKeys()
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
	rotated, _ := DesiredAuth(layout(2), "aaaa", []byte(BoxKeyFile([]AuthKey{fixedKey(5, false), fixedKey(6, true), fixedKey(1, false)}, time.Now())))
	got := kinds(Diff(rotated.State, clone(plan.State)))
	want := "file " + units.CredentialFile + "\nrestart relay@4443.service\nrestart relay@4444.service"
	if got != want {
		t.Errorf("rotation: Diff =\n%s\nwant\n%s", got, want)
	}
	for _, c := range Diff(rotated.State, HostState{}) {
		if s := c.String(); strings.Contains(s, string(key[40:60])) || strings.Contains(s, Digest(key)) {
			t.Errorf("change %q shows the key or its hash", s)
		}
	}
	if _, err := DesiredAuth(layout(2), "aaaa", nil); !errors.Is(err, ErrNoAuthKey) {
		t.Errorf("no key: %v", err)
	}
	if _, err := DesiredAuth(layout(2), "aaaa", []byte("short\n")); err == nil {
		t.Error("a short key was planned")
	}
	if _, err := DesiredAuth(layout(2), "aaaa", []byte(FormatAuthKeys([]AuthKey{fixedKey(1, false)}))); err == nil {
		t.Error("a private signing key was planned for a box")
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

// TestWriteKeys: the first key signs, the link key says what it is, a
// key with an end says when, and no line holds a key.
func TestWriteKeys(t *testing.T) {
	old := fixedKey(2, false)
	old.Until = time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	keys := []AuthKey{fixedKey(1, false), fixedKey(3, true), old}
	var b strings.Builder
	WriteKeys(&b, keys)
	want := "key " + keys[0].ID() + "  signs and verifies, until rotated\nkey " + keys[1].ID() + "  link key (subscribe only), until rotated\nkey " + keys[2].ID() + "  verifies, until 2026-12-04T10:00:00Z\n"
	if b.String() != want || strings.Contains(b.String(), base64.StdEncoding.EncodeToString(keys[0].Seed)[:8]) {
		t.Errorf("WriteKeys:\n%s\nwant:\n%s", b.String(), want)
	}
}
