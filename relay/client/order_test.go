package client_test

import (
	"context"
	"crypto/tls"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/relayfleet/relayfleet/relay"
	"github.com/relayfleet/relayfleet/relay/client"
	"github.com/relayfleet/relayfleet/relay/moqlite"
	"github.com/relayfleet/relayfleet/relay/transport"
)

// TestGroupsDeliveredInStreamOrder: a relay opens group 13's stream and
// then group 14's, but 14's bytes arrive first (13's header is held back
// until the test releases it). The subscription hands out 13 before 14,
// in the order the relay opened them: 14 waits behind 13's header. (The
// session used to read each stream's header in its own goroutine, and
// delivered whichever came first: 14, then 13. A listener's first groups
// after a make-before-break move come in such a burst.)
func TestGroupsDeliveredInStreamOrder(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cert, err := relay.SelfSignedCertificate()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := quic.ListenAddr("127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{moqlite.ALPN}},
		&quic.Config{EnableDatagrams: true, MaxIdleTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	release := make(chan struct{})
	served := make(chan error, 1)
	go func() { served <- serveTwoGroups(ctx, ln, release) }()

	conn, err := quic.DialAddr(ctx, ln.Addr().String(), &tls.Config{InsecureSkipVerify: true, NextProtos: []string{moqlite.ALPN}}, client.QUICConfig(0))
	if err != nil {
		t.Fatal(err)
	}
	s, err := client.NewSession(ctx, transport.NewQUIC(conn), "", quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sub, err := s.Subscribe(ctx, "b", "t")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	// Group 14 has come; 13's stream is open but has brought nothing.
	g, err := sub.NextGroupWithin(ctx, 2*time.Second)
	if err == nil {
		g.Close()
		t.Fatalf("group %d handed out while group 13, opened before it, had not started: want group 14 held back", g.Sequence)
	}
	if !errors.Is(err, client.ErrSilent) {
		t.Fatalf("first group: %v, want nothing yet (ErrSilent)", err)
	}
	close(release)
	for _, want := range []uint64{13, 14} {
		g, err := sub.NextGroupWithin(ctx, 10*time.Second)
		if err != nil {
			t.Fatalf("group %d: %v", want, err)
		}
		p, err := g.ReadFrame()
		g.Close()
		if g.Sequence != want || err != nil || string(p) != "frame" {
			t.Fatalf("got group %d (frame %q, %v), want group %d", g.Sequence, p, err, want)
		}
	}
	if err := <-served; err != nil {
		t.Fatal(err)
	}
}

// serveTwoGroups is a moq-lite relay for one session: it answers SETUP
// and one SUBSCRIBE, then opens a stream for group 13 and one for group
// 14, writes all of 14 and, once release is closed, all of 13.
func serveTwoGroups(ctx context.Context, ln *quic.Listener, release <-chan struct{}) error {
	conn, err := ln.Accept(ctx)
	if err != nil {
		return err
	}
	setup, err := conn.AcceptStream(ctx)
	if err != nil {
		return err
	}
	if typ, err := moqlite.ReadVarint(setup); err != nil || typ != moqlite.StreamClientSetup {
		return errors.Join(errors.New("client setup"), err)
	}
	if _, err := moqlite.ReadSetupBody(setup); err != nil {
		return err
	}
	b, err := moqlite.AppendSetup(nil, moqlite.StreamServerSetup, &moqlite.ServerSetup{Version: moqlite.Version02})
	if err != nil {
		return err
	}
	if _, err := setup.Write(b); err != nil {
		return err
	}
	st, err := conn.AcceptStream(ctx)
	if err != nil {
		return err
	}
	var sub moqlite.Subscribe
	if typ, err := moqlite.ReadVarint(st); err != nil || typ != moqlite.StreamSubscribe {
		return errors.Join(errors.New("subscribe"), err)
	}
	if err := moqlite.ReadMessage(st, &sub); err != nil {
		return err
	}
	if _, err := st.Write(moqlite.AppendMessage(nil, &moqlite.SubscribeOk{})); err != nil {
		return err
	}
	var groups [2]*quic.SendStream
	for i := range groups {
		if groups[i], err = conn.OpenUniStream(); err != nil {
			return err
		}
	}
	write := func(st *quic.SendStream, seq uint64) error {
		b := moqlite.AppendGroupStart(nil, moqlite.GroupHeader{Subscribe: sub.ID, Sequence: seq})
		if _, err := st.Write(moqlite.AppendFrame(b, []byte("frame"))); err != nil {
			return err
		}
		// The client may have read the frame and stopped the stream
		// (STOP_SENDING) before this Close: it got everything.
		if err := st.Close(); err != nil && !strings.Contains(err.Error(), "close called for canceled stream") {
			return err
		}
		return nil
	}
	if err := write(groups[1], 14); err != nil {
		return err
	}
	select {
	case <-release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return write(groups[0], 13) // the connection lives on until the test ends
}
