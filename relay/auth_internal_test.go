package relay

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
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

// testKey is a fixed Ed25519 key made from seed, a byte repeated.
func testKey(seed byte) ed25519.PrivateKey {
	return ed25519.NewKeyFromSeed(bytes.Repeat([]byte{seed}, ed25519.SeedSize))
}

func b64std(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

func TestLoadAuthKeys(t *testing.T) {
	until := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	priv, old, link := testKey(1), testKey(2), testKey(3)
	pub := func(k ed25519.PrivateKey) ed25519.PublicKey { return k.Public().(ed25519.PublicKey) }
	tests := []struct {
		name, text string
		want       []Key
		err        string // substring of the error; "" means none
	}{
		{name: "private key, as relay keygen --auth writes", text: "# comment\ned25519-private:" + b64std(priv.Seed()) + "\n",
			want: []Key{{Private: priv, Public: pub(priv)}}},
		{name: "fleet box: public keys and a link key, rotation", text: "ed25519-public:" + b64std(pub(priv)) + "\n\n  ed25519-public:" + b64std(pub(old)) + "   until=2026-12-07T12:00:00Z \r\n" +
			"ed25519-link-public:" + b64std(pub(link)) + "\ned25519-link-private:" + b64std(link.Seed()) + "\n",
			want: []Key{{Public: pub(priv)}, {Public: pub(old), Until: until}, {Public: pub(link), Link: true}, {Public: pub(link), Private: link, Link: true}}},
		{name: "an earlier fleet's HS256 file", text: "# old\nTmV3U2lnbmluZ0tleU5ld1NpZ25pbmdLZXlOZXdTaWc\nT2xkS2V5T2xkS2V5T2xkS2V5T2xkS2V5T2xkS2V5T2x until=2026-12-07T12:00:00Z\n",
			want: []Key{{HS256: []byte("TmV3U2lnbmluZ0tleU5ld1NpZ25pbmdLZXlOZXdTaWc")}, {HS256: []byte("T2xkS2V5T2xkS2V5T2xkS2V5T2xkS2V5T2xkS2V5T2x"), Until: until}}},
		{name: "a short plain secret", text: "0123456789abcde\n", err: ":1: not a key line; want lines ed25519-public:BASE64"},
		{name: "a plain secret beside a typed line", text: "0123456789abcdef0123456789abcdef\ned25519-public:" + b64std(pub(old)) + "\n", err: ":1: not a key line"},
		{name: "bad until", text: "# c\ned25519-public:" + b64std(pub(old)) + " until=tomorrow\n", err: ":2: until=\"tomorrow\" is not an RFC 3339 time"},
		{name: "unknown attribute", text: "ed25519-public:" + b64std(pub(old)) + " for=all\n", err: ":1: unknown attribute \"for\""},
		{name: "short key", text: "ed25519-public:" + b64std(pub(old)) + "\ned25519-public:" + b64std([]byte("short")) + "\n", err: ":2: ed25519-public: the key is 5 bytes, want 32"},
		{name: "not base64", text: "ed25519-private:" + strings.Repeat("*", 44) + "\n", err: ":1: ed25519-private: the key is not standard base64"},
		{name: "unknown type", text: "rsa-public:" + b64std(pub(old)) + "\n", err: ":1: unknown key type \"rsa-public\""},
		{name: "empty", text: "# only a comment\n\n", err: "no key in the file; want lines"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := writeKeyFile(t, tt.text)
			got, err := LoadAuthKeys(f)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) || !strings.Contains(err.Error(), f) || !strings.Contains(err.Error(), "relay keygen --auth") {
					t.Fatalf("err %v, want one naming %s, %q and how to make a key file", err, f, tt.err)
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
				g, w := got[i], tt.want[i]
				if !bytes.Equal(g.Public, w.Public) || !bytes.Equal(g.Private, w.Private) || !bytes.Equal(g.HS256, w.HS256) || g.Link != w.Link || !g.Until.Equal(w.Until) {
					t.Errorf("key %d: %+v, want %+v", i, g, w)
				}
			}
		})
	}
}

// TestLoadAuthKeysRawBytes: a key file made with head -c 32 /dev/urandom
// is refused every time, whatever bytes it holds (before, about one in
// eight was refused as "key is 2 bytes" and the rest taken, trimmed), and
// the error says how to make a key file without quoting the bytes.
func TestLoadAuthKeysRawBytes(t *testing.T) {
	for i := range 64 {
		raw := make([]byte, 32)
		rand.Read(raw)
		if i == 0 {
			raw[5] = '\n' // the case that used to be "key is 2 bytes"
		}
		f := writeKeyFile(t, string(raw))
		_, err := LoadAuthKeys(f)
		if err == nil {
			t.Fatalf("raw random bytes %x accepted as a key file", raw)
		}
		if !strings.Contains(err.Error(), f) || !strings.Contains(err.Error(), "relay keygen --auth --out FILE") {
			t.Fatalf("err %v, want one naming %s and relay keygen --auth", err, f)
		}
	}
	// Text that happens to be valid UTF-8 gets the line's error.
	f := writeKeyFile(t, "   correct horse battery staple  \n")
	if _, err := LoadAuthKeys(f); err == nil || !strings.Contains(err.Error(), f+":1: not a key line") {
		t.Fatalf("plain text line: err %v", err)
	}
}

// TestWriteAuthKey: relay keygen --auth writes a file that signs, and
// the public line it prints verifies what it signs and cannot sign.
func TestWriteAuthKey(t *testing.T) {
	f := filepath.Join(t.TempDir(), "key")
	line, err := WriteAuthKey(f)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(f); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode: %v, %v", fi, err)
	}
	if _, err := WriteAuthKey(f); err == nil {
		t.Fatal("WriteAuthKey overwrote a file")
	}
	signer, err := LoadAuthenticator(f)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := signer.NewToken("live", "", true, false, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(line, KeyLinePublic+":") {
		t.Fatalf("printed %q, want an %s line", line, KeyLinePublic)
	}
	verifier, err := LoadAuthenticator(writeKeyFile(t, line+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c, err := verifier.Verify(tok); err != nil || len(c.Put) != 1 || c.ID == "" {
		t.Fatalf("public line verifies: %+v, %v (want the put claim and a token id)", c, err)
	}
	if _, err := verifier.NewToken("live", "", true, false, time.Hour); !errors.Is(err, ErrNoPrivateKey) {
		t.Fatalf("public line signed: err %v", err)
	}
}

// TestRelayCredentialsCannotMint: the key file a fleet box gets (public
// keys and the link key) cannot make a token that lets anyone publish,
// and a link token can subscribe only.
func TestRelayCredentialsCannotMint(t *testing.T) {
	fleetKey, link := testKey(7), testKey(8)
	box := KeyLinePublic + ":" + b64std(fleetKey.Public().(ed25519.PublicKey)) + "\n" +
		KeyLineLinkPublic + ":" + b64std(link.Public().(ed25519.PublicKey)) + "\n" +
		KeyLineLinkPrivate + ":" + b64std(link.Seed()) + "\n"
	relayAuth, err := LoadAuthenticator(writeKeyFile(t, box))
	if err != nil {
		t.Fatal(err)
	}
	if relayAuth.CanSign() {
		t.Error("CanSign with a box's key file")
	}
	if _, err := relayAuth.NewToken("live", "", true, false, time.Hour); !errors.Is(err, ErrNoPrivateKey) {
		t.Errorf("NewToken with a box's key file: %v, want ErrNoPrivateKey", err)
	}
	now := time.Now()
	claims := Claims{Put: []string{""}, Get: []string{""}, IssuedAt: now.Unix(), Expires: now.Add(time.Hour).Unix()}
	if _, err := relayAuth.Sign(claims); err == nil {
		t.Error("Sign with a box's key file")
	}
	// Everything a box holds, used to sign by hand: the link key's
	// publish token is refused, its subscribe token grants subscribing.
	pubTok, err := sign(Key{Private: link}, claims)
	if err != nil {
		t.Fatal(err)
	}
	u := func(tok string) *url.URL { return &url.URL{Path: "/", RawQuery: "jwt=" + tok} }
	// An origin's file holds the link key's public half; an edge's the
	// private half alone (provision.RelayKeyFile).
	originAuth := relayAuth
	edgeAuth, err := LoadAuthenticator(writeKeyFile(t, KeyLinePublic+":"+b64std(fleetKey.Public().(ed25519.PublicKey))+"\n"+
		KeyLineLinkPrivate+":"+b64std(link.Seed())+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := originAuth.Authorize(u(pubTok)); err == nil || !strings.Contains(err.Error(), "link key's token may only subscribe") {
		t.Errorf("link key's publish token: err %v, want refused", err)
	}
	linkTok, err := upstreamDialURL(edgeAuth, "https://origin:4443/")
	if err != nil {
		t.Fatal(err)
	}
	lu, _ := url.Parse(linkTok)
	p, err := originAuth.Authorize(lu)
	if err != nil || !p.CanSubscribe("live/a") || p.CanPublishAny() {
		t.Errorf("link token on an origin: %+v, %v; want subscribe only", p, err)
	}
	// A relay that is no origin (an edge) takes no link token at all.
	for name, tok := range map[string]string{"link token": lu.Query().Get("jwt"), "link key's publish token": pubTok} {
		if _, err := edgeAuth.Authorize(u(tok)); !errors.Is(err, ErrUnauthorized) || !strings.Contains(err.Error(), "only origins take") {
			t.Errorf("%s on an edge: err %v, want refused", name, err)
		}
	}
	// The fleet's key verifies on the box and publishes.
	fleetAuth, _ := NewAuthenticator(fleetKey.Seed())
	tok, err := fleetAuth.NewToken("live", "", true, false, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if p, err := relayAuth.Authorize(u(tok)); err != nil || !p.CanPublish("live/a") {
		t.Errorf("fleet token on the box: %+v, %v", p, err)
	}
	// A file of public keys alone cannot dial upstreams: relay serve says so.
	pubOnly := writeKeyFile(t, KeyLinePublic+":"+b64std(fleetKey.Public().(ed25519.PublicKey))+"\n")
	a, err := LoadAuthenticator(pubOnly)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Start(context.Background(), Config{Listen: "127.0.0.1:0", Auth: a, Upstreams: []string{"http://127.0.0.1:1/"}})
	if err == nil {
		r.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "ed25519-link-private") {
		t.Errorf("relay with upstreams and public keys only: err %v", err)
	}
}

// TestTokenLifetimeLimit: a token valid for longer than the maximum is
// refused, counted from iat and from now, whoever signed it.
func TestTokenLifetimeLimit(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	a, err := NewAuthenticator(testKey(9).Seed())
	if err != nil {
		t.Fatal(err)
	}
	a = a.WithClock(func() time.Time { return now })
	year := 365 * 24 * time.Hour
	tests := []struct {
		name     string
		iat, exp time.Time
		max      time.Duration // 0: the default
		ok       bool
	}{
		{name: "a year", iat: now, exp: now.Add(year)},
		{name: "a year, no iat", exp: now.Add(year)},
		{name: "a year, iat in the future", iat: now.Add(year - time.Hour), exp: now.Add(year)},
		{name: "a year, issued a year ago", iat: now.Add(-year + time.Hour), exp: now.Add(time.Hour)},
		{name: "the default maximum", iat: now, exp: now.Add(DefaultMaxTokenLifetime), ok: true},
		{name: "a second over it", iat: now, exp: now.Add(DefaultMaxTokenLifetime + time.Second)},
		{name: "an hour, no iat", exp: now.Add(time.Hour), ok: true},
		{name: "a year under a relay that allows it", iat: now, exp: now.Add(year), max: year, ok: true},
		{name: "a day under a relay that allows an hour", iat: now, exp: now.Add(24 * time.Hour), max: time.Hour},
	}
	for _, tt := range tests {
		c := Claims{Get: []string{"live"}, Expires: tt.exp.Unix()}
		if !tt.iat.IsZero() {
			c.IssuedAt = tt.iat.Unix()
		}
		tok, err := a.Sign(c)
		if err != nil {
			t.Fatal(err)
		}
		v := a
		if tt.max != 0 {
			v = a.WithMaxLifetime(tt.max)
		}
		_, err = v.Verify(tok)
		if tt.ok && err != nil {
			t.Errorf("%s: refused: %v", tt.name, err)
		}
		if !tt.ok && (err == nil || !errors.Is(err, ErrUnauthorized) || !strings.Contains(err.Error(), "lifetime")) {
			t.Errorf("%s: err %v, want refused for its lifetime", tt.name, err)
		}
	}
}

// TestKeyRotation: every key before its until verifies, the first one
// signs, and a key stops verifying at its until by the clock at verify
// time, without a new Authenticator; a relay holding the public keys
// alone does the same.
func TestKeyRotation(t *testing.T) {
	start := time.Unix(1_800_000_000, 0)
	var clock atomic.Int64
	clock.Store(start.Unix())
	now := func() time.Time { return time.Unix(clock.Load(), 0) }
	oldPriv, newPriv := testKey(4), testKey(5)
	oldKey := Key{Private: oldPriv, Until: start.Add(24 * time.Hour)}
	newKey := Key{Private: newPriv}

	oldOnly, err := NewAuthenticatorKeys([]Key{{Private: oldPriv}})
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
	// What a relay holds during the overlap: both public keys.
	relayAuth, err := NewAuthenticatorKeys([]Key{{Public: newPriv.Public().(ed25519.PublicKey)}, {Public: oldPriv.Public().(ed25519.PublicKey), Until: oldKey.Until}})
	if err != nil {
		t.Fatal(err)
	}
	relayAuth = relayAuth.WithClock(now)
	claims := Claims{Get: []string{"live"}, IssuedAt: start.Unix(), Expires: start.Add(20 * time.Hour).Unix()}
	oldTok, _ := oldOnly.Sign(claims)
	newTok, _ := a.Sign(claims)
	if _, err := oldOnly.Verify(newTok); err == nil {
		t.Fatal("Sign did not use the first key")
	}
	u := func(tok string) *url.URL { return &url.URL{Path: "/", RawQuery: "jwt=" + tok} }
	for _, v := range []*Authenticator{a, relayAuth} {
		for name, tok := range map[string]string{"old": oldTok, "new": newTok} {
			if p, err := v.Authorize(u(tok)); err != nil || !p.CanSubscribe("live/a") {
				t.Errorf("%s key during the overlap: %v", name, err)
			}
		}
	}
	clock.Store(oldKey.Until.Add(-time.Second).Unix())
	claims.Expires = start.Add(47 * time.Hour).Unix() // outlives the old key
	claims.IssuedAt = oldKey.Until.Add(-time.Hour).Unix()
	oldTok, _ = oldOnly.Sign(claims)
	newTok, _ = a.Sign(claims)
	for _, v := range []*Authenticator{a, relayAuth} {
		if _, err := v.Verify(oldTok); err != nil {
			t.Errorf("old key a second before its until: %v", err)
		}
	}
	clock.Store(oldKey.Until.Unix())
	for _, v := range []*Authenticator{a, relayAuth} {
		if _, err := v.Verify(oldTok); err == nil || !strings.Contains(err.Error(), "past its until") {
			t.Errorf("old key at its until: err %v, want refused as past its until", err)
		}
		if _, err := v.Verify(newTok); err != nil {
			t.Errorf("new key after the old one's until: %v", err)
		}
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

// TestHS256KeyFile: a key file exactly as an earlier fleet wrote it (so
// that the fleet can roll this build out before moving to Ed25519) signs
// and verifies HS256 tokens, the lifetime limit included; its tokens and
// Ed25519 ones never cross, and a relay with it says so in its log.
func TestHS256KeyFile(t *testing.T) {
	f := writeKeyFile(t, "TmV3U2lnbmluZ0tleU5ld1NpZ25pbmdLZXlOZXdTaWc\n")
	a, err := LoadAuthenticator(f)
	if err != nil {
		t.Fatal(err)
	}
	if !a.HasHS256() || !a.CanSign() {
		t.Fatal("an HS256 file does not sign")
	}
	tok, err := a.NewToken("live", "", true, false, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(tok, b64.EncodeToString([]byte(`{"alg":"HS256"`))) {
		t.Errorf("token %q is not HS256", tok)
	}
	if c, err := a.Verify(tok); err != nil || len(c.Put) != 1 {
		t.Errorf("HS256 token: %+v, %v", c, err)
	}
	now := time.Now()
	year, _ := a.Sign(Claims{Put: []string{"live"}, IssuedAt: now.Unix(), Expires: now.AddDate(1, 0, 0).Unix()})
	if _, err := a.Verify(year); err == nil {
		t.Error("a year-long HS256 token verifies")
	}
	ed, _ := NewAuthenticator(testKey(1).Seed())
	edTok, _ := ed.NewToken("live", "", true, false, time.Hour)
	if _, err := a.Verify(edTok); err == nil {
		t.Error("an Ed25519 token verifies under the HS256 key")
	}
	if _, err := ed.Verify(tok); err == nil {
		t.Error("an HS256 token verifies under an Ed25519 key")
	}
	// HS256 claimed in the header of a token signed with an Ed25519 key's
	// signature bytes, or EdDSA over an HMAC: refused by the key's type.
	parts := strings.Split(tok, ".")
	swapped := b64.EncodeToString([]byte(jwtHeader)) + "." + parts[1] + "." + parts[2]
	if _, err := a.Verify(swapped); err == nil {
		t.Error("a token whose header was changed verifies")
	}
	var log bytes.Buffer
	r, err := Start(context.Background(), Config{Listen: "127.0.0.1:0", Auth: a, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	if !strings.Contains(log.String(), "HS256 keys of an earlier relayfleet") {
		t.Errorf("no warning in the log:\n%s", log.String())
	}
}
