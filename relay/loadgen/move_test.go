package loadgen_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/relay"
	"github.com/relayfleet/relayfleet/relay/client"
	"github.com/relayfleet/relayfleet/relay/loadgen"
)

// runShed measures 20 listeners on edge A (the router sends them there,
// and elsewhere when asked to avoid A) while A sheds every session, with
// the going-away notice grace given (0: closed at once), 500 ms into the
// window.
func runShed(t *testing.T, grace time.Duration) (*loadgen.Report, *relay.Relay) {
	// The window outlasts the grace by 2.5 s, so every frame published
	// while the listeners move is inside it.
	window := grace + 2500*time.Millisecond
	if window < 4*time.Second {
		window = 4 * time.Second
	}
	origin := startRelayAndPublisher(t, 1)
	a, _ := startEdge(t, "127.0.0.1:0", origin)
	b, _ := startEdge(t, "127.0.0.1:0", origin)
	srv := startAvoidRouter(t, fmt.Sprintf("http://%s/", a.Addr()), a.CertificateHash(), b, nil)
	shed := make(chan int, 1)
	rep, err := loadgen.Run(context.Background(), loadgen.Options{
		Router: srv.URL, Broadcast: "live", Listeners: 20, Shards: 2, Duration: window, Late: time.Hour,
		// A silence timeout far above the default: the listeners are to
		// move on the going-away notice or close only. With the default
		// (960 ms) a loaded machine, starving the test's relays and
		// listeners for a second, made some reconnect as silent, some
		// before the shed (A then shed fewer than 20).
		Reconnect: true, Silence: 5 * time.Second, IdleTimeout: idleTimeout, Logger: testutil.Logger(),
		Window: func(start bool) {
			if start {
				go func() {
					time.Sleep(500 * time.Millisecond) // the shed comes mid-window
					shed <- a.Server().ShedNotice(context.Background(), -1, 1000, grace)
				}()
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := <-shed; n != 20 {
		t.Fatalf("A shed %d sessions, want the 20 listeners", n)
	}
	t.Logf("grace %v: report: %+v", grace, rep)
	return rep, b
}

// TestRunMovesBeforeBreak: a relay that sheds its listeners with a
// going-away notice keeps serving them for the grace; each subscribes on
// the other relay meanwhile and switches between two groups, so that no
// frame is lost. Without the notice (grace 0) the same shed leaves a gap
// and loses frames. The grace is generous (5 s; the fleet's default is
// longer): under -race on a loaded 2-core machine 20 dials and subscribes
// took over 2 s, and a listener still moving when the grace ran out lost
// the frames between. What tells the two apart on any machine is a
// session closed under its listener (the report's errors): none with
// the notice, every listener's without. Lost frames and the gap follow
// only on a machine slow to reconnect: on a quiet one a listener closed
// without notice is back on the other relay within a frame or two (26-46
// ms at 20 ms frames) and, one frame per group, misses nothing; the gap
// is logged.
func TestRunMovesBeforeBreak(t *testing.T) {
	rep, b := runShed(t, 5*time.Second)
	if rep.Connected != 20 || rep.ListenersLost != 0 || rep.SilentAtEnd != 0 {
		t.Fatalf("report %+v: want 20 connected, none lost or silent at the end", rep)
	}
	if got := rep.ReconnectsByReason[client.ReasonGoingAway]; got != 20 || rep.Reconnects != 20 {
		t.Fatalf("reconnects %d, by reason %v: want 20, all going-away", rep.Reconnects, rep.ReconnectsByReason)
	}
	if st := b.Stats(); st.SessionsTotal < 20 {
		t.Fatalf("edge B saw %d sessions, want the 20 listeners", st.SessionsTotal)
	}
	if rep.FramesLost != 0 || rep.GroupsMissing != 0 || rep.GroupsCut != 0 {
		t.Fatalf("%d frames lost (%d groups missing, %d cut) moving make-before-break, want none", rep.FramesLost, rep.GroupsMissing, rep.GroupsCut)
	}
	if n := sessionsClosed(rep); n != 0 {
		t.Fatalf("%d sessions closed under their listeners (%v) moving make-before-break, want none", n, rep.Errors)
	}
	t.Logf("make-before-break: longest gap %.0f ms, p99 %.0f ms (frames every 20 ms)", rep.GapMs.Max, rep.GapMs.P99)

	t.Run("without-notice", func(t *testing.T) {
		rep, _ := runShed(t, 0)
		if got := rep.ReconnectsByReason[client.ReasonGoingAway]; got != 20 {
			t.Fatalf("reconnects by reason %v: want 20 going-away", rep.ReconnectsByReason)
		}
		max := time.Duration(rep.GapMs.Max * float64(time.Millisecond))
		t.Logf("closed without notice: %d sessions closed under their listeners, %d frames lost, longest gap %v", sessionsClosed(rep), rep.FramesLost, max)
		if n := sessionsClosed(rep); n < 20 {
			t.Fatalf("closed without notice: %d sessions closed under their listeners (%v), want all 20: the test could not see a break", n, rep.Errors)
		}
	})
}

// sessionsClosed counts the load generator's errors: sessions that ended
// under their listeners (the relay's close without notice is one each).
func sessionsClosed(rep *loadgen.Report) int {
	n := 0
	for _, c := range rep.Errors {
		n += c
	}
	return n
}
