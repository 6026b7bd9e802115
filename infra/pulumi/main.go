// Command pulumi is the relayfleet Pulumi project's program for `pulumi up`
// under an official Pulumi install: it reads the inventory named in the
// stack config and calls program.Deploy, the same function `fleet up` runs
// inline.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi/config"

	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/inventories"
	"github.com/relayfleet/relayfleet/provision"
)

func main() {
	pulumi.Run(func(ctx *pulumi.Context) error {
		c := config.New(ctx, "")
		inv := c.Get("inventory")
		if inv == "" {
			inv = "../../inventories/lab.yaml"
		}
		relay, err := filepath.Abs(c.Require("relayBinary"))
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
		// secrets by fleet up (relayfleet:relayAuthKeys, relayTLSSeed).
		s := config.New(ctx, program.SecretNamespace)
		_, err = program.Deploy(ctx, f, cat, program.Options{RelayBinary: relay, Release: provision.Digest(data),
			AuthKeys: s.Get(program.RelayAuthKeysKey), TLSSeed: s.Get(program.RelayTLSSeedKey)})
		return err
	})
}
