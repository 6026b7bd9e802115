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
