package relay_test

import (
	"bytes"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/internal/cli"
	"github.com/relayfleet/relayfleet/relay"
)

// serveDefaults are relay serve's flags at their defaults.
func serveDefaults() relay.ServeFlags {
	return relay.ServeFlags{
		Listen: "127.0.0.1:0", UDPBuffer: strconv.Itoa(relay.DefaultUDPBuffer), LogLevel: "info",
		SendBatch: relay.DefaultSendBatch, AckThreshold: relay.DefaultAckThreshold, AckDelay: relay.DefaultAckDelay,
		ListenerAckDelay: relay.DefaultListenerAckDelay, ListenerAckThreshold: relay.DefaultListenerAckThreshold,
		ReapAfter: relay.DefaultReapAfter, ShedRate: relay.DefaultShedRate, ShutdownGrace: relay.DefaultShutdownGrace,
		NoticeGrace: relay.DefaultNoticeGrace, PTOWaitsForReads: true, MaxSessionsPerAddress: relay.DefaultMaxSessionsPerAddress,
		HeartbeatInterval: relay.DefaultHeartbeatInterval,
	}
}

func writeTemp(t *testing.T, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// liveKey and otherKey are key file lines (relay keygen --auth).
const (
	liveKey  = "ed25519-private:MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="
	otherKey = "ed25519-private:ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA="
)

// TestServeFlagsConfigErrors: bad flags are usage errors (exit 2) naming
// the flag, checked in relay serve's order; files that cannot be used are
// plain errors (exit 1).
func TestServeFlagsConfigErrors(t *testing.T) {
	expired := writeTemp(t, "old", liveKey+" until=2000-01-01T00:00:00Z\n")
	notPEM := writeTemp(t, "notpem", "x\n")
	for _, tc := range []struct {
		name  string
		set   func(*relay.ServeFlags)
		want  string
		usage bool
	}{
		{"no listen", func(f *relay.ServeFlags) { f.Listen = "" }, "--listen is required (HOST:PORT)", true},
		{"listen", func(f *relay.ServeFlags) { f.Listen = "x" }, `--listen "x": want HOST:PORT`, true},
		{"port", func(f *relay.ServeFlags) { f.Listen = "h:70000" }, `--listen "h:70000": port must be a number from 0 to 65535`, true},
		{"upstream first", func(f *relay.ServeFlags) { f.Listen, f.Upstream = "", "https://a:1/,ftp://b" }, `--upstream "https://a:1/,ftp://b": want http:// or https:// URLs, comma-separated`, true},
		{"public-listen", func(f *relay.ServeFlags) { f.PublicListen = relay.PrefixList{"/a"} }, "--public-listen needs --auth-key (without a key everything is public)", true},
		{"no auth on all addresses", func(f *relay.ServeFlags) { f.Listen = "[::]:4443" },
			`--listen "[::]:4443" is not a loopback address: without --auth-key any client that reaches it may publish; give --auth-key FILE (a token key file: docs/relay.md, Tokens), or --no-auth to accept every publisher`, true},
		{"no auth on an empty host", func(f *relay.ServeFlags) { f.Listen = ":4443" }, `--listen ":4443" is not a loopback address`, true},
		{"no auth on a LAN address", func(f *relay.ServeFlags) { f.Listen = "10.1.2.3:4443" }, `--listen "10.1.2.3:4443" is not a loopback address`, true},
		{"no auth on a host name", func(f *relay.ServeFlags) { f.Listen = "relay.example.com:4443" }, `--listen "relay.example.com:4443" is not a loopback address`, true},
		{"no-auth with a key", func(f *relay.ServeFlags) { f.NoAuth, f.AuthKeyFile = true, "k" }, "--no-auth and --auth-key exclude each other", true},
		{"bad uncapped address", func(f *relay.ServeFlags) { f.UncappedAddresses = "127.0.0.2,10.0.0.0/33" }, `--uncapped-addresses: "10.0.0.0/33" is not an IP address or CIDR prefix`, true},
		{"cert alone", func(f *relay.ServeFlags) { f.CertFile = "c" }, "--cert and --key must be given together", true},
		{"three modes", func(f *relay.ServeFlags) { f.CertFile, f.KeyFile, f.TLSKeyFile, f.ACMEDomain = "c", "k", "t", "a.b" },
			"--cert/--key and --tls-key and --acme-domain exclude each other: give certificate files, a key for self-signed certificates, or an ACME domain", true},
		{"acme-dir", func(f *relay.ServeFlags) { f.ACMEDir = "d" }, "--acme-dir needs --acme-domain", true},
		{"acme-domain", func(f *relay.ServeFlags) { f.ACMEDomain = "relay" }, `--acme-domain "relay": want a DNS name such as relay.example.com`, true},
		{"acme-ca", func(f *relay.ServeFlags) { f.ACMEDomain, f.ACMECA = "a.b", "http://ca" }, `--acme-ca "http://ca": want the https:// URL of an ACME directory`, true},
		{"udp-buffer", func(f *relay.ServeFlags) { f.UDPBuffer = "3GiB" }, `--udp-buffer "3GiB": want a positive number of bytes`, true},
		{"udp-buffer 0", func(f *relay.ServeFlags) { f.UDPBuffer = "0" }, `--udp-buffer "0": want a positive number of bytes`, true},
		{"memory-budget", func(f *relay.ServeFlags) { f.MemoryBudget = "-1" }, `--memory-budget "-1": want a positive number of bytes`, true},
		{"log-level", func(f *relay.ServeFlags) { f.LogLevel = "loud" }, `flag --log-level: "loud" is not debug, info, warn or error`, true},
		{"heartbeat-interval", func(f *relay.ServeFlags) { f.HeartbeatInterval = 500 * time.Microsecond }, "--heartbeat-interval 500µs: want 0 (none) or at least 1ms", true},
		{"reset secret", func(f *relay.ServeFlags) { f.ResetSecretFile = filepath.Join(t.TempDir(), "none") }, "--stateless-reset-secret: ", true},
		{"tls-key", func(f *relay.ServeFlags) { f.TLSKeyFile = notPEM }, "--tls-key: " + notPEM + `: no PEM block; want a PEM PKCS #8 "PRIVATE KEY"`, false},
		{"acme-ca-root", func(f *relay.ServeFlags) { f.ACMEDomain, f.ACMECARoot = "a.b", notPEM }, "--acme-ca-root: " + notPEM + ": no PEM certificates in it", false},
		{"auth-key", func(f *relay.ServeFlags) { f.AuthKeyFile = expired }, "auth key " + expired + ": every key is past its until time", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := serveDefaults()
			tc.set(&f)
			_, err := f.Config(&bytes.Buffer{})
			var ue *cli.UsageError
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) || errors.As(err, &ue) != tc.usage {
				t.Errorf("Config: %v (usage error %v)\nwant %q (usage error %v)", err, errors.As(err, &ue), tc.want, tc.usage)
			}
		})
	}
}

// TestServeFlagsConfig: the flags' values land in Config; their 0 graces,
// listener ACK delay and heartbeat interval are Config's negative "none".
func TestServeFlagsConfig(t *testing.T) {
	var log bytes.Buffer
	f := serveDefaults()
	f.Upstream = "http://127.0.0.1:1/,https://b.example:443/"
	f.UDPBuffer, f.MemoryBudget, f.MaxListeners = "4MiB", "3GiB", 7
	f.PTOWaitsForReads, f.ListenerAckDelay, f.NoticeGrace, f.ShutdownGrace, f.MaxSessionsPerAddress = false, 0, 0, 0, 0
	f.HeartbeatInterval = 0
	f.AuthKeyFile, f.PublicListen = writeTemp(t, "key", liveKey+"\n"), relay.PrefixList{"/open"}
	cfg, err := f.Config(&log)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Listen != f.Listen || cfg.UDPBuffer != 4<<20 || cfg.MemoryBudget != 3<<30 || cfg.MaxSessions != 7 ||
		len(cfg.Upstreams) != 2 || cfg.Upstreams[1] != "https://b.example:443/" || !cfg.PTOIgnoresReads ||
		cfg.ListenerAckDelay != -1 || cfg.NoticeGrace != -1 || cfg.ShutdownGrace != -1 || cfg.MaxSessionsPerAddress != -1 || cfg.Auth == nil || cfg.TLSKey != nil || cfg.ACME != nil ||
		cfg.HeartbeatInterval != -1 {
		t.Errorf("Config: %+v", cfg)
	}
	cfg.Logger.Info("hello")
	if !strings.Contains(log.String(), "msg=hello") {
		t.Errorf("the logger writes to stderr: %q", log.String())
	}
	f = serveDefaults()
	if cfg, err = f.Config(&log); err != nil || cfg.ListenerAckDelay != relay.DefaultListenerAckDelay || cfg.NoticeGrace != relay.DefaultNoticeGrace ||
		cfg.PTOIgnoresReads || cfg.MemoryBudget != 0 || cfg.Auth != nil || cfg.MaxSessionsPerAddress != relay.DefaultMaxSessionsPerAddress ||
		cfg.HeartbeatInterval != relay.DefaultHeartbeatInterval {
		t.Errorf("defaults: %v %+v", err, cfg)
	}
}

// TestServeFlagsAuthOnLoopbackOrAsked: without --auth-key a relay
// serves on a loopback address, or anywhere with --no-auth; with a key,
// anywhere.
func TestServeFlagsAuthOnLoopbackOrAsked(t *testing.T) {
	key := writeTemp(t, "key", liveKey+"\n")
	for _, tc := range []struct {
		listen string
		noAuth bool
		key    string
	}{
		{"127.0.0.1:0", false, ""},
		{"127.0.0.2:4443", false, ""},
		{"[::1]:4443", false, ""},
		{"localhost:4443", false, ""},
		{"[::]:4443", true, ""},
		{"10.1.2.3:4443", true, ""},
		{"[::]:4443", false, key},
		{"0.0.0.0:4443", false, key},
	} {
		f := serveDefaults()
		f.Listen, f.NoAuth, f.AuthKeyFile = tc.listen, tc.noAuth, tc.key
		cfg, err := f.Config(&bytes.Buffer{})
		if err != nil {
			t.Errorf("--listen %s --no-auth=%v --auth-key %q: %v", tc.listen, tc.noAuth, tc.key, err)
			continue
		}
		if (cfg.Auth != nil) != (tc.key != "") {
			t.Errorf("--listen %s --no-auth=%v --auth-key %q: auth %v", tc.listen, tc.noAuth, tc.key, cfg.Auth != nil)
		}
	}
}

func TestPrefixList(t *testing.T) {
	var p relay.PrefixList
	if err := p.Set("/a, /b"); err != nil {
		t.Fatal(err)
	}
	if err := p.Set("/c"); err != nil {
		t.Fatal(err)
	}
	if p.String() != "/a,/b,/c" || p.Type() != "prefixes" {
		t.Errorf("%q %q", p.String(), p.Type())
	}
	if err := p.Set("/d,,/e"); err == nil || err.Error() != `empty prefix (to make everything public, give "/")` {
		t.Errorf("Set with an empty prefix: %v", err)
	}
}

func TestLoadAuthenticator(t *testing.T) {
	if _, err := relay.LoadAuthenticator(writeTemp(t, "k", liveKey+" until=2000-01-01T00:00:00Z\n"+otherKey+"\n")); err != nil {
		t.Errorf("one live key: %v", err)
	}
	old := writeTemp(t, "old", liveKey+" until=2000-01-01T00:00:00Z\n")
	if _, err := relay.LoadAuthenticator(old); err == nil || err.Error() != "auth key "+old+": every key is past its until time" {
		t.Errorf("every key expired: %v", err)
	}
	if _, err := relay.LoadAuthenticator(filepath.Join(t.TempDir(), "none")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("no file: %v", err)
	}
}

func TestLoadCertPool(t *testing.T) {
	cert, err := relay.SelfSignedCertificate()
	if err != nil {
		t.Fatal(err)
	}
	roots := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]})
	if _, err := relay.LoadCertPool(writeTemp(t, "roots", string(roots))); err != nil {
		t.Errorf("LoadCertPool: %v", err)
	}
	empty := writeTemp(t, "empty", "")
	if _, err := relay.LoadCertPool(empty); err == nil || err.Error() != empty+": no PEM certificates in it" {
		t.Errorf("no certificates: %v", err)
	}
}

func TestTokenFlags(t *testing.T) {
	key := writeTemp(t, "key", liveKey+"\n")
	given := func(names ...string) func(string) bool {
		return func(n string) bool { return strings.Contains(strings.Join(names, " "), n) }
	}
	for _, tc := range []struct {
		f    relay.TokenFlags
		want string
	}{
		{relay.TokenFlags{Changed: given("publish")}, "--key is required"},
		{relay.TokenFlags{KeyFile: key, Changed: given()}, "give exactly one of --publish PREFIX or --subscribe PREFIX"},
		{relay.TokenFlags{KeyFile: key, Changed: given("publish", "subscribe")}, "give exactly one of --publish PREFIX or --subscribe PREFIX"},
	} {
		var out bytes.Buffer
		var ue *cli.UsageError
		if err := tc.f.Run(&out); !errors.As(err, &ue) || err.Error() != tc.want || out.Len() != 0 {
			t.Errorf("%+v: %v, want usage error %q", tc.f, err, tc.want)
		}
	}
	var out bytes.Buffer
	f := relay.TokenFlags{KeyFile: key, Publish: "/live/", TTL: time.Hour, Changed: given("publish")}
	if err := f.Run(&out); err != nil {
		t.Fatal(err)
	}
	tok := strings.TrimSuffix(out.String(), "\n")
	auth, err := relay.LoadAuthenticator(key)
	if err != nil {
		t.Fatal(err)
	}
	if tok == "" || strings.Contains(tok, "\n") {
		t.Fatalf("token line %q", out.String())
	}
	c, err := auth.Verify(tok)
	if err != nil || len(c.Put) != 1 || c.Put[0] != "live" || len(c.Get) != 0 {
		t.Errorf("the token's claims: %+v, %v; want put live", c, err)
	}
}

// TestKeygenAndPrintPin: Keygen writes a key and prints its pin, which
// PrintPin prints again; both name their flag in errors.
func TestKeygenAndPrintPin(t *testing.T) {
	file := filepath.Join(t.TempDir(), "key")
	var out, again bytes.Buffer
	if err := relay.Keygen(file, false, &out); err != nil {
		t.Fatal(err)
	}
	if err := relay.PrintPin(file, &again); err != nil {
		t.Fatal(err)
	}
	if len(out.String()) != 65 || out.String() != again.String() {
		t.Errorf("keygen printed %q, pin %q", out.String(), again.String())
	}
	if err := relay.Keygen(file, false, &out); err == nil || err.Error() != "--out: "+file+" already exists; not overwriting it" {
		t.Errorf("Keygen over a file: %v", err)
	}
	none := filepath.Join(t.TempDir(), "none")
	if err := relay.PrintPin(none, &out); err == nil || err.Error() != "--tls-key: "+none+" does not exist" {
		t.Errorf("PrintPin without a file: %v", err)
	}
	var ue *cli.UsageError
	if err := relay.Keygen("", false, &out); !errors.As(err, &ue) || err.Error() != "--out is required (the FILE to write the key to)" {
		t.Errorf("Keygen(\"\"): %v", err)
	}
	if err := relay.PrintPin("", &out); !errors.As(err, &ue) || err.Error() != "--tls-key is required (the key FILE)" {
		t.Errorf("PrintPin(\"\"): %v", err)
	}
}
