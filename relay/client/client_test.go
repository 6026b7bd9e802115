package client_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/relay/client"
)

func TestPattern(t *testing.T) {
	p := client.Pattern(12, 3, 40)
	if len(p) != 40 || !strings.HasPrefix(string(p), "g12 f3 ") {
		t.Fatalf("Pattern = %q", p)
	}
	g, f, err := client.CheckPattern(p, 40)
	if err != nil || g != 12 || f != 3 {
		t.Fatalf("CheckPattern = %d, %d, %v", g, f, err)
	}
	p[30] ^= 1
	if _, _, err := client.CheckPattern(p, 40); err == nil {
		t.Fatal("CheckPattern accepted a changed byte")
	}
	if _, _, err := client.CheckPattern(client.Pattern(1, 2, 40), 41); err == nil {
		t.Fatal("CheckPattern accepted a short payload")
	}
	if string(client.Pattern(1, 2, 0)) != "g1 f2 " {
		t.Fatal("a size below the header keeps the header")
	}
}

func TestDialRejectsBadURLs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, u := range []string{"ftp://127.0.0.1:1/", "http://127.0.0.1/", "::"} {
		if _, err := client.Dial(ctx, u, nil); err == nil {
			t.Errorf("Dial(%q) succeeded", u)
		}
	}
	// http:// fetches /certificate.sha256; garbage there is an error, not a pin.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/certificate.sha256" {
			t.Errorf("fetched %s", r.URL.Path)
		}
		w.Write([]byte("not-a-hash"))
	}))
	defer srv.Close()
	_, err := client.Dial(ctx, srv.URL+"/x", nil)
	if err == nil || !strings.Contains(err.Error(), "certificate hash") {
		t.Fatalf("Dial with a bad hash: %v", err)
	}
}

func TestRouteAvoidingAsksTheRouter(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.URL.Query()["avoid"]
		if r.URL.Query().Get("broadcast") != "room" {
			t.Errorf("broadcast = %q", r.URL.Query().Get("broadcast"))
		}
		w.Write([]byte(`{"url":"https://127.0.0.1:4443/"}`))
	}))
	defer srv.Close()
	rc, err := client.NewRouterClient(srv.URL, client.RouterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	avoid := []string{"https://10.0.0.1:4443/", "https://10.0.0.2:4443/#spki=00"}
	if _, err := rc.RouteAvoiding(ctx, "room", avoid...); err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, " ") != strings.Join(avoid, " ") {
		t.Errorf("avoid = %q, want %q", got, avoid)
	}
	if _, err := rc.Route(ctx, "room"); err != nil || len(got) != 0 {
		t.Errorf("Route sent avoid %q (%v)", got, err)
	}
	// A resolver passes them on and keeps the router's URL, without the
	// token, as the target's Relay.
	res, err := client.NewResolver(client.ResolverOptions{Router: srv.URL, Broadcast: "room", Token: "tok"})
	if err != nil {
		t.Fatal(err)
	}
	tg, err := res.Resolve(ctx, time.Time{}, avoid[0])
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != avoid[0] {
		t.Errorf("Resolve sent avoid %q", got)
	}
	if tg.Relay != "https://127.0.0.1:4443/" || tg.URL != "https://127.0.0.1:4443/?jwt=tok" || tg.Path != "/?jwt=tok" {
		t.Errorf("target %q %q %q", tg.Relay, tg.URL, tg.Path)
	}
}
