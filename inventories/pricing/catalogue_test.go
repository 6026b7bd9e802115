package pricing

import (
	"strings"
	"testing"

	"github.com/relayfleet/relayfleet/inventories"
)

// These tests hold the shipped providers.yaml to the facts it claims.

func shipped(t *testing.T) *inventories.Catalogue {
	t.Helper()
	cat, err := inventories.LoadCatalogue(inventories.Embedded(inventories.ProvidersFile))
	if err != nil {
		t.Fatalf("shipped providers.yaml: %v", err)
	}
	return cat
}

// shippedProvider is the shipped catalogue's provider name.
func shippedProvider(t *testing.T, name string) *inventories.Provider {
	t.Helper()
	p, ok := shipped(t).Provider(name)
	if !ok {
		t.Fatalf("no %s provider", name)
	}
	return p
}

func TestShippedCatalogueLoads(t *testing.T) {
	cat := shipped(t)
	if _, err := inventories.LoadFleet(inventories.Embedded("example.yaml"), cat); err != nil {
		t.Fatalf("example.yaml against the shipped catalogue: %v", err)
	}
	for _, ref := range []string{"hetzner-robot/ax42", "hetzner-robot/ax102", "hcloud/ccx33@eu", "hcloud/ccx43@eu", "digitalocean/c-8", "lab/small"} {
		if _, _, err := cat.Lookup(ref); err != nil {
			t.Errorf("%s: %v", ref, err)
		}
	}
	for _, p := range cat.Providers {
		for _, s := range p.Shapes {
			if s.Unsure && s.Note == "" {
				t.Errorf("%s is marked unsure but its note does not say why", s.Ref(&p))
			}
			if p.Kind != inventories.KindLab && !strings.HasPrefix(s.Date, "2026-") {
				t.Errorf("%s: date %q, want the 2026 date it was read", s.Ref(&p), s.Date)
			}
		}
	}
}

func TestShippedHcloud(t *testing.T) {
	p := shippedProvider(t, "hcloud")
	if p.Kind != inventories.KindCloud || p.API != "hcloud" {
		t.Errorf("hcloud kind %q api %q", p.Kind, p.API)
	}
	for loc, region := range map[string]string{"fsn1": "eu", "nbg1": "eu", "hel1": "eu", "ash": "us", "hil": "us", "sin": "ap"} {
		if r, _ := p.RegionOf(loc); r != region {
			t.Errorf("RegionOf(%s) = %q, want %s", loc, r, region)
		}
	}
	var shared, dedicated, compared int
	for _, s := range p.Shapes {
		switch {
		case strings.HasPrefix(s.Name, "cx") || strings.HasPrefix(s.Name, "cpx"):
			shared++
		case strings.HasPrefix(s.Name, "ccx"):
			dedicated++
		}
		e := s.Egress
		if s.Hourly <= 0 || s.Monthly <= 0 || s.Currency != "EUR" || e.Accrues != inventories.AccrueMonth || e.Past != inventories.PastBilled {
			t.Errorf("%s: hourly %v monthly %v %s, egress %+v; want hourly and monthly EUR prices, a monthly allowance billed past it", s.Ref(p), s.Hourly, s.Monthly, s.Currency, e)
		}
		if s.Region == "eu" && e.Included < 20*tib {
			t.Errorf("%s includes %v, want at least 20 TiB (Hetzner's 20 TB)", s.Ref(p), e.Included)
		}
		if !s.Unsure || !strings.Contains(s.Note, "no per-server bandwidth") {
			t.Errorf("%s: the cloud uplink is not published; want unsure and a note saying so", s.Ref(p))
		}
		if s.Region == "eu" {
			continue
		}
		eu, ok := p.Shape(s.Name, "eu")
		if !ok {
			t.Errorf("%s has no EU row to compare with", s.Ref(p))
			continue
		}
		compared++
		if e.Included >= eu.Egress.Included {
			t.Errorf("%s includes %v, not less than the EU row's %v", s.Ref(p), e.Included, eu.Egress.Included)
		}
	}
	if shared == 0 || dedicated < 6 || compared == 0 {
		t.Errorf("hcloud has %d shared, %d dedicated rows, %d US/AP rows compared; want shared and all of CCX13..CCX63", shared, dedicated, compared)
	}
}

func TestShippedHetznerRobot(t *testing.T) {
	p := shippedProvider(t, "hetzner-robot")
	if p.Kind != inventories.KindDedicated || p.API != "" {
		t.Errorf("hetzner-robot kind %q api %q", p.Kind, p.API)
	}
	for _, s := range p.Shapes {
		e := s.Egress
		if s.Hourly != 0 || s.Monthly <= 0 || s.Uplink != 1e9 || e.Accrues != inventories.AccrueUnmetered || e.Past != inventories.PastNone || e.FairUse == "" {
			t.Errorf("%s: %+v; want monthly only, 1 Gbit/s, unmetered with a fair-use clause", s.Ref(p), s)
		}
		if !strings.Contains(s.Note, "threads") {
			t.Errorf("%s: note should say cores are hardware threads", s.Ref(p))
		}
	}
}

func TestShippedDigitalOcean(t *testing.T) {
	p := shippedProvider(t, "digitalocean")
	if r, ok := p.RegionOf("ams3"); !ok || len(p.Regions) != 1 {
		t.Errorf("ams3 -> %q, %d regions; want one region holding ams3", r, len(p.Regions))
	}
	want := map[string]bool{"s-4vcpu-8gb": true, "c-4": true, "c-8": true, "c-16": true, "c-32": true}
	for _, s := range p.Shapes {
		delete(want, s.Name)
		e := s.Egress
		if e.Accrues != inventories.AccruePooledHour || e.Past != inventories.PastBilled || e.Price != 0.01 || e.Per != "GiB" || e.Included <= 0 {
			t.Errorf("%s: egress %+v; want a pooled-hour allowance billed at 0.01 per GiB past it", s.Ref(p), e)
		}
		if s.Currency != "USD" || s.Hourly <= 0 || s.Monthly <= 0 {
			t.Errorf("%s: %v/%v %s; want USD hourly and monthly prices", s.Ref(p), s.Hourly, s.Monthly, s.Currency)
		}
	}
	if len(want) > 0 {
		t.Errorf("digitalocean lacks %v", want)
	}
}

func TestShippedStoryCases(t *testing.T) {
	cat := shipped(t)
	var daily, cdn bool
	for i := range cat.Providers {
		p := &cat.Providers[i]
		for _, s := range p.Shapes {
			if s.Egress.Accrues == inventories.AccrueDay && s.Egress.Past == inventories.PastThrottled {
				daily = true
				if s.Egress.Throttle <= 0 || s.Egress.Throttle >= s.Uplink || !s.Unsure {
					t.Errorf("%s: throttle %v of uplink %v, unsure %v; want a throttle below the uplink, marked unsure", s.Ref(p), s.Egress.Throttle, s.Uplink, s.Unsure)
				}
			}
		}
		if p.Kind == inventories.KindCDN {
			cdn = true
			if p.Unusable == "" || !strings.Contains(p.Unusable, "QUIC") {
				t.Errorf("%s: unusable %q; want why it cannot carry relay audio", p.Name, p.Unusable)
			}
			if len(p.Shapes) == 0 || p.Shapes[0].Source == "" || p.Shapes[0].Date == "" {
				t.Errorf("%s: want a dated, sourced row", p.Name)
			}
		}
	}
	if !daily || !cdn {
		t.Errorf("daily-cap provider %v, cdn provider %v; want both", daily, cdn)
	}
}
