package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/relay"
)

func TestBadInputExitsTwoWithOneLine(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "key")
	if err := os.WriteFile(key, []byte("0123456789abcdef0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	short := filepath.Join(dir, "short-secret")
	if err := os.WriteFile(short, []byte("0123456789"), 0o600); err != nil {
		t.Fatal(err)
	}
	open := filepath.Join(dir, "open-secret")
	if err := os.WriteFile(open, []byte("0123456789abcdef0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args []string
		want string // substring naming the flag or problem
	}{
		{[]string{"serve", "--listen", "127.0.0.1:0", "--stateless-reset-secret", filepath.Join(dir, "none")}, "--stateless-reset-secret"},
		{[]string{"serve", "--listen", "127.0.0.1:0", "--stateless-reset-secret", short}, "--stateless-reset-secret: " + short + ": 10 bytes, want at least 32"},
		{[]string{"serve", "--listen", "127.0.0.1:0", "--stateless-reset-secret", open}, "--stateless-reset-secret: " + open + ": readable by every user"},
		{[]string{"serve", "--listen", "127.0.0.1:0", "--shed-rate", "0"}, "--shed-rate"},
		{[]string{"serve", "--listen", "127.0.0.1:0", "--notice-grace", "-1s"}, "--notice-grace"},
		{[]string{"serve", "--listen", "127.0.0.1:0", "--notice-grace", "2h"}, "--notice-grace"},
		{[]string{"serve", "--listen", "127.0.0.1:0", "--shutdown-grace", "-1s"}, "--shutdown-grace"},
		{nil, "usage"},
		{[]string{"bogus"}, "unknown command"},
		{[]string{"serve"}, "--listen"},
		{[]string{"serve", "--listen", "nohost"}, "--listen"},
		{[]string{"serve", "--listen", "127.0.0.1:99999"}, "--listen"},
		{[]string{"serve", "--listen", "127.0.0.1:0", "--cert", "x"}, "--cert and --key"},
		{[]string{"serve", "--listen", "127.0.0.1:0", "--udp-buffer", "lots"}, "--udp-buffer"},
		{[]string{"serve", "--listen", "127.0.0.1:0", "--send-batch", "0"}, "--send-batch"},
		{[]string{"serve", "--listen", "127.0.0.1:0", "--log-level", "loud"}, "--log-level"},
		{[]string{"serve", "--listen", "127.0.0.1:0", "--upstream", "http://a:1/,ftp://b:2/"}, "--upstream"},
		{[]string{"serve", "--listen", "127.0.0.1:0", "--memory-budget", "-5MiB"}, "--memory-budget"},
		{[]string{"serve", "--listen", "127.0.0.1:0", "--max-listeners", "-1"}, "--max-listeners"},
		{[]string{"serve", "--listen", "127.0.0.1:0", "--reap-after", "0s"}, "--reap-after"},
		{[]string{"serve", "--nope"}, "-nope"},
		{[]string{"serve", "--listen", "127.0.0.1:0", "--public-listen", "x"}, "--public-listen needs --auth-key"},
		{[]string{"serve", "--listen", "127.0.0.1:0", "--auth-key", key, "--public-listen", "live,"}, "-public-listen"},
		{[]string{"token", "--publish", "a"}, "--key"},
		{[]string{"token", "--key", key}, "exactly one"},
		{[]string{"token", "--key", key, "--publish", "a", "--subscribe", "b"}, "exactly one"},
		{[]string{"token", "--key", key, "--publish", "a", "--ttl", "-1h"}, "--ttl"},
		{[]string{"token", "--key", key, "--publish", "a", "--ttl", "soon"}, "-ttl"},
		{[]string{"publish", "--name", "x"}, "URL"},
		{[]string{"publish", "ftp://h:1/", "--name", "x"}, "https:// or http://"},
		{[]string{"publish", "http://127.0.0.1:1/", "ftp://h:2/", "--name", "x"}, `URL "ftp://h:2/": must start with https:// or http://`},
		{[]string{"publish", "http://127.0.0.1:1/", "http://relay.example:2/", "--name", "x"}, "URL http://relay.example:2/: its certificate hash would come over plain HTTP"},
		{[]string{"publish", "http://h:1/"}, "--name"},
		{[]string{"publish", "http://h:1/", "--name", "x", "--size", "3"}, "--size"},
		{[]string{"listen", "http://h:1/", "--name", "x", "--groups", "-1"}, "--groups"},
		{[]string{"listen", "http://h:1/", "--name", "x", "--transport", "pigeon"}, "--transport"},
		{[]string{"listen", "http://127.0.0.1:1/", "--name", "x", "--silence", "-1s"}, "--silence"},
		{[]string{"listen", "http://127.0.0.1:1/", "--name", "x", "--silence", "soon"}, "-silence"},
		{[]string{"publish", "http://h:1/", "--name", "x", "--paced", "--transport", "websocket"}, "--paced"},
		{[]string{"router", "--relays", "f.json"}, "--listen"},
		{[]string{"router", "--listen", "127.0.0.1:0"}, "--relays"},
		{[]string{"router", "--listen", "127.0.0.1:0", "--relays", "f.json", "--poll", "0s"}, "--poll"},
		{[]string{"loadgen", "--broadcast", "x", "--listeners", "1", "--duration", "1s"}, "--url"},
		{[]string{"loadgen", "--url", "udp://h:1", "--broadcast", "x", "--listeners", "1", "--duration", "1s"}, "--url"},
		{[]string{"loadgen", "--url", "http://h:1/", "--listeners", "1", "--duration", "1s"}, "--broadcast"},
		{[]string{"loadgen", "--url", "http://h:1/", "--broadcast", "x", "--duration", "1s"}, "--listeners"},
		{[]string{"loadgen", "--url", "http://h:1/", "--broadcast", "x", "--listeners", "1"}, "--duration"},
		{[]string{"loadgen", "--url", "http://h:1/", "--broadcast", "x", "--listeners", "1", "--duration", "1s", "--freeze", "2"}, "--freeze"},
		{[]string{"loadgen", "--url", "http://h:1/", "--broadcast", "x", "--listeners", "1", "--duration", "1s", "--freeze-at", "1s"}, "--freeze-at"},
		{[]string{"loadgen", "--url", "http://h:1/", "--broadcast", "x", "--listeners", "1", "--duration", "1s", "--freeze-for", "1s"}, "--freeze-for"},
		{[]string{"loadgen", "--url", "http://h:1/", "--broadcast", "x", "--listeners", "1", "--duration", "1s", "--freeze", "0.5", "--freeze-for", "-1s"}, "--freeze-for"},
		{[]string{"loadgen", "--url", "http://h:1/", "--broadcast", "x", "--listeners", "1", "--duration", "1s", "--silence", "0s"}, "--silence"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), tt.args, &stdout, &stderr)
			if code != 2 {
				t.Fatalf("exit %d, want 2; stderr %q", code, stderr.String())
			}
			msg := stderr.String()
			if !strings.Contains(msg, tt.want) {
				t.Fatalf("stderr %q does not mention %q", msg, tt.want)
			}
			if tt.args != nil && strings.Count(strings.TrimSpace(msg), "\n") != 0 {
				t.Fatalf("stderr is not one line: %q", msg)
			}
		})
	}
}

func TestTokenIsAcceptedByTheRelay(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "key")
	if err := os.WriteFile(keyFile, []byte(privLine(newKey)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"token", "--key", keyFile, "--publish", "live/", "--ttl", "2h"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	tok := strings.TrimSpace(stdout.String())
	a, err := relay.LoadAuthenticator(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	c, err := a.Verify(tok)
	if err != nil {
		t.Fatalf("verify printed token: %v", err)
	}
	if len(c.Put) != 1 || c.Put[0] != "live" || len(c.Get) != 0 {
		t.Fatalf("claims %+v", c)
	}
	if d := time.Until(time.Unix(c.Expires, 0)); d < 119*time.Minute || d > 121*time.Minute {
		t.Fatalf("token expires in %v, want 2h", d)
	}
	other, _ := relay.NewAuthenticator([]byte(oldKey))
	if _, err := other.Verify(tok); err == nil {
		t.Fatal("token verified with another key")
	}
}
