package program

import (
	"context"
	"errors"
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

// TestFleetAuthKeys: a fleet's first key is made only when asked (and
// kept), an expired key is dropped from the stack, a key file that
// changes nothing is not rewritten.
func TestFleetAuthKeys(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	empty := &memKeys{secrets: map[string]string{}}
	if _, _, err := FleetAuthKeys(ctx, empty, now, false); !errors.Is(err, provision.ErrNoAuthKey) || empty.writes != 0 {
		t.Fatalf("no key, no create: %v, %d writes; want ErrNoAuthKey and nothing written", err, empty.writes)
	}
	text, keys, err := FleetAuthKeys(ctx, empty, now, true)
	if err != nil || len(keys) != 1 || empty.secrets[RelayAuthKeysKey] != text || empty.writes != 1 {
		t.Fatalf("first key: %q %v %v, stored %q", text, keys, err, empty.secrets)
	}
	again, _, err := FleetAuthKeys(ctx, empty, now, true)
	if err != nil || again != text || empty.writes != 1 {
		t.Errorf("second read: %q (%v), %d writes; want the same key, not rewritten", again, err, empty.writes)
	}

	signing := "TmV3U2lnbmluZ0tleU5ld1NpZ25pbmdLZXlOZXdTaWc"
	old := "T2xkS2V5T2xkS2V5T2xkS2V5T2xkS2V5T2xkS2V5T2x"
	gone := "R29uZUtleUdvbmVLZXlHb25lS2V5R29uZUtleUdvbmU"
	store := &memKeys{secrets: map[string]string{RelayAuthKeysKey: signing + "\n" + old + " until=2026-12-01T12:00:00Z\n" + gone + " until=2026-11-30T11:00:00Z\n"}}
	text, keys, err = FleetAuthKeys(ctx, store, now, false)
	if err != nil || len(keys) != 2 || strings.Contains(text, gone) || !strings.Contains(text, old) || store.secrets[RelayAuthKeysKey] != text || store.writes != 1 {
		t.Errorf("expired key: %q %v %v, %d writes; want it dropped from the stack", text, keys, err, store.writes)
	}

	bad := &memKeys{secrets: map[string]string{RelayAuthKeysKey: "not a key\n"}}
	if _, _, err := FleetAuthKeys(ctx, bad, now, true); err == nil || !strings.HasPrefix(err.Error(), "stack secret relayAuthKeys: ") || bad.writes != 0 {
		t.Errorf("a broken key file: %v, %d writes; want an error naming the secret, nothing written", err, bad.writes)
	}
}

// TestRotateFleetAuthKeys: a rotation stores a new signing key first and
// the old one verifying until now+overlap; a fleet without a key gets
// its first; a broken key file is not overwritten.
func TestRotateFleetAuthKeys(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	signing := "TmV3U2lnbmluZ0tleU5ld1NpZ25pbmdLZXlOZXdTaWc"
	store := &memKeys{secrets: map[string]string{RelayAuthKeysKey: signing + "\n"}}
	text, keys, until, err := RotateFleetAuthKeys(ctx, store, now, time.Hour)
	if err != nil || len(keys) != 2 || keys[1].Secret != signing || keys[0].Secret == signing || !until.Equal(now.Add(time.Hour)) {
		t.Fatalf("rotate: %v %v %v", keys, until, err)
	}
	if store.secrets[RelayAuthKeysKey] != text || !strings.Contains(text, signing+" until=2026-11-30T13:00:00Z") || store.writes != 1 {
		t.Errorf("stored %q (%d writes)", store.secrets[RelayAuthKeysKey], store.writes)
	}
	empty := &memKeys{secrets: map[string]string{}}
	if _, keys, _, err := RotateFleetAuthKeys(ctx, empty, now, time.Hour); err != nil || len(keys) != 1 || empty.writes != 1 {
		t.Errorf("first key: %v, %v, %d writes", keys, err, empty.writes)
	}
	bad := &memKeys{secrets: map[string]string{RelayAuthKeysKey: "not a key\n"}}
	if _, _, _, err := RotateFleetAuthKeys(ctx, bad, now, time.Hour); err == nil || !strings.HasPrefix(err.Error(), "stack secret relayAuthKeys: ") || bad.writes != 0 {
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
