package relay_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"github.com/relayfleet/relayfleet/internal/testutil"
	"runtime"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/relayfleet/relayfleet/relay"
	"github.com/relayfleet/relayfleet/relay/client"
)

// TestBadClientsAreClosed sends malformed openings over raw QUIC and checks
// the relay closes those sessions and keeps serving.
func TestBadClientsAreClosed(t *testing.T) {
	ctx := testContext(t)
	r := startRelay(t, relay.Config{})
	tests := map[string][]byte{
		"unknown stream type": {0x3f},
		"setup too short":     {0x20, 0x00, 0x05, 0x01},
		"no moq-lite-02":      {0x20, 0x00, 0x06, 0x01, 0x80, 0x00, 0xff, 0x0e, 0x00},
		"bad setup body":      {0x20, 0x00, 0x02, 0x05, 0x05},
	}
	for name, opening := range tests {
		t.Run(name, func(t *testing.T) {
			conn, err := quic.DialAddr(ctx, r.Addr().String(), &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"moql"}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.CloseWithError(0, "")
			st, err := conn.OpenStreamSync(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := st.Write(opening); err != nil {
				t.Fatal(err)
			}
			if name == "setup too short" {
				st.Close() // FIN before the promised length
			}
			select {
			case <-conn.Context().Done():
				var appErr *quic.ApplicationError
				if !errors.As(context.Cause(conn.Context()), &appErr) || appErr.ErrorCode == 0 {
					t.Fatalf("closed with %v, want an application error code", context.Cause(conn.Context()))
				}
			case <-time.After(10 * time.Second):
				t.Fatal("relay kept a malformed session open")
			}
		})
	}
	// An unknown ALPN is refused at the handshake.
	if c, err := quic.DialAddr(ctx, r.Addr().String(), &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"nope"}}, nil); err == nil {
		c.CloseWithError(0, "")
		t.Fatal("handshake with an unknown ALPN succeeded")
	}
	s := dial(t, ctx, relayURL(r, ""), nil)
	if _, err := s.Announced(ctx, ""); err != nil {
		t.Fatalf("relay unusable after bad clients: %v", err)
	}
	testutil.WaitFor(t, 10*time.Second, "bad sessions to be gone", func() bool { return r.Stats().Sessions == 1 })
}

// TestSubscribeChurn subscribes and unsubscribes repeatedly while a
// publisher sends, and checks nothing accumulates.
func TestSubscribeChurn(t *testing.T) {
	ctx := testContext(t)
	r := startRelay(t, relay.Config{})
	pub := dial(t, ctx, relayURL(r, ""), nil)
	tw := pub.Publish("churn").Track("audio")
	stop := make(chan struct{})
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		for g := uint64(0); ; g++ {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			_ = tw.WriteGroup(ctx, g, [][]byte{client.Pattern(g, 0, 50)})
		}
	}()
	sub := dial(t, ctx, relayURL(r, ""), nil)
	ann, err := sub.Announced(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := ann.WaitFor(ctx, "churn"); err != nil {
		t.Fatal(err)
	}
	ann.Close()
	base := -1
	for i := 0; i < 15; i++ {
		s, err := sub.Subscribe(ctx, "churn", "audio")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := collect(ctx, s, 2, 50); err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
		s.Close()
		testutil.WaitFor(t, 10*time.Second, "upstream to be dropped", func() bool {
			st := r.Stats()
			return st.Subscribers == 0 && st.Tracks == 0 && tw.Subscribers() == 0
		})
		if i == 4 {
			base = runtime.NumGoroutine()
		}
	}
	close(stop)
	<-sent
	// Goroutines must not grow with the number of cycles.
	testutil.WaitFor(t, 10*time.Second, fmt.Sprintf("goroutines back to about %d", base), func() bool { return runtime.NumGoroutine() <= base+5 })
}
