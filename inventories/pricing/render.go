package pricing

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"

	"github.com/relayfleet/relayfleet/internal/text"
	"github.com/relayfleet/relayfleet/inventories"
)

// Sources are the providers' API tokens and endpoints for live prices.
// An empty token skips that provider; an empty endpoint is the public API.
type Sources struct {
	HcloudToken, HcloudURL string
	DOToken, DOURL         string
}

// FetchAll fetches live prices from every provider with a token, and
// names the providers it asked, in order.
func FetchAll(ctx context.Context, src Sources) ([]Live, []string, error) {
	var live []Live
	var checked []string
	if src.HcloudToken != "" {
		ls, err := FetchHcloud(ctx, src.HcloudToken, src.HcloudURL, nil)
		if err != nil {
			return nil, nil, err
		}
		live = append(live, ls...)
		checked = append(checked, "hcloud")
	}
	if src.DOToken != "" {
		ls, err := FetchDigitalOcean(ctx, src.DOToken, src.DOURL, nil)
		if err != nil {
			return nil, nil, err
		}
		live = append(live, ls...)
		checked = append(checked, "digitalocean")
	}
	return live, checked, nil
}

// WriteDifferences compares live prices, from the providers checked, with
// the catalogue read from file, and writes what differs as a table.
func WriteDifferences(w io.Writer, cat *inventories.Catalogue, file string, live []Live, checked []string) error {
	from := ""
	for _, c := range checked {
		from += " " + c
	}
	diffs := Compare(cat, live)
	if len(diffs) == 0 {
		fmt.Fprintf(w, "\nlive prices (%d rows from%s): the same as %s\n", len(live), from, file)
		return nil
	}
	fmt.Fprintf(w, "\nlive prices (%d rows from%s): %d differences from %s\n", len(live), from, len(diffs), file)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SHAPE\tFIELD\tSHIPPED\tLIVE")
	for _, d := range diffs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", d.Ref, d.Field, text.Dash(d.Shipped), text.Dash(d.Live))
	}
	return tw.Flush()
}

// WriteCatalogue writes the catalogue read from file as a table: a row
// per usable shape, then the providers that are not usable.
func WriteCatalogue(w io.Writer, cat *inventories.Catalogue, file string) error {
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
