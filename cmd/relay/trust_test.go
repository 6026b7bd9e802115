package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/relay"
	"github.com/relayfleet/relayfleet/relay/client"
	"github.com/relayfleet/relayfleet/relay/router"
)

// TestClearTextTrustNeedsOptIn: a relay URL on another host whose hash
// would come over plain HTTP, a clear-text router on another host, an
// unpinned clear-text upstream: each is refused with one line naming the
// way out.
func TestClearTextTrustNeedsOptIn(t *testing.T) {
	hex := strings.Repeat("ab", 32)
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"listen", "http://192.0.2.10:4443/", "--name", "x"}, "--trust-http-hash"},
		{[]string{"publish", "http://192.0.2.10:4443/", "--name", "x"}, "--trust-http-hash"},
		{[]string{"publish", "http://192.0.2.10:4443/", "--name", "x", "--ogg", "-"}, "--trust-http-hash"},
		{[]string{"loadgen", "--url", "http://192.0.2.10:4443/", "--broadcast", "x", "--listeners", "1", "--duration", "1s"}, "--trust-http-hash"},
		{[]string{"listen", "http://192.0.2.10:4443/#spki=abc", "--name", "x"}, "#spki"},
		{[]string{"listen", "--router", "http://192.0.2.10:8080", "--name", "x"}, "--insecure-router"},
		{[]string{"loadgen", "--router", "http://192.0.2.10:8080", "--broadcast", "x", "--listeners", "1", "--duration", "1s"}, "--insecure-router"},
		{[]string{"listen", "--router", "https://192.0.2.10:8080", "--router-spki", "xyz", "--name", "x"}, "--router-spki"},
		{[]string{"listen", "--router", "http://127.0.0.1:8080", "--router-spki", hex, "--name", "x"}, "--router-spki"},
		{[]string{"listen", "http://127.0.0.1:1/", "--router-spki", hex, "--name", "x"}, "need --router"},
		{[]string{"listen", "http://127.0.0.1:1/", "--router", "http://127.0.0.1:8080", "--name", "x"}, "not both"},
		{[]string{"loadgen", "--url", "http://127.0.0.1:1/", "--certificate-sha256", "nope", "--broadcast", "x", "--listeners", "1", "--duration", "1s"}, "--certificate-sha256"},
		{[]string{"serve", "--listen", "127.0.0.1:0", "--upstream", "http://192.0.2.10:4443/"}, "#spki=HEX"},
		{[]string{"serve", "--listen", "127.0.0.1:0", "--upstream", "http://192.0.2.10:4443/#spki=12"}, "--upstream"},
		{[]string{"router", "--listen", "127.0.0.1:0", "--relays", "f.json", "--cert", "c.pem"}, "--cert and --key"},
		{[]string{"router", "--listen", "127.0.0.1:0", "--relays", "f.json", "--cert", "c.pem", "--key", "k.pem", "--tls-key", "t.pem"}, "not both"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), tt.args, &stdout, &stderr)
			msg := stderr.String()
			if code != 2 || !strings.Contains(msg, tt.want) || strings.Count(strings.TrimSpace(msg), "\n") != 0 {
				t.Fatalf("exit %d, stderr %q: want exit 2 and one line naming %q", code, msg, tt.want)
			}
		})
	}
}

// TestListenThroughTLSRouterPinnedBySPKI runs `relay router --tls-key`
// and `relay listen --router https://... --router-spki`: the listener gets
// the relay and its certificate hash over TLS checked against the router's
// key, and receives; with another key's pin it is refused.
func TestListenThroughTLSRouterPinnedBySPKI(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "router.key")
	key, err := relay.WriteTLSKey(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	spki, err := relay.SPKIHash(key.Public())
	if err != nil {
		t.Fatal(err)
	}

	rl, err := relay.Start(ctx, relay.Config{Listen: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer rl.Close()
	u := fmt.Sprintf("http://%s/", rl.Addr())
	relays, _ := json.Marshal(router.File{Relays: []router.Relay{{URL: u, Stats: u + "stats"}}})
	relaysFile := filepath.Join(dir, "relays.json")
	if err := os.WriteFile(relaysFile, relays, 0o644); err != nil {
		t.Fatal(err)
	}

	rctx, stopRouter := context.WithCancel(ctx)
	routerErr := &testutil.SyncBuffer{}
	routerDone := make(chan int, 1)
	go func() {
		routerDone <- run(rctx, []string{"router", "--listen", "127.0.0.1:0", "--relays", relaysFile, "--tls-key", keyFile, "--poll", "100ms"}, &bytes.Buffer{}, routerErr)
	}()
	defer func() { stopRouter(); <-routerDone }()
	addrRE := regexp.MustCompile(`router listening" addr=(\S+) .*spki_sha256=([0-9a-f]{64})`)
	var m []string
	if !testutil.Poll(20*time.Second, func() bool { m = addrRE.FindStringSubmatch(routerErr.String()); return m != nil }) {
		t.Fatalf("router did not start: %s", routerErr.String())
	}
	if m[2] != spki {
		t.Fatalf("router logged spki %s, want the key's %s", m[2], spki)
	}
	routerURL := "https://" + m[1]

	pub, err := client.Dial(ctx, u, &client.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	tw := pub.Publish("b").Track("audio")
	go func() {
		for seq := uint64(0); ctx.Err() == nil; seq++ {
			_ = tw.WriteGroup(ctx, seq, [][]byte{client.Pattern(seq, 0, 64)})
			time.Sleep(20 * time.Millisecond)
		}
	}()

	var out, errOut bytes.Buffer
	// The router routes nothing until its first poll: retry briefly.
	for deadline := time.Now().Add(20 * time.Second); ; {
		out.Reset()
		errOut.Reset()
		code := run(ctx, []string{"listen", "--router", routerURL, "--router-spki", spki, "--name", "b", "--groups", "3"}, &out, &errOut)
		if code == 0 {
			break
		}
		if time.Now().After(deadline) || !strings.Contains(errOut.String(), "503") {
			t.Fatalf("listen through the router: exit %d: %s", code, errOut.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !strings.Contains(out.String(), "received 3 groups") {
		t.Fatalf("listen output %q", out.String())
	}

	errOut.Reset()
	code := run(ctx, []string{"listen", "--router", routerURL, "--router-spki", strings.Repeat("0f", 32), "--name", "b", "--groups", "1"}, &out, &errOut)
	if code == 0 || !strings.Contains(errOut.String(), "does not match the pinned spki") {
		t.Fatalf("listen with another router key's pin: exit %d: %s", code, errOut.String())
	}
	errOut.Reset()
	code = run(ctx, []string{"listen", "--router", routerURL, "--name", "b", "--groups", "1"}, &out, &errOut)
	if code == 0 {
		t.Fatalf("listen to a self-signed router without a pin succeeded: %s", out.String())
	}
}
