package program

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/relayfleet/relayfleet/provision"
)

// KeyStore keeps the fleet's relay token keys: the fleet's stack
// (*Stack), where they are a secret (relayfleet:relayAuthKeys, encrypted
// with the stack's passphrase). It is the only place their private
// halves live: relays get provision.BoxKeyFile.
type KeyStore interface {
	ReadSecrets(ctx context.Context) (map[string]string, error)
	SetSecret(ctx context.Context, key, value string) error
}

// FleetAuthKeys returns the key file the fleet's relays get
// (provision.BoxKeyFile: public keys and the link key) and the fleet's
// keys at now, the expired ones dropped (and the store rewritten without
// them). With create, a fleet without a key gets its first ones, and one
// whose state holds an earlier relayfleet's HS256 key moves to Ed25519
// keys (the HS256 key is dropped: relays no longer verify it); without,
// those are provision.ErrNoAuthKey and provision.ErrLegacyAuthKeys.
func FleetAuthKeys(ctx context.Context, ks KeyStore, now time.Time, create bool) (string, []provision.AuthKey, error) {
	secrets, err := ks.ReadSecrets(ctx)
	if err != nil {
		return "", nil, err
	}
	text := secrets[RelayAuthKeysKey]
	keys, err := provision.ActiveAuthKeys(text, now)
	switch {
	case (errors.Is(err, provision.ErrNoAuthKey) || errors.Is(err, provision.ErrLegacyAuthKeys)) && create:
		if keys, _, _, err = provision.RotateAuthKeys("", now, 0); err != nil {
			return "", nil, err
		}
	case err != nil:
		return "", nil, fmt.Errorf("stack secret %s: %w", RelayAuthKeysKey, err)
	}
	clean := provision.FormatAuthKeys(keys)
	if clean != text {
		if err := ks.SetSecret(ctx, RelayAuthKeysKey, clean); err != nil {
			return "", nil, err
		}
	}
	return provision.BoxKeyFile(keys, now), keys, nil
}

// CheckKeysForRelease refuses to move a fleet whose state holds an
// earlier relayfleet's HS256 key to Ed25519 keys while the relay build
// its boxes run (the file binaryPath, read only then) cannot read them:
// that build would refuse the new key file and every relay would stop.
func CheckKeysForRelease(ctx context.Context, ks KeyStore, binaryPath string) error {
	secrets, err := ks.ReadSecrets(ctx)
	if err != nil {
		return err
	}
	if _, err := provision.ParseAuthKeys(secrets[RelayAuthKeysKey]); !errors.Is(err, provision.ErrLegacyAuthKeys) {
		return nil
	}
	binary, err := os.ReadFile(binaryPath)
	if err != nil {
		return err
	}
	if !provision.ReadsEd25519KeyFiles(binary) {
		return fmt.Errorf("%w; but the fleet's relay build predates Ed25519 key files and would refuse them: roll out a build of this relayfleet first (fleet rollout; it reads the HS256 key file), then run this again", provision.ErrLegacyAuthKeys)
	}
	return nil
}

// RotateFleetAuthKeys puts a new signing key and link key first in the
// fleet's keys and keeps the current ones verifying until now+overlap
// (provision.RotateAuthKeys), and stores the result. It returns the key
// file the relays get, the keys, until when the old ones verify, and
// whether the state held an earlier relayfleet's HS256 key (dropped).
func RotateFleetAuthKeys(ctx context.Context, ks KeyStore, now time.Time, overlap time.Duration) (string, []provision.AuthKey, time.Time, bool, error) {
	secrets, err := ks.ReadSecrets(ctx)
	if err != nil {
		return "", nil, time.Time{}, false, err
	}
	keys, until, legacy, err := provision.RotateAuthKeys(secrets[RelayAuthKeysKey], now, overlap)
	if err != nil {
		return "", nil, time.Time{}, false, fmt.Errorf("stack secret %s: %w", RelayAuthKeysKey, err)
	}
	if err := ks.SetSecret(ctx, RelayAuthKeysKey, provision.FormatAuthKeys(keys)); err != nil {
		return "", nil, time.Time{}, false, err
	}
	return provision.BoxKeyFile(keys, now), keys, until, legacy, nil
}

// FleetTLSSeed returns the fleet's relay TLS seed (RelayTLSSeedKey), each
// box's relay TLS key's source (provision.BoxTLSKey). With create, a
// fleet without one gets its first, kept in ks; without, it is
// ErrNoTLSSeed. The seed is never rotated: a box's key, and so its pin,
// stays the same across ups and converges.
func FleetTLSSeed(ctx context.Context, ks KeyStore, create bool) (string, error) {
	secrets, err := ks.ReadSecrets(ctx)
	if err != nil {
		return "", err
	}
	seed := secrets[RelayTLSSeedKey]
	switch {
	case seed == "" && !create:
		return "", ErrNoTLSSeed
	case seed == "":
		if seed, err = provision.NewTLSSeed(); err != nil {
			return "", err
		}
		if err := ks.SetSecret(ctx, RelayTLSSeedKey, seed); err != nil {
			return "", err
		}
	case len(seed) < provision.MinTLSSeedLen:
		return "", fmt.Errorf("stack secret %s: %d bytes, want at least %d (delete it and run fleet up to make a new one; every box's key changes)", RelayTLSSeedKey, len(seed), provision.MinTLSSeedLen)
	}
	return seed, nil
}

// TargetTLSKeys gives each target its box's relay TLS key, derived from
// the fleet's seed and the box's name as fleet up derives it, so that a
// converge outside Pulumi keeps the key the relays file pins.
func TargetTLSKeys(targets []provision.Target, seed string) error {
	for i := range targets {
		key, _, err := provision.BoxTLSKey(seed, targets[i].Host.Name)
		if err != nil {
			return err
		}
		targets[i].TLSKey = key
	}
	return nil
}
