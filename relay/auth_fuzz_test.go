package relay_test

import (
	"bytes"
	"encoding/base64"
	"errors"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/relayfleet/relayfleet/relay"
)

// fuzzKey is the fuzz targets' Ed25519 seed.
var fuzzKey = []byte("fuzz-key-0123456789abcdef-ed2551")

// fuzzNow is the fuzz authenticators' clock; fuzzIat is the tokens'
// issue time, and farFuture an expiry within the maximum lifetime.
var (
	fuzzNow   = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	fuzzIat   = fuzzNow.Add(-time.Hour).Unix()
	farFuture = fuzzNow.Add(time.Hour).Unix()
)

func fuzzAuthenticator(t testing.TB) *relay.Authenticator {
	return fuzzAuthenticatorKey(t, fuzzKey)
}

func fuzzAuthenticatorKey(t testing.TB, key []byte) *relay.Authenticator {
	a, err := relay.NewAuthenticator(key)
	if err != nil {
		t.Fatal(err)
	}
	return a.WithClock(func() time.Time { return fuzzNow })
}

func signFuzz(t testing.TB, c relay.Claims) string {
	tok, err := fuzzAuthenticator(t).Sign(c)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// sameClaims compares claims with a nil list equal to an empty one (the
// JSON encoding leaves empty lists out).
func sameClaims(a, b relay.Claims) bool {
	return slices.Equal(a.Put, b.Put) && slices.Equal(a.Get, b.Get) && a.IssuedAt == b.IssuedAt && a.Expires == b.Expires && a.ID == b.ID
}

// FuzzVerify feeds arbitrary tokens to Verify. A token that verifies is
// unexpired and within the maximum lifetime, its claims survive a Sign and Verify round trip, and it does
// not verify under another key; one that does not verify is refused with
// ErrUnauthorized.
func FuzzVerify(f *testing.F) {
	f.Add(signFuzz(f, relay.Claims{Put: []string{"live/room1"}, Get: []string{"live"}, IssuedAt: fuzzIat, Expires: farFuture, ID: "0123456789abcdef"}))
	f.Add(signFuzz(f, relay.Claims{Put: []string{"live"}, IssuedAt: fuzzIat, Expires: fuzzNow.AddDate(1, 0, 0).Unix()}))
	f.Add(signFuzz(f, relay.Claims{Get: []string{""}, Expires: farFuture}))
	f.Add(signFuzz(f, relay.Claims{Put: []string{"a"}, Expires: 1}))
	f.Add("eyJhbGciOiJub25lIn0.eyJleHAiOjQxMDI0NDQ4MDB9.")
	f.Add("a.b.c")
	f.Add("")
	f.Fuzz(func(t *testing.T, tok string) {
		a := fuzzAuthenticator(t)
		c, err := a.Verify(tok)
		if err != nil {
			if !errors.Is(err, relay.ErrUnauthorized) {
				t.Fatalf("Verify(%q): %v, want an ErrUnauthorized", tok, err)
			}
			return
		}
		if c.Expires <= fuzzNow.Unix() {
			t.Fatalf("Verify(%q) accepted claims that expired at %d", tok, c.Expires)
		}
		maxSec := int64(relay.DefaultMaxTokenLifetime / time.Second)
		if c.Expires-fuzzNow.Unix() > maxSec || c.IssuedAt != 0 && c.Expires-c.IssuedAt > maxSec {
			t.Fatalf("Verify(%q) accepted claims %+v valid for longer than %s", tok, c, relay.DefaultMaxTokenLifetime)
		}
		other := fuzzAuthenticatorKey(t, append([]byte("other-"), fuzzKey[6:]...))
		if _, err := other.Verify(tok); err == nil {
			t.Fatalf("Verify(%q) succeeded under another key", tok)
		}
		tok2, err := a.Sign(c)
		if err != nil {
			t.Fatalf("Sign(%+v): %v", c, err)
		}
		c2, err := a.Verify(tok2)
		if err != nil || !sameClaims(c, c2) {
			t.Fatalf("claims %+v signed and verified again: %+v, %v", c, c2, err)
		}
	})
}

// FuzzVerifyTamper signs claims, checks they verify as they were, then
// changes one byte of the token: the changed token must not verify unless
// every part still decodes to the same bytes (base64 has spare bits in its
// last character, which the decoder ignores).
func FuzzVerifyTamper(f *testing.F) {
	f.Add("live/room1", "live", uint(0), byte('x'))
	f.Add("", "a/b", uint(40), byte('.'))
	f.Add("p", "", uint(1000), byte('A'))
	f.Add("a", "b", uint(86), byte('B'))
	f.Fuzz(func(t *testing.T, put, get string, pos uint, b byte) {
		if !utf8.ValidString(put) || !utf8.ValidString(get) {
			return // JSON carries text; invalid UTF-8 is replaced, so claims would not round-trip
		}
		a := fuzzAuthenticator(t)
		c := relay.Claims{Put: []string{put}, Get: []string{get}, IssuedAt: fuzzIat, Expires: farFuture}
		tok, err := a.Sign(c)
		if err != nil {
			t.Fatal(err)
		}
		got, err := a.Verify(tok)
		if err != nil || !sameClaims(got, c) {
			t.Fatalf("Verify(Sign(%+v)) = %+v, %v", c, got, err)
		}
		i := int(pos % uint(len(tok)))
		if tok[i] == b {
			return
		}
		bad := tok[:i] + string([]byte{b}) + tok[i+1:]
		if _, err := a.Verify(bad); err != nil {
			return
		}
		was, now := strings.Split(tok, "."), strings.Split(bad, ".")
		if len(was) != len(now) {
			t.Fatalf("token with byte %d changed to %q verifies: %q", i, b, bad)
		}
		for k := range was {
			x, err1 := base64.RawURLEncoding.DecodeString(was[k])
			y, err2 := base64.RawURLEncoding.DecodeString(now[k])
			if err1 != nil || err2 != nil || !bytes.Equal(x, y) {
				t.Fatalf("token with byte %d changed to %q verifies: %q", i, b, bad)
			}
		}
	})
}

// FuzzAuthorize signs a token that grants put and get, passes it in a URL
// with arbitrary other query parameters, and checks that the permissions
// are exactly the granted prefixes, segment by segment.
func FuzzAuthorize(f *testing.F) {
	f.Add("live/room1", "live", "x=1", "live/room1/a")
	f.Add("/live//", "", "jwt=other", "live")
	f.Add("foo", "foo", "a=%zz;b", "foobar")
	f.Add("a", "b", "", "a/../b")
	f.Fuzz(func(t *testing.T, put, get, extra, path string) {
		if !utf8.ValidString(put) || !utf8.ValidString(get) {
			return
		}
		a := fuzzAuthenticator(t)
		tok := signFuzz(t, relay.Claims{Put: []string{put}, Get: []string{get}, IssuedAt: fuzzIat, Expires: farFuture})
		u := &url.URL{Scheme: "https", Host: "relay.example", RawQuery: "jwt=" + url.QueryEscape(tok) + "&" + extra}
		p, err := a.Authorize(u)
		if err != nil {
			t.Fatalf("Authorize(%s): %v", u, err)
		}
		path = strings.Join(segs(path), "/")
		if got, want := p.CanPublish(path), under(put, path); got != want {
			t.Fatalf("put %q: CanPublish(%q) = %v, want %v", put, path, got, want)
		}
		if got, want := p.CanSubscribe(path), under(get, path); got != want {
			t.Fatalf("get %q: CanSubscribe(%q) = %v, want %v", get, path, got, want)
		}
		if !p.CanPublishAny() {
			t.Fatalf("put %q: CanPublishAny is false", put)
		}
	})
}

// segs is the reference for broadcast paths: the non-empty parts between
// slashes.
func segs(p string) []string {
	var out []string
	for s := range strings.SplitSeq(p, "/") {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

// under reports whether path is prefix or below it, segment by segment.
func under(prefix, path string) bool {
	ps, ss := segs(prefix), segs(path)
	return len(ps) <= len(ss) && slices.Equal(ps, ss[:len(ps)])
}
