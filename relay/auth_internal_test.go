package relay

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/internal/testutil"
)

func writeKeyFile(t *testing.T, text string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(f, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestLoadAuthKeys(t *testing.T) {
	until := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name, text string
		want       []Key
		err        string // substring of the error; "" means none
	}{
		{name: "one plain line as before", text: "0123456789abcdef0123456789abcdef\n",
			want: []Key{{Secret: []byte("0123456789abcdef0123456789abcdef")}}},
		{name: "plain key with inner spaces", text: "  correct horse battery staple  ",
			want: []Key{{Secret: []byte("correct horse battery staple")}}},
		{name: "rotation", text: "# new key first\nnew-key-0123456789abcdef\n\nold-key-0123456789abcdef  until=2026-12-07T12:00:00Z\n",
			want: []Key{{Secret: []byte("new-key-0123456789abcdef")}, {Secret: []byte("old-key-0123456789abcdef"), Until: until}}},
		{name: "bad until", text: "# c\nold-key-0123456789abcdef until=tomorrow\n", err: ":2: until=\"tomorrow\" is not an RFC 3339 time"},
		{name: "short key", text: "good-key-0123456789abcdef\nshort until=2026-12-07T12:00:00Z\n", err: ":2: key is 5 bytes, want at least 16"},
		{name: "empty", text: "# only a comment\n\n", err: "no key in the file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := writeKeyFile(t, tt.text)
			got, err := LoadAuthKeys(f)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) || !strings.Contains(err.Error(), f) {
					t.Fatalf("err %v, want one naming %s and %q", err, f, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %d keys, want %d", len(got), len(tt.want))
			}
			for i := range got {
				if !bytes.Equal(got[i].Secret, tt.want[i].Secret) || !got[i].Until.Equal(tt.want[i].Until) {
					t.Errorf("key %d: %q until %v, want %q until %v", i, got[i].Secret, got[i].Until, tt.want[i].Secret, tt.want[i].Until)
				}
			}
		})
	}
}

// TestKeyRotation: every key before its until verifies, the first one
// signs, and a key stops verifying at its until by the clock at verify
// time, without a new Authenticator.
func TestKeyRotation(t *testing.T) {
	start := time.Unix(1_800_000_000, 0)
	var clock atomic.Int64
	clock.Store(start.Unix())
	now := func() time.Time { return time.Unix(clock.Load(), 0) }
	oldKey := Key{Secret: []byte("old-key-0123456789abcdef"), Until: start.Add(24 * time.Hour)}
	newKey := Key{Secret: []byte("new-key-0123456789abcdef")}

	oldOnly, err := NewAuthenticatorKeys([]Key{{Secret: oldKey.Secret}})
	if err != nil {
		t.Fatal(err)
	}
	oldOnly = oldOnly.WithClock(now)
	// The key file during the overlap: the old key is listed first until
	// the fleet has handed out the new one, then after it.
	a, err := NewAuthenticatorKeys([]Key{newKey, oldKey})
	if err != nil {
		t.Fatal(err)
	}
	a = a.WithClock(now)
	claims := Claims{Get: []string{"live"}, Expires: start.Add(72 * time.Hour).Unix()}
	oldTok, _ := oldOnly.Sign(claims)
	newTok, _ := a.Sign(claims)
	if _, err := oldOnly.Verify(newTok); err == nil {
		t.Fatal("Sign did not use the first key")
	}
	u := func(tok string) *url.URL { return &url.URL{Path: "/", RawQuery: "jwt=" + tok} }
	for name, tok := range map[string]string{"old": oldTok, "new": newTok} {
		if p, err := a.Authorize(u(tok)); err != nil || !p.CanSubscribe("live/a") {
			t.Errorf("%s key during the overlap: %v", name, err)
		}
	}
	clock.Store(oldKey.Until.Add(-time.Second).Unix())
	if _, err := a.Verify(oldTok); err != nil {
		t.Errorf("old key a second before its until: %v", err)
	}
	clock.Store(oldKey.Until.Unix())
	if _, err := a.Verify(oldTok); err == nil || !strings.Contains(err.Error(), "past its until") {
		t.Errorf("old key at its until: err %v, want refused as past its until", err)
	}
	if _, err := a.Verify(newTok); err != nil {
		t.Errorf("new key after the old one's until: %v", err)
	}

	// When the first key has passed its until, the next one signs.
	b, _ := NewAuthenticatorKeys([]Key{oldKey, newKey})
	b = b.WithClock(now)
	tok, err := b.Sign(claims)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := oldOnly.WithClock(func() time.Time { return start }).Verify(tok); err == nil {
		t.Error("signed with a key past its until")
	}
	all, _ := NewAuthenticatorKeys([]Key{oldKey})
	if _, err := all.WithClock(now).Sign(claims); err == nil {
		t.Error("signed although every key is past its until")
	}
}

// TestPublicListenPermissions: without a token, only the public prefixes
// and only to subscribe; a token adds to them; a bad or empty token is
// refused, not downgraded.
func TestPublicListenPermissions(t *testing.T) {
	a, err := NewAuthenticator([]byte("0123456789abcdef0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	pub := a.WithPublicListen([]string{"/live/", "radio"})
	anon, err := pub.Authorize(&url.URL{Path: "/"})
	if err != nil {
		t.Fatalf("no token with public prefixes: %v", err)
	}
	if !anon.CanSubscribe("live/a") || !anon.CanSubscribe("radio") || anon.CanSubscribe("secret/a") || anon.CanSubscribe("livex") {
		t.Errorf("anonymous subscribe permissions %+v", anon)
	}
	if anon.CanPublishAny() || anon.CanPublish("live/a") {
		t.Error("anonymous session may publish")
	}
	if _, err := a.Authorize(&url.URL{Path: "/"}); err == nil {
		t.Error("no token and no public prefixes admitted")
	}
	tok, _ := pub.NewToken("studio", "", true, false, time.Hour)
	p, err := pub.Authorize(&url.URL{Path: "/", RawQuery: "jwt=" + tok})
	if err != nil {
		t.Fatal(err)
	}
	if !p.CanPublish("studio/a") || !p.CanSubscribe("live/a") || p.CanSubscribe("studio/a") {
		t.Errorf("token plus public permissions %+v", p)
	}
	for _, q := range []string{"jwt=garbage", "jwt=", "jwt=" + tok[:len(tok)-2]} {
		if _, err := pub.Authorize(&url.URL{Path: "/", RawQuery: q}); err == nil {
			t.Errorf("?%s downgraded to public", q)
		}
	}
}

func TestUpstreamDialURLCarriesToken(t *testing.T) {
	if u, _ := upstreamDialURL(nil, "http://origin:4443/"); u != "http://origin:4443/" {
		t.Errorf("without a key: %s", u)
	}
	a, _ := NewAuthenticator([]byte("0123456789abcdef0123456789abcdef"))
	raw, err := upstreamDialURL(a, "http://origin:4443/root?x=1")
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	if u.Host != "origin:4443" || u.Path != "/root" || u.Query().Get("x") != "1" {
		t.Errorf("dial URL %s lost part of the upstream URL", raw)
	}
	c, err := a.Verify(u.Query().Get("jwt"))
	if err != nil {
		t.Fatalf("link token: %v", err)
	}
	if len(c.Put) != 0 || len(c.Get) != 1 || c.Get[0] != "" {
		t.Errorf("link token claims %+v, want get everything, put nothing", c)
	}
	if ttl := time.Duration(c.Expires-c.IssuedAt) * time.Second; ttl <= 0 || ttl > upstreamTokenTTL {
		t.Errorf("link token valid %v", ttl)
	}
}

// TestRefusalLogIsRateLimited: a flood of refusals is counted in full but
// logs at most refusalLogsPerSecond lines a second, then one summary.
func TestRefusalLogIsRateLimited(t *testing.T) {
	var out testutil.SyncBuffer
	r := &refusals{logger: slog.New(slog.NewTextHandler(&out, nil))}
	const flood = 1000
	for range flood {
		r.refuse(ReasonUnauthorized, viaWebSocket, "203.0.113.5:4000", "err", "no token")
	}
	if m, sum := r.byReason(); sum != flood || m[ReasonUnauthorized] != flood {
		t.Fatalf("counted %v (sum %d), want %d unauthorized", m, sum, flood)
	}
	if !testutil.Poll(10*time.Second, func() bool { return strings.Contains(out.String(), "suppressed refusals") }) {
		t.Fatalf("no summary line after the flood; log:\n%.2000s", out.String())
	}
	logged, suppressed := 0, 0
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		switch {
		case strings.Contains(line, "msg=refused reason=unauthorized transport=websocket remote=203.0.113.5:4000"):
			logged++
		case strings.Contains(line, "msg=\"suppressed refusals\""):
			var n int
			i := strings.Index(line, "count=")
			if _, err := fmt.Sscan(line[i+len("count="):], &n); err != nil {
				t.Fatalf("summary line %q: %v", line, err)
			}
			suppressed += n
		default:
			t.Errorf("unexpected log line %q", line)
		}
	}
	// The loop takes far less than a second; should the machine stall,
	// a new window may log a few more lines, never the whole flood.
	if logged+suppressed != flood || logged >= flood/4 {
		t.Errorf("logged %d lines and summed up %d refusals, want at most a few dozen lines for %d refusals", logged, suppressed, flood)
	}
}
