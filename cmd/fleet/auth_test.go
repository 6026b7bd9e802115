package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/provision"
	"github.com/relayfleet/relayfleet/relay"
)

// memStore is a program.KeyStore in memory: the stack's secrets.
type memStore struct{ secrets map[string]string }

func (m *memStore) ReadSecrets(context.Context) (map[string]string, error) {
	out := map[string]string{}
	for k, v := range m.secrets {
		out[k] = v
	}
	return out, nil
}

func (m *memStore) SetSecret(_ context.Context, k, v string) error {
	m.secrets[k] = v
	return nil
}

// withKeys makes the auth commands use a stack holding text and a clock
// at now.
func withKeys(t *testing.T, text string, now time.Time) *memStore {
	t.Helper()
	m := &memStore{secrets: map[string]string{}}
	if text != "" {
		m.secrets[program.RelayAuthKeysKey] = text
	}
	oldStore, oldClock, oldRelease := openKeyStore, clock, useRelease
	openKeyStore = func(*program.Stack) program.KeyStore { return m }
	clock = func() time.Time { return now }
	// The fleet's release is the --relay-binary build: no backend.
	useRelease = func(_ context.Context, st *program.Stack, relayFlag string, _ bool, _ io.Writer) error {
		path, data, err := provision.ReadRelay(relayFlag)
		if err != nil {
			return err
		}
		st.Program.RelayBinary, st.Program.Release = path, provision.Digest(data)
		return nil
	}
	t.Cleanup(func() { openKeyStore, clock, useRelease = oldStore, oldClock, oldRelease })
	return m
}

const labInventory = "../../inventories/lab.yaml"

var (
	testNow = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	// The fleet's keys: its signing key, its link key, an old signing
	// key kept through a rotation and one past its until.
	signingKey = provision.AuthKey{Seed: bytes.Repeat([]byte{1}, 32)}
	linkKey    = provision.AuthKey{Seed: bytes.Repeat([]byte{2}, 32), Link: true}
	oldKey     = provision.AuthKey{Seed: bytes.Repeat([]byte{3}, 32), Until: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
	goneKey    = provision.AuthKey{Seed: bytes.Repeat([]byte{4}, 32), Until: time.Date(2026, 11, 30, 11, 0, 0, 0, time.UTC)}
	fleetKeys  = provision.FormatAuthKeys([]provision.AuthKey{signingKey, linkKey, oldKey, goneKey})
	// signingState is a fleet's state with its signing and link key.
	signingState = provision.FormatAuthKeys([]provision.AuthKey{signingKey, linkKey})
)

// seedText is a key's seed as the state text holds it, to look for in
// output that must not show it.
func seedText(k provision.AuthKey) string { return base64.StdEncoding.EncodeToString(k.Seed)[:16] }

func TestAuthBadInput(t *testing.T) {
	withKeys(t, fleetKeys, testNow)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"token", "--publish", "live/"}, "fleet token: flag --inventory: required"},
		{[]string{"token", "--inventory", labInventory}, "fleet token: give exactly one of --publish PREFIX or --subscribe PREFIX"},
		{[]string{"token", "--inventory", labInventory, "--publish", "live/", "--subscribe", "live/"}, "fleet token: give exactly one of"},
		{[]string{"token", "--inventory", labInventory, "--publish", "live now/"}, `fleet token: flag --publish: character ' '`},
		{[]string{"token", "--inventory", labInventory, "--subscribe", "../x"}, `fleet token: flag --subscribe: segment ".."`},
		{[]string{"token", "--inventory", labInventory, "--publish", ""}, "fleet token: flag --publish: empty"},
		{[]string{"token", "--inventory", labInventory, "--publish", "live/", "--ttl", "0s"}, "fleet token: flag --ttl: 0s is out of range: want 1s to 24h"},
		{[]string{"token", "--inventory", labInventory, "--publish", "live/", "--ttl", "25h"}, "fleet token: flag --ttl: 25h0m0s is out of range: want 1s to 24h"},
		{[]string{"token", "--inventory", labInventory, "--publish", "live/", "--ttl", "8760h"}, "fleet token: flag --ttl: 8760h0m0s is out of range: want 1s to 24h"},
		{[]string{"token", "--inventory", labInventory, "--publish", "live/", "--ttl", "soon"}, "fleet token: flag --ttl:"},
		{[]string{"token", "--inventory", "/nonexistent/fleet.yaml", "--publish", "live/"}, "fleet token: /nonexistent/fleet.yaml"},
		{[]string{"auth"}, "fleet auth: want a subcommand: export, rotate or show"},
		{[]string{"auth", "list"}, `fleet auth: unknown subcommand "list" (want export, rotate or show)`},
		{[]string{"auth", "show"}, "fleet auth show: flag --inventory: required"},
		{[]string{"auth", "export", "--inventory", labInventory}, "fleet auth export: flag --out: required"},
		{[]string{"auth", "export", "--inventory", labInventory, "--out", "/nonexistent/dir/origin.keys"}, "fleet auth export: flag --out: no directory /nonexistent/dir"},
		{[]string{"auth", "export", "--inventory", labInventory, "--out", "/dev/null"}, "fleet auth export: flag --out: /dev/null is not a regular file"},
		{[]string{"auth", "rotate", "--inventory", labInventory, "--overlap", "-1h", "--relay-binary", "/bin/sh"}, "fleet auth rotate: flag --overlap: -1h0m0s is out of range: want 0s to 720h"},
		{[]string{"auth", "rotate", "--inventory", labInventory, "--overlap", "800h", "--relay-binary", "/bin/sh"}, "fleet auth rotate: flag --overlap: 800h0m0s is out of range: want 0s to 720h"},
		{[]string{"converge", "--inventory", labInventory, "--stack", "a b", "--relay-binary", "/bin/sh"}, `fleet converge: flag --stack: want letters`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			out, errOut, code := fleet(t, tc.args...)
			if code != 2 || out != "" || !strings.HasPrefix(errOut, tc.want) || strings.Count(errOut, "\n") != 1 {
				t.Errorf("exit %d, stdout %q, stderr %q; want 2 and %q", code, out, errOut, tc.want)
			}
		})
	}
}

// TestTokenSignsWithTheFleetKey: fleet token signs with the first
// unexpired key of the stack's key file, for the prefix and TTL asked.
func TestTokenSignsWithTheFleetKey(t *testing.T) {
	store := withKeys(t, fleetKeys, testNow)
	out, errOut, code := fleet(t, "token", "--inventory", labInventory, "--publish", "live/", "--ttl", "2h")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	tok := strings.TrimSpace(out)
	a, err := relay.NewAuthenticator(signingKey.Seed)
	if err != nil {
		t.Fatal(err)
	}
	c, err := a.Verify(tok)
	if err != nil {
		t.Fatalf("the fleet's signing key does not verify the token: %v", err)
	}
	if strings.Join(c.Put, ",") != "live" || len(c.Get) != 0 {
		t.Errorf("claims put %v get %v, want put live (relay.NewToken's clean path) only", c.Put, c.Get)
	}
	if ttl := c.Expires - c.IssuedAt; ttl != 7200 {
		t.Errorf("ttl %ds, want 7200", ttl)
	}
	old, _ := relay.NewAuthenticator(oldKey.Seed)
	if _, err := old.Verify(tok); err == nil {
		t.Error("signed with the old key, not the first")
	}
	link, _ := relay.NewAuthenticator(linkKey.Seed)
	if _, err := link.Verify(tok); err == nil {
		t.Error("signed with the link key")
	}
	// The expired key was dropped from the stack on the way.
	if got := store.secrets[program.RelayAuthKeysKey]; strings.Contains(got, base64.StdEncoding.EncodeToString(goneKey.Seed)) || !strings.Contains(got, base64.StdEncoding.EncodeToString(oldKey.Seed)) {
		t.Errorf("stack keys after the read:\n%s", got)
	}
	out, _, code = fleet(t, "token", "--inventory", labInventory, "--subscribe", "radio/")
	c, err = a.Verify(strings.TrimSpace(out))
	if code != 0 || err != nil || strings.Join(c.Get, ",") != "radio" || c.Expires-c.IssuedAt != 3600 {
		t.Errorf("subscribe token: exit %d, %v, claims %+v (want get radio/ for 1h)", code, err, c)
	}
}

func TestTokenWithoutAKey(t *testing.T) {
	spent := oldKey
	spent.Until = time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	for _, text := range []string{"", provision.FormatAuthKeys([]provision.AuthKey{spent})} {
		store := withKeys(t, text, testNow)
		out, errOut, code := fleet(t, "token", "--inventory", labInventory, "--publish", "live/")
		if code != 1 || out != "" || !strings.Contains(errOut, "run fleet up") || strings.Count(errOut, "\n") != 1 {
			t.Errorf("keys %q: exit %d, stdout %q, stderr %q; want 1 and run fleet up", text, code, out, errOut)
		}
		if store.secrets[program.RelayAuthKeysKey] != text && text == "" {
			t.Error("fleet token made a key")
		}
	}
}

// TestFleetAuthKeysFirstKey: fleet up and converge make the fleet's first
// keys, a fresh signing key and link key, and keep them.
func TestFleetAuthKeysFirstKey(t *testing.T) {
	store := withKeys(t, "", testNow)
	text, keys, err := fleetAuthKeys(context.Background(), store, true)
	if err != nil || len(keys) != 2 || len(keys[0].Seed) != 32 || store.secrets[program.RelayAuthKeysKey] != provision.FormatAuthKeys(keys) || text != provision.BoxKeyFile(keys, testNow) {
		t.Fatalf("first key: %q %v %v; stored %q", text, keys, err, store.secrets)
	}
	again, _, _ := fleetAuthKeys(context.Background(), store, true)
	if again != text {
		t.Error("a second read made another key")
	}
}

func TestAuthShowPrintsIDsOnly(t *testing.T) {
	withKeys(t, fleetKeys, testNow)
	out, errOut, code := fleet(t, "auth", "show", "--inventory", labInventory)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	want := "key " + signingKey.ID() + "  signs and verifies, until rotated\n" +
		"key " + linkKey.ID() + "  link key (subscribe only), until rotated\n" +
		"key " + oldKey.ID() + "  verifies, until 2026-12-01T12:00:00Z\n"
	if out != want {
		t.Errorf("auth show:\n%s\nwant\n%s", out, want)
	}
	for _, k := range []provision.AuthKey{signingKey, linkKey, oldKey, goneKey} {
		if strings.Contains(out+errOut, seedText(k)) {
			t.Errorf("a key was printed: %s", out)
		}
	}
}

func TestAuthExportWritesA0600File(t *testing.T) {
	withKeys(t, fleetKeys, testNow)
	path := filepath.Join(t.TempDir(), "origin.keys")
	out, errOut, code := fleet(t, "auth", "export", "--inventory", labInventory, "--out", path)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(data) != provision.PublicKeyFile([]provision.AuthKey{signingKey, linkKey, oldKey}) {
		t.Errorf("exported:\n%s", data)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", st.Mode().Perm())
	}
	if strings.Contains(out+string(data), seedText(signingKey)) || strings.Contains(out+string(data), seedText(oldKey)) || strings.Contains(out+string(data), seedText(linkKey)) {
		t.Errorf("a private key was printed or exported: %s", out)
	}
}

// TestAuthRotateStoresNewAndOld: rotate keeps the new key first and the
// old one until now+overlap, and says so, before it converges (here it
// fails: no stack lists boxes to converge, which it reports).
func TestAuthRotateStoresNewAndOld(t *testing.T) {
	store := withKeys(t, signingState, testNow)
	relayBin, _ := os.Executable() // any ELF file passes as the relay build
	out, errOut, code := fleet(t, "auth", "rotate", "--inventory", labInventory, "--overlap", "6h",
		"--relay-binary", relayBin, "--lab-dir", t.TempDir())
	keys, err := provision.ParseAuthKeys(store.secrets[program.RelayAuthKeysKey])
	if err != nil || len(keys) != 4 {
		t.Fatalf("stored keys %v %v", keys, err)
	}
	if keys[0].ID() == signingKey.ID() || !keys[0].Until.IsZero() || keys[2].ID() != signingKey.ID() || !keys[2].Until.Equal(testNow.Add(6*time.Hour)) {
		t.Errorf("stored keys: %v", keys)
	}
	if !strings.Contains(out, "new signing key "+keys[0].ID()) || !strings.Contains(out, "old keys verify until 2026-11-30T18:00:00Z") {
		t.Errorf("rotate said:\n%s", out)
	}
	if strings.Contains(out+errOut, seedText(keys[0])) || strings.Contains(out+errOut, seedText(signingKey)) {
		t.Errorf("a key was printed:\n%s%s", out, errOut)
	}
	if code == 0 {
		t.Errorf("rotate succeeded without boxes to converge:\n%s", out)
	}
}

// TestTokenRevokeKeepsTheList: fleet token prints the token's id;
// fleet token revoke --id keeps an entry for it in the stack until the
// longest token lifetime, --prefix one for the tokens issued until now,
// dropping the entries past their until, then goes to the boxes.
func TestTokenRevokeKeepsTheList(t *testing.T) {
	store := withKeys(t, fleetKeys, testNow)
	store.secrets[program.RelayRevocationsKey] = "jti=old until=2026-11-30T11:00:00Z\n"
	out, errOut, code := fleet(t, "token", "--inventory", labInventory, "--subscribe", "live/")
	c, err := relay.TokenClaims(strings.TrimSpace(out))
	if code != 0 || err != nil || c.ID == "" || !strings.Contains(errOut, "token id "+c.ID+",") {
		t.Fatalf("fleet token: exit %d, claims %+v %v, stderr %q: want the token id on stderr", code, c, err, errOut)
	}
	out, _, code = fleet(t, "token", "revoke", "--inventory", labInventory, "--id", c.ID, "--lab-dir", t.TempDir())
	list := store.secrets[program.RelayRevocationsKey]
	if !strings.Contains(list, "jti="+c.ID+" until=2026-12-01T12:00:00Z\n") || strings.Contains(list, "jti=old") {
		t.Errorf("stored list:\n%s", list)
	}
	if !strings.Contains(out, "revoked jti="+c.ID) || code == 0 {
		t.Errorf("revoke without boxes: exit %d, said:\n%s", code, out)
	}
	fleet(t, "token", "revoke", "--inventory", labInventory, "--prefix", "live/b", "--until", "2026-12-01T00:00:00Z", "--lab-dir", t.TempDir())
	rs, err := provision.ParseRevocations(store.secrets[program.RelayRevocationsKey])
	if err != nil || len(rs) != 2 || rs[1].Prefix != "live/b" || !rs[1].IssuedBefore.Equal(testNow) || !rs[1].Until.Equal(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("list after the prefix revocation: %+v, %v", rs, err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"token", "revoke", "--inventory", labInventory}, "fleet token revoke: give exactly one of --id JTI"},
		{[]string{"token", "revoke", "--inventory", labInventory, "--id", "a", "--prefix", "live/"}, "fleet token revoke: give exactly one of"},
		{[]string{"token", "revoke", "--inventory", labInventory, "--id", "a=b"}, `fleet token revoke: flag --id "a=b"`},
		{[]string{"token", "revoke", "--inventory", labInventory, "--prefix", "../x"}, `fleet token revoke: flag --prefix: segment ".."`},
		{[]string{"token", "revoke", "--inventory", labInventory, "--id", "a", "--until", "tomorrow"}, `fleet token revoke: flag --until "tomorrow": want an RFC 3339 time`},
		{[]string{"token", "revoke", "--inventory", labInventory, "--id", "a", "--until", "2026-11-01T00:00:00Z"}, "fleet token revoke: flag --until 2026-11-01T00:00:00Z: already past"},
	} {
		out, errOut, code := fleet(t, tc.args...)
		if code != 2 || out != "" || !strings.HasPrefix(errOut, tc.want) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 2 and %q", tc.args, code, out, errOut, tc.want)
		}
	}
}

// TestRelayCredentialsCannotMint: what the fleet hands out, the key file
// pushed to every box and the export for origins, verifies the fleet's
// tokens and cannot make one that publishes: it holds no signing key,
// and the link key it carries makes tokens that may only subscribe. A
// year-long token is refused even with the fleet's own signing key.
func TestRelayCredentialsCannotMint(t *testing.T) {
	store := withKeys(t, fleetKeys, testNow)
	boxText, _, err := fleetAuthKeys(context.Background(), store, false)
	if err != nil {
		t.Fatal(err)
	}
	box := filepath.Join(t.TempDir(), "relay-auth")
	os.WriteFile(box, []byte(boxText), 0o600)
	export := filepath.Join(t.TempDir(), "origin.keys")
	if _, errOut, code := fleet(t, "auth", "export", "--inventory", labInventory, "--out", export); code != 0 {
		t.Fatalf("export: %s", errOut)
	}
	out, errOut, code := fleet(t, "token", "--inventory", labInventory, "--publish", "live/")
	if code != 0 {
		t.Fatalf("fleet token: %s", errOut)
	}
	fleetTok := strings.TrimSpace(out)
	now := time.Now()
	for _, file := range []string{box, export} {
		v, err := relay.LoadAuthenticator(file)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if c, err := v.Verify(fleetTok); err != nil || strings.Join(c.Put, ",") != "live" {
			t.Errorf("%s does not verify fleet token: %+v, %v", filepath.Base(file), c, err)
		}
		if _, err := v.NewToken("live", "", true, false, time.Hour); !errors.Is(err, relay.ErrNoPrivateKey) {
			t.Errorf("%s signed a token: %v", filepath.Base(file), err)
		}
		// Every private key in the file, used by hand to sign a token
		// that publishes: none verifies.
		data, _ := os.ReadFile(file)
		keys, err := relay.ParseKeyFile(file, data)
		if err != nil {
			t.Fatal(err)
		}
		for i, k := range keys {
			if k.Private == nil {
				continue
			}
			forger, err := relay.NewAuthenticator(k.Private)
			if err != nil {
				t.Fatal(err)
			}
			forged, err := forger.NewToken("live", "", true, false, time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := v.Verify(forged); err == nil {
				t.Errorf("%s: a publish token signed with its key %d verifies", filepath.Base(file), i+1)
			}
		}
		if strings.Contains(string(data), "ed25519-private:") {
			t.Errorf("%s holds a signing key", filepath.Base(file))
		}
	}
	// A year-long token, signed with the fleet's own key, is refused.
	signer, _ := relay.NewAuthenticator(signingKey.Seed)
	year, err := signer.Sign(relay.Claims{Get: []string{"live"}, IssuedAt: now.Unix(), Expires: now.AddDate(1, 0, 0).Unix()})
	if err != nil {
		t.Fatal(err)
	}
	v, _ := relay.LoadAuthenticator(box)
	if _, err := v.Verify(year); err == nil || !strings.Contains(err.Error(), "lifetime") {
		t.Errorf("a year-long token: %v, want refused for its lifetime", err)
	}
}

// TestAuthRotateMovesHS256: fleet auth rotate on a fleet whose state holds
// an earlier relayfleet's HS256 key moves it to Ed25519 keys when the
// fleet's relay build reads them, and says that tokens it signed stop
// working; with a build that does not, it refuses and changes nothing.
func TestAuthRotateMovesHS256(t *testing.T) {
	const hs256 = "TmV3U2lnbmluZ0tleU5ld1NpZ25pbmdLZXlOZXdTaWc\n"
	store := withKeys(t, hs256, testNow)
	oldBuild := filepath.Join(t.TempDir(), "relay")
	os.WriteFile(oldBuild, append([]byte("\x7fELF"), make([]byte, 64)...), 0o755)
	_, errOut, code := fleet(t, "auth", "rotate", "--inventory", labInventory, "--relay-binary", oldBuild, "--lab-dir", t.TempDir())
	if code == 0 || !strings.Contains(errOut, "predates Ed25519 key files") || store.secrets[program.RelayAuthKeysKey] != hs256 {
		t.Errorf("old build: exit %d, stderr %q, state %q", code, errOut, store.secrets[program.RelayAuthKeysKey])
	}
	if _, errOut, code := fleet(t, "token", "--inventory", labInventory, "--publish", "live/"); code == 0 || !strings.Contains(errOut, "fleet up or fleet auth rotate moves the fleet to Ed25519") {
		t.Errorf("fleet token with HS256 state: exit %d, %q", code, errOut)
	}
	relayBin, _ := os.Executable() // links the relay: it reads Ed25519 key files
	out, _, _ := fleet(t, "auth", "rotate", "--inventory", labInventory, "--relay-binary", relayBin, "--lab-dir", t.TempDir())
	keys, err := provision.ParseAuthKeys(store.secrets[program.RelayAuthKeysKey])
	if err != nil || len(keys) != 2 || !strings.Contains(out, "the fleet's HS256 key is dropped") {
		t.Errorf("moved keys %v, %v; rotate said:\n%s", keys, err, out)
	}
}
