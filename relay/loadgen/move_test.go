package loadgen_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/relay"
	"github.com/relayfleet/relayfleet/relay/client"
	"github.com/relayfleet/relayfleet/relay/loadgen"
)

// moveBound is the gap (frames are published every 20 ms) that a shed
// without notice must exceed, or lose frames, for the test to see the
// break: a listener that reconnects only on the close waits for the
// router, a dial, a subscribe and the first group, and loses what was
// published meanwhile.
const moveBound = 500 * time.Millisecond

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
		Reconnect: true, Silence: 5 * time.Second, IdleTimeout: idleTimeout, Logger: quietLogger(),
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
// the frames between. The longest gap is asserted only where it tells
// the two apart (without the notice); with it, the gap is the machine's
// scheduling delay, which is logged.
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
	t.Logf("make-before-break: longest gap %.0f ms, p99 %.0f ms (frames every 20 ms)", rep.GapMs.Max, rep.GapMs.P99)

	t.Run("without-notice", func(t *testing.T) {
		rep, _ := runShed(t, 0)
		if got := rep.ReconnectsByReason[client.ReasonGoingAway]; got != 20 {
			t.Fatalf("reconnects by reason %v: want 20 going-away", rep.ReconnectsByReason)
		}
		if max := time.Duration(rep.GapMs.Max * float64(time.Millisecond)); rep.FramesLost == 0 && max <= moveBound {
			t.Fatalf("closed without notice: no frame lost and longest gap %v: the test could not see a break", max)
		}
	})
}
