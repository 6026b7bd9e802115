package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/relay"
	"github.com/relayfleet/relayfleet/relay/client"
)

// newKey and oldKey are Ed25519 seeds.
const (
	newKey = "new-key-0123456789abcdef01234567"
	oldKey = "old-key-0123456789abcdef01234567"
)

// privLine is the key file line of seed's private key (it signs);
// pubLine, of its public key (it verifies only).
func privLine(seed string) string {
	return relay.KeyLinePrivate + ":" + base64.StdEncoding.EncodeToString([]byte(seed))
}

func pubLine(seed string) string {
	return relay.KeyLinePublic + ":" + base64.StdEncoding.EncodeToString(ed25519.NewKeyFromSeed([]byte(seed)).Public().(ed25519.PublicKey))
}

func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(f, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

func mustAuth(t *testing.T, key string) *relay.Authenticator {
	t.Helper()
	a, err := relay.NewAuthenticator([]byte(key))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// runToken runs `relay token` and returns the token it prints.
func runToken(t *testing.T, args ...string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), append([]string{"token"}, args...), &stdout, &stderr); code != 0 {
		t.Fatalf("relay token %v: exit %d: %s", args, code, stderr.String())
	}
	return strings.TrimSpace(stdout.String())
}

// TestTokenSignsWithTheFirstLiveKey: with a rotation key file, `relay
// token` signs with the first key whose until has not passed.
func TestTokenSignsWithTheFirstLiveKey(t *testing.T) {
	future := time.Now().Add(48 * time.Hour).UTC().Format(time.RFC3339)
	past := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	for name, tt := range map[string]struct{ file, signer, notSigner string }{
		"new key first":   {"# rotation\n" + privLine(newKey) + "\n" + privLine(oldKey) + " until=" + future + "\n", newKey, oldKey},
		"first key spent": {privLine(oldKey) + " until=" + past + "\n\n" + privLine(newKey) + "\n", newKey, oldKey},
		"old key first":   {privLine(oldKey) + "  until=" + future + "\n" + privLine(newKey) + "\n", oldKey, newKey},
	} {
		t.Run(name, func(t *testing.T) {
			tok := runToken(t, "--key", writeFile(t, "keys", tt.file), "--subscribe", "live")
			if _, err := mustAuth(t, tt.signer).Verify(tok); err != nil {
				t.Errorf("token does not verify with %s: %v", tt.signer, err)
			}
			if _, err := mustAuth(t, tt.notSigner).Verify(tok); err == nil {
				t.Errorf("token signed with %s", tt.notSigner)
			}
		})
	}
	var stdout, stderr bytes.Buffer
	spent := writeFile(t, "spent", privLine(oldKey)+" until="+past+"\n")
	if code := run(context.Background(), []string{"token", "--key", spent, "--publish", "x"}, &stdout, &stderr); code == 0 ||
		!strings.Contains(stderr.String(), spent) || !strings.Contains(stderr.String(), "past its until") {
		t.Errorf("every key spent: exit %d, stderr %q", code, stderr.String())
	}
	bad := writeFile(t, "bad", privLine(newKey)+"\n"+pubLine(oldKey)+" until=friday\n")
	stderr.Reset()
	if code := run(context.Background(), []string{"serve", "--listen", "127.0.0.1:0", "--auth-key", bad}, &stdout, &stderr); code == 0 ||
		!strings.Contains(stderr.String(), bad+":2:") || strings.Count(strings.TrimSpace(stderr.String()), "\n") != 0 {
		t.Errorf("bad until: exit %d, stderr %q; want one line naming %s:2", code, stderr.String(), bad)
	}
	// A file of public keys verifies and cannot sign.
	pubOnly := writeFile(t, "pub", pubLine(newKey)+"\n")
	stdout.Reset()
	stderr.Reset()
	if code := run(context.Background(), []string{"token", "--key", pubOnly, "--publish", "x"}, &stdout, &stderr); code == 0 || stdout.Len() != 0 ||
		!strings.Contains(stderr.String(), pubOnly) || !strings.Contains(stderr.String(), "no private key") {
		t.Errorf("token from a public key file: exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
	}
	// A key file made with head -c 32 /dev/urandom is refused with how to
	// make one.
	raw := writeFile(t, "raw", "\x8f\xff\n0123456789abcdef0123456789ab")
	stderr.Reset()
	if code := run(context.Background(), []string{"serve", "--listen", "127.0.0.1:0", "--auth-key", raw}, &stdout, &stderr); code == 0 ||
		!strings.Contains(stderr.String(), raw) || !strings.Contains(stderr.String(), "relay keygen --auth --out FILE") {
		t.Errorf("raw key file: exit %d, stderr %q", code, stderr.String())
	}
}

// TestServeAuthFlags runs `relay serve --auth-key FILE --public-listen`
// in process, FILE holding public keys only: a listener without a token
// gets the public prefix only, a publisher needs a token from `relay
// token` (with the private key file), and both keys of the file verify.
func TestServeAuthFlags(t *testing.T) {
	future := time.Now().Add(48 * time.Hour).UTC().Format(time.RFC3339)
	pubKeys := writeFile(t, "pubkeys", pubLine(newKey)+"\n"+pubLine(oldKey)+" until="+future+"\n")
	keys := writeFile(t, "keys", privLine(newKey)+"\n")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	base, stderr, stop := serveInProcessLogs(t, "--udp-buffer", "1MiB", "--auth-key", pubKeys, "--public-listen", "live", "--public-listen", "radio,news")
	defer stop()
	url := base + "/"
	dial := func(q string) *client.Session {
		t.Helper()
		s, err := client.Dial(ctx, url+q, nil)
		if err != nil {
			t.Fatalf("dial %s: %v", q, err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	// The old key still verifies during the overlap.
	oldTok, err := mustAuth(t, oldKey).NewToken("", "", true, false, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pub := dial("?jwt=" + oldTok)
	for _, b := range []string{"news/a", "secret/a"} {
		tw := pub.Publish(b).Track("audio")
		go func() {
			for seq := uint64(0); ctx.Err() == nil; seq++ {
				_ = tw.WriteGroup(ctx, seq, [][]byte{client.Pattern(seq, 0, 32)})
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	anon := dial("")
	ann, err := anon.Announced(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := ann.WaitFor(ctx, "news/a"); err != nil {
		t.Fatalf("public listener: %v", err)
	}
	ann.Close()
	sub, err := anon.Subscribe(ctx, "news/a", "audio")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sub.NextGroup(ctx); err != nil {
		t.Fatalf("public listener on news/a: %v", err)
	}
	if s, err := anon.Subscribe(ctx, "secret/a", "audio"); err == nil {
		gctx, gcancel := context.WithTimeout(ctx, 3*time.Second)
		if _, err := s.NextGroup(gctx); err == nil {
			t.Error("listened to secret/a without a token")
		}
		gcancel()
	}
	sub2, err := dial("?jwt="+runToken(t, "--key", keys, "--subscribe", "secret")).Subscribe(ctx, "secret/a", "audio")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sub2.NextGroup(ctx); err != nil {
		t.Fatalf("listener with a token from relay token: %v", err)
	}
	anon.Publish("live/intruder")
	if !testutil.Poll(20*time.Second, func() bool {
		return strings.Contains(stderr.String(), "reason=forbidden transport=quic") && strings.Contains(stderr.String(), "broadcast=live/intruder")
	}) {
		t.Fatalf("no log line for the refused publish:\n%s", stderr.String())
	}
	if strings.Contains(stderr.String(), oldTok) {
		t.Error("the log shows a token")
	}
}

// TestTokenFile: relay listen (and publish, loadgen) present a token read
// from --token-file, so it never sits on a command line; without it a
// listener outside the public prefixes is refused; a bad file is a
// one-line usage error naming the flag.
func TestTokenFile(t *testing.T) {
	keys := writeFile(t, "keys", privLine(newKey)+"\n")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	base, _, stop := serveInProcessLogs(t, "--udp-buffer", "1MiB", "--auth-key", keys)
	defer stop()
	url := base + "/"
	auth := mustAuth(t, newKey)
	pubTok, err := auth.NewToken("private/", "", true, false, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pubFile := writeFile(t, "pub.jwt", pubTok+"\n")
	pubCtx, stopPub := context.WithCancel(ctx)
	defer stopPub()
	pubDone := make(chan int, 1)
	pubErr := &testutil.SyncBuffer{}
	go func() {
		pubDone <- run(pubCtx, []string{"publish", url, "--name", "private/room", "--interval", "20ms", "--token-file", pubFile}, io.Discard, pubErr)
	}()
	subTok, err := auth.NewToken("", "private/", false, true, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	subFile := writeFile(t, "sub.jwt", subTok)
	var out, errb bytes.Buffer
	if code := run(ctx, []string{"listen", url, "--name", "private/room", "--groups", "3", "--token-file", subFile}, &out, &errb); code != 0 {
		t.Fatalf("listen with --token-file: exit %d: %s (publisher: %s)", code, errb.String(), pubErr.String())
	}
	if strings.Contains(out.String()+errb.String(), subTok) {
		t.Fatal("the token was printed")
	}
	lctx, lcancel := context.WithTimeout(ctx, 10*time.Second)
	defer lcancel()
	errb.Reset()
	if code := run(lctx, []string{"listen", url, "--name", "private/room", "--groups", "3"}, io.Discard, &errb); code == 0 {
		t.Fatal("a listener without a token was let in")
	}
	stopPub()
	if code := <-pubDone; code != 0 && !strings.Contains(pubErr.String(), "context canceled") {
		t.Logf("publisher: exit %d: %s", code, pubErr.String())
	}
	empty := writeFile(t, "empty.jwt", "\n")
	spaced := writeFile(t, "spaced.jwt", "a b\n")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"listen", url, "--name", "x", "--token-file", empty}, "--token-file " + empty + ": empty"},
		{[]string{"listen", url, "--name", "x", "--token-file", spaced}, "want one token"},
		{[]string{"publish", url, "--name", "x", "--token-file", filepath.Join(t.TempDir(), "missing")}, "--token-file"},
		{[]string{"loadgen", "--url", url, "--broadcast", "x", "--listeners", "1", "--duration", "1s", "--token-file", empty}, "--token-file"},
	} {
		var o, e bytes.Buffer
		code := run(ctx, c.args, &o, &e)
		msg := strings.TrimSpace(e.String())
		if code != 2 || !strings.Contains(msg, c.want) || strings.Count(msg, "\n") > 0 {
			t.Errorf("%v: exit %d, %q; want 2 and one line with %q", c.args, code, msg, c.want)
		}
	}
}

// TestKeygenAuth: relay keygen --auth writes a key file relay token
// signs with, and prints the public line a relay verifies with.
func TestKeygenAuth(t *testing.T) {
	key := filepath.Join(t.TempDir(), "key")
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"keygen", "--auth", "--out", key}, &stdout, &stderr); code != 0 {
		t.Fatalf("keygen --auth: exit %d: %s", code, stderr.String())
	}
	public := writeFile(t, "public", stdout.String())
	verifier, err := relay.LoadAuthenticator(public)
	if err != nil {
		t.Fatalf("the printed line as a key file: %v", err)
	}
	if verifier.CanSign() {
		t.Fatal("the printed public line signs")
	}
	tok := runToken(t, "--key", key, "--publish", "live")
	if c, err := verifier.Verify(tok); err != nil || len(c.Put) != 1 || c.Put[0] != "live" {
		t.Fatalf("token from the keygen file: %+v, %v", c, err)
	}
}

// TestPublishToTwoOrigins: relay publish URL1 URL2 sends the same groups
// to both relays: a listener on each hears them, checked frames and all.
func TestPublishToTwoOrigins(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a, stopA := serveInProcess(t, "--udp-buffer", "1MiB")
	defer stopA()
	b, stopB := serveInProcess(t, "--udp-buffer", "1MiB")
	defer stopB()
	pubCtx, stopPub := context.WithCancel(ctx)
	defer stopPub()
	pubErr := &testutil.SyncBuffer{}
	pubDone := make(chan int, 1)
	go func() {
		pubDone <- run(pubCtx, []string{"publish", a + "/", b + "/", "--name", "room", "--interval", "20ms", "--size", "64"}, io.Discard, pubErr)
	}()
	for _, url := range []string{a + "/", b + "/"} {
		var out, errb bytes.Buffer
		if code := run(ctx, []string{"listen", url, "--name", "room", "--groups", "5", "--check", "64"}, &out, &errb); code != 0 {
			t.Fatalf("listen on %s: exit %d: %s (publisher: %s)", url, code, errb.String(), pubErr.String())
		}
		if !strings.Contains(out.String(), "received 5 groups") {
			t.Fatalf("listen on %s: %q", url, out.String())
		}
	}
	stopPub()
	if code := <-pubDone; code != 0 {
		t.Errorf("publisher: exit %d: %s", code, pubErr.String())
	}
}
