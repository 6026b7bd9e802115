package relay_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/relay"
	"github.com/relayfleet/relayfleet/relay/client"
)

// endedWith waits up to within for s to end and returns the reason
// client.ReconnectReason gives, and how long it took; "" if it did not end.
func endedWith(s *client.Session, within time.Duration) (string, time.Duration) {
	start := time.Now()
	select {
	case <-s.Done():
		r, _ := client.ReconnectReason(s.Err())
		return r, time.Since(start)
	case <-time.After(within):
		return "", within
	}
}

// TestSessionClosedAtTokenExpiry: a session whose token expires is closed
// with the token-expired code soon after its exp (plus the grace), on
// raw QUIC and WebSocket, and the client is told to reconnect with a
// fresh token (ReasonTokenExpired, retried); a session with a longer
// token stays.
func TestSessionClosedAtTokenExpiry(t *testing.T) {
	ctx := testContext(t)
	auth := testAuth(t, "0123456789abcdef0123456789abcdef")
	r := startRelay(t, relay.Config{Auth: auth, ExpiryGrace: 200 * time.Millisecond})
	long := mintToken(t, auth, "", "live")
	for _, tr := range []string{client.TransportQUIC, client.TransportWebSocket} {
		short, err := auth.NewToken("", "live", false, true, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		c, err := relay.TokenClaims(short)
		if err != nil {
			t.Fatal(err)
		}
		s := dial(t, ctx, relayURL(r, "?jwt="+short), &client.Options{Transport: tr})
		keep := dial(t, ctx, relayURL(r, "?jwt="+long), &client.Options{Transport: tr})
		reason, _ := endedWith(s, 15*time.Second)
		ended := time.Now()
		if reason != client.ReasonTokenExpired {
			t.Fatalf("%s: session with a 2 s token: ended %q, want %q (err %v)", tr, reason, client.ReasonTokenExpired, s.Err())
		}
		if exp := time.Unix(c.Expires, 0); ended.Before(exp) {
			t.Errorf("%s: session closed at %s, before its token's expiry %s", tr, ended.Format(time.RFC3339Nano), exp.Format(time.RFC3339Nano))
		}
		if _, retry := client.ReconnectReason(s.Err()); !retry {
			t.Errorf("%s: token-expired is not retried", tr)
		}
		if !strings.Contains(s.Err().Error(), "token expired") {
			t.Errorf("%s: close error %v does not say token expired", tr, s.Err())
		}
		if err := keep.Err(); err != nil {
			t.Errorf("%s: the session with an hour's token ended too: %v", tr, err)
		}
	}
}

// TestRevokedTokenSessionsClosed: writing a token's id into the relay's
// revocation file closes its live sessions within 5 s (QUIC and
// WebSocket) with "token revoked", refuses new ones, and leaves another
// token's sessions alone; a prefix entry closes the tokens issued before
// it under the prefix, and a token minted after it is admitted.
func TestRevokedTokenSessionsClosed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	auth := testAuth(t, "0123456789abcdef0123456789abcdef")
	file := filepath.Join(t.TempDir(), "revoked")
	r := startRelay(t, relay.Config{Auth: auth, RevocationFile: file})
	bad, good := mintToken(t, auth, "", "live/a"), mintToken(t, auth, "", "live/a")
	underB := mintToken(t, auth, "", "live/b/x")
	badClaims, err := relay.TokenClaims(bad)
	if err != nil || badClaims.ID == "" {
		t.Fatalf("token claims %+v, %v: want a jti", badClaims, err)
	}
	var doomed, kept []*client.Session
	for _, tr := range []string{client.TransportQUIC, client.TransportWebSocket} {
		doomed = append(doomed, dial(t, ctx, relayURL(r, "?jwt="+bad), &client.Options{Transport: tr}))
		kept = append(kept, dial(t, ctx, relayURL(r, "?jwt="+good), &client.Options{Transport: tr}))
		kept = append(kept, dial(t, ctx, relayURL(r, "?jwt="+underB), &client.Options{Transport: tr}))
	}
	until := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	if err := os.WriteFile(file, []byte("# revoked\njti="+badClaims.ID+" until="+until+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for i, s := range doomed {
		reason, took := endedWith(s, 5*time.Second)
		if reason != client.ReasonUnauthorized || !strings.Contains(s.Err().Error(), "token revoked") {
			t.Errorf("revoked session %d: ended %q after %v (err %v); want unauthorized, token revoked, within 5 s", i, reason, took, s.Err())
		}
	}
	for i, s := range kept {
		if err := s.Err(); err != nil {
			t.Errorf("session %d of another token ended: %v", i, err)
		}
	}
	for _, tr := range allTransports {
		if !refusedOnConnect(ctx, relayURL(r, "?jwt="+bad), tr) {
			t.Errorf("%s: a session with the revoked token admitted", tr)
		}
	}

	// By prefix: underB's sessions go; a token minted a second later works.
	time.Sleep(1100 * time.Millisecond) // iat has a second's grain
	before := time.Now().UTC().Format(time.RFC3339)
	entries := fmt.Sprintf("jti=%s until=%s\nprefix=live/b issued-before=%s until=%s\n", badClaims.ID, until, before, until)
	if err := os.WriteFile(file, []byte(entries), 0o644); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(kept); i += 2 {
		if reason, took := endedWith(kept[i], 5*time.Second); reason != client.ReasonUnauthorized {
			t.Errorf("session %d under live/b: ended %q after %v; want unauthorized within 5 s", i, reason, took)
		}
	}
	for i := 0; i < len(kept); i += 2 {
		if err := kept[i].Err(); err != nil {
			t.Errorf("session %d of live/a ended on a live/b revocation: %v", i, err)
		}
	}
	time.Sleep(1100 * time.Millisecond)
	fresh := mintToken(t, auth, "", "live/b/x")
	if refusedOnConnect(ctx, relayURL(r, "?jwt="+fresh), client.TransportQUIC) {
		t.Errorf("a live/b token minted after the prefix revocation refused")
	}

	// A file that does not parse keeps the revocations in force.
	if err := os.WriteFile(file, []byte("garbage\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2500 * time.Millisecond)
	if !refusedOnConnect(ctx, relayURL(r, "?jwt="+bad), client.TransportQUIC) {
		t.Errorf("a broken revocation file lifted the revocations")
	}
}

// TestRevocationFileChecked: relay serve refuses a revocation file that
// does not parse, naming the file and line.
func TestRevocationFileChecked(t *testing.T) {
	for _, c := range []struct{ text, want string }{
		{"jti=x\n", ":1: until=RFC3339 is missing"},
		{"# c\nprefix=live until=2030-01-01T00:00:00Z\n", ":2: prefix= needs issued-before"},
		{"jti=x prefix=live issued-before=2030-01-01T00:00:00Z until=2030-01-01T00:00:00Z\n", "exactly one of jti= or prefix="},
		{"jti=x until=tomorrow\n", `until="tomorrow" is not an RFC 3339 time`},
		{"who=x until=2030-01-01T00:00:00Z\n", `unknown key "who"`},
	} {
		_, err := relay.ParseRevocations("f", []byte(c.text))
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "revocation file f") {
			t.Errorf("%q: %v, want an error naming the file with %q", c.text, err, c.want)
		}
	}
	f := filepath.Join(t.TempDir(), "revoked")
	if err := os.WriteFile(f, []byte("jti=x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := relay.Start(context.Background(), relay.Config{Listen: "127.0.0.1:0", Logger: quietLogger(),
		Auth: testAuth(t, "0123456789abcdef0123456789abcdef"), RevocationFile: f})
	if err == nil || !strings.Contains(err.Error(), f) {
		t.Errorf("start with a broken revocation file: %v, want an error naming it", err)
	}
}

// TestListenerComesBackWithFreshToken: a listener whose tokens live 2 s,
// from a token source (the client's hook), is closed at each expiry and
// reconnects at once with a fresh token from the hook, and keeps hearing
// the broadcast.
func TestListenerComesBackWithFreshToken(t *testing.T) {
	ctx := testContext(t)
	auth := testAuth(t, "0123456789abcdef0123456789abcdef")
	r := startRelay(t, relay.Config{Auth: auth, ExpiryGrace: 100 * time.Millisecond})
	tw := dial(t, ctx, relayURL(r, "?jwt="+mintToken(t, auth, "show", "")), nil).Publish("show").Track("audio")
	go func() {
		for g := uint64(0); ctx.Err() == nil; g++ {
			_ = tw.WriteGroup(ctx, g, [][]byte{client.Pattern(g, 0, 64)})
			time.Sleep(50 * time.Millisecond)
		}
	}()
	var asked atomic.Int32
	res, err := client.NewResolver(client.ResolverOptions{URL: relayURL(r, ""), TokenSource: func(context.Context) (string, error) {
		asked.Add(1)
		return auth.NewToken("", "show", false, true, 2*time.Second)
	}})
	if err != nil {
		t.Fatal(err)
	}
	out := &testutil.SyncBuffer{}
	lctx, cancel := context.WithTimeout(ctx, 6*time.Second)
	defer cancel()
	err = client.Listen(lctx, res, &client.Options{Logger: quietLogger()}, client.ListenOptions{
		Broadcast: "show", Track: "audio", Silence: time.Second, Reconnect: true}, out)
	if err != nil {
		t.Fatalf("listen: %v\n%s", err, out)
	}
	if n := strings.Count(out.String(), "reconnected (token-expired)"); n < 1 || asked.Load() < 2 {
		t.Errorf("%d token-expired reconnects, token source asked %d times; want at least 1 and 2:\n%s", n, asked.Load(), out)
	}
	if strings.Contains(out.String(), "unauthorized") {
		t.Errorf("a listener was refused:\n%s", out)
	}
}

// TestPublisherComesBackWithFreshToken: a publisher whose tokens live 2 s
// (relay publish with --token-file: client.RunPublish with a token
// source) is closed at the expiry and publishes on with a fresh token.
func TestPublisherComesBackWithFreshToken(t *testing.T) {
	ctx := testContext(t)
	auth := testAuth(t, "0123456789abcdef0123456789abcdef")
	r := startRelay(t, relay.Config{Auth: auth, ExpiryGrace: 100 * time.Millisecond})
	var asked atomic.Int32
	out := &testutil.SyncBuffer{}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err := client.RunPublish(pctx, relayURL(r, ""), &client.Options{Logger: quietLogger()}, client.PublishOptions{
		Broadcast: "show", Track: "audio", Interval: 50 * time.Millisecond, FramesPerGroup: 1, FrameSize: 16,
		TokenSource: func(context.Context) (string, error) {
			asked.Add(1)
			return auth.NewToken("show", "", true, false, 2*time.Second)
		},
	}, out)
	if err != nil {
		t.Fatalf("publish: %v\n%s", err, out)
	}
	if !strings.Contains(out.String(), "reconnected (token-expired)") || asked.Load() < 2 {
		t.Errorf("token source asked %d times; want a token-expired reconnect:\n%s", asked.Load(), out)
	}
}
