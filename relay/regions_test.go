package relay_test

import (
	"bufio"
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/relay"
	"github.com/relayfleet/relayfleet/relay/loadgen"
)

// Regions on loopback: region A's two origins get the publisher (to
// both); region B's two origins pull from A's (their upstreams), and B's
// edges pull from B's origins. However many edges and listeners B has,
// A's origins see one subscription per B origin (the long-haul link of
// each), and B's origins count the bytes pulled over it on /metrics
// (relay_upstream_bytes_total{upstream}).

// upstreamBytes is relay_upstream_bytes_total by upstream on r's /metrics.
func upstreamBytes(t *testing.T, r *relay.Relay) map[string]float64 {
	t.Helper()
	resp, err := http.Get(relayURL(r, "metrics"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	const prefix = `relay_upstream_bytes_total{upstream="`
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		up, val, ok := strings.Cut(strings.TrimPrefix(line, prefix), `"} `)
		if !ok {
			t.Fatalf("/metrics line %q", line)
		}
		v, err := strconv.ParseFloat(val, 64)
		if err != nil {
			t.Fatalf("/metrics line %q: %v", line, err)
		}
		out[up] = v
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func sum(m map[string]float64) float64 {
	n := 0.0
	for _, v := range m {
		n += v
	}
	return n
}

// atA is what region A's origins see: subscriptions and sessions, summed.
func atA(origins []*relay.Relay) (subs int64, sessions int) {
	for _, o := range origins {
		st := o.Stats()
		subs += st.Subscribers
		sessions += st.Sessions
	}
	return subs, sessions
}

func TestRegionsOneLinkPerOrigin(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	many := relay.Config{MemoryBudget: -1, MaxSessionsPerAddress: -1}
	withUp := func(ups ...string) relay.Config { c := many; c.Upstreams = ups; return c }

	a1, a2 := startRelay(t, many), startRelay(t, many)
	upA := []string{relayURL(a1, ""), relayURL(a2, "")}
	b1, b2 := startRelay(t, withUp(upA...)), startRelay(t, withUp(upA...))
	upB := []string{relayURL(b1, ""), relayURL(b2, "")}
	edgesA := []*relay.Relay{startRelay(t, withUp(upA...)), startRelay(t, withUp(upA...))}
	// The second B edge lists B's origins the other way round, so that
	// each B origin has an edge pulling from it (with one order, as the
	// stack writes, the second origin is a standby that pulls only when
	// an edge fails over to it).
	edgesB := []*relay.Relay{startRelay(t, withUp(upB...)), startRelay(t, withUp(upB[1], upB[0]))}

	pctx, pcancel := context.WithCancel(ctx)
	defer pcancel()
	go func() {
		_ = loadgen.Publish(pctx, upA[0], loadgen.PublishOptions{Broadcast: "live", FrameTime: 20 * time.Millisecond,
			FramesPerGroup: 1, FrameSize: 160, Logger: quietLogger(), Origins: upA[1:]})
	}()
	testutil.WaitFor(t, 15*time.Second, "the broadcast on both of A's origins", func() bool {
		return a1.Stats().Publishers == 1 && a2.Stats().Publishers == 1
	})

	var logs []*groupLog
	listen := func(edges []*relay.Relay, perEdge int) {
		for _, e := range edges {
			for range perEdge {
				logs = append(logs, logGroups(t, ctx, relayURL(e, "")))
			}
		}
	}
	heard := func(what string) {
		t.Helper()
		testutil.WaitFor(t, 20*time.Second, what, func() bool {
			for _, l := range logs {
				if len(l.snapshot()) < 20 {
					return false
				}
			}
			return true
		})
	}
	listen(edgesB, 3)
	listen(edgesA, 1)
	heard("every listener (3 on each B edge, 1 on each A edge) hearing 20 groups")

	// One subscription at A per B origin (and per A edge); one session
	// (link) from each to each of A's origins, and the publisher's two.
	wantSubs := int64(2 + len(edgesA))
	wantSessions := 2*(2+len(edgesA)) + 2
	if !testutil.Poll(10*time.Second, func() bool {
		s, n := atA([]*relay.Relay{a1, a2})
		return s == wantSubs && n == wantSessions
	}) {
		s, n := atA([]*relay.Relay{a1, a2})
		t.Fatalf("A's origins see %d subscriptions (a1 %d, a2 %d) and %d sessions (a1 %d, a2 %d); want %d and %d",
			s, a1.Stats().Subscribers, a2.Stats().Subscribers, n, a1.Stats().Sessions, a2.Stats().Sessions, wantSubs, wantSessions)
	}
	for _, b := range []*relay.Relay{b1, b2} {
		if st := b.Stats(); st.UpstreamTracks != 1 {
			t.Errorf("a B origin pulls %d tracks; want 1", st.UpstreamTracks)
		}
	}

	// More of B: a third edge, and more listeners on every B edge. A
	// sees nothing more.
	edgesB = append(edgesB, startRelay(t, withUp(upB...)))
	listen(edgesB, 4)
	heard("every listener, with a third B edge and 4 more listeners on each")
	subs, sessions := atA([]*relay.Relay{a1, a2})
	t.Logf("at A with %d B edges and %d listeners: %d subscriptions, %d sessions", len(edgesB), len(logs), subs, sessions)
	if subs != wantSubs || sessions != wantSessions {
		t.Fatalf("A's origins see %d subscriptions and %d sessions with 3 B edges and %d listeners; want %d and %d as with 2 edges",
			subs, sessions, len(logs), wantSubs, wantSessions)
	}

	// B's origins count the long-haul bytes, by upstream (A's origins),
	// and the figure moves while the audio flows; B's edges count what
	// they pull from B's origins.
	first := map[*relay.Relay]map[string]float64{b1: upstreamBytes(t, b1), b2: upstreamBytes(t, b2)}
	for b, m := range first {
		if len(m) != 2 {
			t.Fatalf("a B origin's relay_upstream_bytes_total has %v; want one series per A origin", m)
		}
		for u := range m {
			if u != upA[0] && u != upA[1] {
				t.Errorf("a B origin's upstream %q is none of A's %v", u, upA)
			}
		}
		if sum(m) <= 0 {
			t.Errorf("B origin %s pulled no bytes yet", b.Addr())
		}
	}
	testutil.WaitFor(t, 10*time.Second, "the long-haul bytes to grow by 50 frames on both B origins", func() bool {
		return sum(upstreamBytes(t, b1)) >= sum(first[b1])+50*160 && sum(upstreamBytes(t, b2)) >= sum(first[b2])+50*160
	})
	for _, e := range edgesB {
		if got := sum(upstreamBytes(t, e)); got <= 0 {
			t.Errorf("B edge %s: relay_upstream_bytes_total %v; want bytes from B's origins", e.Addr(), got)
		}
	}
	t.Logf("long-haul bytes: B1 %v, B2 %v", upstreamBytes(t, b1), upstreamBytes(t, b2))
}
