package relay

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/relay/client"
)

// The listener side of crash recovery against the real relay: the
// client's own probe (client.Subscription.NextGroupWithin) draws the
// stateless reset from a relay restarted with the same secret, and
// `relay listen`'s loop (client.Listen) follows a shed to another relay.

// publishTo publishes broadcast "b", track "t" on r, one group every
// 40 ms, until the test ends.
func publishTo(t *testing.T, ctx context.Context, r *Relay) {
	t.Helper()
	s, err := client.Dial(ctx, "http://"+r.Addr().String()+"/", &client.Options{Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	b := s.Publish("b")
	tw := b.Track("t")
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(40 * time.Millisecond)
		defer tick.Stop()
		for seq := uint64(0); ; seq++ {
			if gw, err := tw.OpenGroup(pctx, seq); err == nil {
				_ = gw.WriteFrame(client.Pattern(seq, 0, 32))
				_ = gw.Close()
			}
			select {
			case <-tick.C:
			case <-pctx.Done():
				return
			case <-s.Done():
				return
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		b.Close()
		s.Close()
	})
}

// listenTo dials r over transport tr, waits for broadcast "b" and
// subscribes to its track "t"; the session and the subscription are
// closed at the test's end.
func listenTo(t *testing.T, ctx context.Context, r *Relay, tr string) (*client.Session, *client.Subscription) {
	t.Helper()
	s, err := client.Dial(ctx, "http://"+r.Addr().String()+"/", &client.Options{Logger: testLogger(), Transport: tr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	sub, err := s.SubscribeAnnounced(ctx, "b", "t")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sub.Close)
	return s, sub
}

// nextError reads sub's groups, each within d, until a read fails, and
// returns that error.
func nextError(ctx context.Context, sub *client.Subscription, d time.Duration) error {
	for {
		g, err := sub.NextGroupWithin(ctx, d)
		if err != nil {
			return err
		}
		g.Close()
	}
}

// httpsURL is the URL a router names r by.
func httpsURL(r *Relay) string { return "https://" + r.Addr().String() + "/" }

// routeAmong is a resolver for broadcast "b" whose router (a fake, closed
// at the test's end) answers with the first of relays not avoided; asked
// returns the avoid lists it was asked with so far.
func routeAmong(t *testing.T, relays []*Relay) (res *client.Resolver, asked func() [][]string) {
	t.Helper()
	var (
		mu     sync.Mutex
		avoids [][]string
	)
	router := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		avoid := req.URL.Query()["avoid"]
		mu.Lock()
		avoids = append(avoids, avoid)
		mu.Unlock()
		for _, r := range relays {
			if !slices.Contains(avoid, httpsURL(r)) {
				_ = json.NewEncoder(w).Encode(client.Destination{URL: httpsURL(r), CertificateHash: r.CertificateHash()})
				return
			}
		}
		http.Error(w, "no relay", http.StatusServiceUnavailable)
	}))
	t.Cleanup(router.Close)
	res, err := client.NewResolver(client.ResolverOptions{Router: router.URL, Broadcast: "b"})
	if err != nil {
		t.Fatal(err)
	}
	return res, func() [][]string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(avoids)
	}
}

// listenVerbose runs client.Listen (relay listen's loop) on res for
// track "t" with a silence timeout and reconnects, its verbose lines in
// out; stop ends it and checks that it returned no error.
func listenVerbose(t *testing.T, ctx context.Context, res *client.Resolver, silence time.Duration) (out *testutil.SyncBuffer, stop func()) {
	out = &testutil.SyncBuffer{}
	lctx, lcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- client.Listen(lctx, res, &client.Options{Logger: testLogger()}, client.ListenOptions{
			Broadcast: "b", Track: "t", Silence: silence, Reconnect: true, Verbose: true,
		}, out)
	}()
	return out, func() {
		lcancel()
		if err := <-done; err != nil {
			t.Errorf("Listen: %v", err)
		}
	}
}

// TestListenerProbeDrawsStatelessReset: a listener reading with a silence
// timeout learns of a relay crashed and restarted on its port with the
// same secret by a stateless reset, drawn by its probe at half the
// timeout, before the timeout; with another secret it learns by the
// silence. (Twice the default timeout: the reset has 0.96 s after the
// probe to arrive on a loaded machine.)
func TestListenerProbeDrawsStatelessReset(t *testing.T) {
	t.Parallel()
	const silence = 2 * client.DefaultSilence
	shared := randomSecret(t)
	for _, tt := range []struct {
		name    string
		secretB []byte
		reason  string
	}{
		{"same secret", shared, "stateless-reset"},
		{"other secret", randomSecret(t), "silent"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			a, err := Start(ctx, Config{Listen: "127.0.0.1:0", Logger: testLogger(), ResetSecret: shared})
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			publishTo(t, ctx, a)
			_, sub := listenTo(t, ctx, a, client.TransportQUIC)
			// Past the first moments' path MTU probes, whose large
			// packets would draw a reset by themselves.
			for start := time.Now(); time.Since(start) < 1500*time.Millisecond; {
				g, err := sub.NextGroupWithin(ctx, silence)
				if err != nil {
					t.Fatal(err)
				}
				g.Close()
			}
			addr := a.Addr().String()
			a.crash()
			crashed := time.Now()
			b, err := Start(ctx, Config{Listen: addr, Logger: testLogger(), ResetSecret: tt.secretB})
			if err != nil {
				t.Fatalf("start B on A's port: %v", err)
			}
			defer b.Close()
			gotErr := nextError(ctx, sub, silence)
			took := time.Since(crashed)
			reason, ok := client.ReconnectReason(gotErr)
			t.Logf("%s after %v (%v)", reason, took, gotErr)
			if reason != tt.reason || !ok {
				t.Fatalf("ReconnectReason(%v) = %q, %v; want %q", gotErr, reason, ok, tt.reason)
			}
			if reason == "stateless-reset" && took >= silence {
				t.Errorf("the reset came %v after the crash, not within the silence timeout %v", took, silence)
			}
		})
	}
}

// TestListenFollowsShed: POST /shed on relay A sends its listener
// going-away; client.Listen (relay listen's loop) asks the router again
// avoiding A and goes on from B at once.
func TestListenFollowsShed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var relays []*Relay
	for range 2 {
		r := startTestRelay(t, Config{})
		publishTo(t, ctx, r)
		relays = append(relays, r)
	}
	res, asked := routeAmong(t, relays)
	const silence = 10 * time.Second // so that only the going-away can move it soon
	out, stop := listenVerbose(t, ctx, res, silence)
	defer stop()
	groups := regexp.MustCompile(`(?m)^group \d+:`)
	if !testutil.Poll(20*time.Second, func() bool { return len(groups.FindAllString(out.String(), -1)) >= 5 }) {
		t.Fatalf("no groups from A: %s", out.String())
	}
	shed := time.Now()
	// Sessions on A: its publisher and the listener; listeners go first.
	if n := relays[0].Server().Shed(ctx, 1, 100); n != 1 {
		t.Fatalf("shed %d sessions, want 1", n)
	}
	line := regexp.MustCompile(`reconnected \(([a-z-]+)\) from (\S+) to (\S+): no audio for ([0-9.]+) s`)
	var m []string
	if !testutil.Poll(30*time.Second, func() bool { m = line.FindStringSubmatch(out.String()); return m != nil }) {
		t.Fatalf("no reconnect line: %s", out.String())
	}
	took := time.Since(shed)
	t.Logf("%s; %v after the shed", m[0], took)
	if m[1] != "going-away" || m[2] != httpsURL(relays[0]) || m[3] != httpsURL(relays[1]) {
		t.Errorf("reconnect line %q: want going-away from A to B", m[0])
	}
	if took >= silence/2 {
		t.Errorf("back %v after the shed: not immediate", took)
	}
	avoids := asked()
	last := avoids[len(avoids)-1]
	if !slices.Equal(last, []string{httpsURL(relays[0])}) {
		t.Errorf("the router was asked to avoid %q, want A", last)
	}
}

// TestShedReasonOnEveryTransport: a listener shed by the relay reads
// "going-away" from its subscription's error over raw QUIC, WebTransport
// and WebSocket, at once (not after its 10 s silence timeout).
func TestShedReasonOnEveryTransport(t *testing.T) {
	for _, tr := range []string{client.TransportQUIC, client.TransportWebTransport, client.TransportWebSocket} {
		t.Run(tr, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			r := startTestRelay(t, Config{})
			publishTo(t, ctx, r)
			s, sub := listenTo(t, ctx, r, tr)
			for range 3 {
				g, err := sub.NextGroupWithin(ctx, 5*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				g.Close()
			}
			shed := time.Now()
			if n := r.Server().Shed(ctx, 1, 100); n != 1 {
				t.Fatalf("shed %d sessions, want 1", n)
			}
			gotErr := nextError(ctx, sub, 10*time.Second)
			took := time.Since(shed)
			if reason, ok := client.ReconnectReason(gotErr); reason != "going-away" || !ok {
				t.Errorf("ReconnectReason(%v) = %q, %v; want going-away", gotErr, reason, ok)
			}
			if took > 5*time.Second {
				t.Errorf("the subscription ended %v after the shed", took)
			}
			select {
			case <-s.Done():
			case <-time.After(5 * time.Second):
				t.Fatal("session open 5 s after the shed")
			}
			if reason, _ := client.ReconnectReason(s.Err()); reason != "going-away" {
				t.Errorf("session: ReconnectReason(%v) = %q", s.Err(), reason)
			}
		})
	}
}

// TestListenMovesBeforeBreak: relay A sheds its listener with a
// going-away notice and a grace; client.Listen subscribes on B (the
// router is asked to avoid A) while still reading A, switches once B
// caught up, and hears every group once: no group missing, none twice,
// and a "moved" line with a short gap. A and B are edges of one origin,
// so their groups are the same.
func TestListenMovesBeforeBreak(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	origin := startTestRelay(t, Config{})
	publishTo(t, ctx, origin)
	var relays []*Relay
	for range 2 {
		relays = append(relays, startTestRelay(t, Config{Upstreams: []string{"http://" + origin.Addr().String() + "/"}}))
	}
	res, _ := routeAmong(t, relays)
	out, stop := listenVerbose(t, ctx, res, 10*time.Second)
	defer stop()
	groups := regexp.MustCompile(`(?m)^group (\d+):`)
	deadline := time.Now().Add(20 * time.Second)
	if !testutil.Poll(time.Until(deadline), func() bool { return len(groups.FindAllString(out.String(), -1)) >= 5 }) {
		t.Fatalf("no groups from A: %s", out.String())
	}
	const grace = 2 * time.Second
	if n := relays[0].Server().ShedNotice(ctx, 1, 100, grace); n != 1 {
		t.Fatalf("shed %d sessions, want 1", n)
	}
	line := regexp.MustCompile(`(moved|reconnected) \(([a-z-]+)\) from (\S+) to (\S+): no audio for ([0-9.]+) s`)
	var m []string
	if !testutil.Poll(time.Until(deadline.Add(10*time.Second)), func() bool { m = line.FindStringSubmatch(out.String()); return m != nil }) {
		t.Fatalf("no reconnect line: %s", out.String())
	}
	t.Logf("%s", m[0])
	if m[1] != "moved" || m[2] != "going-away" || m[3] != httpsURL(relays[0]) || m[4] != httpsURL(relays[1]) {
		t.Fatalf("line %q: want moved (going-away) from A to B", m[0])
	}
	// Groups come every 40 ms: a move leaves no gap near the issue's
	// 500 ms bound for an audible one.
	if gap, _ := strconv.ParseFloat(m[5], 64); gap > 0.5 {
		t.Errorf("no audio for %.3f s across the move, want well under 0.5 s", gap)
	}
	// A few groups from B, then every group heard exactly once: none
	// twice, none missing. Not necessarily in order: a relay hands each
	// group to its subscribers from the group's own goroutine once its
	// first frame came, so that two groups close together (a new
	// subscription's first ones, or any under load) may swap.
	after := len(groups.FindAllString(out.String(), -1)) + 5
	if !testutil.Poll(time.Until(deadline.Add(20*time.Second)), func() bool { return len(groups.FindAllString(out.String(), -1)) >= after }) {
		t.Fatalf("no groups from B: %s", out.String())
	}
	var seqs []uint64
	for _, g := range groups.FindAllStringSubmatch(out.String(), -1) {
		seq, _ := strconv.ParseUint(g[1], 10, 64)
		seqs = append(seqs, seq)
	}
	heard := slices.Sorted(slices.Values(seqs))
	for i := 1; i < len(heard); i++ {
		if heard[i] != heard[i-1]+1 {
			t.Errorf("group %d heard after group %d (in order: %v): want each group once", heard[i], heard[i-1], seqs)
		}
	}
	if n := relays[0].Stats().Sessions; n != 0 {
		t.Errorf("A still holds %d sessions: the listener did not close the old one", n)
	}
}
