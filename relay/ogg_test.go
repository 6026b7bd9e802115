package relay_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/relay"
	"github.com/relayfleet/relayfleet/relay/client"
	"github.com/relayfleet/relayfleet/relay/internal/oggtest"
)

// oggOpusStream builds an Ogg Opus stream of n 120 ms packets (TOC 0xfb:
// CELT FB 20 ms frames, code 3; count byte 6) of varied sizes, some longer
// than 255 bytes and one spanning two pages, and returns it with the
// packets.
func oggOpusStream(n int) ([]byte, [][]byte) {
	w := &oggtest.Writer{Serial: 0x5eed}
	w.Page(0x02, 0, oggtest.OpusHead())
	w.Page(0, 0, []byte("OpusTags\x00\x00\x00\x00\x00\x00\x00\x00"))
	packets := make([][]byte, n)
	for i := range packets {
		p := make([]byte, 2+(i*97)%700)
		p[0], p[1] = 0xfb, 6
		for j := 2; j < len(p); j++ {
			p[j] = byte(i*31 + j)
		}
		packets[i] = p
	}
	// Two packets to a page, except that packet 3 is split across pages 3
	// and 4 at a 255 boundary when it is long enough.
	granule := uint64(312)
	for i := 0; i < n; i += 2 {
		var lacing, body []byte
		for _, p := range packets[i:min(i+2, n)] {
			lacing = append(lacing, oggtest.Lace(len(p))...)
			body = append(body, p...)
			granule += 5760
		}
		flags := byte(0)
		if i+2 >= n {
			flags = 0x04
		}
		if i == 2 && len(packets[3]) > 255 {
			// Page ends after the first 255 bytes of packet 3.
			cut := len(oggtest.Lace(len(packets[2]))) + 1
			bodyCut := len(packets[2]) + 255
			w.RawPage(0, granule-5760, lacing[:cut], body[:bodyCut])
			w.RawPage(0x01|flags, granule, lacing[cut:], body[bodyCut:])
			continue
		}
		w.RawPage(flags, granule, lacing, body)
	}
	return w.Buf.Bytes(), packets
}

// TestOggOpusThroughRelay publishes an Ogg Opus stream through the relay
// and checks the subscriber gets every packet, in order, one to a group.
func TestOggOpusThroughRelay(t *testing.T) {
	ctx := testContext(t)
	r := startRelay(t, relay.Config{})
	stream, packets := oggOpusStream(12) // under the relay's 16-group lag limit: unpaced
	if len(packets[3]) <= 255 {
		t.Fatal("packet 3 should span two pages")
	}
	tw := dial(t, ctx, relayURL(r, ""), nil).Publish("live/demo").Track("audio")
	sub := subscribeWhenAnnounced(t, ctx, dial(t, ctx, relayURL(r, ""), nil), "live/demo", "audio")
	if err := tw.WaitSubscribers(ctx, 1); err != nil {
		t.Fatal(err)
	}
	st, err := client.PublishOgg(ctx, tw, client.NewOggOpusReader(bytes.NewReader(stream)), false)
	if err != nil {
		t.Fatalf("PublishOgg: %v", err)
	}
	if st.Packets != len(packets) || st.Skipped != 0 || st.Duration != time.Duration(len(packets))*120*time.Millisecond {
		t.Fatalf("stats %+v", st)
	}
	if want := "published 12 Opus packets (1.4 s, 120 ms each)"; st.String() != want {
		t.Errorf("summary %q, want %q", st.String(), want)
	}
	// Each group is a stream of its own: they may arrive in any order.
	got := make(map[uint64][]byte)
	for len(got) < len(packets) {
		g, err := sub.NextGroup(ctx)
		if err != nil {
			t.Fatalf("after %d groups: %v", len(got), err)
		}
		p, err := g.ReadFrame()
		if err != nil {
			t.Fatalf("group %d: %v", g.Sequence, err)
		}
		if _, err := g.ReadFrame(); err != io.EOF {
			t.Fatalf("group %d: second frame: %v, want io.EOF", g.Sequence, err)
		}
		if _, dup := got[g.Sequence]; dup {
			t.Fatalf("group %d twice", g.Sequence)
		}
		got[g.Sequence] = p
	}
	for i, want := range packets {
		if p, ok := got[uint64(i)]; !ok || !bytes.Equal(p, want) {
			t.Fatalf("group %d: %d bytes (present %v), want packet %d (%d bytes)", i, len(p), ok, i, len(want))
		}
	}
}

// TestRunPublishOggPacesAndEndsCleanly runs the `relay publish --ogg FILE`
// path: packets go out at 120 ms intervals, a listener that joins once
// the broadcast is announced gets the rest of them, the last included,
// and the track then ends.
func TestRunPublishOggPacesAndEndsCleanly(t *testing.T) {
	ctx := testContext(t)
	r := startRelay(t, relay.Config{})
	const n = 10
	stream, packets := oggOpusStream(n)
	var out bytes.Buffer
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		done <- client.RunPublishOgg(ctx, relayURL(r, ""), &client.Options{Logger: quietLogger()},
			client.OggPublishOptions{Broadcast: "live/demo", Input: bytes.NewReader(stream), Pace: true}, &out)
	}()
	sub := subscribeWhenAnnounced(t, ctx, dial(t, ctx, relayURL(r, ""), nil), "live/demo", "audio")
	var got []uint64
	for {
		g, err := sub.NextGroup(ctx)
		if errors.Is(err, client.ErrTrackEnded) {
			break
		}
		if err != nil {
			t.Fatalf("after groups %v: %v", got, err)
		}
		p, err := g.ReadFrame()
		if err != nil || g.Sequence >= n || !bytes.Equal(p, packets[g.Sequence]) {
			t.Fatalf("group %d: frame of %d bytes, %v", g.Sequence, len(p), err)
		}
		got = append(got, g.Sequence)
	}
	if err := <-done; err != nil {
		t.Fatalf("RunPublishOgg: %v", err)
	}
	elapsed := time.Since(start)
	slices.Sort(got)
	if len(got) == 0 || got[len(got)-1] != n-1 {
		t.Fatalf("groups %v: want a run ending with the last, %d", got, n-1)
	}
	for i := 1; i < len(got); i++ {
		if got[i] != got[i-1]+1 {
			t.Fatalf("groups %v: not contiguous", got)
		}
	}
	if min := (n - 1) * 120 * time.Millisecond; elapsed < min {
		t.Errorf("published %d packets in %v: not paced (want at least %v)", n, elapsed, min)
	}
	line := strings.TrimSpace(out.String())
	want := fmt.Sprintf("published %d Opus packets (1.2 s, 120 ms each)", n)
	if !strings.HasPrefix(line, want) || strings.Contains(line, "\n") {
		t.Errorf("summary %q, want %q (and perhaps the count with no subscribers)", line, want)
	}
	t.Logf("listener got groups %d to %d; %s; %v", got[0], got[len(got)-1], line, elapsed)
}

// TestRunPublishOggToTwoOrigins: `relay publish --ogg FILE URL1 URL2`
// sends each packet, as the same group sequence, to both relays, and ends
// the broadcast on both.
func TestRunPublishOggToTwoOrigins(t *testing.T) {
	ctx := testContext(t)
	a, b := startRelay(t, relay.Config{}), startRelay(t, relay.Config{})
	const n = 10
	stream, packets := oggOpusStream(n)
	done := make(chan error, 1)
	go func() {
		done <- client.RunPublishOgg(ctx, relayURL(a, ""), &client.Options{Logger: quietLogger()},
			client.OggPublishOptions{Broadcast: "live/demo", Input: bytes.NewReader(stream), Pace: true, Origins: []string{relayURL(b, "")}}, io.Discard)
	}()
	subs := []*client.Subscription{
		subscribeWhenAnnounced(t, ctx, dial(t, ctx, relayURL(a, ""), nil), "live/demo", "audio"),
		subscribeWhenAnnounced(t, ctx, dial(t, ctx, relayURL(b, ""), nil), "live/demo", "audio"),
	}
	for i, sub := range subs {
		var last uint64
		for {
			g, err := sub.NextGroup(ctx)
			if errors.Is(err, client.ErrTrackEnded) {
				break
			}
			if err != nil {
				t.Fatalf("origin %d: %v", i, err)
			}
			p, err := g.ReadFrame()
			if err != nil || g.Sequence >= n || !bytes.Equal(p, packets[g.Sequence]) {
				t.Fatalf("origin %d: group %d: frame of %d bytes, %v", i, g.Sequence, len(p), err)
			}
			last = g.Sequence
		}
		if last != n-1 {
			t.Errorf("origin %d: last group %d, want %d", i, last, n-1)
		}
	}
	if err := <-done; err != nil {
		t.Fatalf("RunPublishOgg: %v", err)
	}
}
