package program

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/relayfleet/relayfleet/provision"
)

// KeyStore keeps the fleet's relay auth key file: the fleet's stack
// (*Stack), where it is a secret (relayfleet:relayAuthKeys, encrypted
// with the stack's passphrase).
type KeyStore interface {
	ReadSecrets(ctx context.Context) (map[string]string, error)
	SetSecret(ctx context.Context, key, value string) error
}

// FleetAuthKeys returns the fleet's key file text and its keys at now,
// the expired ones dropped (and the store rewritten without them). With
// create, a fleet without a key gets its first one; without, it is
// provision.ErrNoAuthKey.
func FleetAuthKeys(ctx context.Context, ks KeyStore, now time.Time, create bool) (string, []provision.AuthKey, error) {
	secrets, err := ks.ReadSecrets(ctx)
	if err != nil {
		return "", nil, err
	}
	text := secrets[RelayAuthKeysKey]
	keys, err := provision.ActiveAuthKeys(text, now)
	switch {
	case errors.Is(err, provision.ErrNoAuthKey) && create:
		if keys, _, err = provision.RotateAuthKeys("", now, 0); err != nil {
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
	return clean, keys, nil
}

// RotateFleetAuthKeys puts a new signing key first in the fleet's key
// file and keeps the current one verifying until now+overlap
// (provision.RotateAuthKeys), and stores the result. It returns the key
// file text, its keys, and until when the old ones verify.
func RotateFleetAuthKeys(ctx context.Context, ks KeyStore, now time.Time, overlap time.Duration) (string, []provision.AuthKey, time.Time, error) {
	secrets, err := ks.ReadSecrets(ctx)
	if err != nil {
		return "", nil, time.Time{}, err
	}
	keys, until, err := provision.RotateAuthKeys(secrets[RelayAuthKeysKey], now, overlap)
	if err != nil {
		return "", nil, time.Time{}, fmt.Errorf("stack secret %s: %w", RelayAuthKeysKey, err)
	}
	text := provision.FormatAuthKeys(keys)
	if err := ks.SetSecret(ctx, RelayAuthKeysKey, text); err != nil {
		return "", nil, time.Time{}, err
	}
	return text, keys, until, nil
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
