package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"text/tabwriter"
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
	if err := writeCatalogue(stdout, cat, file); err != nil {
		return err
	}

	var live []pricing.Live
	ctx, cancel := context.WithTimeout(ctx, livePriceTimeout)
	defer cancel()
	checked := ""
	if tok := os.Getenv(envHcloudToken); tok != "" {
		ls, err := pricing.FetchHcloud(ctx, tok, os.Getenv(envHcloudURL), nil)
		if err != nil {
			return fmt.Errorf("live prices: %w", err)
		}
		live = append(live, ls...)
		checked += " hcloud"
	}
	if tok := os.Getenv(envDOToken); tok != "" {
		ls, err := pricing.FetchDigitalOcean(ctx, tok, os.Getenv(envDOURL), nil)
		if err != nil {
			return fmt.Errorf("live prices: %w", err)
		}
		live = append(live, ls...)
		checked += " digitalocean"
	}
	if checked == "" {
		fmt.Fprintf(stdout, "\nlive prices: set %s or %s to compare with the providers' APIs\n", envHcloudToken, envDOToken)
		return nil
	}
	diffs := pricing.Compare(cat, live)
	if len(diffs) == 0 {
		fmt.Fprintf(stdout, "\nlive prices (%d rows from%s): the same as %s\n", len(live), checked, file)
		return nil
	}
	fmt.Fprintf(stdout, "\nlive prices (%d rows from%s): %d differences from %s\n", len(live), checked, len(diffs), file)
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SHAPE\tFIELD\tSHIPPED\tLIVE")
	for _, d := range diffs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", d.Ref, d.Field, dash(d.Shipped), dash(d.Live))
	}
	return tw.Flush()
}

func writeCatalogue(w io.Writer, cat *inventories.Catalogue, file string) error {
	fmt.Fprintf(w, "Provider catalogue %s (prices in each row's currency; plans convert to %s)\n\n", file, cat.Currency)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SHAPE\tCORES\tCPU\tRAM\tUPLINK\tHOURLY\tMONTHLY\tINCLUDED EGRESS\tACCRUES\tPAST IT\tREAD ON\tUNSURE")
	for i := range cat.Providers {
		p := &cat.Providers[i]
		if p.Unusable != "" {
			continue
		}
		for j := range p.Shapes {
			s := &p.Shapes[j]
			hourly := "-"
			if s.Hourly > 0 {
				hourly = strconv.FormatFloat(s.Hourly, 'f', -1, 64) + " " + s.Currency
			}
			monthly := strconv.FormatFloat(s.Monthly, 'f', -1, 64) + " " + s.Currency
			if s.Monthly == 0 && s.Hourly == 0 {
				monthly = "free"
			}
			unsure := ""
			if s.Unsure {
				unsure = "unsure"
			}
			cpu := "dedicated"
			if s.SharedCPU {
				cpu = "shared"
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Ref(p), s.Cores, cpu, s.RAM.IEC(), s.Uplink,
				hourly, monthly, includedEgress(s.Egress), s.Egress.Accrues, pastIt(s), s.Date, unsure)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, p := range cat.Providers {
		if p.Unusable != "" {
			title := ""
			if p.Title != "" {
				title = " (" + p.Title + ")"
			}
			fmt.Fprintf(w, "\nnot usable: %s%s: %s\n", p.Name, title, p.Unusable)
		}
	}
	fmt.Fprintf(w, "\nsources, notes and fair-use terms: %s (`unsure` rows are not confirmed from the provider's own pages)\n", file)
	return nil
}

func includedEgress(e inventories.Egress) string {
	if e.Accrues == inventories.AccrueUnmetered {
		return "unmetered"
	}
	// Show allowances in the units they are sold in: Hetzner's "TB" is a
	// TiB, DigitalOcean counts GiB, others decimal.
	switch {
	case e.Included%(1<<40) == 0:
		return e.Included.IEC()
	case e.Included%(1<<30) == 0:
		return strconv.FormatInt(int64(e.Included>>30), 10) + " GiB"
	}
	return e.Included.String()
}

func pastIt(s *inventories.Shape) string {
	e := s.Egress
	switch e.Past {
	case inventories.PastBilled:
		return fmt.Sprintf("%s %s/%s", strconv.FormatFloat(e.Price, 'f', -1, 64), s.Currency, e.Per)
	case inventories.PastThrottled:
		return "throttled to " + e.Throttle.String()
	case inventories.PastNone:
		return "-"
	}
	return e.Past
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
