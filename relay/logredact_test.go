package relay_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/relay"
	"github.com/relayfleet/relayfleet/relay/client"
)

// TestWebTransportTokenNotLogged: a WebTransport session carries its token
// in the CONNECT request's URI (?jwt=, as the listen page and `relay
// listen --transport webtransport` send it), which the HTTP/3 server logs
// at debug level; the relay's log must show the request and not the
// token.
func TestWebTransportTokenNotLogged(t *testing.T) {
	a := testAuth(t, "0123456789abcdef0123456789abcdef")
	var log testutil.SyncBuffer
	r, err := relay.Start(context.Background(), relay.Config{Listen: "127.0.0.1:0", Auth: a,
		Logger: slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	tok := mintToken(t, a, "", "room")
	u, err := client.WithToken(relayURL(r, "/"), tok)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := client.Dial(ctx, u, &client.Options{Logger: quietLogger(), Transport: client.TransportWebTransport})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if !testutil.Poll(15*time.Second, func() bool { return strings.Contains(log.String(), "handling request") }) {
		t.Fatalf("no request logged at debug level:\n%s", log.String())
	}
	if strings.Contains(log.String(), tok) {
		t.Errorf("the relay's log holds the token:\n%s", log.String())
	}
	if !strings.Contains(log.String(), "jwt=REDACTED") {
		t.Errorf("the request's ?jwt= is not shown redacted:\n%s", log.String())
	}
}

// TestLogRedactsTokens: ?jwt= values go, in the message, in string,
// error and Stringer attributes and in groups; the rest stays.
func TestLogRedactsTokens(t *testing.T) {
	var b strings.Builder
	l := relay.RedactTokensForTest(slog.New(slog.NewTextHandler(&b, nil)))
	u, _ := url.Parse("https://relay:4443/live?jwt=SECRET1&x=1")
	l.With("base", "/?jwt=SECRET2").Info("request /?a=b&jwt=SECRET3",
		"uri", "/room?jwt=SECRET4#f", "err", fmt.Errorf("dial %s: refused", "http://h/?jwt=SECRET5"),
		"url", u, slog.Group("g", "u", "?jwt=SECRET6"), "n", 7, "plain", "no token here")
	out := b.String()
	if strings.Contains(out, "SECRET") {
		t.Errorf("a token is left:\n%s", out)
	}
	for _, want := range []string{"jwt=REDACTED&x=1", "uri=\"/room?jwt=REDACTED#f\"", "n=7", "plain=\"no token here\"", "g.u="} {
		if !strings.Contains(out, want) {
			t.Errorf("%q missing:\n%s", want, out)
		}
	}
}
