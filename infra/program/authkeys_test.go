package program

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/provision"
)

// memKeys is a KeyStore in memory that counts its writes.
type memKeys struct {
	secrets map[string]string
	writes  int
}

func (m *memKeys) ReadSecrets(context.Context) (map[string]string, error) {
	out := map[string]string{}
	for k, v := range m.secrets {
		out[k] = v
	}
	return out, nil
}

func (m *memKeys) SetSecret(_ context.Context, key, value string) error {
	m.secrets[key] = value
	m.writes++
	return nil
}

// key is a fixed AuthKey whose seed is b repeated.
func key(b byte, link bool, until time.Time) provision.AuthKey {
	return provision.AuthKey{Seed: bytes.Repeat([]byte{b}, 32), Link: link, Until: until}
}

// legacyState is the stack secret of an earlier relayfleet: HS256 keys.
const legacyState = "TmV3U2lnbmluZ0tleU5ld1NpZ25pbmdLZXlOZXdTaWc\nT2xkS2V5T2xkS2V5T2xkS2V5T2xkS2V5T2xkS2V5T2x until=2026-12-01T12:00:00Z\n"

// TestFleetAuthKeys: a fleet's first keys are made only when asked (and
// kept), an expired key is dropped from the stack, a key file that
// changes nothing is not rewritten, and what relays get is the public
// halves and the link key.
func TestFleetAuthKeys(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	empty := &memKeys{secrets: map[string]string{}}
	if _, _, err := FleetAuthKeys(ctx, empty, now, false); !errors.Is(err, provision.ErrNoAuthKey) || empty.writes != 0 {
		t.Fatalf("no key, no create: %v, %d writes; want ErrNoAuthKey and nothing written", err, empty.writes)
	}
	text, keys, err := FleetAuthKeys(ctx, empty, now, true)
	if err != nil || len(keys) != 2 || empty.secrets[RelayAuthKeysKey] != provision.FormatAuthKeys(keys) || text != provision.BoxKeyFile(keys, now) || empty.writes != 1 {
		t.Fatalf("first keys: %q %v %v, stored %q", text, keys, err, empty.secrets)
	}
	again, _, err := FleetAuthKeys(ctx, empty, now, true)
	if err != nil || again != text || empty.writes != 1 {
		t.Errorf("second read: %q (%v), %d writes; want the same keys, not rewritten", again, err, empty.writes)
	}

	signing, link := key(1, false, time.Time{}), key(2, true, time.Time{})
	old, gone := key(3, false, now.Add(24*time.Hour)), key(4, false, now.Add(-time.Hour))
	store := &memKeys{secrets: map[string]string{RelayAuthKeysKey: provision.FormatAuthKeys([]provision.AuthKey{signing, link, old, gone})}}
	text, keys, err = FleetAuthKeys(ctx, store, now, false)
	want := []provision.AuthKey{signing, link, old}
	if err != nil || len(keys) != 3 || text != provision.BoxKeyFile(want, now) || store.secrets[RelayAuthKeysKey] != provision.FormatAuthKeys(want) || store.writes != 1 {
		t.Errorf("expired key: %q %v %v, %d writes; want it dropped from the stack", text, keys, err, store.writes)
	}
	if err := provision.CheckBoxKeyFile(text); err != nil || strings.Contains(text, provision.FormatAuthKeys([]provision.AuthKey{signing})) {
		t.Errorf("the relays' key file holds the signing key, or is refused (%v):\n%s", err, text)
	}

	bad := &memKeys{secrets: map[string]string{RelayAuthKeysKey: "not a key\n"}}
	if _, _, err := FleetAuthKeys(ctx, bad, now, true); err == nil || !strings.HasPrefix(err.Error(), "stack secret relayAuthKeys: ") || bad.writes != 0 {
		t.Errorf("a broken key file: %v, %d writes; want an error naming the secret, nothing written", err, bad.writes)
	}
}

// TestFleetAuthKeysMigration: state holding an earlier relayfleet's
// HS256 key is refused where nothing may change it (fleet token, show,
// export), and moves to Ed25519 keys where fleet up asks for keys.
func TestFleetAuthKeysMigration(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	store := &memKeys{secrets: map[string]string{RelayAuthKeysKey: legacyState}}
	if _, _, err := FleetAuthKeys(ctx, store, now, false); !errors.Is(err, provision.ErrLegacyAuthKeys) || store.writes != 0 {
		t.Fatalf("HS256 state, no create: %v, %d writes", err, store.writes)
	}
	text, keys, err := FleetAuthKeys(ctx, store, now, true)
	if err != nil || len(keys) != 2 || store.writes != 1 || strings.Contains(store.secrets[RelayAuthKeysKey], "TmV3U2ln") {
		t.Fatalf("HS256 state moved: %v, %v, %d writes, stored %q", keys, err, store.writes, store.secrets[RelayAuthKeysKey])
	}
	if err := provision.CheckBoxKeyFile(text); err != nil {
		t.Errorf("the relays' key file after the move: %v", err)
	}
}

// TestCheckKeysForRelease: an HS256 state does not move to Ed25519 keys
// while the fleet's relay build cannot read them; otherwise nothing is
// checked.
func TestCheckKeysForRelease(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	oldBuild, newBuild := filepath.Join(dir, "old"), filepath.Join(dir, "new")
	os.WriteFile(oldBuild, []byte("\x7fELF relay: key is %d bytes, want at least 16"), 0o755)
	os.WriteFile(newBuild, []byte("\x7fELF relay: format:ed25519"), 0o755)
	legacy := &memKeys{secrets: map[string]string{RelayAuthKeysKey: legacyState}}
	if err := CheckKeysForRelease(ctx, legacy, oldBuild); !errors.Is(err, provision.ErrLegacyAuthKeys) || !strings.Contains(err.Error(), "predates Ed25519 key files") {
		t.Errorf("HS256 state, old build: %v", err)
	}
	if err := CheckKeysForRelease(ctx, legacy, newBuild); err != nil {
		t.Errorf("HS256 state, new build: %v", err)
	}
	moved := &memKeys{secrets: map[string]string{RelayAuthKeysKey: provision.FormatAuthKeys([]provision.AuthKey{key(1, false, time.Time{})})}}
	if err := CheckKeysForRelease(ctx, moved, filepath.Join(dir, "absent")); err != nil {
		t.Errorf("Ed25519 state: %v (the build need not even be read)", err)
	}
}

// TestRotateFleetAuthKeys: a rotation stores a new signing key and link
// key first and the old ones verifying until now+overlap; a fleet
// without a key gets its first; one with an HS256 key moves to Ed25519
// and says so; a broken key file is not overwritten.
func TestRotateFleetAuthKeys(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	signing, link := key(1, false, time.Time{}), key(2, true, time.Time{})
	store := &memKeys{secrets: map[string]string{RelayAuthKeysKey: provision.FormatAuthKeys([]provision.AuthKey{signing, link})}}
	text, keys, until, legacy, err := RotateFleetAuthKeys(ctx, store, now, time.Hour)
	if err != nil || legacy || len(keys) != 4 || keys[2].ID() != signing.ID() || keys[3].ID() != link.ID() || keys[0].ID() == signing.ID() || !until.Equal(now.Add(time.Hour)) {
		t.Fatalf("rotate: %v %v %v", keys, until, err)
	}
	if text != provision.BoxKeyFile(keys, now) || store.secrets[RelayAuthKeysKey] != provision.FormatAuthKeys(keys) ||
		!strings.Contains(store.secrets[RelayAuthKeysKey], strings.TrimSuffix(provision.FormatAuthKeys([]provision.AuthKey{signing}), "\n")+" until=2026-11-30T13:00:00Z") || store.writes != 1 {
		t.Errorf("stored %q (%d writes)", store.secrets[RelayAuthKeysKey], store.writes)
	}
	empty := &memKeys{secrets: map[string]string{}}
	if _, keys, _, legacy, err := RotateFleetAuthKeys(ctx, empty, now, time.Hour); err != nil || legacy || len(keys) != 2 || empty.writes != 1 {
		t.Errorf("first keys: %v, %v, %d writes", keys, err, empty.writes)
	}
	hs := &memKeys{secrets: map[string]string{RelayAuthKeysKey: legacyState}}
	if _, keys, _, legacy, err := RotateFleetAuthKeys(ctx, hs, now, time.Hour); err != nil || !legacy || len(keys) != 2 || hs.writes != 1 {
		t.Errorf("HS256 state: %v, legacy %v, %v, %d writes", keys, legacy, err, hs.writes)
	}
	bad := &memKeys{secrets: map[string]string{RelayAuthKeysKey: "not a key\n"}}
	if _, _, _, _, err := RotateFleetAuthKeys(ctx, bad, now, time.Hour); err == nil || !strings.HasPrefix(err.Error(), "stack secret relayAuthKeys: ") || bad.writes != 0 {
		t.Errorf("a broken key file: %v, %d writes", err, bad.writes)
	}
}

// TestFleetTLSSeed: a fleet's relay TLS seed is made once, when asked,
// and kept; a seed too short to derive keys from is refused, naming the
// secret, not rewritten.
func TestFleetTLSSeed(t *testing.T) {
	ctx := context.Background()
	empty := &memKeys{secrets: map[string]string{}}
	if _, err := FleetTLSSeed(ctx, empty, false); !errors.Is(err, ErrNoTLSSeed) || empty.writes != 0 {
		t.Fatalf("no seed, no create: %v, %d writes", err, empty.writes)
	}
	seed, err := FleetTLSSeed(ctx, empty, true)
	if err != nil || len(seed) < provision.MinTLSSeedLen || empty.secrets[RelayTLSSeedKey] != seed || empty.writes != 1 {
		t.Fatalf("first seed: %v, stored %d writes", err, empty.writes)
	}
	if again, err := FleetTLSSeed(ctx, empty, true); err != nil || again != seed || empty.writes != 1 {
		t.Fatalf("second read: %v, %d writes; want the same seed, not rewritten", err, empty.writes)
	}
	bad := &memKeys{secrets: map[string]string{RelayTLSSeedKey: "short"}}
	if _, err := FleetTLSSeed(ctx, bad, true); err == nil || !strings.HasPrefix(err.Error(), "stack secret relayTLSSeed: ") || strings.Contains(err.Error(), "short") || bad.writes != 0 {
		t.Fatalf("a short seed: %v, %d writes", err, bad.writes)
	}
}
