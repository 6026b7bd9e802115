package pricing

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/relayfleet/relayfleet/inventories"
)

const (
	hcloudToken = "hc-secret-token-0123456789"
	doToken     = "dop_v1_secret_token_0123456789"
	tib         = inventories.Bytes(1) << 40
	gib         = inventories.Bytes(1) << 30
)

// apiServer is an httptest server that answers GET path with the fixture
// testdata/<prefix>_page<N>.json for ?page=N (1 when absent), checks the
// bearer token, and records the pages asked for.
type apiServer struct {
	*httptest.Server
	mu    sync.Mutex
	pages []string
	auth  []string
}

func newAPIServer(t *testing.T, path, prefix, token string) *apiServer {
	t.Helper()
	s := &apiServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		page := r.URL.Query().Get("page")
		if page == "" {
			page = "1"
		}
		s.mu.Lock()
		s.pages = append(s.pages, page)
		s.auth = append(s.auth, r.Header.Get("Authorization"))
		s.mu.Unlock()
		if r.Method != http.MethodGet || r.URL.Path != path {
			http.Error(w, `{"error":"unexpected request"}`, http.StatusNotFound)
			t.Errorf("unexpected request %s %s", r.Method, r.URL.Path)
			return
		}
		if r.Header.Get("Authorization") != "Bearer "+token {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			if strings.HasPrefix(prefix, "hcloud") {
				w.Write([]byte(`{"error":{"code":"unauthorized","message":"unable to authenticate","details":{}}}`))
			} else {
				w.Write([]byte(`{"id":"Unauthorized","message":"Unable to authenticate you"}`))
			}
			return
		}
		body, err := os.ReadFile(filepath.Join("testdata", prefix+"_page"+page+".json"))
		if err != nil {
			http.Error(w, `{"error":"no such page"}`, http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(body)
	}))
	t.Cleanup(s.Close)
	return s
}

func findLive(t *testing.T, ls []Live, shape, location string) Live {
	t.Helper()
	for _, l := range ls {
		if l.Shape == shape && l.Location == location {
			return l
		}
	}
	t.Fatalf("no live row for %s in %q", shape, location)
	return Live{}
}

func TestFetchHcloud(t *testing.T) {
	srv := newAPIServer(t, "/server_types", "hcloud_server_types", hcloudToken)
	live, err := FetchHcloud(context.Background(), hcloudToken, srv.URL, srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(srv.pages, ","); got != "1,2" {
		t.Errorf("pages asked for = %s, want 1,2 (meta.pagination.next_page)", got)
	}
	for _, a := range srv.auth {
		if a != "Bearer "+hcloudToken {
			t.Errorf("Authorization = %q, want the bearer token", a)
		}
	}
	// cx22 is past its unavailable_after date; ccx33 in sin is deprecated
	// but still sold until 2099.
	want := []string{
		"ccx13 ash", "ccx13 fsn1", "ccx13 hel1", "ccx13 hil", "ccx13 nbg1", "ccx13 sin",
		"ccx33 ash", "ccx33 fsn1", "ccx33 hel1", "ccx33 hil", "ccx33 nbg1", "ccx33 sin",
		"cpx22 fsn1", "cpx22 hel1", "cpx22 nbg1",
		"cx23 fsn1", "cx23 hel1", "cx23 nbg1",
	}
	var got []string
	for _, l := range live {
		got = append(got, l.Shape+" "+l.Location)
		if l.Provider != ProviderHcloud || l.Currency != "EUR" || l.OverageUnit != "TiB" {
			t.Errorf("%s %s: provider %q currency %q unit %q", l.Shape, l.Location, l.Provider, l.Currency, l.OverageUnit)
		}
	}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("rows =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, tc := range []struct {
		shape, loc      string
		cores           int
		ram             inventories.Bytes
		hourly, monthly float64
		included        inventories.Bytes
		overage         float64
	}{
		{"ccx33", "fsn1", 8, 32 * gib, 0.0777, 48.49, 30 * tib, 1},
		{"ccx33", "ash", 8, 32 * gib, 0.081, 50.49, 3 * tib, 1},
		{"ccx33", "sin", 8, 32 * gib, 0.12, 74.9, 3 * tib, 7.4},
		{"ccx13", "hil", 2, 8 * gib, 0.0217, 13.49, 1 * tib, 1},
		{"cx23", "hel1", 2, 4 * gib, 0.0056, 3.49, 20 * tib, 1},
	} {
		l := findLive(t, live, tc.shape, tc.loc)
		if l.Cores != tc.cores || l.RAM != tc.ram || l.Hourly != tc.hourly || l.Monthly != tc.monthly || l.Included != tc.included || l.OveragePer != tc.overage {
			t.Errorf("%s %s = %+v, want cores %d ram %d hourly %v monthly %v included %d overage %v",
				tc.shape, tc.loc, l, tc.cores, tc.ram, tc.hourly, tc.monthly, tc.included, tc.overage)
		}
	}
}

func TestFetchDigitalOcean(t *testing.T) {
	srv := newAPIServer(t, "/v2/sizes", "do_sizes", doToken)
	live, err := FetchDigitalOcean(context.Background(), doToken, srv.URL, srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(srv.pages, ","); got != "1,2" {
		t.Errorf("pages asked for = %s, want 1,2 (links.pages.next)", got)
	}
	for _, a := range srv.auth {
		if a != "Bearer "+doToken {
			t.Errorf("Authorization = %q, want the bearer token", a)
		}
	}
	var got []string
	for _, l := range live {
		got = append(got, l.Shape)
		if l.Provider != ProviderDigitalOcean || l.Location != "" || l.Currency != "USD" || l.OveragePer != 0.01 || l.OverageUnit != "GiB" {
			t.Errorf("%s: %+v", l.Shape, l)
		}
	}
	// s-1vcpu-512mb-10gb is not available and is left out.
	if want := "c-16,c-4,c-8,s-4vcpu-8gb"; strings.Join(got, ",") != want {
		t.Errorf("sizes = %s, want %s", strings.Join(got, ","), want)
	}
	c8 := findLive(t, live, "c-8", "")
	if c8.Cores != 8 || c8.RAM != 16*gib || c8.Hourly != 0.25 || c8.Monthly != 168 || c8.Included != 6000*gib {
		t.Errorf("c-8 = %+v", c8)
	}
}

func TestFetchErrorsKeepTheTokenOut(t *testing.T) {
	ctx := context.Background()
	t.Run("hcloud wrong token", func(t *testing.T) {
		srv := newAPIServer(t, "/server_types", "hcloud_server_types", "another-token")
		_, err := FetchHcloud(ctx, hcloudToken, srv.URL, srv.Client())
		if err == nil || !strings.HasPrefix(err.Error(), "hcloud server types: ") {
			t.Fatalf("err = %v, want one starting with hcloud server types:", err)
		}
		if strings.Contains(err.Error(), hcloudToken) {
			t.Errorf("error carries the token: %v", err)
		}
	})
	t.Run("digitalocean wrong token", func(t *testing.T) {
		srv := newAPIServer(t, "/v2/sizes", "do_sizes", "another-token")
		_, err := FetchDigitalOcean(ctx, doToken, srv.URL, srv.Client())
		if err == nil || !strings.HasPrefix(err.Error(), "digitalocean sizes: ") {
			t.Fatalf("err = %v, want one starting with digitalocean sizes:", err)
		}
		if strings.Contains(err.Error(), doToken) {
			t.Errorf("error carries the token: %v", err)
		}
	})
	t.Run("no token", func(t *testing.T) {
		if _, err := FetchHcloud(ctx, "", "http://127.0.0.1:1", nil); !errors.Is(err, errNoToken) {
			t.Errorf("FetchHcloud without a token: %v", err)
		}
		if _, err := FetchDigitalOcean(ctx, "", "http://127.0.0.1:1", nil); !errors.Is(err, errNoToken) {
			t.Errorf("FetchDigitalOcean without a token: %v", err)
		}
	})
	t.Run("digitalocean pagination that does not advance", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := os.ReadFile(filepath.Join("testdata", "do_sizes_page1.json"))
			w.Write(body) // always page 1, always "next: page=2"
		}))
		defer srv.Close()
		if _, err := FetchDigitalOcean(ctx, doToken, srv.URL, srv.Client()); err == nil || !strings.Contains(err.Error(), "does not advance") {
			t.Errorf("err = %v, want a pagination error", err)
		}
	})
}
