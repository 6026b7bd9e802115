package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	pebbleca "github.com/letsencrypt/pebble/v2/ca"
	pebbledb "github.com/letsencrypt/pebble/v2/db"
	pebbleva "github.com/letsencrypt/pebble/v2/va"
	pebblewfe "github.com/letsencrypt/pebble/v2/wfe"

	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/relay"
)

func TestCertFlagErrors(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "tls.key")
	if code := run(context.Background(), []string{"keygen", "--out", key}, io.Discard, io.Discard); code != 0 {
		t.Fatalf("keygen exit %d", code)
	}
	l := []string{"serve", "--listen", "127.0.0.1:0"}
	tests := []struct {
		args []string
		want string
	}{
		{append(l, "--key", "k"), "--cert and --key"},
		{append(l, "--cert", "c", "--key", "k", "--tls-key", key), "--cert/--key and --tls-key exclude each other"},
		{append(l, "--cert", "c", "--key", "k", "--acme-domain", "relay.example.com"), "--cert/--key and --acme-domain exclude each other"},
		{append(l, "--tls-key", key, "--acme-domain", "relay.example.com"), "--tls-key and --acme-domain exclude each other"},
		{append(l, "--acme-email", "a@b.c"), "--acme-email needs --acme-domain"},
		{append(l, "--acme-ca", "https://ca/dir"), "--acme-ca needs --acme-domain"},
		{append(l, "--acme-ca-root", "r.pem"), "--acme-ca-root needs --acme-domain"},
		{append(l, "--acme-dir", dir), "--acme-dir needs --acme-domain"},
		{append(l, "--acme-domain", "https://relay.example.com/"), "--acme-domain"},
		{append(l, "--acme-domain", "localhost"), "--acme-domain"},
		{append(l, "--acme-domain", "relay.example.com", "--acme-ca", "http://ca/dir"), "--acme-ca"},
		{[]string{"keygen"}, "--out"},
		{[]string{"keygen", "--out", key, "extra"}, "unexpected argument"},
		{[]string{"pin"}, "--tls-key"},
		{[]string{"pin", "--tls-key", key, "extra"}, "unexpected argument \"extra\""},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var stderr bytes.Buffer
			code := run(context.Background(), tt.args, io.Discard, &stderr)
			if code != 2 {
				t.Fatalf("exit %d, want 2; stderr %q", code, stderr.String())
			}
			msg := stderr.String()
			if !strings.Contains(msg, tt.want) || strings.Count(strings.TrimSpace(msg), "\n") != 0 {
				t.Fatalf("stderr %q: want one line mentioning %q", msg, tt.want)
			}
		})
	}
}

// TestKeygenAndPin: keygen writes a 0600 key and prints its SPKI pin,
// refuses to overwrite, and pin prints the same pin; bad key files are
// named in the error.
func TestKeygenAndPin(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "tls.key")
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"keygen", "--out", keyFile}, &out, &errOut); code != 0 {
		t.Fatalf("keygen exit %d: %s", code, errOut.String())
	}
	spki := strings.TrimSpace(out.String())
	fi, err := os.Stat(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v, want 0600", fi.Mode().Perm())
	}
	key, err := relay.LoadTLSKey(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := relay.SPKIHash(&key.PublicKey); spki != want {
		t.Fatalf("keygen printed %q, want the key's SPKI %s", spki, want)
	}
	before, _ := os.ReadFile(keyFile)
	errOut.Reset()
	if code := run(context.Background(), []string{"keygen", "--out", keyFile}, io.Discard, &errOut); code == 0 || !strings.Contains(errOut.String(), "already exists") {
		t.Fatalf("second keygen: exit %d, %q", code, errOut.String())
	}
	if after, _ := os.ReadFile(keyFile); !bytes.Equal(before, after) {
		t.Fatal("keygen overwrote the key")
	}
	out.Reset()
	if code := run(context.Background(), []string{"pin", "--tls-key", keyFile}, &out, io.Discard); code != 0 || strings.TrimSpace(out.String()) != spki {
		t.Fatalf("pin: exit %d, %q, want %s", code, out.String(), spki)
	}
	bad := filepath.Join(dir, "bad.key")
	if err := os.WriteFile(bad, []byte("-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{bad, filepath.Join(dir, "missing.key")} {
		errOut.Reset()
		code := run(context.Background(), []string{"pin", "--tls-key", f}, io.Discard, &errOut)
		if code == 0 || !strings.Contains(errOut.String(), f) || strings.Count(strings.TrimSpace(errOut.String()), "\n") != 0 {
			t.Fatalf("pin %s: exit %d, %q; want one line naming the file", f, code, errOut.String())
		}
	}
}

// serveInProcess runs `relay serve` with args until the test ends and
// returns its base URL.
func serveInProcess(t *testing.T, args ...string) (base string, stop func()) {
	t.Helper()
	base, _, stop = serveInProcessLogs(t, args...)
	return base, stop
}

// serveInProcessLogs is serveInProcess that also returns what serve logs.
func serveInProcessLogs(t *testing.T, args ...string) (base string, logs *testutil.SyncBuffer, stop func()) {
	t.Helper()
	addr := "127.0.0.1:" + testutil.FreePort(t)
	ctx, cancel := context.WithCancel(context.Background())
	logs = &testutil.SyncBuffer{}
	done := make(chan int, 1)
	go func() { done <- run(ctx, append([]string{"serve", "--listen", addr}, args...), io.Discard, logs) }()
	stop = func() {
		cancel()
		<-done
	}
	exited := -1
	if !testutil.Poll(20*time.Second, func() bool {
		select {
		case exited = <-done:
			return true
		default:
		}
		return strings.Contains(logs.String(), "relay listening")
	}) {
		stop()
		t.Fatalf("relay did not start: %s", logs.String())
	}
	if exited >= 0 {
		t.Fatalf("serve exited %d: %s", exited, logs.String())
	}
	return "http://" + addr, logs, stop
}

func getStats(t *testing.T, base string) relay.Stats {
	t.Helper()
	var st relay.Stats
	testutil.GetJSON(t, base+"/stats", &st)
	return st
}

// TestServeTLSKeyKeepsThePin: two runs of serve --tls-key make different
// certificates with the key's SPKI pin, the one keygen printed.
func TestServeTLSKeyKeepsThePin(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "tls.key")
	var out bytes.Buffer
	if code := run(context.Background(), []string{"keygen", "--out", keyFile}, &out, io.Discard); code != 0 {
		t.Fatal("keygen failed")
	}
	spki := strings.TrimSpace(out.String())
	var hashes []string
	for range 2 {
		base, stop := serveInProcess(t, "--tls-key", keyFile)
		st := getStats(t, base)
		stop()
		if st.SPKISHA256 != spki {
			t.Fatalf("/stats spki_sha256 %s, want %s", st.SPKISHA256, spki)
		}
		hashes = append(hashes, st.CertificateSHA256)
	}
	if hashes[0] == hashes[1] || len(hashes[0]) != 64 {
		t.Fatalf("certificate hashes %v: want two different certificates", hashes)
	}
}

// sameSizeCerts makes two self-signed certificates with keys whose PEM
// files have the same sizes, so that only their content tells them apart.
func sameSizeCerts(t *testing.T) (certs, keys [2][]byte) {
	t.Helper()
	for i := 0; ; i++ {
		if i > 1000 {
			t.Fatal("no two certificates of one size")
		}
		c, err := relay.SelfSignedCertificate()
		if err != nil {
			t.Fatal(err)
		}
		kder, err := x509.MarshalPKCS8PrivateKey(c.PrivateKey)
		if err != nil {
			t.Fatal(err)
		}
		cp := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Certificate[0]})
		kp := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})
		if i == 0 {
			certs[0], keys[0] = cp, kp
			continue
		}
		if len(cp) == len(certs[0]) && len(kp) == len(keys[0]) {
			certs[1], keys[1] = cp, kp
			return certs, keys
		}
	}
}

// TestServeSIGHUPReloadsCertificate: files rewritten with the same sizes
// and modification times (which the poll cannot see) are taken on SIGHUP.
func TestServeSIGHUPReloadsCertificate(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	certs, keys := sameSizeCerts(t)
	hash := func(p []byte) string {
		b, _ := pem.Decode(p)
		return relay.CertificateHash(tls.Certificate{Certificate: [][]byte{b.Bytes}})
	}
	// One mtime for both writes, set before the file is renamed into
	// place: a poll never sees a changed size or mtime.
	mtime := time.Now().Add(-time.Hour).Truncate(time.Second)
	write := func(i int) {
		t.Helper()
		for f, data := range map[string][]byte{certFile: certs[i], keyFile: keys[i]} {
			tmp := f + ".tmp"
			if err := os.WriteFile(tmp, data, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chtimes(tmp, mtime, mtime); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, f); err != nil {
				t.Fatal(err)
			}
		}
	}
	write(0)
	base, stop := serveInProcess(t, "--cert", certFile, "--key", keyFile)
	defer stop()
	if got := getStats(t, base).CertificateSHA256; got != hash(certs[0]) {
		t.Fatalf("serving %s, want %s", got, hash(certs[0]))
	}
	write(1)
	time.Sleep(relay.DefaultCertReloadInterval + time.Second) // a poll came and saw no change
	if got := getStats(t, base).CertificateSHA256; got != hash(certs[0]) {
		t.Fatalf("files with unchanged size and mtime were reloaded without SIGHUP (%s)", got)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if !testutil.Poll(10*time.Second, func() bool { return getStats(t, base).CertificateSHA256 == hash(certs[1]) }) {
		t.Fatal("SIGHUP did not reload the certificate files")
	}
}

// TestServeACME: serve --acme-domain with --acme-ca, --acme-ca-root and
// --acme-dir gets its certificate from Pebble (run here, validation off)
// and serves it on TCP, verified against Pebble's root.
func TestServeACME(t *testing.T) {
	t.Setenv("PEBBLE_VA_ALWAYS_VALID", "1")
	t.Setenv("PEBBLE_VA_NOSLEEP", "1")
	t.Setenv("PEBBLE_WFE_NONCEREJECT", "0")
	logger := log.New(io.Discard, "", 0)
	store := pebbledb.NewMemoryStore()
	authority := pebbleca.New(logger, store, "", "ecdsa", 0, 1, map[string]pebbleca.Profile{"default": {Description: "default"}})
	front := pebblewfe.New(logger, store, pebbleva.New(logger, 0, 0, false, "", store), authority,
		[]string{"pebble.letsencrypt.org"}, false, false, 0, 0)
	srv := httptest.NewTLSServer(front.Handler())
	defer srv.Close()
	dir := t.TempDir()
	caRoot := filepath.Join(dir, "pebble-api.pem")
	if err := os.WriteFile(caRoot, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	const domain = "cli.example.test"
	base, stop := serveInProcess(t, "--acme-domain", domain, "--acme-email", "ops@example.test",
		"--acme-ca", srv.URL+pebblewfe.DirectoryPath, "--acme-ca-root", caRoot, "--acme-dir", filepath.Join(dir, "acme"))
	defer stop()
	roots := x509.NewCertPool()
	roots.AddCert(authority.GetRootCert(0).Cert)
	conn, err := tls.Dial("tcp", strings.TrimPrefix(base, "http://"), &tls.Config{RootCAs: roots, ServerName: domain})
	if err != nil {
		t.Fatalf("tls with pebble's root: %v", err)
	}
	defer conn.Close()
	served := relay.CertificateHash(tls.Certificate{Certificate: [][]byte{conn.ConnectionState().PeerCertificates[0].Raw}})
	if st := getStats(t, base); st.CertificateSHA256 != served {
		t.Fatalf("/stats certificate_sha256 %s, served %s", st.CertificateSHA256, served)
	}

	// A CA root file without certificates is refused, naming the flag.
	var stderr bytes.Buffer
	empty := filepath.Join(dir, "empty.pem")
	if err := os.WriteFile(empty, []byte("nothing"), 0o644); err != nil {
		t.Fatal(err)
	}
	code := run(context.Background(), []string{"serve", "--listen", "127.0.0.1:0", "--acme-domain", domain, "--acme-ca-root", empty}, io.Discard, &stderr)
	if code == 0 || !strings.Contains(stderr.String(), "--acme-ca-root") {
		t.Fatalf("empty --acme-ca-root: exit %d, %q", code, stderr.String())
	}
}

// TestKeygenArgs: flags parse, a positional argument is a usage error
// naming it (and nothing is written), and a bad flag names the flag.
func TestKeygenArgs(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string // "" for no error
	}{
		{[]string{"--out", "k"}, ""},
		{[]string{"--out", "k2", "extra"}, `unexpected argument "extra"`},
		{[]string{"extra", "--out", "k3"}, `unexpected argument "extra"`},
		{[]string{"--nope"}, "--nope"},
	} {
		args := slices.Clone(tc.args)
		for i, a := range args {
			if i > 0 && args[i-1] == "--out" {
				args[i] = filepath.Join(dir, a)
			}
		}
		var stderr bytes.Buffer
		code := run(context.Background(), append([]string{"keygen"}, args...), io.Discard, &stderr)
		switch {
		case tc.want == "" && code != 0:
			t.Errorf("%q: exit %d, %s", tc.args, code, stderr.String())
		case tc.want != "" && (code != 2 || !strings.Contains(stderr.String(), tc.want)):
			t.Errorf("%q: exit %d, %q; want 2 and an error with %q", tc.args, code, stderr.String(), tc.want)
		}
	}
	if names, _ := filepath.Glob(filepath.Join(dir, "*")); len(names) != 1 {
		t.Errorf("keygen wrote %q, want only k", names)
	}
}
