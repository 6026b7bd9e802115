package relay_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/relay"
	"github.com/relayfleet/relayfleet/relay/client"
)

// seeAll reads announcements until every name in want is active, and
// fails on a read error (a message the watcher could not decode).
func seeAll(t *testing.T, ctx context.Context, s *client.Session, want map[string]bool, where string) *client.Announcements {
	t.Helper()
	ann, err := s.Announced(ctx, "")
	if err != nil {
		t.Fatalf("%s: announce watcher: %v", where, err)
	}
	seen := map[string]bool{}
	for len(seen) < len(want) {
		a, err := ann.Next(ctx)
		if err != nil {
			t.Fatalf("%s: after %d of %d broadcasts: %v", where, len(seen), len(want), err)
		}
		if a.Active && want[a.Path] {
			seen[a.Path] = true
		}
	}
	return ann
}

// TestManyBroadcasts: 2,424 broadcasts on an origin, from three
// publishers, one of which announces 1,100 (past the per-session cap of
// 1,024: the extra 76 are refused and counted). A watcher on the origin
// and one on an edge (through the edge's mirror of the origin's announces)
// see every broadcast, and the mirror keeps following changes. (Before,
// the relay sent every name in one AnnounceInit; past 1,024 names no peer
// could decode it, so every watcher, the edges' mirror loop included,
// broke.)
func TestManyBroadcasts(t *testing.T) {
	ctx := testContext(t)
	origin := startRelay(t, relay.Config{MemoryBudget: -1})
	edge := startRelay(t, relay.Config{MemoryBudget: -1, Upstreams: []string{relayURL(origin, "")}})

	want := map[string]bool{}
	publish := func(prefix string, n int) {
		s := dial(t, ctx, relayURL(origin, ""), nil)
		for i := range n {
			name := fmt.Sprintf("%s/%04d", prefix, i)
			s.Publish(name)
			if i < 1024 {
				want[name] = true
			}
		}
	}
	publish("a", 700)
	publish("b", 700)
	publish("c", 1100)
	testutil.WaitFor(t, 10*time.Second, "the broadcasts on the origin", func() bool { return origin.Stats().Broadcasts == len(want) })
	// The refusals are counted as the origin reads the last announces,
	// which may be after the accepted ones registered.
	if !testutil.Poll(10*time.Second, func() bool { return origin.Stats().AnnouncesRefused >= 1100-1024 }) || origin.Stats().AnnouncesRefused != 1100-1024 {
		t.Fatalf("announces refused %d, want %d", origin.Stats().AnnouncesRefused, 1100-1024)
	}

	seeAll(t, ctx, dial(t, ctx, relayURL(origin, ""), nil), want, "origin")
	edgeWatcher := seeAll(t, ctx, dial(t, ctx, relayURL(edge, ""), nil), want, "edge")

	// The edge's mirror still follows: a new broadcast shows up there.
	dial(t, ctx, relayURL(origin, ""), nil).Publish("late")
	if err := edgeWatcher.WaitFor(ctx, "late"); err != nil {
		t.Fatalf("edge: the broadcast announced after the 2,424: %v", err)
	}
}
