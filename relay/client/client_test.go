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
