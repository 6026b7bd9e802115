package relay_test

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/relay"
	"github.com/relayfleet/relayfleet/relay/client"
	"github.com/relayfleet/relayfleet/relay/moqlite"
)

// quietLogger is the relay tests' logger (testutil.Logger).
func quietLogger() *slog.Logger { return testutil.Logger() }

func startRelay(t *testing.T, cfg relay.Config) *relay.Relay {
	t.Helper()
	cfg.Listen = "127.0.0.1:0"
	cfg.Logger = quietLogger()
	r, err := relay.Start(context.Background(), cfg)
	if err != nil {
		t.Fatalf("start relay: %v", err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func relayURL(r *relay.Relay, path string) string {
	return fmt.Sprintf("http://%s/%s", r.Addr(), strings.TrimPrefix(path, "/"))
}

func dial(t *testing.T, ctx context.Context, url string, opts *client.Options) *client.Session {
	t.Helper()
	if opts == nil {
		opts = &client.Options{}
	}
	opts.Logger = quietLogger()
	s, err := client.Dial(ctx, url, opts)
	if err != nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// subscribeWhenAnnounced waits for broadcast to be announced, then subscribes.
// showListeners publishes show/audio on r and subscribes n listeners,
// each on its own session, once the relay counts every subscription.
func showListeners(t *testing.T, ctx context.Context, r *relay.Relay, n int) (*client.TrackWriter, []*client.Subscription) {
	t.Helper()
	return showListenersAt(t, ctx, r, relayURL(r, ""), n)
}

// hearGroups writes groups one-frame groups of size bytes and fails unless
// every listener hears all of them.
func hearGroups(t *testing.T, ctx context.Context, tw *client.TrackWriter, subs []*client.Subscription, groups, size int) {
	t.Helper()
	for g := uint64(0); g < uint64(groups); g++ {
		if err := tw.WriteGroup(ctx, g, [][]byte{client.Pattern(g, 0, size)}); err != nil {
			t.Fatal(err)
		}
	}
	for i, sub := range subs {
		if got, err := collect(ctx, sub, groups, size); err != nil || len(got) != groups {
			t.Fatalf("listener %d: %d groups, %v", i, len(got), err)
		}
	}
}

// showListenersAt is showListeners with the sessions dialled to url.
func showListenersAt(t *testing.T, ctx context.Context, r *relay.Relay, url string, n int) (*client.TrackWriter, []*client.Subscription) {
	return showListenersWith(t, ctx, r, url, n, nil)
}

// showListenersWith is showListenersAt with the listeners dialled with
// opts (nil: the defaults); each gets a copy.
func showListenersWith(t *testing.T, ctx context.Context, r *relay.Relay, url string, n int, opts *client.Options) (*client.TrackWriter, []*client.Subscription) {
	t.Helper()
	tw := dial(t, ctx, url, nil).Publish("show").Track("audio")
	subs := make([]*client.Subscription, n)
	for i := range subs {
		var o *client.Options
		if opts != nil {
			c := *opts
			o = &c
		}
		subs[i] = subscribeWhenAnnounced(t, ctx, dial(t, ctx, url, o), "show", "audio")
	}
	if err := tw.WaitSubscribers(ctx, 1); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "the listeners' subscriptions", func() bool { return r.Stats().Subscribers >= int64(n) })
	return tw, subs
}

func subscribeWhenAnnounced(t *testing.T, ctx context.Context, s *client.Session, broadcast, track string) *client.Subscription {
	t.Helper()
	ann, err := s.Announced(ctx, "")
	if err != nil {
		t.Fatalf("announced: %v", err)
	}
	defer ann.Close()
	if err := ann.WaitFor(ctx, broadcast); err != nil {
		t.Fatalf("wait for announce of %s: %v", broadcast, err)
	}
	sub, err := s.Subscribe(ctx, broadcast, track)
	if err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	return sub
}

// readGroup reads a whole group and checks each frame's pattern.
func readGroup(g *client.GroupReader, size int) ([]uint64, error) {
	var frames []uint64
	for {
		p, err := g.ReadFrame()
		if err == io.EOF {
			return frames, nil
		}
		if err != nil {
			return frames, err
		}
		gs, f, err := client.CheckPattern(p, size)
		if err != nil {
			return frames, err
		}
		if gs != g.Sequence {
			return frames, fmt.Errorf("frame of group %d on group stream %d", gs, g.Sequence)
		}
		frames = append(frames, f)
	}
}

// collect reads n groups from sub, checking every frame, and returns the
// frame indexes per group sequence.
func collect(ctx context.Context, sub *client.Subscription, n, size int) (map[uint64][]uint64, error) {
	got := make(map[uint64][]uint64)
	for len(got) < n {
		g, err := sub.NextGroup(ctx)
		if err != nil {
			return got, fmt.Errorf("after %d groups: %w", len(got), err)
		}
		frames, err := readGroup(g, size)
		if err != nil {
			return got, fmt.Errorf("group %d: %w", g.Sequence, err)
		}
		if _, dup := got[g.Sequence]; dup {
			return got, fmt.Errorf("group %d delivered twice", g.Sequence)
		}
		got[g.Sequence] = frames
	}
	return got, nil
}

func TestFanOutToEverySubscriber(t *testing.T) {
	for _, tr := range []string{client.TransportQUIC, client.TransportWebSocket, client.TransportWebTransport} {
		t.Run(tr, func(t *testing.T) {
			ctx := testContext(t)
			r := startRelay(t, relay.Config{})
			const groups, framesPer, size, subs = 12, 3, 100, 3

			pub := dial(t, ctx, relayURL(r, "live"), &client.Options{Transport: tr})
			tw := pub.Publish("room1").Track("audio")

			var subscriptions []*client.Subscription
			for i := 0; i < subs; i++ {
				s := dial(t, ctx, relayURL(r, "live"), &client.Options{Transport: tr})
				subscriptions = append(subscriptions, subscribeWhenAnnounced(t, ctx, s, "room1", "audio"))
			}
			if err := tw.WaitSubscribers(ctx, 1); err != nil {
				t.Fatal(err)
			}
			// However many subscribers, the relay pulls the track once.
			if n := tw.Subscribers(); n != 1 {
				t.Fatalf("publisher sees %d upstream subscriptions, want 1", n)
			}
			if st := r.Stats(); st.Tracks != 1 || st.Subscribers != subs || st.Broadcasts != 1 || st.Publishers != 1 {
				t.Fatalf("stats = %+v", st)
			}

			var wg sync.WaitGroup
			errs := make([]error, subs)
			results := make([]map[uint64][]uint64, subs)
			for i, sub := range subscriptions {
				wg.Add(1)
				go func() {
					defer wg.Done()
					results[i], errs[i] = collect(ctx, sub, groups, size)
				}()
			}
			for g := uint64(0); g < groups; g++ {
				var frames [][]byte
				for f := uint64(0); f < framesPer; f++ {
					frames = append(frames, client.Pattern(g, f, size))
				}
				if err := tw.WriteGroup(ctx, g, frames); err != nil {
					t.Fatalf("write group %d: %v", g, err)
				}
				time.Sleep(5 * time.Millisecond) // pacing the publisher, as a live one
			}
			wg.Wait()
			for i := range subscriptions {
				if errs[i] != nil {
					t.Fatalf("subscriber %d: %v", i, errs[i])
				}
				for g := uint64(0); g < groups; g++ {
					if fs := results[i][g]; len(fs) != framesPer || fs[0] != 0 || fs[1] != 1 || fs[2] != 2 {
						t.Fatalf("subscriber %d group %d frames %v", i, g, fs)
					}
				}
			}
			testutil.WaitFor(t, 10*time.Second, "relay frame counters", func() bool {
				st := r.Stats()
				return st.FramesIn == groups*framesPer && st.FramesOut == subs*groups*framesPer && st.GroupsOut == subs*groups
			})
		})
	}
}

func TestLateJoinerStartsAtNewestGroup(t *testing.T) {
	ctx := testContext(t)
	r := startRelay(t, relay.Config{})
	const size = 64
	pub := dial(t, ctx, relayURL(r, ""), nil)
	tw := pub.Publish("show").Track("audio")

	early := subscribeWhenAnnounced(t, ctx, dial(t, ctx, relayURL(r, ""), nil), "show", "audio")
	if err := tw.WaitSubscribers(ctx, 1); err != nil {
		t.Fatal(err)
	}
	for g := uint64(0); g < 3; g++ {
		if err := tw.WriteGroup(ctx, g, [][]byte{client.Pattern(g, 0, size)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := collect(ctx, early, 3, size); err != nil {
		t.Fatal(err)
	}
	// Group 3 is in progress, two frames in, when the late joiner arrives.
	gw, err := tw.OpenGroup(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	for f := uint64(0); f < 2; f++ {
		if err := gw.WriteFrame(client.Pattern(3, f, size)); err != nil {
			t.Fatal(err)
		}
	}
	testutil.WaitFor(t, 10*time.Second, "frames of group 3 at the relay", func() bool { return r.Stats().FramesIn == 5 })

	late := subscribeWhenAnnounced(t, ctx, dial(t, ctx, relayURL(r, ""), nil), "show", "audio")
	if err := gw.WriteFrame(client.Pattern(3, 2, size)); err != nil {
		t.Fatal(err)
	}
	gw.Close()
	if err := tw.WriteGroup(ctx, 4, [][]byte{client.Pattern(4, 0, size)}); err != nil {
		t.Fatal(err)
	}
	// Groups are streams: the client may hand over 3 and 4 in either
	// order when they arrive together (the relay sends them back to back,
	// in one sendmmsg since send batching). What matters is that the late
	// joiner starts at group 3, from its first frame, and hears nothing
	// older.
	got := map[uint64]int{}
	for len(got) < 2 {
		g, err := late.NextGroup(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if g.Sequence != 3 && g.Sequence != 4 {
			t.Fatalf("late joiner got group %d, want the newest, 3, then 4", g.Sequence)
		}
		frames, err := readGroup(g, size)
		if err != nil {
			t.Fatalf("late joiner group %d: %v", g.Sequence, err)
		}
		got[g.Sequence] = len(frames)
	}
	if got[3] != 3 || got[4] != 1 {
		t.Fatalf("late joiner: frames per group %v; want all three of group 3 from the start, and group 4's one", got)
	}
	if got, err := collect(ctx, early, 2, size); err != nil || len(got[3]) != 3 || len(got[4]) != 1 {
		t.Fatalf("early subscriber: %v, %v", got, err)
	}
}

func TestUnsubscribeAndDisconnectFreeEverything(t *testing.T) {
	for _, tr := range []string{client.TransportQUIC, client.TransportWebSocket, client.TransportWebTransport} {
		t.Run(tr, func(t *testing.T) { testFreeEverything(t, tr) })
	}
}

func testFreeEverything(t *testing.T, tr string) {
	testutil.NoLeaks(t) // every goroutine of the relay and the clients is gone at the end
	ctx := testContext(t)
	r, err := relay.Start(ctx, relay.Config{Listen: "127.0.0.1:0", Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	pub, err := client.Dial(ctx, relayURL(r, "x"), &client.Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	b := pub.Publish("b")
	tw := b.Track("t")
	subSess, err := client.Dial(ctx, relayURL(r, "x"), &client.Options{Logger: quietLogger(), Transport: tr})
	if err != nil {
		t.Fatal(err)
	}
	watch, err := subSess.Announced(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := watch.WaitFor(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	sub, err := subSess.Subscribe(ctx, "b", "t")
	if err != nil {
		t.Fatal(err)
	}
	if err := tw.WaitSubscribers(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := tw.WriteGroup(ctx, 0, [][]byte{client.Pattern(0, 0, 10)}); err != nil {
		t.Fatal(err)
	}
	if _, err := collect(ctx, sub, 1, 10); err != nil {
		t.Fatal(err)
	}

	// Unsubscribing ends the relay's upstream subscription.
	sub.Close()
	testutil.WaitFor(t, 10*time.Second, "upstream unsubscribe", func() bool { return tw.Subscribers() == 0 })
	testutil.WaitFor(t, 10*time.Second, "relay to drop the track", func() bool {
		st := r.Stats()
		return st.Tracks == 0 && st.Subscribers == 0 && st.Broadcasts == 1
	})

	// Subscribing to an unknown broadcast fails.
	if _, err := subSess.Subscribe(ctx, "nope", "t"); err == nil {
		t.Fatal("subscribe to an unknown broadcast succeeded")
	}

	// A subscriber whose publisher disconnects sees the track end, and
	// watchers see the broadcast go.
	sub2, err := subSess.Subscribe(ctx, "b", "t")
	if err != nil {
		t.Fatal(err)
	}
	if err := tw.WaitSubscribers(ctx, 1); err != nil {
		t.Fatal(err)
	}
	pub.Close()
	if _, err := sub2.NextGroup(ctx); !errors.Is(err, client.ErrTrackEnded) {
		t.Fatalf("after publisher left: %v, want ErrTrackEnded", err)
	}
	ann, err := watch.Next(ctx)
	if err != nil || ann.Active || ann.Path != "b" {
		t.Fatalf("announce after publisher left = %+v, %v", ann, err)
	}
	testutil.WaitFor(t, 10*time.Second, "relay to drop the publisher", func() bool {
		st := r.Stats()
		return st.Broadcasts == 0 && st.Publishers == 0 && st.Sessions == 1 && st.Tracks == 0
	})
	watch.Close()
	subSess.Close()
	testutil.WaitFor(t, 10*time.Second, "relay to drop the subscriber session", func() bool { return r.Stats().Sessions == 0 })
	r.Close()
}

func TestHTTPEndpoints(t *testing.T) {
	r := startRelay(t, relay.Config{UDPBuffer: 1 << 20})
	base := fmt.Sprintf("http://%s", r.Addr())
	hash := getText(t, r, "/certificate.sha256")
	if hash != r.CertificateHash() || len(hash) != 64 {
		t.Fatalf("certificate.sha256 = %q, want %q", hash, r.CertificateHash())
	}
	if relay.CertificateHash(r.Certificate()) != hash {
		t.Fatal("hash does not match the serving certificate")
	}
	leaf := r.Certificate().Leaf
	if v := leaf.NotAfter.Sub(leaf.NotBefore); v > 14*24*time.Hour || v < 9*24*time.Hour {
		t.Fatalf("certificate validity %v, want about 10 days", v)
	}
	if leaf.PublicKeyAlgorithm != x509.ECDSA {
		t.Fatalf("certificate key %v, want ECDSA", leaf.PublicKeyAlgorithm)
	}
	if got := getText(t, r, "/healthz"); !strings.HasPrefix(got, "ok") {
		t.Fatalf("healthz = %q", got)
	}
	var st relay.Stats
	if err := json.Unmarshal([]byte(getText(t, r, "/stats")), &st); err != nil {
		t.Fatal(err)
	}
	if st.UDPBufferRequested != 1<<20 || st.UDPReceiveBuffer <= 0 || st.UDPSendBuffer <= 0 {
		t.Fatalf("stats UDP buffers = %+v", st)
	}
	m := getText(t, r, "/metrics")
	for _, want := range []string{"relay_sessions ", "relay_frames_sent_total ", "relay_udp_receive_buffer_bytes "} {
		if !strings.Contains(m, want) {
			t.Fatalf("metrics lack %q:\n%s", want, m)
		}
	}
	resp, err := http.Get(base + "/nothing-here")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("plain GET of a path: %s, want 404", resp.Status)
	}
}

func TestHTTPSURLVerifiesCertificate(t *testing.T) {
	ctx := testContext(t)
	r := startRelay(t, relay.Config{})
	url := fmt.Sprintf("https://localhost:%d/", r.Addr().Port)
	if s, err := client.Dial(ctx, url, &client.Options{Logger: quietLogger()}); err == nil {
		s.Close()
		t.Fatal("https:// accepted a self-signed certificate without roots")
	}
	pool := x509.NewCertPool()
	pool.AddCert(r.Certificate().Leaf)
	for _, tr := range []string{client.TransportQUIC, client.TransportWebSocket} {
		s, err := client.Dial(ctx, url, &client.Options{RootCAs: pool, Transport: tr, Logger: quietLogger()})
		if err != nil {
			t.Fatalf("https:// %s with the certificate as root: %v", tr, err)
		}
		s.Close()
	}
}

func TestAuthTokens(t *testing.T) {
	ctx := testContext(t)
	key := []byte("0123456789abcdef0123456789abcdef")
	r := startRelay(t, relay.Config{AuthKey: key})
	tok := func(pub, sub string) string {
		t.Helper()
		s, err := relay.NewToken(key, pub, sub, pub != "", sub != "", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if s, err := client.Dial(ctx, relayURL(r, ""), &client.Options{Logger: quietLogger()}); err == nil {
		// The relay closes the session right after SETUP.
		select {
		case <-s.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("session without a token stayed open")
		}
		s.Close()
	}
	pub := dial(t, ctx, relayURL(r, "?jwt="+tok("live", "")), nil)
	tw := pub.Publish("live/a").Track("t")
	pub.Publish("other/b") // not allowed: ignored by the relay
	// The token travels in the URL query: in SETUP's path parameter over
	// raw QUIC, in the HTTP request over WebSocket and WebTransport.
	var subs []*client.Subscription
	for _, tr := range []string{client.TransportQUIC, client.TransportWebSocket, client.TransportWebTransport} {
		sub := dial(t, ctx, relayURL(r, "?jwt="+tok("", "live")), &client.Options{Transport: tr})
		subs = append(subs, subscribeWhenAnnounced(t, ctx, sub, "live/a", "t"))
	}
	if err := tw.WaitSubscribers(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := tw.WriteGroup(ctx, 7, [][]byte{client.Pattern(7, 0, 20)}); err != nil {
		t.Fatal(err)
	}
	for i, s := range subs {
		if got, err := collect(ctx, s, 1, 20); err != nil || len(got[7]) != 1 {
			t.Fatalf("subscriber %d: got %v, %v", i, got, err)
		}
	}
	for _, tr := range []string{client.TransportWebSocket, client.TransportWebTransport} {
		if s, err := client.Dial(ctx, relayURL(r, "?jwt=garbage"), &client.Options{Transport: tr, Logger: quietLogger()}); err == nil {
			s.Close()
			t.Fatalf("%s upgrade with a bad token succeeded", tr)
		}
	}
	if st := r.Stats(); st.Broadcasts != 1 {
		t.Fatalf("broadcasts = %d, want only the permitted one", st.Broadcasts)
	}
	other := dial(t, ctx, relayURL(r, "?jwt="+tok("", "elsewhere")), nil)
	if _, err := other.Subscribe(ctx, "live/a", "t"); err == nil {
		t.Fatal("subscribe outside the token's prefix succeeded")
	}
}

type fakeHash string

func (h fakeHash) RoundTrip(*http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Status: "200 OK", Body: io.NopCloser(strings.NewReader(string(h))), Header: http.Header{}}, nil
}

func TestHTTPURLPinsTheFetchedHash(t *testing.T) {
	ctx := testContext(t)
	r := startRelay(t, relay.Config{})
	wrong := strings.Repeat("ab", 32)
	_, err := client.Dial(ctx, relayURL(r, ""), &client.Options{Logger: quietLogger(), HTTPClient: &http.Client{Transport: fakeHash(wrong)}})
	if err == nil {
		t.Fatal("dial succeeded although the certificate does not match the pinned hash")
	}
	s, err := client.Dial(ctx, relayURL(r, ""), &client.Options{Logger: quietLogger(), HTTPClient: &http.Client{Transport: fakeHash(r.CertificateHash())}})
	if err != nil {
		t.Fatalf("dial with the right pin: %v", err)
	}
	s.Close()
}

func TestDrainStopsAdmittingUntilUndrained(t *testing.T) {
	r := startRelay(t, relay.Config{})
	base := fmt.Sprintf("http://%s", r.Addr())
	do := func(method string) {
		t.Helper()
		req, _ := http.NewRequest(method, base+"/drain", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s /drain: %s", method, resp.Status)
		}
	}
	stats := func() relay.Stats {
		t.Helper()
		var st relay.Stats
		testutil.GetJSON(t, base+"/stats", &st)
		return st
	}
	if st := stats(); st.Draining || !st.Admitting || st.Headroom == 0 {
		t.Fatalf("fresh relay: %+v", st)
	}
	do(http.MethodPost)
	if st := stats(); !st.Draining || st.Admitting || st.Headroom != 0 {
		t.Errorf("draining relay: draining=%v admitting=%v headroom=%d", st.Draining, st.Admitting, st.Headroom)
	}
	// A new WebSocket session is refused before the upgrade.
	req, _ := http.NewRequest(http.MethodGet, base+"/", nil)
	req.Header.Set("Upgrade", "websocket")
	req.Header.Set("Connection", "Upgrade")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("new session while draining: %s, want 503", resp.Status)
	}
	do(http.MethodDelete)
	if st := stats(); st.Draining || !st.Admitting {
		t.Errorf("undrained relay: %+v", st)
	}
}

// TestCloseTellsSessions: a relay that stops closes its sessions before
// its socket, so a client learns at once (and a listener reconnects
// through the router) instead of after its idle timeout.
func TestCloseTellsSessions(t *testing.T) {
	r := startRelay(t, relay.Config{})
	ctx := testContext(t)
	sessions := make([]*client.Session, 60)
	for i := range sessions {
		sessions[i] = dial(t, ctx, relayURL(r, ""), nil)
	}
	start := time.Now()
	r.Close()
	for i, s := range sessions {
		select {
		case <-s.Done():
		case <-time.After(5 * time.Second):
			t.Fatalf("session %d still open 5 s after the relay closed: the close was not sent", i)
		}
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("sessions learned after %v", d)
	}
}

// TestGroupTooLargeIsReset: a group that grows past the relay's 8 MiB
// bound ends there, and its listeners' streams are reset at once, not
// left open until the track's next group.
func TestGroupTooLargeIsReset(t *testing.T) {
	ctx := testContext(t)
	r := startRelay(t, relay.Config{})
	tw, subs := showListeners(t, ctx, r, 1)
	frame := make([]byte, moqlite.MaxFrameSize)
	frames := make([][]byte, 9) // 9 MiB
	for i := range frames {
		frames[i] = frame
	}
	go func() { _ = tw.WriteGroup(ctx, 0, frames) }() // the relay stops reading it
	g, err := subs[0].NextGroup(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ended := make(chan error, 1)
	var read atomic.Int64
	go func() {
		for {
			if _, err := g.ReadFrame(); err != nil {
				ended <- err
				return
			}
			read.Add(1)
		}
	}()
	select {
	case err := <-ended:
		if n := read.Load(); err == io.EOF || n > 8 {
			t.Fatalf("the group ended with %v after %d frames; want a reset after at most 8", err, n)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("the listener's stream of a group past 8 MiB is still open after 20 s (%d frames read)", read.Load())
	}
}
