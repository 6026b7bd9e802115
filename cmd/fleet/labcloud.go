package main

import (
	"github.com/spf13/cobra"

	"github.com/relayfleet/relayfleet/infra/localcloud/providers"
	"github.com/relayfleet/relayfleet/internal/cli"
)

// labCloudCommand is `fleet lab cloud PROVIDER`: the provider's API on
// this machine, backed by lab boxes (package infra/localcloud).
func labCloudCommand(ios *cli.IOStreams) *cobra.Command {
	var o providers.LabOptions
	cmd := &cobra.Command{
		Use:       "cloud hcloud|digitalocean --listen ADDR",
		Short:     "a cloud provider's API on this machine, its servers lab boxes",
		ValidArgs: providers.Names(),
		Args: func(cmd *cobra.Command, args []string) error {
			if err := oneArg("a provider (hcloud or digitalocean)")(cmd, args); err != nil {
				return err
			}
			return providers.CheckName(args[0])
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return providers.ServeLab(cmd.Context(), args[0], o, ios)
		},
	}
	fs := cmd.Flags()
	addLabFlags(fs, &o.Lab)
	fs.StringVar(&o.Listen, "listen", "", "address to serve the API on: loopback (127.0.0.1:8780) or the lab bridge's address")
	fs.StringVar(&o.StateFile, "state", "", "the API's records (servers, actions, firewalls), JSON mode 0600 (default LABDIR/localcloud-PROVIDER.json)")
	fs.StringVar(&o.TokenFile, "token-file", "", "the API token, one line, mode 0600; made with a random token when missing (default LABDIR/localcloud-PROVIDER.token)")
	fs.StringVar(&o.FaultsFile, "faults", "", `faults to inject, JSON read again whenever it changes (tests): {"version": 1, "unavailable": [{"shape": "cx23", "location": "fsn1", "count": 1}], "rate_limited": {"requests": 3, "retry_after_seconds": 2}, "hang_actions": [{"name": "NAME"}], "no_address": [{}]}; a rule's name, shape and location each match any when left out (docs/testing.md#faults)`)
	fs.StringVar(&o.RequestsFile, "requests", "", `JSON file the API's request counts are written to after each request: {"total": N, "routes": {"GET /servers/{id}": N}, "statuses": {"429": N}}`)
	fs.Float64Var(&o.RAMScale, "ram-scale", 0.25, "boxes get the server type's RAM times this, at least 256 MiB (0.25: a 4 GiB cx23 boots as a 1 GiB box); cores are capped at this machine's CPU count")
	cli.Ranged(fs, "ram-scale", cli.Floats(0.01, 1))
	return cmd
}
