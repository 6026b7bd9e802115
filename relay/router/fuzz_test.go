package router_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/relayfleet/relayfleet/relay/router"
)

// FuzzParse feeds arbitrary relays files to Parse. An error is one line
// that says it is about the relays file; a file that parses has only
// http(s) URLs and no URL twice, and written back as JSON it parses to
// the same.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{"relays": [{"url": "https://relay1.example:4443/", "stats": "http://relay1.example:4443/stats", "draining": false}]}`,
		`{"relays": [{"url": "http://a:1/", "stats": "http://a:1/stats"}, {"url": "http://a:1/", "stats": "http://a:1/stats"}]}`,
		`{"relays": []}`, `{"relays": null}`, `null`, `{}`, `{"relays": [{"URL": "http://a/", "Stats": "http://a/s"}]}`,
		`{"relays": [{"url": "ftp://a/", "stats": "http://a/s"}]}`, `{"relays": [{"url": "HTTPS://A/", "stats": "Http://a/s"}]}`, `{"relays": [], "extra": 1}`, `{} {}`, `{"relays": [{"url": "http://\u00e9/\ud800", "stats": "https://b"}]}`,
		"", "[", `{"relays": [{"url": "http://a/", "stats": "http://a/s", "draining": "yes"}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := router.Parse(data)
		if err != nil {
			if msg := err.Error(); strings.ContainsAny(msg, "\n\r") || !strings.HasPrefix(msg, "relays file: ") {
				t.Fatalf("error %q: want one line starting with %q", msg, "relays file: ")
			}
			return
		}
		seen := map[string]bool{}
		for i, r := range file.Relays {
			for _, u := range []string{r.URL, r.Stats} {
				if l := strings.ToLower(u); !strings.HasPrefix(l, "http://") && !strings.HasPrefix(l, "https://") {
					t.Fatalf("relay %d: %q accepted, not an http(s) URL", i, u)
				}
			}
			if seen[r.URL] {
				t.Fatalf("relay %d: url %q accepted twice", i, r.URL)
			}
			seen[r.URL] = true
		}
		out, err := json.Marshal(file)
		if err != nil {
			t.Fatalf("marshal accepted file: %v", err)
		}
		again, err := router.Parse(out)
		if err != nil {
			t.Fatalf("accepted file written back does not parse: %v\n%s", err, out)
		}
		if !reflect.DeepEqual(file, again) {
			t.Fatalf("accepted file changed on a round trip: %+v, then %+v", file, again)
		}
	})
}
