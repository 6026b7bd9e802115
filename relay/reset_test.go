package relay

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/relay/client"
	"github.com/relayfleet/relayfleet/relay/moqlite"
	"github.com/relayfleet/relayfleet/relay/transport"
)

func testLogger() *slog.Logger {
	if os.Getenv("RELAY_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

func randomSecret(t *testing.T) []byte {
	t.Helper()
	b := make([]byte, MinResetSecret)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// crash ends the relay the way SIGKILL does, as far as its peers can
// tell: its sockets close and no CONNECTION_CLOSE goes out (quic-go
// destroys the connections when the socket fails). Close still frees the
// rest afterwards.
func (r *Relay) crash() {
	_ = r.udp.Close()
	_ = r.conns.Close()
}

func TestStatelessResetKey(t *testing.T) {
	secret := randomSecret(t)
	k1, err := statelessResetKey(secret, 4443)
	if err != nil {
		t.Fatal(err)
	}
	k1again, _ := statelessResetKey(append([]byte(nil), secret...), 4443)
	k2, _ := statelessResetKey(secret, 4444)
	other, _ := statelessResetKey(randomSecret(t), 4443)
	switch {
	case *k1 != *k1again:
		t.Error("the same secret and port give different keys")
	case *k1 == *k2:
		t.Error("two ports of one box share a key")
	case *k1 == *other:
		t.Error("two secrets give the same key")
	case bytes.Contains(k1[:], secret[:8]):
		t.Error("the key holds the secret")
	}
	r1, _ := statelessResetKey(nil, 4443)
	r2, _ := statelessResetKey(nil, 4443)
	if *r1 == *r2 {
		t.Error("without a secret, two processes share a key")
	}
	if _, err := statelessResetKey(secret[:31], 4443); err == nil || !strings.Contains(err.Error(), "31 bytes") {
		t.Errorf("31-byte secret: %v", err)
	}
}

func TestLoadResetSecret(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, b []byte, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := randomSecret(t)
	if b, err := LoadResetSecret(write("good", good, 0o600)); err != nil || !bytes.Equal(b, good) {
		t.Fatalf("good file: %x, %v", b, err)
	}
	if _, err := LoadResetSecret(write("ro", good, 0o400)); err != nil {
		t.Fatalf("0400 file: %v", err)
	}
	for _, tt := range []struct {
		file string
		want string
	}{
		{filepath.Join(dir, "missing"), "no such file"},
		{write("short", good[:20], 0o600), "20 bytes, want at least 32"},
		{write("world", good, 0o644), "readable by every user"},
		{write("huge", make([]byte, 5000), 0o600), "longer than 4096"},
		{dir, "not a regular file"},
	} {
		if _, err := LoadResetSecret(tt.file); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want %q", tt.file, err, tt.want)
		}
	}
}

// TestStatelessResetAfterRestart: a client is connected to relay process
// A, which dies without a word (crash); B starts on the same port. With the
// same secret, the client's next packet to the port draws a stateless
// reset and the client's connection ends with quic.StatelessResetError
// within seconds, not at its 30 s idle timeout. With another secret (or
// none: before the fix, quic-go sent no reset at all) the token does not
// match and the connection lives on.
//
// A client that only receives draws no reset from quic-go: its keep-alive
// PINGs (about 25 bytes) are below the 43 bytes quic-go answers, so it
// must send something larger once it suspects the relay (the last case
// holds that, with keep-alives every 200 ms for 2 s: if it ever fails,
// quic-go changed and the client's poke may be unneeded).
func TestStatelessResetAfterRestart(t *testing.T) {
	t.Parallel()
	shared := randomSecret(t)
	for _, tt := range []struct {
		name      string
		secretB   []byte
		poke      string // what the client sends after the crash
		settle    time.Duration
		keepAlive time.Duration
		reset     bool
	}{
		{"same secret, stream write", shared, "stream", 0, 0, true},
		{"same secret, datagram", shared, "datagram", 0, 0, true},
		{"other secret", randomSecret(t), "stream", 0, 0, false},
		{"no secret", nil, "stream", 0, 0, false},
		// Settled, and without path MTU probes, whose large packets draw
		// a reset too (a listener that receives audio is done with them
		// in its first second).
		{"same secret, keep-alives only", shared, "", time.Second, 200 * time.Millisecond, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			wait := 3 * time.Second
			if tt.poke == "" {
				wait = 2 * time.Second
			}
			took, cause := restartAfter(t, shared, tt.secretB, tt.poke, tt.settle, tt.keepAlive, wait)
			if cause != nil {
				t.Logf("the connection ended %v after the poke: %v", took.Round(time.Millisecond), cause)
			}
			var sr *quic.StatelessResetError
			got := errors.As(cause, &sr)
			if got != tt.reset {
				t.Fatalf("connection ended with %v (stateless reset: %v), want stateless reset: %v", cause, got, tt.reset)
			}
		})
	}
}

// restartAfter connects a client to a relay with secretA, crashes it,
// starts one with secretB on the port, makes the client send poke
// ("stream": 100 bytes on a new stream; "datagram": a 48-byte DATAGRAM;
// "": nothing, only keep-alives every keepAlive) and returns how long
// after the poke the client's connection ended and why, or nil if it did
// not within wait.
//
// The crash comes settle after the session registered (quic-go's path MTU
// probes, large packets that draw resets too, go out in the first moments
// of a connection).
func restartAfter(t *testing.T, secretA, secretB []byte, poke string, settle, keepAlive, wait time.Duration) (time.Duration, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := Start(ctx, Config{Listen: "127.0.0.1:0", Logger: testLogger(), ResetSecret: secretA})
	if err != nil {
		t.Fatal(err)
	}
	addr := a.Addr().String()
	conn, err := quic.DialAddr(ctx, addr,
		&tls.Config{InsecureSkipVerify: true, NextProtos: []string{moqlite.ALPN}},
		&quic.Config{MaxIdleTimeout: 30 * time.Second, KeepAlivePeriod: keepAlive, EnableDatagrams: true,
			// Without a poke, nothing but keep-alives: path MTU probes
			// (large) go out whenever the connection next sends, which
			// on a connection that has been quiet may be after the crash.
			DisablePathMTUDiscovery: poke == ""})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseWithError(0, "")
	sess, err := client.NewSession(ctx, transport.NewQUIC(conn), "/", testLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	if !testutil.Poll(10*time.Second, func() bool { return a.Stats().Sessions == 1 }) {
		t.Fatal("the session did not register on A")
	}

	time.Sleep(settle)
	a.crash()
	b, err := Start(ctx, Config{Listen: addr, Logger: testLogger(), ResetSecret: secretB})
	if err != nil {
		a.Close()
		t.Fatalf("start B on A's port: %v", err)
	}
	defer b.Close()
	defer a.Close()
	// The client may have sent B something of its own already (a path
	// MTU probe, an ACK) while B came up; what that drew is the answer,
	// judged like the poke's.
	select {
	case <-conn.Context().Done():
		t.Logf("the client's connection ended before the poke, on a packet of its own")
		return 0, context.Cause(conn.Context())
	default:
	}
	poked := time.Now()
	switch poke {
	case "stream":
		st, err := conn.OpenStream()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Write(make([]byte, 100)); err != nil {
			t.Fatal(err)
		}
	case "datagram":
		if !conn.ConnectionState().SupportsDatagrams.Remote {
			t.Fatal("the relay does not take datagrams")
		}
		if err := conn.SendDatagram(make([]byte, 48)); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-conn.Context().Done():
		return time.Since(poked), context.Cause(conn.Context())
	case <-time.After(wait):
		return time.Since(poked), nil
	}
}
