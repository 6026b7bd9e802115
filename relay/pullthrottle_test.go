package relay_test

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/relay"
	"github.com/relayfleet/relayfleet/relay/client"
)

// subscribeMany subscribes s to n broadcasts nobody publishes
// (prefix0..prefix<n-1>, track audio) one after another and returns how
// many the relay accepted; accepted ones are closed at once.
func subscribeMany(ctx context.Context, s *client.Session, prefix string, n int) int {
	accepted := 0
	for i := range n {
		sub, err := s.Subscribe(ctx, fmt.Sprintf("%s%d", prefix, i), "audio")
		if err == nil {
			accepted++
			sub.Close()
		}
	}
	return accepted
}

// TestAnonymousUnknownSubscribesThrottled: on an edge with a public
// prefix, subscribes without a token to broadcasts the upstream does not
// announce start upstream pulls (and their log lines) at a bounded rate,
// per session and over all sessions; the rest are refused at once. A
// session with a token is not throttled, and a broadcast the upstream
// announces is served to an anonymous listener while the global limit is
// spent. (Before, every such subscribe opened an upstream subscription
// and logged a line: 136 of 136.)
func TestAnonymousUnknownSubscribesThrottled(t *testing.T) {
	ctx := testContext(t)
	const key = "0123456789abcdef0123456789abcdef"
	origin := startRelay(t, relay.Config{Auth: testAuth(t, key)})
	edge, log := startLoggedRelay(t, relay.Config{Auth: testAuth(t, key, "live"), Upstreams: []string{relayURL(origin, "")}})
	pubCtx, stopPub := context.WithCancel(ctx)
	defer stopPub()
	publishLoop(pubCtx, t, relayURL(origin, "?jwt="+mintToken(t, testAuth(t, key), "live", "")), "live/a", 0)
	// The edge learns what the upstream announces before the flood.
	first := dial(t, ctx, relayURL(edge, ""), nil)
	subscribeWhenAnnounced(t, ctx, first, "live/a", "audio").Close()
	first.Close()

	start := time.Now()
	// One session, 40 names: past its own burst.
	s := dial(t, ctx, relayURL(edge, ""), nil)
	one := subscribeMany(ctx, s, "live/nope-one-", 40)
	oneTook := time.Since(start)
	if bound := relay.AnonymousPullBurst + int(math.Ceil(relay.AnonymousPullsPerSecond*oneTook.Seconds())); one > bound {
		t.Errorf("one anonymous session started %d upstream pulls of 40 in %v, want at most %d", one, oneTook.Round(time.Millisecond), bound)
	}
	// 16 sessions of 6 names each, each within its own burst: past the
	// global one.
	var sessions []*client.Session
	for range 16 {
		sessions = append(sessions, dial(t, ctx, relayURL(edge, ""), nil))
	}
	many := 0
	for i, s := range sessions {
		many += subscribeMany(ctx, s, fmt.Sprintf("live/nope-%d-", i), 6)
	}
	took := time.Since(start)
	total := one + many
	bound := relay.UnknownPullBurst + int(math.Ceil(relay.UnknownPullsPerSecond*took.Seconds()))
	t.Logf("anonymous subscribes to unknown names: %d of 40 from one session, %d of 96 from 16 sessions accepted in %v (global bound %d)",
		one, many, took.Round(time.Millisecond), bound)
	if total > bound {
		t.Errorf("%d upstream pulls of unknown names in %v, want at most %d", total, took.Round(time.Millisecond), bound)
	}
	if many == 96 {
		t.Error("every subscribe of 16 sessions accepted: no global limit")
	}
	// The upstream refuses every pull, and the edge logs each refusal it
	// sees: no more lines than pulls.
	time.Sleep(time.Second)
	if n := countLines(log.String(), "upstream refused subscription", "live/nope"); n > total {
		t.Errorf("%d 'upstream refused subscription' lines for %d pulls", n, total)
	}
	if st := edge.Stats(); st.RefusedByReason[relay.ReasonOverloaded] < int64(136-total) {
		t.Errorf("refused %v, want the %d throttled subscribes counted as overloaded", st.RefusedByReason, 136-total)
	}

	// A broadcast the upstream announces is not throttled, the global
	// limit spent or not.
	known := dial(t, ctx, relayURL(edge, ""), nil)
	sub, err := known.Subscribe(ctx, "live/a", "audio")
	if err != nil {
		t.Fatalf("an anonymous subscribe to an announced broadcast: %v", err)
	}
	if _, err := sub.NextGroup(ctx); err != nil {
		t.Fatalf("an anonymous listener of an announced broadcast heard nothing: %v", err)
	}
	sub.Close()
	// A session with a token is not throttled.
	tok := dial(t, ctx, relayURL(edge, "?jwt="+mintToken(t, testAuth(t, key), "", "live")), nil)
	if n := subscribeMany(ctx, tok, "live/nope-token-", 20); n != 20 {
		t.Errorf("a tokened session had %d of 20 subscribes accepted, want all", n)
	}
}
