package pricing

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/relayfleet/relayfleet/inventories"
)

// fixtureLive is what both test servers answer, parsed by the real
// clients.
func fixtureLive(t *testing.T) []Live {
	t.Helper()
	ctx := context.Background()
	hs := newAPIServer(t, "/server_types", "hcloud_server_types", hcloudToken)
	hl, err := FetchHcloud(ctx, hcloudToken, hs.URL, hs.Client())
	if err != nil {
		t.Fatal(err)
	}
	ds := newAPIServer(t, "/v2/sizes", "do_sizes", doToken)
	dl, err := FetchDigitalOcean(ctx, doToken, ds.URL, ds.Client())
	if err != nil {
		t.Fatal(err)
	}
	return append(hl, dl...)
}

func testCatalogue(t *testing.T) *inventories.Catalogue {
	t.Helper()
	cat, err := inventories.LoadCatalogue("testdata/providers.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return cat
}

func diffLines(ds []Difference) string {
	var b strings.Builder
	for _, d := range ds {
		fmt.Fprintf(&b, "%s | %s | %s | %s\n", d.Ref, d.Field, d.Shipped, d.Live)
	}
	return b.String()
}

func TestCompare(t *testing.T) {
	cat := testCatalogue(t)
	base := fixtureLive(t)
	edit := func(f func([]Live) []Live) []Live { return f(slices.Clone(base)) }
	set := func(shape, loc string, f func(*Live)) func([]Live) []Live {
		return func(ls []Live) []Live {
			for i := range ls {
				if ls[i].Shape == shape && ls[i].Location == loc {
					f(&ls[i])
				}
			}
			return ls
		}
	}
	for _, tc := range []struct {
		name string
		live []Live
		want []Difference
	}{
		{name: "matching data", live: base},
		{
			name: "price change",
			live: edit(set("ccx33", "fsn1", func(l *Live) { l.Monthly = 52.49; l.Hourly = 0.0841 })),
			want: []Difference{
				{Ref: "hcloud/ccx33@eu (fsn1)", Field: "hourly", Shipped: "0.0777 EUR", Live: "0.0841 EUR"},
				{Ref: "hcloud/ccx33@eu (fsn1)", Field: "monthly", Shipped: "48.49 EUR", Live: "52.49 EUR"},
			},
		},
		{
			name: "within tolerance",
			live: edit(set("c-8", "", func(l *Live) { l.Monthly = 168.5; l.Hourly = 0.2505 })),
		},
		{
			name: "traffic, overage, cores and ram",
			live: edit(set("ccx13", "ash", func(l *Live) {
				l.Included = 2 * tib
				l.OveragePer = 1.5
				l.Cores = 4
				l.RAM = 16 * gib
			})),
			want: []Difference{
				{Ref: "hcloud/ccx13@us (ash)", Field: "cores", Shipped: "2", Live: "4"},
				{Ref: "hcloud/ccx13@us (ash)", Field: "included", Shipped: "1 TiB a month", Live: "2 TiB a month"},
				{Ref: "hcloud/ccx13@us (ash)", Field: "overage", Shipped: "1 EUR/TiB", Live: "1.5 EUR/TiB"},
				{Ref: "hcloud/ccx13@us (ash)", Field: "ram", Shipped: "8 GiB", Live: "16 GiB"},
			},
		},
		{
			name: "missing shape",
			live: edit(func(ls []Live) []Live {
				return append(ls, Live{Provider: "digitalocean", Shape: "c-32", Cores: 32, RAM: 64 * gib, Hourly: 1, Monthly: 672,
					Currency: "USD", Included: 9000 * gib, OveragePer: 0.01, OverageUnit: "GiB"})
			}),
			want: []Difference{{Ref: "digitalocean/c-32", Field: FieldMissing,
				Live: "32 cores, 64 GiB RAM, 1 USD an hour, 672 USD a month, 9000 GiB included a month"}},
		},
		{
			name: "removed shape",
			live: edit(func(ls []Live) []Live {
				return slices.DeleteFunc(ls, func(l Live) bool { return l.Shape == "c-16" || (l.Shape == "ccx13" && l.Location == "sin") })
			}),
			want: []Difference{
				{Ref: "digitalocean/c-16", Field: FieldNotSold, Shipped: "336 USD a month"},
				{Ref: "hcloud/ccx13@ap", Field: FieldNotSold, Shipped: "21.5 EUR a month"},
			},
		},
		{
			name: "location in no region",
			live: edit(func(ls []Live) []Live {
				l := findLive(t, ls, "cx23", "fsn1")
				l.Location = "fsn9"
				return append(ls, l)
			}),
			want: []Difference{{Ref: "hcloud/cx23 (fsn9)", Field: FieldMissing,
				Live: "2 cores, 4 GiB RAM, 0.0056 EUR an hour, 3.49 EUR a month, 20 TiB included a month; location fsn9 is in no region of hcloud"}},
		},
		{
			name: "only the providers asked",
			live: slices.DeleteFunc(slices.Clone(base), func(l Live) bool { return l.Provider == ProviderDigitalOcean }),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Compare(cat, tc.live)
			if diffLines(got) != diffLines(tc.want) {
				t.Errorf("Compare =\n%swant\n%s", diffLines(got), diffLines(tc.want))
			}
		})
	}
}

func TestCompareCombinedIsSorted(t *testing.T) {
	cat := testCatalogue(t)
	live := fixtureLive(t)
	live = slices.DeleteFunc(live, func(l Live) bool { return l.Shape == "cpx22" })
	for i := range live {
		if live[i].Shape == "s-4vcpu-8gb" || live[i].Location == "nbg1" {
			live[i].Monthly *= 1.1
		}
	}
	live = append(live, Live{Provider: "hcloud", Shape: "cax11", Location: "fsn1", Currency: "EUR"})
	slices.Reverse(live)
	got := Compare(cat, live)
	if !slices.IsSortedFunc(got, func(a, b Difference) int {
		return strings.Compare(a.Ref+"\x00"+a.Field, b.Ref+"\x00"+b.Field)
	}) {
		t.Errorf("not sorted:\n%s", diffLines(got))
	}
	want := []string{
		"digitalocean/s-4vcpu-8gb | monthly",
		"hcloud/cax11@eu (fsn1) | " + FieldMissing,
		"hcloud/ccx13@eu (nbg1) | monthly",
		"hcloud/ccx33@eu (nbg1) | monthly",
		"hcloud/cpx22@eu | " + FieldNotSold,
		"hcloud/cx23@eu (nbg1) | monthly",
	}
	var gotKeys []string
	for _, d := range got {
		gotKeys = append(gotKeys, d.Ref+" | "+d.Field)
	}
	if strings.Join(gotKeys, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(gotKeys, "\n"), strings.Join(want, "\n"))
	}
}

func TestCompareConvertsCurrencies(t *testing.T) {
	cat := testCatalogue(t)
	// c-4 quoted in EUR at the catalogue's rate is the same price.
	live := []Live{{Provider: "digitalocean", Shape: "c-4", Cores: 4, RAM: 8 * gib, Hourly: 0.125 * 0.86, Monthly: 84 * 0.86,
		Currency: "EUR", Included: 5000 * gib, OveragePer: 0.0086, OverageUnit: "GiB"}}
	for _, d := range Compare(cat, live) {
		if d.Field != FieldNotSold {
			t.Errorf("unexpected difference %+v", d)
		}
	}
}
