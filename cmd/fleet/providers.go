package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/relayfleet/relayfleet/internal/cli"
	"github.com/relayfleet/relayfleet/inventories"
	"github.com/relayfleet/relayfleet/inventories/pricing"
)

// Environment variables for live prices. The endpoints are for tests and
// proxies; they default to the public APIs.
const (
	envHcloudToken   = "HCLOUD_TOKEN"
	envHcloudURL     = "HCLOUD_ENDPOINT"
	envDOToken       = "DIGITALOCEAN_TOKEN"
	envDOURL         = "DIGITALOCEAN_API_URL"
	livePriceTimeout = 30 * time.Second
)

func providersCommand(ios *cli.IOStreams) *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "providers",
		Short: "show the provider catalogue (and live prices with HCLOUD_TOKEN / DIGITALOCEAN_TOKEN)",
		Args:  cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runProviders(cmd.Context(), file, ios.Out)
		},
	}
	cmd.Flags().StringVar(&file, "providers", inventories.Embedded(inventories.ProvidersFile), "provider catalogue to show")
	return cmd
}

func runProviders(ctx context.Context, file string, stdout io.Writer) error {
	cat, err := inventories.LoadCatalogue(file)
	if err != nil {
		return err
	}
	if err := pricing.WriteCatalogue(stdout, cat, file); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, livePriceTimeout)
	defer cancel()
	live, checked, err := pricing.FetchAll(ctx, pricing.Sources{
		HcloudToken: os.Getenv(envHcloudToken), HcloudURL: os.Getenv(envHcloudURL),
		DOToken: os.Getenv(envDOToken), DOURL: os.Getenv(envDOURL),
	})
	if err != nil {
		return fmt.Errorf("live prices: %w", err)
	}
	if len(checked) == 0 {
		fmt.Fprintf(stdout, "\nlive prices: set %s or %s to compare with the providers' APIs\n", envHcloudToken, envDOToken)
		return nil
	}
	return pricing.WriteDifferences(stdout, cat, file, live, checked)
}
