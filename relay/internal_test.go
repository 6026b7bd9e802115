package relay

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/relay/internal/bpath"
)

func TestPaths(t *testing.T) {
	tests := []struct {
		prefix, path string
		suffix       string
		ok           bool
	}{
		{"", "a/b", "a/b", true},
		{"a", "a", "", true},
		{"a", "a/b", "b", true},
		{"a", "ab", "", false},
		{"a/b", "a", "", false},
		{"live", "live/room/1", "room/1", true},
	}
	for _, tt := range tests {
		s, ok := bpath.StripPrefix(tt.prefix, tt.path)
		if s != tt.suffix || ok != tt.ok {
			t.Errorf("bpath.StripPrefix(%q, %q) = %q, %v; want %q, %v", tt.prefix, tt.path, s, ok, tt.suffix, tt.ok)
		}
	}
	for in, want := range map[string]string{"/a//b/": "a/b", "": "", "///": "", "x": "x"} {
		if got := bpath.Clean(in); got != want {
			t.Errorf("bpath.Clean(%q) = %q, want %q", in, got, want)
		}
	}
	if bpath.Join("", "b") != "b" || bpath.Join("a", "") != "a" || bpath.Join("a", "b") != "a/b" {
		t.Error("joinPath")
	}
}

func TestTokenVerification(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	a, err := NewAuthenticator(key)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	a.now = func() time.Time { return now }
	good, err := a.Sign(Claims{Put: []string{"live"}, Get: []string{"live/"}, IssuedAt: now.Unix(), Expires: now.Add(time.Hour).Unix()})
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse("https://relay.example:443/?jwt=" + good)
	p, err := a.Authorize(u)
	if err != nil {
		t.Fatal(err)
	}
	if !p.CanPublish("live/x") || p.CanPublish("livex") || !p.CanSubscribe("live") || p.CanSubscribe("other") {
		t.Fatalf("permissions %+v", p)
	}
	expired, _ := a.Sign(Claims{Put: []string{""}, Expires: now.Unix()})
	parts := strings.Split(good, ".")
	none := b64.EncodeToString([]byte(`{"alg":"none"}`)) + "." + parts[1] + "."
	tampered := parts[0] + "." + b64.EncodeToString([]byte(`{"put":[""],"exp":9999999999}`)) + "." + parts[2]
	for name, tok := range map[string]string{"expired": expired, "alg none": none, "tampered": tampered, "garbage": "a.b", "empty": ""} {
		u, _ := url.Parse("https://relay.example:443/")
		u.RawQuery = url.Values{"jwt": {tok}}.Encode()
		if _, err := a.Authorize(u); err == nil {
			t.Errorf("%s token accepted", name)
		}
	}
	if _, err := NewAuthenticator([]byte("short")); err == nil {
		t.Error("short key accepted")
	}
	var open *Authenticator
	if p, err := open.Authorize(u); err != nil || !p.CanPublish("anything") {
		t.Error("nil Authenticator must allow everything")
	}
}

func TestDrainOnlyFromLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:5000":        true,
		"[::1]:5000":            true,
		"[::ffff:127.0.0.1]:80": true,
		"203.0.113.5:5000":      false,
		"[2001:db8::1]:5000":    false,
		"garbage":               false,
	} {
		req := httptest.NewRequest(http.MethodPost, "/drain", nil)
		req.RemoteAddr = addr
		if got := fromLoopback(req); got != want {
			t.Errorf("fromLoopback(%s) = %v, want %v", addr, got, want)
		}
	}
}
