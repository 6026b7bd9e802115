package relay_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/relay"
	"github.com/relayfleet/relayfleet/relay/client"
)

// groupLog records, per group sequence, the frames a subscription got.
type groupLog struct {
	mu     sync.Mutex
	groups map[uint64][]byte
}

func logGroups(t *testing.T, ctx context.Context, url string) *groupLog {
	t.Helper()
	s := dial(t, ctx, url, nil)
	sub := subscribeWhenAnnounced(t, ctx, s, "live", "audio")
	l := &groupLog{groups: map[uint64][]byte{}}
	go func() {
		for {
			g, err := sub.NextGroup(ctx)
			if err != nil {
				return
			}
			var b []byte
			for {
				f, err := g.ReadFrame()
				if err != nil {
					if err != io.EOF {
						b = nil
					}
					break
				}
				b = append(b, f...)
			}
			if b != nil {
				l.mu.Lock()
				l.groups[g.Sequence] = b
				l.mu.Unlock()
			}
		}
	}()
	return l
}

func (l *groupLog) snapshot() map[uint64][]byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := make(map[uint64][]byte, len(l.groups))
	for k, v := range l.groups {
		m[k] = v
	}
	return m
}

func (l *groupLog) newest() uint64 {
	var n uint64
	for k := range l.snapshot() {
		n = max(n, k)
	}
	return n
}

// sameGroups checks that the groups both logs got carry the same frames,
// and that they share at least want of them.
func sameGroups(t *testing.T, a, b map[uint64][]byte, want int) {
	t.Helper()
	shared := 0
	for seq, fa := range a {
		fb, ok := b[seq]
		if !ok {
			continue
		}
		shared++
		if !bytes.Equal(fa, fb) {
			t.Errorf("group %d differs between the origins", seq)
		}
	}
	if shared < want {
		t.Errorf("%d groups with the same sequence on both origins; want at least %d", shared, want)
	}
}

// TestPublishOriginsSameGroupsToEach: client.PublishOrigins publishes to
// two origins at once: each gets the same group sequences with the same
// frames; when one dies (kill -9) publishing goes on to the other, and
// once it is back on its port the publisher reconnects to it and it gets
// the same groups again.
func TestPublishOriginsSameGroupsToEach(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	secret := make([]byte, relay.MinResetSecret)
	for i := range secret {
		secret[i] = byte(i*5 + 3)
	}
	a, err := relay.Start(ctx, relay.Config{Listen: "127.0.0.1:0", Logger: quietLogger(), ResetSecret: secret})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b := startRelay(t, relay.Config{})
	p, err := client.PublishOrigins(ctx, []string{relayURL(a, ""), relayURL(b, "")}, &client.Options{Logger: quietLogger()}, "live", "audio", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if p.Connected() != 2 {
		t.Fatalf("%d origins connected; want 2", p.Connected())
	}
	go func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for seq := uint64(0); ; seq++ {
			_ = p.WriteGroup(ctx, seq, [][]byte{client.Pattern(seq, 0, 64), []byte(fmt.Sprintf("frame two of %d", seq))})
			select {
			case <-tick.C:
			case <-ctx.Done():
				return
			}
		}
	}()
	la, lb := logGroups(t, ctx, relayURL(a, "")), logGroups(t, ctx, relayURL(b, ""))
	testutil.WaitFor(t, 15*time.Second, "groups on both origins", func() bool {
		return len(la.snapshot()) >= 20 && len(lb.snapshot()) >= 20
	})
	sameGroups(t, la.snapshot(), lb.snapshot(), 15)

	addr := a.Addr().String()
	a.Crash()
	a.Close()
	testutil.WaitFor(t, 15*time.Second, "the publisher to notice the dead origin (its 5 s idle timeout)", func() bool { return p.Connected() == 1 })
	before := lb.newest()
	testutil.WaitFor(t, 5*time.Second, "groups on the other origin", func() bool { return lb.newest() >= before+10 })

	again, err := relay.Start(ctx, relay.Config{Listen: addr, Logger: quietLogger(), ResetSecret: secret})
	if err != nil {
		t.Fatalf("start the origin again on %s: %v", addr, err)
	}
	defer again.Close()
	testutil.WaitFor(t, 10*time.Second, "the publisher back on the restarted origin", func() bool { return p.Connected() == 2 })
	la2 := logGroups(t, ctx, relayURL(again, ""))
	testutil.WaitFor(t, 10*time.Second, "groups on the restarted origin", func() bool { return len(la2.snapshot()) >= 20 })
	got := la2.snapshot()
	for seq := range got {
		if seq <= before {
			t.Errorf("the restarted origin got group %d, sent before it died (newest then %d): the sequence must go on", seq, before)
			break
		}
	}
	sameGroups(t, got, lb.snapshot(), 15)
}
