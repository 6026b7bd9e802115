package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestProvidersGolden(t *testing.T) {
	t.Setenv(envHcloudToken, "")
	t.Setenv(envDOToken, "")
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
	t.Setenv(envHcloudToken, "")
	t.Setenv(envDOToken, "")
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

// fakeAPIs serves the pricing package's fixtures the way the Hetzner Cloud
// and DigitalOcean APIs answer, checking the bearer token.
func fakeAPIs(t *testing.T, token string) (hcloudURL, doURL string) {
	t.Helper()
	fixtures := filepath.Join("..", "..", "inventories", "pricing", "testdata")
	serve := func(path, prefix string) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != "Bearer "+token {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusUnauthorized)
				w.Write([]byte(`{"error":{"code":"unauthorized","message":"unable to authenticate","details":{}}}`))
				return
			}
			if r.URL.Path != path {
				http.NotFound(w, r)
				return
			}
			page := r.URL.Query().Get("page")
			if page == "" {
				page = "1"
			}
			body, err := os.ReadFile(filepath.Join(fixtures, prefix+"_page"+page+".json"))
			if err != nil {
				http.NotFound(w, r)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.Write(body)
		}))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	return serve("/server_types", "hcloud_server_types"), serve("/v2/sizes", "do_sizes") + "/"
}

func TestProvidersLivePrices(t *testing.T) {
	const token = "s3cret-token-value"
	hc, do := fakeAPIs(t, token)
	t.Setenv(envHcloudToken, token)
	t.Setenv(envHcloudURL, hc)
	t.Setenv(envDOToken, token)
	t.Setenv(envDOURL, do)

	// The pricing fixtures' own catalogue matches the APIs: no differences.
	match := filepath.Join("..", "..", "inventories", "pricing", "testdata", "providers.yaml")
	out, errOut, code := fleet(t, "providers", "--providers", match)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "from hcloud digitalocean): the same as") {
		t.Errorf("matching catalogue reported differences:\n%s", out)
	}

	// The golden catalogue differs: every difference is listed.
	out, errOut, code = fleet(t, "providers", "--providers", "testdata/providers.yaml")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "differences from testdata/providers.yaml") || !strings.Contains(out, "missing from providers.yaml") {
		t.Errorf("differences not shown:\n%s", out)
	}
	if strings.Contains(out+errOut, token) {
		t.Error("the token appears in the output")
	}
}

func TestProvidersBadTokenFails(t *testing.T) {
	const token = "right-token"
	hc, _ := fakeAPIs(t, token)
	t.Setenv(envHcloudToken, "wrong-token-value")
	t.Setenv(envHcloudURL, hc)
	t.Setenv(envDOToken, "")
	_, errOut, code := fleet(t, "providers", "--providers", "testdata/providers.yaml")
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	if strings.Count(errOut, "\n") != 1 || !strings.HasPrefix(errOut, "fleet providers: live prices: hcloud") {
		t.Errorf("stderr = %q, want one line about hcloud", errOut)
	}
	if strings.Contains(errOut, "wrong-token-value") {
		t.Error("the token appears in the error")
	}
}
