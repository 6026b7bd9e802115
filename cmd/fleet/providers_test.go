package main

import (
	"strings"
	"testing"

	"github.com/relayfleet/relayfleet/inventories/pricing"
)

func TestProvidersGolden(t *testing.T) {
	t.Setenv(pricing.EnvHcloudToken, "")
	t.Setenv(pricing.EnvDOToken, "")
	out, errOut, code := fleet(t, "providers", "--providers", "testdata/providers.yaml")
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	golden(t, "providers.txt", out)
	if !strings.Contains(out, "not usable: freecdn") {
		t.Error("the unusable CDN tier is not shown as unusable")
	}
}

func TestProvidersShippedCatalogue(t *testing.T) {
	t.Setenv(pricing.EnvHcloudToken, "")
	t.Setenv(pricing.EnvDOToken, "")
	out, _, code := fleet(t, "providers")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"hcloud/ccx33@eu", "hcloud/ccx33@us", "hetzner-robot/", "digitalocean/c-8", "pooled-hour", "throttled to", "not usable:"} {
		if !strings.Contains(out, want) {
			t.Errorf("shipped catalogue table lacks %q", want)
		}
	}
}
