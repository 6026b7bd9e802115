package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/relay/client"
)

// TestUpstreamLinkDialsBesideAStuckDial: the link's first dial went to an
// upstream that was not listening yet and hangs (as a QUIC dial does until
// its handshake timeout); the upstream is up now. A caller gets a session
// from a second dial started beside the stuck one, and the caller that
// started the stuck dial gets it too, while that dial still hangs. Before,
// both waited for the stuck dial and got its error: a pulled track's first
// listener heard nothing for up to 3 s (TestE2ELocalCloud's silent
// reconnect).
func TestUpstreamLinkDialsBesideAStuckDial(t *testing.T) {
	defer func(d time.Duration) { linkHedgeAfter = d }(linkHedgeAfter)
	linkHedgeAfter = 20 * time.Millisecond

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	origin, err := Start(ctx, Config{Listen: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer origin.Close()
	originURL := fmt.Sprintf("http://%s/", origin.Addr())

	stuck := make(chan struct{})  // closed once the first dial hangs
	var stuckReturned atomic.Bool // the first dial gave up
	var dials atomic.Int32
	l := &upstreamLink{urls: []string{originURL}, logger: slog.New(slog.DiscardHandler)}
	l.dialFn = func(ctx context.Context, u string) (*client.Session, error) {
		if dials.Add(1) == 1 {
			close(stuck)
			<-ctx.Done() // upstreamDialWait, or the link's close
			stuckReturned.Store(true)
			return nil, ctx.Err()
		}
		return client.Dial(ctx, u, &client.Options{Logger: l.logger})
	}
	defer l.close()

	first := make(chan error, 1)
	var firstSess atomic.Pointer[client.Session]
	go func() {
		s, err := l.session(ctx)
		firstSess.Store(s)
		first <- err
	}()
	<-stuck
	s, err := l.session(ctx)
	if err != nil {
		t.Fatalf("second caller: %v (want a session from a dial beside the stuck one)", err)
	}
	if stuckReturned.Load() {
		t.Fatal("the second caller got its session only after the stuck dial gave up")
	}
	select {
	case err := <-first:
		if err != nil || firstSess.Load() != s {
			t.Fatalf("first caller: session %p, %v; want the link's session %p", firstSess.Load(), err, s)
		}
	case <-ctx.Done():
		t.Fatal("the first caller still waits on the stuck dial")
	}
	if stuckReturned.Load() {
		t.Fatal("the first caller got the session only after its dial gave up")
	}
	// The stuck one and at least one beside it; each caller starts at
	// most maxCallDials (the dials beside it may be slow too: the hedge
	// here is 20 ms).
	if n := dials.Load(); n < 2 || n > 2*maxCallDials {
		t.Errorf("%d dials, want 2 to %d (the stuck one, and at most %d per caller)", n, 2*maxCallDials, maxCallDials)
	}
	// A third caller shares the live session; no dial.
	if s3, err := l.session(ctx); err != nil || s3 != s {
		t.Errorf("third caller: %p, %v; want the live session %p", s3, err, s)
	}
	// The stuck dial ends with the link; it does not replace the session.
	l.close()
	if _, err := l.session(ctx); !errors.Is(err, errLinkClosed) {
		t.Errorf("after close: %v, want errLinkClosed", err)
	}
}
