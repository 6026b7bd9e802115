package pricing

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/relayfleet/relayfleet/inventories"
)

// Environment variables for live prices (SourcesFromEnv). The endpoints
// are for tests and proxies; they default to the public APIs.
const (
	EnvHcloudToken = "HCLOUD_TOKEN"
	EnvHcloudURL   = "HCLOUD_ENDPOINT"
	EnvDOToken     = "DIGITALOCEAN_TOKEN"
	EnvDOURL       = "DIGITALOCEAN_API_URL"
)

// LiveTimeout bounds asking the providers' APIs for live prices.
const LiveTimeout = 30 * time.Second

// SourcesFromEnv are the tokens and endpoints the environment gives.
func SourcesFromEnv() Sources {
	return Sources{
		HcloudToken: os.Getenv(EnvHcloudToken), HcloudURL: os.Getenv(EnvHcloudURL),
		DOToken: os.Getenv(EnvDOToken), DOURL: os.Getenv(EnvDOURL),
	}
}

// Show is fleet providers: the catalogue read from file as a table
// (WriteCatalogue), then how it differs from the live prices of the
// providers src has a token for (WriteDifferences), or how to ask them.
// It asks for at most LiveTimeout.
func Show(ctx context.Context, w io.Writer, file string, src Sources) error {
	cat, err := inventories.LoadCatalogue(file)
	if err != nil {
		return err
	}
	if err := WriteCatalogue(w, cat, file); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, LiveTimeout)
	defer cancel()
	live, checked, err := FetchAll(ctx, src)
	if err != nil {
		return fmt.Errorf("live prices: %w", err)
	}
	if len(checked) == 0 {
		fmt.Fprintf(w, "\nlive prices: set %s or %s to compare with the providers' APIs\n", EnvHcloudToken, EnvDOToken)
		return nil
	}
	return WriteDifferences(w, cat, file, live, checked)
}
