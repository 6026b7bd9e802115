//go:build e2e

// Revocation on a two-box lab fleet through the real Pulumi CLI (issue
// 34.5): listeners with two tokens on both relays, then fleet token revoke
// --id names one token: its sessions on every relay are closed within 5 s
// (the fleet writes the revocation list over SSH, each relay reads it every
// second), new ones with it are refused, the other token's listeners stay.
// It runs on its own lab (bridge rfrvk0, subnet 10.231.143.0/24, dir
// /var/lib/relayfleet/lab-rvk) and state directory, sharing the image
// cache, and leaves no box behind.
package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/relay"
	"github.com/relayfleet/relayfleet/relay/client"
	"github.com/relayfleet/relayfleet/test/systest"
)

const (
	rvkLabDir = "/var/lib/relayfleet/lab-rvk"
	rvkBridge = "rfrvk0"
	rvkSubnet = "10.231.143.0/24"
)

func TestE2ERevokedTokenClosedOnEveryRelay(t *testing.T) {
	t.Parallel() // its own lab and fleet: see e2eLab
	e := newE2ELab(t, rvkLabDir, rvkBridge, rvkSubnet, map[string]string{"fleet": "rvk"})
	inv := filepath.Join(e.work, "rvk.yaml")
	fleetFile := "version: 1\nname: rvk\nsteady:\n  - name: rvk\n    provider: lab\n    shape: small\n    count: 2\n    processes: auto\n    base_port: 4443\n"
	if err := os.WriteFile(inv, []byte(fleetFile), 0o644); err != nil {
		t.Fatal(err)
	}
	e.inv = inv
	e.fleet("up")
	boxes := e.boxes(e.owned)
	if len(boxes) != 2 {
		t.Fatalf("%d boxes after up, want 2", len(boxes))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// fleet token and fleet token revoke take the stack flags, not
	// --relay-binary.
	stackFlags := append([]string{"--inventory", inv, "--state-dir", e.state, "--pulumi", e.cli}, systest.LabFlags(e.labDir, e.images, e.bridge, e.subnet)...)
	token := func() (string, relay.Claims) {
		t.Helper()
		out, code := systest.Combined(t, e.cmd(ctx, append([]string{"token", "--subscribe", "live/"}, stackFlags...)...))
		lines := strings.Split(strings.TrimSpace(out), "\n")
		tok := lines[len(lines)-1]
		c, err := relay.TokenClaims(tok)
		if code != 0 || err != nil || c.ID == "" {
			t.Fatalf("fleet token: exit %d, claims %+v, %v:\n%s", code, c, err, out)
		}
		return tok, c
	}
	revokedTok, revoked := token()
	keptTok, _ := token()

	// Two listener sessions per token on each relay (raw QUIC and
	// WebSocket).
	type listener struct {
		box, via string
		s        *client.Session
	}
	var doomed, kept []listener
	for _, b := range boxes {
		for _, via := range []string{client.TransportQUIC, client.TransportWebSocket} {
			for _, tok := range []string{revokedTok, keptTok} {
				url := fmt.Sprintf("http://%s:4443/?jwt=%s", b.Address, tok)
				s, err := client.Dial(ctx, url, &client.Options{Transport: via, TrustHTTPHash: true, Logger: testutil.Logger()})
				if err != nil {
					t.Fatalf("%s %s: dial: %v", b.Name, via, err)
				}
				t.Cleanup(func() { s.Close() })
				l := listener{box: b.Name, via: via, s: s}
				if tok == revokedTok {
					doomed = append(doomed, l)
				} else {
					kept = append(kept, l)
				}
			}
		}
	}
	time.Sleep(time.Second)
	for _, l := range append(doomed, kept...) {
		if err := l.s.Err(); err != nil {
			t.Fatalf("%s %s: the session ended before any revocation: %v", l.box, l.via, err)
		}
	}

	start := time.Now()
	out, code := systest.Combined(t, e.cmd(ctx, append([]string{"token", "revoke", "--id", revoked.ID}, stackFlags...)...))
	pushed := time.Now()
	t.Logf("fleet token revoke: exit %d after %.1fs\n%s", code, pushed.Sub(start).Seconds(), out)
	if code != 0 || strings.Count(out, "revocation list written") != 2 {
		t.Fatalf("fleet token revoke: exit %d, want the list written on both boxes:\n%s", code, out)
	}
	for _, l := range doomed {
		select {
		case <-l.s.Done():
			reason, _ := client.ReconnectReason(l.s.Err())
			if reason != client.ReasonUnauthorized || !strings.Contains(l.s.Err().Error(), "token revoked") {
				t.Errorf("%s %s: the revoked token's session ended with %q (%v), want unauthorized, token revoked", l.box, l.via, reason, l.s.Err())
			}
			t.Logf("%s %s: closed %.2fs after fleet token revoke returned", l.box, l.via, time.Since(pushed).Seconds())
		case <-time.After(time.Until(pushed.Add(5 * time.Second))):
			t.Errorf("%s %s: the revoked token's session still open 5 s after fleet token revoke returned", l.box, l.via)
		}
	}
	for _, l := range kept {
		if err := l.s.Err(); err != nil {
			t.Errorf("%s %s: another token's session ended: %v", l.box, l.via, err)
		}
	}
	// New sessions with the revoked token are refused on both relays.
	for _, b := range boxes {
		url := fmt.Sprintf("http://%s:4443/?jwt=%s", b.Address, revokedTok)
		s, err := client.Dial(ctx, url, &client.Options{Transport: client.TransportWebSocket, TrustHTTPHash: true, Logger: testutil.Logger()})
		if err == nil {
			s.Close()
			t.Errorf("%s: a new session with the revoked token admitted", b.Name)
		}
	}
	e.fleet("destroy", "--yes")
}
