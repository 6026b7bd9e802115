package pricing

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/digitalocean/godo"
	"github.com/hetznercloud/hcloud-go/v2/hcloud"
	"golang.org/x/oauth2"

	"github.com/relayfleet/relayfleet/inventories"
)

// Live is one shape's price as a provider API reports it now.
type Live struct {
	Provider string // catalogue provider name: "hcloud" or "digitalocean"
	Shape    string // server type name / size slug
	Location string // hcloud location name; "" for digitalocean (same price everywhere)
	Cores    int
	RAM      inventories.Bytes
	Hourly   float64
	Monthly  float64
	Currency string
	Included inventories.Bytes // included egress per month
	// OveragePer is the price past the allowance, per OverageUnit.
	OveragePer float64
	// OverageUnit is the unit OveragePer is quoted per, spelled as
	// providers.yaml spells egress.per: "TiB" for hcloud (what Hetzner
	// calls a TB: the API reports 20 TB included as 20 x 2^40 bytes) and
	// "GiB" for digitalocean.
	OverageUnit string
}

// Provider names of the live sources, as providers.yaml names them.
const (
	ProviderHcloud       = "hcloud"
	ProviderDigitalOcean = "digitalocean"
)

// hcloudCurrency is the currency of Hetzner Cloud prices. GET /server_types
// carries no currency; Hetzner Cloud bills in EUR (GET /pricing says so).
const hcloudCurrency = "EUR"

// DigitalOcean's overage terms are not in the API: every droplet's egress
// past the team's pooled allowance is billed at $0.01 per GiB
// (https://docs.digitalocean.com/products/droplets/details/pricing/).
const (
	doCurrency     = "USD"
	doOveragePrice = 0.01
	doOverageUnit  = "GiB"
	// doTransferUnit is what one unit of Size.Transfer is. The API calls it
	// a terabyte; DigitalOcean's price list shows transfer 1.0 as
	// "1,000 GiB", and that is what the allowance is counted in.
	doTransferUnit = 1000 << 30
)

var errNoToken = errors.New("no API token")

// FetchHcloud lists Hetzner Cloud's server types and returns one Live row
// per server type and location, with net prices. endpoint "" means the
// public API; hc nil means a plain http.Client. Locations whose server type
// is past its unavailable_after date are left out.
func FetchHcloud(ctx context.Context, token, endpoint string, hc *http.Client) ([]Live, error) {
	if token == "" {
		return nil, fmt.Errorf("hcloud server types: %w", errNoToken)
	}
	opts := []hcloud.ClientOption{hcloud.WithToken(token), hcloud.WithApplication("relayfleet", "")}
	if endpoint != "" {
		opts = append(opts, hcloud.WithEndpoint(endpoint))
	}
	if hc != nil {
		opts = append(opts, hcloud.WithHTTPClient(hc))
	}
	types, err := hcloud.NewClient(opts...).ServerType.All(ctx)
	if err != nil {
		return nil, fmt.Errorf("hcloud server types: %w", err)
	}
	now := time.Now()
	var out []Live
	for _, st := range types {
		if gone(st.Deprecation, now) {
			continue
		}
		for _, p := range st.Pricings {
			if p.Location == nil {
				continue
			}
			loc := p.Location.Name
			if !soldAt(st, loc, now) {
				continue
			}
			l := Live{
				Provider:    ProviderHcloud,
				Shape:       st.Name,
				Location:    loc,
				Cores:       st.Cores,
				RAM:         inventories.Bytes(math.Round(float64(st.Memory) * (1 << 30))),
				Currency:    hcloudCurrency,
				Included:    inventories.Bytes(min(p.IncludedTraffic, math.MaxInt64)),
				OverageUnit: "TiB",
			}
			for _, f := range []struct {
				name string
				in   string
				out  *float64
			}{
				{"hourly", p.Hourly.Net, &l.Hourly},
				{"monthly", p.Monthly.Net, &l.Monthly},
				{"per TB traffic", p.PerTBTraffic.Net, &l.OveragePer},
			} {
				v, err := parsePrice(f.in)
				if err != nil {
					return nil, fmt.Errorf("hcloud server type %s in %s: %s price: %w", st.Name, loc, f.name, err)
				}
				*f.out = v
			}
			out = append(out, l)
		}
	}
	sortLive(out)
	return out, nil
}

// gone reports whether a deprecated resource can no longer be ordered.
func gone(d *hcloud.DeprecationInfo, now time.Time) bool {
	return d != nil && !d.UnavailableAfter.IsZero() && now.After(d.UnavailableAfter)
}

// soldAt reports whether the server type can be ordered at loc. A server
// type that lists no locations (older API answers) is sold wherever it is
// priced.
func soldAt(st *hcloud.ServerType, loc string, now time.Time) bool {
	if len(st.Locations) == 0 {
		return true
	}
	for _, l := range st.Locations {
		if l.Location != nil && l.Location.Name == loc {
			return !gone(l.Deprecation, now)
		}
	}
	return false
}

func parsePrice(s string) (float64, error) {
	v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return 0, fmt.Errorf("want a non-negative number, got %q", s)
	}
	return v, nil
}

// FetchDigitalOcean lists DigitalOcean's droplet sizes, page by page, and
// returns one Live row per size that can be ordered now. endpoint "" means
// the public API; hc nil means a plain http.Client.
func FetchDigitalOcean(ctx context.Context, token, endpoint string, hc *http.Client) ([]Live, error) {
	if token == "" {
		return nil, fmt.Errorf("digitalocean sizes: %w", errNoToken)
	}
	if hc == nil {
		hc = &http.Client{}
	}
	// The token travels in the Authorization header only, as
	// godo.NewFromToken does it.
	authed := *hc
	authed.Transport = &oauth2.Transport{
		Source: oauth2.StaticTokenSource(&oauth2.Token{AccessToken: token}),
		Base:   hc.Transport,
	}
	var opts []godo.ClientOpt
	if endpoint != "" {
		if !strings.HasSuffix(endpoint, "/") {
			endpoint += "/" // godo resolves "v2/sizes" against it
		}
		opts = append(opts, godo.SetBaseURL(endpoint))
	}
	client, err := godo.New(&authed, opts...)
	if err != nil {
		return nil, fmt.Errorf("digitalocean sizes: %w", err)
	}
	var out []Live
	lo := &godo.ListOptions{Page: 1, PerPage: 200}
	for {
		sizes, resp, err := client.Sizes.List(ctx, lo)
		if err != nil {
			return nil, fmt.Errorf("digitalocean sizes: %w", err)
		}
		for _, s := range sizes {
			if !s.Available {
				continue
			}
			out = append(out, Live{
				Provider:    ProviderDigitalOcean,
				Shape:       s.Slug,
				Cores:       s.Vcpus,
				RAM:         inventories.Bytes(s.Memory) << 20,
				Hourly:      s.PriceHourly,
				Monthly:     s.PriceMonthly,
				Currency:    doCurrency,
				Included:    inventories.Bytes(math.Round(s.Transfer * doTransferUnit)),
				OveragePer:  doOveragePrice,
				OverageUnit: doOverageUnit,
			})
		}
		if resp == nil || resp.Links == nil || resp.Links.IsLastPage() || len(sizes) == 0 {
			break
		}
		page, err := resp.Links.CurrentPage()
		if err != nil {
			return nil, fmt.Errorf("digitalocean sizes: page links: %w", err)
		}
		if page+1 <= lo.Page {
			return nil, fmt.Errorf("digitalocean sizes: page %d links to page %d as next; pagination does not advance", lo.Page, page+1)
		}
		lo.Page = page + 1
	}
	sortLive(out)
	return out, nil
}

func sortLive(ls []Live) {
	slices.SortFunc(ls, func(a, b Live) int {
		return cmp.Or(cmp.Compare(a.Provider, b.Provider), cmp.Compare(a.Shape, b.Shape), cmp.Compare(a.Location, b.Location))
	})
}
