package relay_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/relayfleet/relayfleet/relay"
)

// TestListenPageServed: GET /listen serves the page, which loads only
// /listen.js from the relay itself, and /listen.js is the committed
// bundle (relay/web/dist/listen.js). The page playing audio is tested in
// headless Chromium by relay/web (make test-listen).
func TestListenPageServed(t *testing.T) {
	r := startRelay(t, relay.Config{Listen: "127.0.0.1:0"})
	base := fmt.Sprintf("http://%s", r.Addr())
	get := func(path string) (*http.Response, []byte) {
		t.Helper()
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, b
	}
	resp, page := get("/listen?broadcast=live/room")
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("/listen: %s, Content-Type %q", resp.Status, resp.Header.Get("Content-Type"))
	}
	if !bytes.Contains(page, []byte(`<script type="module" src="/listen.js"></script>`)) {
		t.Errorf("/listen does not load /listen.js:\n%s", page)
	}
	// Nothing from elsewhere: no absolute URL in a src or href.
	if m := regexp.MustCompile(`(?i)(src|href)\s*=\s*"(?:[a-z]+:)?//[^"]*"`).Find(page); m != nil {
		t.Errorf("/listen loads %s from elsewhere", m)
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") {
		t.Errorf("/listen Content-Security-Policy %q, want script-src 'self'", csp)
	}
	resp, js := get("/listen.js")
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/javascript") {
		t.Fatalf("/listen.js: %s, Content-Type %q", resp.Status, resp.Header.Get("Content-Type"))
	}
	want, err := os.ReadFile("web/dist/listen.js")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(js, want) || len(js) == 0 {
		t.Errorf("/listen.js: %d bytes, not web/dist/listen.js (%d bytes)", len(js), len(want))
	}
	presp, err := http.Post(base+"/listen", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	presp.Body.Close()
	if presp.StatusCode == http.StatusOK {
		t.Errorf("POST /listen: %s, want a refusal", presp.Status)
	}
}
