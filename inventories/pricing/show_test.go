package pricing

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestShowLivePrices: with tokens, Show compares the catalogue with the
// providers' APIs: a matching catalogue is "the same", a changed one
// lists its differences; the token shows nowhere.
func TestShowLivePrices(t *testing.T) {
	const token = "s3cret-token-value"
	hc := newAPIServer(t, "/server_types", "hcloud_server_types", token)
	do := newAPIServer(t, "/v2/sizes", "do_sizes", token)
	src := Sources{HcloudToken: token, HcloudURL: hc.URL, DOToken: token, DOURL: do.URL + "/"}

	match := filepath.Join("testdata", "providers.yaml")
	var out strings.Builder
	if err := Show(context.Background(), &out, match, src); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "from hcloud digitalocean): the same as "+match) {
		t.Errorf("matching catalogue reported differences:\n%s", out.String())
	}

	data, err := os.ReadFile(match)
	if err != nil {
		t.Fatal(err)
	}
	changed := filepath.Join(t.TempDir(), "providers.yaml")
	if err := os.WriteFile(changed, []byte(strings.Replace(string(data), "monthly: 48.49", "monthly: 50.0", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := Show(context.Background(), &out, changed, src); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "differences from "+changed) || !strings.Contains(out.String(), "hcloud/ccx33@eu") {
		t.Errorf("differences not shown:\n%s", out.String())
	}
	if strings.Contains(out.String(), token) {
		t.Error("the token appears in the output")
	}
}

// TestShowWithoutTokens: the catalogue alone, and how to compare it.
func TestShowWithoutTokens(t *testing.T) {
	var out strings.Builder
	if err := Show(context.Background(), &out, filepath.Join("testdata", "providers.yaml"), Sources{}); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "Provider catalogue testdata/providers.yaml") || !strings.HasSuffix(out.String(), "\nlive prices: set HCLOUD_TOKEN or DIGITALOCEAN_TOKEN to compare with the providers' APIs\n") {
		t.Errorf("output:\n%s", out.String())
	}
}

// TestShowBadTokenFails: a token the API refuses fails Show in one line
// naming the provider, without the token.
func TestShowBadTokenFails(t *testing.T) {
	hc := newAPIServer(t, "/server_types", "hcloud_server_types", "right-token")
	err := Show(context.Background(), &strings.Builder{}, filepath.Join("testdata", "providers.yaml"), Sources{HcloudToken: "wrong-token-value", HcloudURL: hc.URL})
	if err == nil || !strings.HasPrefix(err.Error(), "live prices: hcloud") || strings.Contains(err.Error(), "\n") {
		t.Errorf("err = %v, want one line about hcloud", err)
	}
	if err != nil && strings.Contains(err.Error(), "wrong-token-value") {
		t.Error("the token appears in the error")
	}
}

// TestSourcesFromEnv: the tokens and endpoints come from the
// environment.
func TestSourcesFromEnv(t *testing.T) {
	t.Setenv(EnvHcloudToken, "h")
	t.Setenv(EnvHcloudURL, "http://h")
	t.Setenv(EnvDOToken, "d")
	t.Setenv(EnvDOURL, "http://d")
	if got := SourcesFromEnv(); got != (Sources{HcloudToken: "h", HcloudURL: "http://h", DOToken: "d", DOURL: "http://d"}) {
		t.Errorf("SourcesFromEnv() = %+v", got)
	}
}
