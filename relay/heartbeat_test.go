package relay_test

import (
	"context"
	"encoding/binary"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/relay"
	"github.com/relayfleet/relayfleet/relay/client"
)

// beatInterval is the tests' heartbeat interval: faster than the
// default, so that a test hears many in little time.
const beatInterval = 30 * time.Millisecond

// heartbeatURL is r's URL rooted at the reserved prefix, as a probe
// without a token connects; query is appended as is.
func heartbeatURL(r *relay.Relay, query string) string { return relayURL(r, "/.fleet"+query) }

// hearBeats subscribes to the heartbeat on s (rooted at /.fleet) and
// returns the sequences of the next n groups, checking that each frame is
// a heartbeat frame for its group, sent within the last 5 s.
func hearBeats(t *testing.T, ctx context.Context, s *client.Session, n int) []uint64 {
	t.Helper()
	sub, err := s.Subscribe(ctx, "heartbeat", relay.HeartbeatTrack)
	if err != nil {
		t.Fatalf("subscribe to the heartbeat: %v", err)
	}
	defer sub.Close()
	var seqs []uint64
	for len(seqs) < n {
		g, err := sub.NextGroup(ctx)
		if err != nil {
			t.Fatalf("heartbeat group %d: %v", len(seqs), err)
		}
		f, err := g.ReadFrame()
		if err != nil {
			t.Fatalf("heartbeat group %d: read frame: %v", g.Sequence, err)
		}
		if _, err := g.ReadFrame(); err != io.EOF {
			t.Errorf("heartbeat group %d: a second frame or no end: %v", g.Sequence, err)
		}
		g.Close()
		if len(f) != relay.HeartbeatFrameLen {
			t.Fatalf("heartbeat frame of %d bytes, want %d", len(f), relay.HeartbeatFrameLen)
		}
		seq, sent := binary.BigEndian.Uint64(f), time.Unix(0, int64(binary.BigEndian.Uint64(f[8:])))
		if seq != g.Sequence {
			t.Errorf("heartbeat frame says sequence %d in group %d", seq, g.Sequence)
		}
		if age := time.Since(sent); age < 0 || age > 5*time.Second {
			t.Errorf("heartbeat %d sent %v ago", seq, age)
		}
		seqs = append(seqs, g.Sequence)
	}
	return seqs
}

// consecutive fails unless seqs are consecutive numbers.
func consecutive(t *testing.T, what string, seqs []uint64) {
	t.Helper()
	for i := 1; i < len(seqs); i++ {
		if seqs[i] != seqs[i-1]+1 {
			t.Fatalf("%s: heartbeat sequences %v are not consecutive", what, seqs)
		}
	}
}

// heardAll fails the test unless seqs, in any order, are consecutive: the
// tests of who may hear the heartbeat check that every group came, not
// their order (TestHeartbeatThroughEdge does: the first group an edge
// pulls, the origin's latest, may land just after the next one under
// load).
func heardAll(t *testing.T, what string, seqs []uint64) {
	t.Helper()
	consecutive(t, what, slices.Sorted(slices.Values(seqs)))
}

// TestHeartbeatThroughEdge: an origin publishes the heartbeat, with
// sequences from the clock; an edge, which publishes none of its own,
// pulls it from the origin through its cluster link, and a listener on
// the edge hears every group in order.
func TestHeartbeatThroughEdge(t *testing.T) {
	ctx := testContext(t)
	origin := startRelay(t, relay.Config{HeartbeatInterval: beatInterval})
	edge := startRelay(t, relay.Config{HeartbeatInterval: beatInterval, Upstreams: []string{relayURL(origin, "")}})

	before := uint64(time.Now().UnixNano() / int64(beatInterval))
	seqs := hearBeats(t, ctx, dial(t, ctx, heartbeatURL(origin, ""), nil), 5)
	consecutive(t, "origin", seqs)
	if seqs[0] < before-100 { // the heartbeat started before this test's clock read
		t.Errorf("origin heartbeat sequence %d, want about the intervals since the epoch, %d", seqs[0], before)
	}

	es := dial(t, ctx, heartbeatURL(edge, ""), nil)
	seqs = hearBeats(t, ctx, es, 20)
	consecutive(t, "edge", seqs)
	if st := edge.Stats(); st.UpstreamTracks != 1 || st.UpstreamSubscribes != 1 {
		t.Errorf("edge: %d upstream tracks, %d upstream subscribes; want the heartbeat pulled once", st.UpstreamTracks, st.UpstreamSubscribes)
	}
	if st := origin.Stats(); st.Subscribers != 0 && st.Subscribers != 1 {
		t.Errorf("origin has %d subscribers", st.Subscribers)
	}
	// The heartbeat is not announced: a listener taking the first
	// broadcast announced never lands on it.
	ann, err := dial(t, ctx, relayURL(origin, ""), nil).Announced(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	defer ann.Close()
	if init := ann.Initial(); len(init) != 0 {
		t.Errorf("origin announces %v", init)
	}
}

// TestHeartbeatNeedsNoToken: with an auth key and no public prefixes, a
// session without a token rooted at /.fleet hears the heartbeat, on the
// origin and through an edge, on every transport; a token that grants
// something else subscribes to it too; a session without a token
// elsewhere is still refused at connect.
func TestHeartbeatNeedsNoToken(t *testing.T) {
	ctx := testContext(t)
	auth := testAuth(t, "0123456789abcdef0123456789abcdef")
	origin := startRelay(t, relay.Config{Auth: auth, HeartbeatInterval: beatInterval})
	edge := startRelay(t, relay.Config{Auth: auth, HeartbeatInterval: beatInterval, Upstreams: []string{relayURL(origin, "")}})
	for _, r := range []struct {
		name string
		r    *relay.Relay
	}{{"origin", origin}, {"edge", edge}} {
		for _, tr := range allTransports {
			s := dial(t, ctx, heartbeatURL(r.r, ""), &client.Options{Transport: tr})
			heardAll(t, r.name+" "+tr, hearBeats(t, ctx, s, 3))
			s.Close()
		}
		other := dial(t, ctx, relayURL(r.r, "?jwt="+mintToken(t, auth, "", "live")), nil)
		if _, err := other.Subscribe(ctx, relay.HeartbeatPath, relay.HeartbeatTrack); err != nil {
			t.Errorf("%s: a token for live/ may not subscribe to the heartbeat: %v", r.name, err)
		}
		if !refusedOnConnect(ctx, relayURL(r.r, "live"), client.TransportQUIC) {
			t.Errorf("%s: a session without a token at /live was admitted", r.name)
		}
	}
}

// TestReservedPrefixRefusesPublish: nobody publishes under .fleet/, not
// with a token that may publish everything, not on a relay without auth,
// not from a session rooted there; listeners keep hearing the relay's own
// heartbeat.
func TestReservedPrefixRefusesPublish(t *testing.T) {
	ctx := testContext(t)
	auth := testAuth(t, "0123456789abcdef0123456789abcdef", "/")
	everything, err := auth.NewToken("", "", true, true, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cfg  relay.Config
		url  func(*relay.Relay) string
		pub  []string
	}{
		{"token publishing everything", relay.Config{Auth: auth}, func(r *relay.Relay) string { return relayURL(r, "?jwt="+everything) },
			[]string{relay.HeartbeatPath, ".fleet/other", ".fleet"}},
		{"rooted at .fleet", relay.Config{Auth: auth}, func(r *relay.Relay) string { return relayURL(r, ".fleet?jwt="+everything) },
			[]string{"heartbeat"}},
		{"no auth", relay.Config{}, func(r *relay.Relay) string { return relayURL(r, "") },
			[]string{relay.HeartbeatPath, ".fleet/x/y"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.HeartbeatInterval = beatInterval
			r := startRelay(t, tc.cfg)
			pub := dial(t, ctx, tc.url(r), nil)
			for _, p := range tc.pub {
				pub.Publish(p).Track(relay.HeartbeatTrack)
			}
			// The same token publishes elsewhere.
			dial(t, ctx, relayURL(r, "?jwt="+everything), nil).Publish("live/ok").Track("audio")
			testutil.WaitFor(t, 10*time.Second, "the allowed broadcast", func() bool { return r.Stats().Broadcasts == 1 })
			testutil.WaitFor(t, 10*time.Second, "the reserved ones refused", func() bool {
				return r.Stats().RefusedByReason[relay.ReasonForbidden] == int64(len(tc.pub))
			})
			s := dial(t, ctx, relayURL(r, "?jwt="+everything), nil)
			sub, err := s.Subscribe(ctx, relay.HeartbeatPath, relay.HeartbeatTrack)
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Close()
			g, err := sub.NextGroup(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if f, err := g.ReadFrame(); err != nil || len(f) != relay.HeartbeatFrameLen {
				t.Errorf("heartbeat frame %x, %v: want the relay's own", f, err)
			}
			g.Close()
		})
	}
}

// TestHeartbeatOffAndAcrossRestart: with the heartbeat off there is none
// to subscribe to; a restarted origin's heartbeat carries on with larger
// sequences than before.
func TestHeartbeatOffAndAcrossRestart(t *testing.T) {
	ctx := testContext(t)
	off := startRelay(t, relay.Config{HeartbeatInterval: -1})
	if _, err := dial(t, ctx, heartbeatURL(off, ""), nil).Subscribe(ctx, "heartbeat", relay.HeartbeatTrack); err == nil {
		t.Error("subscribed to the heartbeat of a relay with it off")
	}
	if _, err := relay.Start(ctx, relay.Config{Listen: "127.0.0.1:0", HeartbeatInterval: time.Microsecond, Logger: quietLogger()}); err == nil {
		t.Error("a 1 µs heartbeat interval was accepted")
	}

	origin := startRelay(t, relay.Config{HeartbeatInterval: beatInterval})
	addr := origin.Addr().String()
	s := dial(t, ctx, heartbeatURL(origin, ""), nil)
	last := hearBeats(t, ctx, s, 3)[2]
	s.Close()
	origin.Close()
	again, err := relay.Start(ctx, relay.Config{Listen: addr, HeartbeatInterval: beatInterval, Logger: quietLogger()})
	if err != nil {
		t.Fatalf("restart: %v", err)
	}
	defer again.Close()
	if first := hearBeats(t, ctx, dial(t, ctx, heartbeatURL(again, ""), nil), 1)[0]; first <= last {
		t.Errorf("after a restart the heartbeat went from %d back to %d", last, first)
	}
}
