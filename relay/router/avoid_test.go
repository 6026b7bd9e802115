package router_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/relay/router"
)

// relayState reads one relay's entry from GET /relays.
func relayState(t *testing.T, srv *httptest.Server, u string) (healthy bool, headroom int) {
	t.Helper()
	resp, err := http.Get(srv.URL + "/relays")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Relays []struct {
			URL      string `json:"url"`
			Healthy  bool   `json:"healthy"`
			Headroom int    `json:"headroom"`
		} `json:"relays"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	for _, r := range out.Relays {
		if r.URL == u {
			return r.Healthy, r.Headroom
		}
	}
	t.Fatalf("/relays does not list %s", u)
	return false, 0
}

// TestRouteAvoid: /route never answers an avoided relay, however the
// client spells its URL (query, #spki= pin, trailing slash), and answers
// an avoided one (the one with the most headroom) rather than a 503 when
// every relay with headroom is avoided.
func TestRouteAvoid(t *testing.T) {
	a, b, r, srv := twoRelays(t, 0)
	au, bu := a.entry(false).URL, b.entry(false).URL
	if _, got := route(t, srv); got != au {
		t.Fatalf("without avoid: %q, want a (most headroom)", got)
	}
	for _, spelling := range []string{au, strings.TrimSuffix(au, "/"), au + "?jwt=x#spki=" + strings.Repeat("ab", 32), strings.ToUpper(au[:8]) + au[8:]} {
		for range 20 { // past every reservation: a still has the most headroom
			if code, got := route(t, srv, spelling); code != http.StatusOK || got != bu {
				t.Fatalf("avoid=%s: %d %q, want b", spelling, code, got)
			}
		}
	}
	if code, got := route(t, srv, au, bu); code != http.StatusOK || got != au {
		t.Fatalf("every relay avoided: %d %q, want a (most headroom) rather than a 503", code, got)
	}
	if _, err := r.Pick(au); err != nil {
		t.Fatal(err)
	}
	q := "?broadcast=live" + strings.Repeat("&avoid=x", 9)
	if code := status(t, srv.URL+"/route"+q); code != http.StatusBadRequest {
		t.Fatalf("9 avoid parameters: status %d, want 400", code)
	}
}

// TestAvoidRepollsTheDeadRelay: a listener that lost its relay says
// avoid=URL; the router polls that relay at once, finds it dead, and stops
// routing anyone there long before its next poll (an hour away here).
func TestAvoidRepollsTheDeadRelay(t *testing.T) {
	a, b, r, srv := twoRelays(t, time.Hour)
	au, bu := a.entry(false).URL, b.entry(false).URL
	if _, got := route(t, srv); got != au {
		t.Fatalf("before: %q, want a", got)
	}
	a.down.Store(true)
	if _, got := route(t, srv, au); got != bu {
		t.Fatalf("avoid=a: %q, want b", got)
	}
	testutil.WaitFor(t, 10*time.Second, "a out of the pool after a listener avoided it and its /stats failed", func() bool {
		healthy, _ := relayState(t, srv, au)
		return !healthy
	})
	// Everyone, not only the listener that avoided it, now goes to b.
	if _, got := route(t, srv); got != bu {
		t.Fatalf("after the re-poll: %q, want b", got)
	}
	// One good poll brings a back.
	a.down.Store(false)
	r.PollOnce(context.Background())
	if _, got := route(t, srv); got != au {
		t.Fatalf("after a good poll: %q, want a back", got)
	}
	if b.polls.Load() != 2 {
		t.Fatalf("b was polled %d times, want 2 (the full polls only): avoid=a must not poll b", b.polls.Load())
	}
}

// TestAvoidRepollIsRateLimited: /route is anonymous, so avoid= may not
// make the router poll a relay more often than once per RepollEvery.
func TestAvoidRepollIsRateLimited(t *testing.T) {
	a, _, r, srv := twoRelays(t, time.Hour)
	start := time.Now()
	for range 300 {
		route(t, srv, a.entry(false).URL)
	}
	elapsed := time.Since(start)
	// Every re-poll started while the answers went out (the flag is set
	// before the answer): wait until the last has landed at a.
	testutil.WaitFor(t, 10*time.Second, "the last re-poll to land", func() bool { return r.RepollsInFlight() == 0 })
	extra := a.polls.Load() - 1
	limit := int64(elapsed/router.RepollEvery) + 2
	if extra < 1 || extra > limit {
		t.Fatalf("300 answers with avoid=a in %v re-polled a %d times, want 1..%d", elapsed, extra, limit)
	}
}

// TestHungRelayLeavesWithinPollTimeout: a relay that accepts the
// connection but never answers (SIGSTOPped) fails its poll after
// PollTimeout, not after the poll interval, and leaves the pool.
func TestHungRelayLeavesWithinPollTimeout(t *testing.T) {
	testutil.NoLeaks(t)
	a, b, r, srv := twoRelays(t, 20*time.Second)
	a.hung.Store(true)
	start := time.Now()
	r.PollOnce(context.Background())
	// Generous: the poll times out after 500 ms; before, after the 20 s
	// poll interval.
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("a poll of a hung relay took %v", d)
	}
	if healthy, _ := relayState(t, srv, a.entry(false).URL); healthy {
		t.Fatal("a hung relay stayed healthy")
	}
	if _, got := route(t, srv); got != b.entry(false).URL {
		t.Fatalf("with a hung: %q, want b", got)
	}
}

// TestNewListenersGoWhereTheRoomIs: two processes of the same capacity,
// one holding 230 listeners and one 10 (after a rollout): the router sends
// new listeners to the emptier one until both hold as many.
func TestNewListenersGoWhereTheRoomIs(t *testing.T) {
	const capacity = 1000
	full, empty := newFakeRelay(t, capacity-230), newFakeRelay(t, capacity-10)
	path := filepath.Join(t.TempDir(), "relays.json")
	writeFile(t, path, full.entry(false), empty.entry(false))
	r, _ := newRouter(t, path)
	r.PollOnce(context.Background())
	got := map[string]int{}
	for range 300 {
		rt, err := r.Pick()
		if err != nil {
			t.Fatal(err)
		}
		got[rt.URL]++
	}
	a, b := 230+got[full.entry(false).URL], 10+got[empty.entry(false).URL]
	if d := a - b; d < -1 || d > 1 {
		t.Fatalf("after 300 new listeners the processes hold %d and %d, want within one", a, b)
	}
}

// TestEveryRelayTimingOutKeepsTheLastState: when every relay's poll
// times out at once (the router starved of CPU, or cut off), the router
// keeps routing on its last known state for router.MaxStarvedPolls polls
// instead of emptying its pool and refusing every listener; then it
// believes the timeouts. One hung relay among answering ones still
// leaves at once (TestHungRelayLeavesWithinPollTimeout).
func TestEveryRelayTimingOutKeepsTheLastState(t *testing.T) {
	a, b, r, srv := twoRelays(t, 20*time.Second)
	a.hung.Store(true)
	b.hung.Store(true)
	for i := range router.MaxStarvedPolls {
		r.PollOnce(context.Background())
		if code, got := route(t, srv); code != http.StatusOK || got != a.entry(false).URL {
			t.Fatalf("poll %d with every relay timing out: %d %q, want the last state's best relay", i+1, code, got)
		}
	}
	r.PollOnce(context.Background())
	if code, got := route(t, srv); code == http.StatusOK {
		t.Fatalf("after %d starved polls the router still routes to %q", router.MaxStarvedPolls+1, got)
	}
	// Answers again: back at once, and the count starts over.
	a.hung.Store(false)
	b.hung.Store(false)
	r.PollOnce(context.Background())
	if code, _ := route(t, srv); code != http.StatusOK {
		t.Fatalf("relays answering again: %d", code)
	}
}
