package program

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi/config"

	"github.com/relayfleet/relayfleet/inventories"
	"github.com/relayfleet/relayfleet/provision"
)

// Project configuration keys (Project:KEY) that infra/pulumi's program
// reads where fleet's inline program has them from its flags.
const (
	InventoryKey   = "inventory"   // the fleet file (default DefaultInventory)
	RelayBinaryKey = "relayBinary" // the relay build, the fleet's release
)

// DefaultInventory is the fleet file of infra/pulumi's program when its
// stack names none, relative to infra/pulumi.
const DefaultInventory = "../../inventories/lab.yaml"

// ProjectProgram is infra/pulumi's program (pulumi up under the Pulumi
// CLI): the fleet file and the relay build from the stack's configuration
// (InventoryKey, RelayBinaryKey), the fleet's keys from the stack secrets
// fleet up keeps, and then Deploy, the function fleet up runs inline.
func ProjectProgram(ctx *pulumi.Context) error {
	c := config.New(ctx, Project)
	inv := c.Get(InventoryKey)
	if inv == "" {
		inv = DefaultInventory
	}
	relay, err := filepath.Abs(c.Require(RelayBinaryKey))
	if err != nil {
		return err
	}
	data, err := os.ReadFile(relay)
	if err != nil {
		return fmt.Errorf("config relayBinary: %w", err)
	}
	f, cat, err := inventories.LoadFleetFile(inv)
	if err != nil {
		return err
	}
	// The fleet's relay auth keys and TLS seed, kept in the stack as
	// secrets by fleet up (SecretNamespace:relayAuthKeys, relayTLSSeed),
	// handed to the hosts as fleet up hands them.
	s := config.New(ctx, SecretNamespace)
	o := Options{RelayBinary: relay, Release: provision.Digest(data)}
	o.AuthKeys, o.TLSSeed, err = StackKeys(map[string]string{
		RelayAuthKeysKey: s.Get(RelayAuthKeysKey), RelayTLSSeedKey: s.Get(RelayTLSSeedKey)}, time.Now())
	if err != nil {
		return err
	}
	_, err = Deploy(ctx, f, cat, o)
	return err
}

// StackKeys is what fleet up's program gets from the fleet's stack
// secrets (FleetAuthKeys, FleetTLSSeed without create): the key file every
// relay gets (public keys and the link key, never the signing key) and the
// relay TLS seed. It writes nothing: a stack whose keys fleet up would
// make or move is refused, saying so.
func StackKeys(secrets map[string]string, now time.Time) (authKeys, tlsSeed string, err error) {
	ks := &readOnlyKeys{secrets: secrets}
	if authKeys, _, err = FleetAuthKeys(context.Background(), ks, now, false); err != nil {
		return "", "", fmt.Errorf("%w (fleet up makes or moves the fleet's keys)", err)
	}
	if tlsSeed, err = FleetTLSSeed(context.Background(), ks, false); err != nil {
		return "", "", err
	}
	return authKeys, tlsSeed, nil
}

// readOnlyKeys is a KeyStore of the secrets a program was given: it
// cannot write them back (expired keys are left for fleet up to drop).
type readOnlyKeys struct{ secrets map[string]string }

func (k *readOnlyKeys) ReadSecrets(context.Context) (map[string]string, error) { return k.secrets, nil }

func (k *readOnlyKeys) SetSecret(context.Context, string, string) error { return nil }
