package main

import (
	"github.com/spf13/cobra"

	"github.com/relayfleet/relayfleet/internal/cli"
	"github.com/relayfleet/relayfleet/inventories"
	"github.com/relayfleet/relayfleet/inventories/pricing"
)

// providersCommand is fleet providers (pricing.Show).
func providersCommand(ios *cli.IOStreams) *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "providers",
		Short: "show the provider catalogue (and live prices with HCLOUD_TOKEN / DIGITALOCEAN_TOKEN)",
		Args:  cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return pricing.Show(cmd.Context(), ios.Out, file, pricing.SourcesFromEnv())
		},
	}
	cmd.Flags().StringVar(&file, "providers", inventories.Embedded(inventories.ProvidersFile), "provider catalogue to show")
	return cmd
}
