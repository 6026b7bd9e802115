package relay_test

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/tls"
	"fmt"
	"github.com/relayfleet/relayfleet/internal/testutil"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/relayfleet/relayfleet/relay"
	"github.com/relayfleet/relayfleet/relay/client"
)

var allTransports = []string{client.TransportQUIC, client.TransportWebSocket, client.TransportWebTransport}

// transportLogName is how the relay names each transport in its log.
var transportLogName = map[string]string{
	client.TransportQUIC:         "quic",
	client.TransportWebSocket:    "websocket",
	client.TransportWebTransport: "webtransport",
}

// startLoggedRelay starts a relay whose Info log the test reads.
func startLoggedRelay(t *testing.T, cfg relay.Config) (*relay.Relay, *testutil.SyncBuffer) {
	t.Helper()
	log := &testutil.SyncBuffer{}
	cfg.Listen = "127.0.0.1:0"
	cfg.Logger = slog.New(slog.NewTextHandler(log, nil))
	r, err := relay.Start(context.Background(), cfg)
	if err != nil {
		t.Fatalf("start relay: %v", err)
	}
	t.Cleanup(func() { r.Close() })
	return r, log
}

// testAuth is an Authenticator whose Ed25519 key is made from the text
// key (its SHA-256 is the seed), with public listen prefixes.
func testAuth(t *testing.T, key string, public ...string) *relay.Authenticator {
	t.Helper()
	seed := sha256.Sum256([]byte(key))
	a, err := relay.NewAuthenticatorKeys([]relay.Key{{Private: ed25519.NewKeyFromSeed(seed[:])}})
	if err != nil {
		t.Fatal(err)
	}
	return a.WithPublicListen(public)
}

func mintToken(t *testing.T, a *relay.Authenticator, pub, sub string) string {
	t.Helper()
	tok, err := a.NewToken(pub, sub, pub != "", sub != "", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// httpStats reads /stats as a client would.
func httpStats(t *testing.T, r *relay.Relay) relay.Stats {
	t.Helper()
	var st relay.Stats
	testutil.GetJSON(t, fmt.Sprintf("http://%s/stats", r.Addr()), &st)
	return st
}

// refusedOnConnect dials and reports whether the relay refused the
// session: the dial fails (WebSocket, WebTransport: before the upgrade) or
// the relay closes the session right after SETUP (raw QUIC).
func refusedOnConnect(ctx context.Context, url, tr string) bool {
	s, err := client.Dial(ctx, url, &client.Options{Transport: tr, Logger: quietLogger()})
	if err != nil {
		return true
	}
	defer s.Close()
	select {
	case <-s.Done():
		return true
	case <-time.After(5 * time.Second):
		return false
	}
}

// countLines counts log lines holding every one of parts.
func countLines(log string, parts ...string) int {
	n := 0
next:
	for _, line := range strings.Split(log, "\n") {
		for _, p := range parts {
			if !strings.Contains(line, p) {
				continue next
			}
		}
		n++
	}
	return n
}

// TestUntokenedSessionsRefusedOnEveryTransport: with a key and no public
// prefixes, a session without a token, or with a bad one, is refused at
// connect on raw QUIC, WebSocket and WebTransport alike, and each refusal
// is logged with its reason and transport and counted per reason.
func TestUntokenedSessionsRefusedOnEveryTransport(t *testing.T) {
	ctx := testContext(t)
	r, log := startLoggedRelay(t, relay.Config{Auth: testAuth(t, "0123456789abcdef0123456789abcdef")})
	for _, tr := range allTransports {
		for _, q := range []string{"", "?jwt=garbage"} {
			if !refusedOnConnect(ctx, relayURL(r, q), tr) {
				t.Errorf("%s session with %q admitted", tr, q)
			}
		}
	}
	testutil.WaitFor(t, 10*time.Second, "six refusals counted", func() bool { return r.Stats().Refused >= 6 })
	st := httpStats(t, r)
	if st.Refused != 6 || st.RefusedByReason[relay.ReasonUnauthorized] != 6 {
		t.Errorf("refused_total %d, refused_by_reason %v; want 6 unauthorized", st.Refused, st.RefusedByReason)
	}
	for _, tr := range allTransports {
		name := transportLogName[tr]
		for _, why := range []string{"no token", "malformed token"} {
			if n := countLines(log.String(), "msg=refused", "reason=unauthorized", "transport="+name, "remote=127.0.0.1:", why); n != 1 {
				t.Errorf("%d log lines for the %s refusal (%s), want 1; log:\n%s", n, name, why, log)
			}
		}
	}
	if m := getText(t, r, "/metrics"); !strings.Contains(m, `relay_sessions_refused_total{reason="unauthorized"} 6`) ||
		!strings.Contains(m, `relay_sessions_refused_total{reason="overloaded"} 0`) {
		t.Errorf("/metrics lacks the refusals by reason:\n%s", m)
	}
	if strings.Contains(log.String(), "garbage") {
		t.Error("the log shows the token")
	}
}

// TestPublicListen: with public listen prefix live, a session without a
// token listens under live/ on every transport but not elsewhere, and what
// it publishes is refused (counted and logged as forbidden); a token adds
// to the public prefixes; a bad or expired token is refused at connect,
// not downgraded to public.
func TestPublicListen(t *testing.T) {
	ctx := testContext(t)
	auth := testAuth(t, "0123456789abcdef0123456789abcdef", "live")
	r, log := startLoggedRelay(t, relay.Config{Auth: auth})

	pubCtx, stopPub := context.WithCancel(ctx)
	defer stopPub()
	everything := mintToken(t, auth, "/", "")
	publishLoop(pubCtx, t, relayURL(r, "?jwt="+everything), "live/a", 0)
	publishLoop(pubCtx, t, relayURL(r, "?jwt="+everything), "secret/b", 0)
	testutil.WaitFor(t, 10*time.Second, "both broadcasts", func() bool { return r.Stats().Broadcasts == 2 })

	for i, tr := range allTransports {
		name := transportLogName[tr]
		anon := dial(t, ctx, relayURL(r, ""), &client.Options{Transport: tr})
		sub := subscribeWhenAnnounced(t, ctx, anon, "live/a", "audio")
		if _, err := collect(ctx, sub, 2, 64); err != nil {
			t.Fatalf("%s: public listen without a token: %v", name, err)
		}
		sub.Close()
		if s, err := anon.Subscribe(ctx, "secret/b", "audio"); err == nil {
			if _, err := s.NextGroup(ctx); err == nil {
				t.Errorf("%s: listened outside the public prefix without a token", name)
			}
			s.Close()
		}
		room := "live/intruder-" + name
		anon.Publish(room).Track("audio")
		testutil.WaitFor(t, 10*time.Second, name+" publish refused", func() bool { return r.Stats().RefusedByReason[relay.ReasonForbidden] == int64(2*(i+1)) })
		if n := countLines(log.String(), "msg=refused", "reason=forbidden", "transport="+name, "op=publish", "broadcast="+room); n != 1 {
			t.Errorf("%d log lines for the refused %s publish, want 1", n, name)
		}
		if n := countLines(log.String(), "msg=refused", "reason=forbidden", "transport="+name, "op=subscribe", "broadcast=secret/b"); n != 1 {
			t.Errorf("%d log lines for the refused %s subscribe, want 1", n, name)
		}
	}
	if st := r.Stats(); st.Broadcasts != 2 {
		t.Errorf("%d broadcasts: an untokened publish got through", st.Broadcasts)
	}

	// A token adds its own prefixes to the public ones.
	tokened := dial(t, ctx, relayURL(r, "?jwt="+mintToken(t, auth, "", "secret")), nil)
	for _, b := range []string{"live/a", "secret/b"} {
		sub := subscribeWhenAnnounced(t, ctx, tokened, b, "audio")
		if _, err := collect(ctx, sub, 1, 64); err != nil {
			t.Errorf("tokened listener on %s: %v", b, err)
		}
		sub.Close()
	}

	// A bad or expired token is refused, even for a public prefix.
	expired, err := auth.Sign(relay.Claims{Get: []string{"live"}, IssuedAt: time.Now().Add(-2 * time.Hour).Unix(), Expires: time.Now().Add(-time.Hour).Unix()})
	if err != nil {
		t.Fatal(err)
	}
	other := testAuth(t, "another key, also long enough")
	for _, tr := range allTransports {
		for what, tok := range map[string]string{"expired": expired, "foreign": mintToken(t, other, "", "live")} {
			if !refusedOnConnect(ctx, relayURL(r, "live?jwt="+tok), tr) {
				t.Errorf("%s: %s token downgraded to public", transportLogName[tr], what)
			}
		}
	}
	testutil.WaitFor(t, 10*time.Second, "bad tokens counted", func() bool { return r.Stats().RefusedByReason[relay.ReasonUnauthorized] == 6 })
	st := httpStats(t, r)
	want := map[string]int64{relay.ReasonUnauthorized: 6, relay.ReasonForbidden: 6}
	for _, reason := range relay.RefusalReasons {
		if st.RefusedByReason[reason] != want[reason] {
			t.Errorf("refused_by_reason %v, want %v", st.RefusedByReason, want)
			break
		}
	}
	if st.Refused != 12 {
		t.Errorf("refused_total %d, want the sum 12", st.Refused)
	}
	if m := getText(t, r, "/metrics"); !strings.Contains(m, `relay_sessions_refused_total{reason="forbidden"} 6`) {
		t.Errorf("/metrics lacks forbidden 6")
	}
	for _, why := range []string{"token expired", "bad signature"} {
		if n := countLines(log.String(), "msg=refused", "reason=unauthorized", why); n != 3 {
			t.Errorf("%d log lines for %s, want 3 (one per transport)", n, why)
		}
	}
}

// TestClusterLinkCarriesItsOwnToken: an origin with a key and no public
// prefix refuses untokened pulls; an edge with the same key file and
// --upstream signs its own token and pulls, and serves its listeners.
func TestClusterLinkCarriesItsOwnToken(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	const key = "0123456789abcdef0123456789abcdef"
	origin := startRelay(t, relay.Config{Auth: testAuth(t, key)})
	edge := startRelay(t, relay.Config{Auth: testAuth(t, key, "live"), Upstreams: []string{relayURL(origin, "")}})
	// An edge without a key is what an attacker would run: refused.
	rogue := startRelay(t, relay.Config{Upstreams: []string{relayURL(origin, "")}})

	pubCtx, stopPub := context.WithCancel(ctx)
	defer stopPub()
	publishLoop(pubCtx, t, relayURL(origin, "?jwt="+mintToken(t, testAuth(t, key), "live", "")), "live/a", 0)
	testutil.WaitFor(t, 10*time.Second, "broadcast on the origin", func() bool { return origin.Stats().Broadcasts == 1 })
	if !refusedOnConnect(ctx, relayURL(origin, ""), client.TransportQUIC) {
		t.Fatal("origin admitted an untokened client")
	}

	listener := dial(t, ctx, relayURL(edge, ""), nil) // public on the edge
	sub := subscribeWhenAnnounced(t, ctx, listener, "live/a", "audio")
	if _, err := collect(ctx, sub, 3, 64); err != nil {
		t.Fatalf("listener on the edge: %v", err)
	}
	if !edge.Stats().UpstreamConnected {
		t.Error("edge not connected upstream")
	}

	rl := dial(t, ctx, relayURL(rogue, ""), nil)
	rsub, err := rl.Subscribe(ctx, "live/a", "audio")
	if err == nil {
		gctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		if _, err := rsub.NextGroup(gctx); err == nil {
			t.Error("an edge without the key pulled from the origin")
		}
		cancel()
		rsub.Close()
	}
	// Its link may look up for a moment at each dial, until the origin's
	// refusal closes it (seen under CI's load): it must not stay up.
	if !testutil.PollEvery(5*time.Second, 10*time.Millisecond, func() bool { return !rogue.Stats().UpstreamConnected }) {
		t.Error("an edge without the key is connected upstream")
	}
	if n := origin.Stats().RefusedByReason[relay.ReasonUnauthorized]; n < 2 {
		t.Errorf("origin counted %d unauthorized refusals, want the untokened client and the rogue edge", n)
	}
}

// TestRefusalReasons: a bad SETUP counts as protocol, a session while
// draining as draining, on the transports that reach each check, and
// refused_total is their sum.
func TestRefusalReasons(t *testing.T) {
	ctx := testContext(t)
	r, log := startLoggedRelay(t, relay.Config{})
	conn, err := quic.DialAddr(ctx, r.Addr().String(), &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"moql"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	st, err := conn.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A client SETUP offering only a version the relay does not speak.
	if _, err := st.Write([]byte{0x20, 0x00, 0x06, 0x01, 0x80, 0x00, 0xff, 0x0e, 0x00}); err != nil {
		t.Fatal(err)
	}
	<-conn.Context().Done()
	testutil.WaitFor(t, 10*time.Second, "the protocol refusal", func() bool { return r.Stats().RefusedByReason[relay.ReasonProtocol] == 1 })

	req, _ := http.NewRequest(http.MethodPost, fmt.Sprintf("http://%s/drain", r.Addr()), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	for _, tr := range allTransports {
		if !refusedOnConnect(ctx, relayURL(r, ""), tr) {
			t.Errorf("%s session admitted while draining", tr)
		}
	}
	stats := httpStats(t, r)
	if stats.RefusedByReason[relay.ReasonDraining] != 3 || stats.RefusedByReason[relay.ReasonProtocol] != 1 || stats.Refused != 4 {
		t.Errorf("refused_total %d, by reason %v; want 3 draining and 1 protocol", stats.Refused, stats.RefusedByReason)
	}
	if countLines(log.String(), "msg=refused", "reason=protocol", "transport=quic", "no supported version") != 1 {
		t.Errorf("no log line for the protocol refusal:\n%s", log)
	}
	for _, tr := range allTransports {
		if countLines(log.String(), "msg=refused", "reason=draining", "transport="+transportLogName[tr]) != 1 {
			t.Errorf("no log line for the %s draining refusal", tr)
		}
	}
}

// TestClusterLinkWithRelayKeys: origin and edge run with a fleet box's
// key file, public keys and the link key, which signs nothing that may
// publish: the edge pulls from the origin with its link token, and
// publishers need a token of the fleet's private key. Only the origin
// holds the link key's public half, so only the origin takes link tokens:
// the link key taken off a box makes a subscribe token that the origin
// takes and the edge refuses as unauthorized.
func TestClusterLinkWithRelayKeys(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	seed := sha256.Sum256([]byte("the fleet's signing key"))
	linkSeed := sha256.Sum256([]byte("the fleet's link key"))
	fleetKey, linkKey := ed25519.NewKeyFromSeed(seed[:]), ed25519.NewKeyFromSeed(linkSeed[:])
	// An origin box's keys, and an edge box's: the link key's private
	// half, which signs its link tokens and verifies none.
	originBox := []relay.Key{{Public: fleetKey.Public().(ed25519.PublicKey)}, {Public: linkKey.Public().(ed25519.PublicKey), Link: true}, {Private: linkKey, Link: true}}
	edgeBox := []relay.Key{{Public: fleetKey.Public().(ed25519.PublicKey)}, {Private: linkKey, Link: true}}
	boxAuth := func(keys []relay.Key, public ...string) *relay.Authenticator {
		a, err := relay.NewAuthenticatorKeys(keys)
		if err != nil {
			t.Fatal(err)
		}
		return a.WithPublicListen(public)
	}
	origin := startRelay(t, relay.Config{Auth: boxAuth(originBox)})
	edge := startRelay(t, relay.Config{Auth: boxAuth(edgeBox, "live"), Upstreams: []string{relayURL(origin, "")}})
	if boxAuth(originBox).CanSign() || boxAuth(edgeBox).CanSign() {
		t.Fatal("a box's keys sign")
	}
	fleet, err := relay.NewAuthenticator(fleetKey.Seed())
	if err != nil {
		t.Fatal(err)
	}
	pubCtx, stopPub := context.WithCancel(ctx)
	defer stopPub()
	publishLoop(pubCtx, t, relayURL(origin, "?jwt="+mintToken(t, fleet, "live", "")), "live/a", 0)
	testutil.WaitFor(t, 10*time.Second, "broadcast on the origin", func() bool { return origin.Stats().Broadcasts == 1 })

	listener := dial(t, ctx, relayURL(edge, ""), nil)
	sub := subscribeWhenAnnounced(t, ctx, listener, "live/a", "audio")
	if _, err := collect(ctx, sub, 3, 64); err != nil {
		t.Fatalf("listener on the edge: %v", err)
	}
	if !edge.Stats().UpstreamConnected {
		t.Error("edge not connected upstream")
	}
	// The link key, taken off a box, signs a publish token: refused.
	forger, err := relay.NewAuthenticator(linkKey.Seed())
	if err != nil {
		t.Fatal(err)
	}
	forged := mintToken(t, forger, "live", "")
	if !refusedOnConnect(ctx, relayURL(origin, "?jwt="+forged), client.TransportQUIC) {
		t.Error("the origin admitted a publish token signed with the link key")
	}
	// Its subscribe token: the edge refuses it (unauthorized), for every
	// broadcast path, while its own link keeps pulling.
	stolen := mintToken(t, forger, "", "live")
	before := edge.Stats().RefusedByReason[relay.ReasonUnauthorized]
	for _, tr := range allTransports {
		if !refusedOnConnect(ctx, relayURL(edge, "?jwt="+stolen), tr) {
			t.Errorf("the edge admitted a link key's subscribe token over %s", tr)
		}
	}
	testutil.WaitFor(t, 10*time.Second, "the edge's unauthorized refusals", func() bool {
		return edge.Stats().RefusedByReason[relay.ReasonUnauthorized] == before+int64(len(allTransports))
	})
	if !edge.Stats().UpstreamConnected {
		t.Error("edge link dropped")
	}
	if _, err := collect(ctx, sub, 3, 64); err != nil {
		t.Fatalf("listener on the edge after the refusals: %v", err)
	}
	// The origin takes the same token, to subscribe only.
	thief := dial(t, ctx, relayURL(origin, "?jwt="+stolen), nil)
	if _, err := collect(ctx, subscribeWhenAnnounced(t, ctx, thief, "live/a", "audio"), 3, 64); err != nil {
		t.Fatalf("link key's subscribe token on the origin: %v", err)
	}
}
