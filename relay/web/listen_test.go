package web_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/relay"
	"github.com/relayfleet/relayfleet/relay/client"
)

// pageStats is window.listenStats (relay/web/src/listen.js).
type pageStats struct {
	State, Transport, Fallback, LastReason, LastDecoderError, Audio string

	Connects, Reconnects, Groups, Frames, Decoded, DecoderErrors int
	Gaps, MissedGroups, Late, Underruns, HeldBack                int

	FrameMs, LongestGapMs, ScheduledSeconds, PlayedSeconds float64
	LatencyMs, MaxLatencyMs                                float64
}

func (s pageStats) String() string {
	return fmt.Sprintf("transport %s (fallback: %q), state %q, connects %d, reconnects %d (last: %q), groups %d (missed %d), frames %d, decoded %d, late %d, held back %d, "+
		"decoder errors %d %q, gaps %d (longest %.0f ms), underruns %d, played %.2f s of %.2f s scheduled (audio %s), latency %.0f ms (max %.0f ms)",
		s.Transport, s.Fallback, s.State, s.Connects, s.Reconnects, s.LastReason, s.Groups, s.MissedGroups, s.Frames, s.Decoded, s.Late, s.HeldBack,
		s.DecoderErrors, s.LastDecoderError, s.Gaps, s.LongestGapMs, s.Underruns, s.PlayedSeconds, s.ScheduledSeconds,
		s.Audio, s.LatencyMs, s.MaxLatencyMs)
}

func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("RELAYFLEET_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	testutil.Skipf(t, "no chromium on PATH (apt-get install chromium, or set RELAYFLEET_CHROMIUM)")
	return ""
}

// encodeOpus makes an Ogg Opus file of a sine tone the way scripts/demo
// streams one: libopus, 48 kHz mono, 120 ms frames, voip.
func encodeOpus(t *testing.T, seconds int) []byte {
	t.Helper()
	testutil.Require(t, "ffmpeg", "ffmpeg")
	out := filepath.Join(t.TempDir(), "tone.ogg")
	cmd := exec.Command("ffmpeg", "-hide_banner", "-loglevel", "error", "-nostdin",
		"-f", "lavfi", "-i", fmt.Sprintf("sine=frequency=440:sample_rate=48000:duration=%d", seconds),
		"-c:a", "libopus", "-ar", "48000", "-ac", "1", "-b:a", "32k",
		"-frame_duration", "120", "-application", "voip", "-page_duration", "120000", "-f", "ogg", out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ffmpeg: %v\n%s", err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// packets reads the Opus packets of an Ogg Opus file.
func packets(t *testing.T, ogg []byte) (ps [][]byte, total time.Duration) {
	t.Helper()
	r := client.NewOggOpusReader(bytes.NewReader(ogg))
	for {
		p, _, err := r.Next()
		if err == io.EOF {
			return ps, total
		}
		if err != nil {
			t.Fatal(err)
		}
		d, err := client.PacketDuration(p)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
		total += d
	}
}

// browser is one headless Chromium page with its console collected.
type browser struct {
	ctx     context.Context
	console testutil.SyncBuffer
}

func newBrowser(t *testing.T, ctx context.Context, autoplay bool, extra ...chromedp.ExecAllocatorOption) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium(t)),
		chromedp.WindowSize(760, 600),
	)
	opts = append(opts, extra...)
	if autoplay {
		opts = append(opts, chromedp.Flag("autoplay-policy", "no-user-gesture-required"))
	} else {
		opts = append(opts, chromedp.Flag("autoplay-policy", "document-user-activation-required"))
	}
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium refuses to run as root with its sandbox
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	bctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	b := &browser{ctx: bctx}
	err := chromedp.Listen(bctx, func(ev any) {
		switch e := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			fmt.Fprintf(&b.console, "console.%s:", e.Type)
			for _, a := range e.Args {
				fmt.Fprintf(&b.console, " %s%s", a.Value, a.Description)
			}
			b.console.Write([]byte("\n"))
		case *runtime.EventExceptionThrown:
			fmt.Fprintf(&b.console, "exception: %s %s\n", e.ExceptionDetails.Text, exceptionDescription(e.ExceptionDetails))
		}
	})
	if err != nil { // Listen starts the browser
		t.Fatalf("start chromium: %v", err)
	}
	return b
}

func (b *browser) stats(t *testing.T) pageStats {
	t.Helper()
	var st pageStats
	js, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`JSON.stringify(window.listenStats || {})`))
	if err == nil {
		err = json.Unmarshal([]byte(js), &st)
	}
	if err != nil {
		t.Fatalf("read window.listenStats: %v\nconsole:\n%s", err, b.console.String())
	}
	return st
}

// waitStats polls the page's counters until cond holds.
func (b *browser) waitStats(t *testing.T, ctx context.Context, what string, cond func(pageStats) bool) pageStats {
	t.Helper()
	for {
		st := b.stats(t)
		if cond(st) {
			return st
		}
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s: %s\nconsole:\n%s", what, st, b.console.String())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// open opens page and waits, within ctx, until it subscribes to pub's
// track.
func (b *browser) open(t *testing.T, ctx context.Context, pub *publisher, page string) {
	t.Helper()
	if err := chromedp.Do(b.ctx, chromedp.Navigate(page)); err != nil {
		t.Fatalf("open %s: %v", page, err)
	}
	b.waitSubscribed(t, ctx, pub, "subscribed")
}

// waitSubscribed waits until the page subscribes to pub's track; what
// says how in the error ("subscribed again").
func (b *browser) waitSubscribed(t *testing.T, ctx context.Context, pub *publisher, what string) {
	t.Helper()
	if err := pub.tw.WaitSubscribers(ctx, 1); err != nil {
		t.Fatalf("the page never %s: %v: %s\nconsole:\n%s", what, err, b.stats(t), b.console.String())
	}
}

// publisher publishes one broadcast's audio track into the relay.
type publisher struct {
	s  *client.Session
	b  *client.Broadcast
	tw *client.TrackWriter
}

func newPublisher(t *testing.T, ctx context.Context, url, name, token string) *publisher {
	t.Helper()
	u, err := client.WithToken(url, token)
	if err != nil {
		t.Fatal(err)
	}
	s, err := client.Dial(ctx, u, &client.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("publisher: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	b := s.Publish(name)
	return &publisher{s: s, b: b, tw: b.Track("audio")}
}

// paced publishes ps[:n] on pub, a group every 120 ms as a live
// publisher, and then sends the outcome; a group sent while nobody
// subscribes is no error.
func (p *publisher) paced(ctx context.Context, ps [][]byte, n int) <-chan error {
	done := make(chan error, 1)
	go func() {
		for seq := 0; seq < n; seq++ {
			if err := p.tw.WriteGroup(ctx, uint64(seq), [][]byte{ps[seq]}); err != nil && !errors.Is(err, client.ErrNoSubscribers) {
				done <- fmt.Errorf("publish group %d: %w", seq, err)
				return
			}
			time.Sleep(120 * time.Millisecond)
		}
		done <- nil
	}()
	return done
}

type setup struct {
	relay   *relay.Relay
	auth    *relay.Authenticator
	relayLg *testutil.SyncBuffer
	ogg     []byte
}

func startRelay(t *testing.T, ctx context.Context) *setup {
	t.Helper()
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	auth, err := relay.NewAuthenticator(key)
	if err != nil {
		t.Fatal(err)
	}
	lg := &testutil.SyncBuffer{}
	r, err := relay.Start(ctx, relay.Config{
		Listen: "127.0.0.1:0",
		Auth:   auth.WithPublicListen([]string{"live"}),
		Logger: slog.New(slog.NewTextHandler(lg, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return &setup{relay: r, auth: auth, relayLg: lg}
}

func (s *setup) token(t *testing.T, publish, subscribe string) string {
	t.Helper()
	tok, err := s.auth.NewToken(publish, subscribe, publish != "", subscribe != "", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestListenPage plays 30 s of ffmpeg-encoded Opus published into a relay
// in headless Chromium, once over WebTransport (a public listen prefix: no
// token) and once over WebSocket (a private prefix: the token in #jwt=),
// and reads the page's counters back: every packet received and decoded,
// 30 s played, no decoder error, no gap, no underrun, no reconnect. A third
// run pauses the publisher for 2.5 s and checks the counters see it: a gap,
// an underrun, a reconnect for silence, and the audio after it played;
// a fourth sends a packet that is not Opus and skips a group: a decoder
// error and a missed group counted, and the audio after them played; a
// fifth restarts the relay under the page, which comes back by itself;
// one more opens it in a browser that holds audio back until a click;
// two more shed the page's session with going-away (POST /shed, helper
// RELAY's; they skip on a relay without it), and the page comes back and
// plays on.
func TestListenPage(t *testing.T) {
	testutil.Short(t, "make test-listen (30 s in headless Chromium)")
	seconds := 30
	ogg := encodeOpus(t, seconds)
	ps, total := packets(t, ogg)
	if total < time.Duration(seconds)*time.Second-200*time.Millisecond {
		t.Fatalf("ffmpeg made %d packets, %v, want %d s", len(ps), total, seconds)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	env := startRelay(t, ctx)
	env.ogg = ogg
	base := fmt.Sprintf("http://%s", env.relay.Addr())
	br := newBrowser(t, ctx, true)

	t.Run("webtransport", func(t *testing.T) {
		st := env.play(t, ctx, br, base, "live/room-wt", "webtransport", "", len(ps), total)
		if st.Transport != "WebTransport" {
			t.Errorf("transport %q, want WebTransport", st.Transport)
		}
		shot(t, br)
	})
	t.Run("websocket-token", func(t *testing.T) {
		tok := env.token(t, "", "private")
		st := env.play(t, ctx, br, base, "private/room-ws", "websocket", tok, len(ps), total)
		if st.Transport != "WebSocket" {
			t.Errorf("transport %q, want WebSocket", st.Transport)
		}
		text, err := chromedp.Run(br.ctx, chromedp.Evaluate[string](`document.body.innerText`))
		if err != nil {
			t.Fatal(err)
		}
		for where, s := range map[string]string{"the page": text, "the browser console": br.console.String(), "the relay log": env.relayLg.String()} {
			if strings.Contains(s, tok) {
				t.Errorf("the token shows in %s", where)
			}
		}
	})
	t.Run("silence", func(t *testing.T) {
		env.silence(t, ctx, br, base, ps)
	})
	t.Run("corrupt-packet", func(t *testing.T) {
		env.corrupt(t, ctx, br, base, ps)
	})
	t.Run("relay-restart", func(t *testing.T) {
		relayRestart(t, ctx, br, ps)
	})
	t.Run("autoplay-blocked", func(t *testing.T) {
		env.autoplayBlocked(t, ctx, base, ps)
	})
	t.Run("going-away-websocket", func(t *testing.T) {
		env.goingAway(t, ctx, br, base, ps, "websocket")
	})
	t.Run("going-away-webtransport", func(t *testing.T) {
		env.goingAway(t, ctx, br, base, ps, "webtransport")
	})
}

// goingAway has the relay shed the page's session (POST /shed?n=1: the
// listener goes first) while audio flows: the page reconnects (within its first backoff wait, under 500 ms) and
// plays on, and over WebSocket it reads the close as going-away.
func (s *setup) goingAway(t *testing.T, ctx context.Context, br *browser, base string, ps [][]byte, transport string) {
	name := "live/room-away-" + transport
	pub := newPublisher(t, ctx, base+"/", name, s.token(t, name, ""))
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	br.open(t, wctx, pub, base+"/listen?broadcast="+name+"&transport="+transport)
	done := pub.paced(wctx, ps, 60)
	before := br.waitStats(t, wctx, "audio before the shed", func(p pageStats) bool { return p.Frames >= 10 })
	resp, err := http.Post(base+"/shed?n=1", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		<-done
		testutil.Skipf(t, "this relay has no POST /shed (helper RELAY's going-away): %s", body)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /shed?n=1: %s %s", resp.Status, body)
	}
	t.Logf("shed: %s", bytes.TrimSpace(body))
	after := br.waitStats(t, wctx, "audio after the shed", func(p pageStats) bool { return p.Reconnects > 0 && p.Frames >= before.Frames+10 })
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	t.Logf("%s", after)
	if after.DecoderErrors != 0 {
		t.Errorf("page: %d decoder errors after the shed; want none", after.DecoderErrors)
	}
	// Over WebSocket the close status is 1001. Over WebTransport
	// Chromium 156 reports close code 0 for the relay's going-away
	// (webtransport-go v0.13.0 resets the session's streams, and the
	// CONNECT stream ends without the close capsule reaching the page), so
	// the page can only tell it was closed; it reconnects all the same.
	if transport == "websocket" && after.LastReason != "going-away" {
		t.Errorf("page: reconnected for %q; want going-away", after.LastReason)
	}
}

// relayRestart plays 3 s through a relay, stops it and starts another on
// the same port (with a new certificate), and plays 3 s more through that one from a new publisher session, the group
// sequence going on: the page reconnects by itself and misses nothing that
// was sent while it was connected.
func relayRestart(t *testing.T, ctx context.Context, br *browser, ps [][]byte) {
	const half = 25
	name := "room-restart"
	var restartLog testutil.SyncBuffer
	defer func() {
		if t.Failed() {
			t.Logf("relay logs:\n%s", restartLog.String())
		}
	}()
	start := func(addr string) *relay.Relay {
		t.Helper()
		var r *relay.Relay
		var err error
		deadline := time.Now().Add(10 * time.Second)
		for {
			r, err = relay.Start(ctx, relay.Config{Listen: addr, Logger: slog.New(slog.NewTextHandler(&restartLog, &slog.HandlerOptions{Level: slog.LevelDebug}))})
			if err == nil || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond) // the port is still held by the old one
		}
		if err != nil {
			t.Fatalf("start relay on %s: %v", addr, err)
		}
		t.Cleanup(func() { r.Close() })
		return r
	}
	r1 := start("127.0.0.1:0")
	addr := r1.Addr().String()
	base := "http://" + addr
	hash1 := r1.CertificateHash()
	send := func(pub *publisher, from, to int) {
		for seq := from; seq < to; seq++ {
			if err := pub.tw.WriteGroup(ctx, uint64(seq), [][]byte{ps[seq]}); err != nil {
				t.Fatalf("publish group %d: %v", seq, err)
			}
			time.Sleep(120 * time.Millisecond) // a group every 120 ms, as a live publisher
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	pub1 := newPublisher(t, ctx, base+"/", name, "")
	br.open(t, wctx, pub1, base+"/listen?broadcast="+name)
	send(pub1, 0, half)
	br.waitStats(t, wctx, "the first half to arrive", func(p pageStats) bool { return p.Frames >= half })
	pub1.s.Close()
	r1.Close()
	r2 := start(addr)
	if r2.CertificateHash() == hash1 {
		t.Fatalf("the new relay serves the old certificate %s", hash1)
	}
	pub2 := newPublisher(t, ctx, base+"/", name, "")
	br.waitSubscribed(t, wctx, pub2, "came back")
	send(pub2, half, 2*half)
	got := br.waitStats(t, wctx, "the second half to play", func(p pageStats) bool {
		return p.Frames >= 2*half && p.PlayedSeconds >= p.ScheduledSeconds-0.001
	})
	t.Logf("%s", got)
	// The page's first reconnect comes while the old relay is still
	// closing (Close takes about 1 s here, and /certificate.sha256 still
	// answers, with the old hash): that WebTransport handshake hangs until
	// the page's 5 s limit, and the page comes back over WebSocket, to the
	// new relay by then. A page opened afresh gets WebTransport at once.
	if got.Reconnects < 1 || got.Connects < 2 || got.Transport == "" {
		t.Errorf("page: %d connects, %d reconnects; want it back after the restart", got.Connects, got.Reconnects)
	}
	if got.Groups != 2*half || got.Decoded != 2*half || got.MissedGroups != 0 || got.DecoderErrors != 0 {
		t.Errorf("page: %d groups (%d missed), %d decoded, %d decoder errors; want %d, none missed, no error",
			got.Groups, got.MissedGroups, got.Decoded, got.DecoderErrors, 2*half)
	}
}

// corrupt sends 10 packets, a packet that is not Opus, skips a group,
// then 10 packets more: the page counts a decoder error and a missed
// group, and plays on with a new decoder.
func (s *setup) corrupt(t *testing.T, ctx context.Context, br *browser, base string, ps [][]byte) {
	name := "live/room-corrupt"
	pub := newPublisher(t, ctx, base+"/", name, s.token(t, name, ""))
	page := fmt.Sprintf("%s/listen?broadcast=%s", base, name)
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	br.open(t, wctx, pub, page)
	// Code 3 (a frame count byte must follow) with nothing after it.
	bad := []byte{ps[0][0] | 3}
	for seq := 0; seq < 22; seq++ {
		p := ps[seq]
		switch seq {
		case 10:
			p = bad
		case 11:
			continue
		}
		if err := pub.tw.WriteGroup(ctx, uint64(seq), [][]byte{p}); err != nil {
			t.Fatalf("publish group %d: %v", seq, err)
		}
		time.Sleep(120 * time.Millisecond) // a group every 120 ms, as a live publisher
	}
	got := br.waitStats(t, wctx, "the packets after the bad one to play", func(p pageStats) bool {
		return p.Frames >= 21 && p.PlayedSeconds >= p.ScheduledSeconds-0.001 && p.Decoded >= 15
	})
	t.Logf("%s", got)
	if got.DecoderErrors < 1 || got.MissedGroups != 1 {
		t.Errorf("page: %d decoder errors, %d missed groups; want the bad packet counted and 1 group missed", got.DecoderErrors, got.MissedGroups)
	}
	if got.Decoded < 15 {
		t.Errorf("page decoded %d of 20 good packets: it did not play on after the decoder error", got.Decoded)
	}
}

// play publishes the whole file paced in real time once the page has
// subscribed, and checks what the page counted.
func (s *setup) play(t *testing.T, ctx context.Context, br *browser, base, name, transport, tok string, n int, total time.Duration) pageStats {
	t.Helper()
	pub := newPublisher(t, ctx, base+"/", name, s.token(t, name, ""))
	page := fmt.Sprintf("%s/listen?broadcast=%s&transport=%s", base, name, transport)
	if tok != "" {
		page += "#jwt=" + tok
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	br.open(t, wctx, pub, page)
	st, err := client.PublishOgg(ctx, pub.tw, client.NewOggOpusReader(bytes.NewReader(s.ogg)), true)
	if err != nil {
		t.Fatalf("publish: %v (%s)", err, st)
	}
	if st.Skipped != 0 || st.Packets != n {
		t.Fatalf("publisher: %s; want %d packets, none skipped", st, n)
	}
	// Every packet has been sent: the page has them all within moments,
	// and has not reconnected (it will, 1 s after the last packet: the
	// broadcast stays but goes silent).
	actx, cancelA := context.WithTimeout(ctx, 15*time.Second)
	defer cancelA()
	sent := br.waitStats(t, actx, "the last packet to arrive", func(p pageStats) bool {
		return p.Frames >= n || p.Reconnects > 0
	})
	want := total.Seconds()
	pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	got := br.waitStats(t, pctx, "the whole file to play", func(p pageStats) bool {
		return p.PlayedSeconds >= want-0.001 || p.DecoderErrors > 0
	})
	got.Reconnects, got.Connects = sent.Reconnects, sent.Connects
	t.Logf("%s", got)
	if got.Groups != n || got.Frames != n || got.Decoded != n {
		t.Errorf("page: %d groups, %d frames, %d decoded; want %d each", got.Groups, got.Frames, got.Decoded, n)
	}
	if got.PlayedSeconds < want-0.001 {
		t.Errorf("page played %.3f s, want %.3f s", got.PlayedSeconds, want)
	}
	if got.DecoderErrors != 0 || got.MissedGroups != 0 || got.Late != 0 || got.Underruns != 0 || got.Reconnects != 0 {
		t.Errorf("page: %d decoder errors, %d missed groups, %d late, %d underruns, %d reconnects; want none",
			got.DecoderErrors, got.MissedGroups, got.Late, got.Underruns, got.Reconnects)
	}
	// A gap between two arrivals that the page's buffer covers is not
	// heard: a loaded CI machine (load 11) delayed one arrival by 261 ms
	// with 343 ms buffered. One the buffer does not cover is (the silence
	// case shows the counter and the longest gap move: 2.5 s).
	if got.Gaps != 0 && got.LongestGapMs >= got.LatencyMs {
		t.Errorf("page: %d gaps, the longest %.0f ms, not covered by the %.0f ms buffered; want none heard",
			got.Gaps, got.LongestGapMs, got.LatencyMs)
	}
	if got.Connects != 1 || got.LatencyMs <= 0 {
		t.Errorf("page: %d connects, latency %.0f ms; want 1 connect and a latency", got.Connects, got.LatencyMs)
	}
	return got
}

// silence publishes 5 s, pauses 2.5 s (past the page's 1 s silence
// timeout), then publishes 5 s more on the same track, continuing the
// group sequence.
func (s *setup) silence(t *testing.T, ctx context.Context, br *browser, base string, ps [][]byte) {
	const before, after = 42, 42 // 120 ms packets: about 5 s each
	const pause = 2500 * time.Millisecond
	name := "live/room-silence"
	pub := newPublisher(t, ctx, base+"/", name, s.token(t, name, ""))
	page := fmt.Sprintf("%s/listen?broadcast=%s", base, name)
	send := func(from, to int) {
		start := time.Now()
		var at time.Duration
		for seq := from; seq < to; seq++ {
			time.Sleep(time.Until(start.Add(at)))
			if err := pub.tw.WriteGroup(ctx, uint64(seq), [][]byte{ps[seq]}); err != nil && !errors.Is(err, client.ErrNoSubscribers) {
				t.Fatalf("publish group %d: %v", seq, err)
			}
			d, _ := client.PacketDuration(ps[seq])
			at += d
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	br.open(t, wctx, pub, page)
	send(0, before)
	time.Sleep(pause)
	// The page reconnects after 1 s of silence; wait until it has
	// subscribed again so the rest is not sent to nobody.
	br.waitStats(t, wctx, "a reconnect after the silence", func(p pageStats) bool { return p.Reconnects > 0 })
	br.waitSubscribed(t, wctx, pub, "subscribed again")
	send(before, before+after)
	got := br.waitStats(t, ctx, "the audio after the silence to play", func(p pageStats) bool {
		return p.Decoded >= before+after && p.PlayedSeconds >= p.ScheduledSeconds-0.001
	})
	t.Logf("%s", got)
	// The page stamps arrivals: the last group before the pause may come a
	// few ms late (CI saw 2,497 ms), so the gap wanted is the pause less
	// a frame; without the pause the longest gap is about one frame.
	const frame = 120 * time.Millisecond
	if got.Gaps < 1 || got.LongestGapMs < float64((pause-frame)/time.Millisecond) || got.Underruns < 1 {
		t.Errorf("page: %d gaps (longest %.0f ms), %d underruns; want at least one gap of %v (less a frame) and an underrun", got.Gaps, got.LongestGapMs, got.Underruns, pause)
	}
	if got.Reconnects < 1 || !strings.Contains(got.LastReason, "silent") {
		t.Errorf("page: %d reconnects, last reason %q; want a reconnect for silence", got.Reconnects, got.LastReason)
	}
	if got.Groups != before+after || got.DecoderErrors != 0 || got.MissedGroups != 0 {
		t.Errorf("page: %d groups (%d missed), %d decoder errors; want %d groups, none missed, no error", got.Groups, got.MissedGroups, got.DecoderErrors, before+after)
	}
}

// shot saves the page as a PNG (Page.captureScreenshot) where
// LISTEN_SCREENSHOT says (make test-listen: docs/img/listen.png).
func shot(t *testing.T, br *browser) {
	t.Helper()
	out := os.Getenv("LISTEN_SCREENSHOT")
	if out == "" {
		return
	}
	time.Sleep(400 * time.Millisecond) // the page redraws its counters every 250 ms
	png, err := chromedp.Run(br.ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(out, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", out, len(png))
}

func exceptionDescription(d *runtime.ExceptionDetails) string {
	if d == nil || d.Exception == nil {
		return ""
	}
	return d.Exception.Description
}

// autoplayBlocked opens the page in a browser that holds audio back until
// a click: the page connects and decodes but queues nothing, shows its
// Play button, and after a click plays what comes, without the backlog.
func (s *setup) autoplayBlocked(t *testing.T, ctx context.Context, base string, ps [][]byte) {
	br := newBrowser(t, ctx, false)
	name := "live/room-click"
	pub := newPublisher(t, ctx, base+"/", name, s.token(t, name, ""))
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	br.open(t, wctx, pub, base+"/listen?broadcast="+name)
	done := pub.paced(wctx, ps, 80)
	held := br.waitStats(t, wctx, "packets held back", func(p pageStats) bool { return p.HeldBack >= 15 })
	if held.Audio != "suspended" || held.PlayedSeconds != 0 || held.ScheduledSeconds != 0 {
		t.Fatalf("before a click: %s; want audio suspended, nothing scheduled or played", held)
	}
	visible, err := chromedp.Run(br.ctx, chromedp.Evaluate[bool](`!document.getElementById("play").hidden`))
	if err != nil || !visible {
		t.Fatalf("the Play button is not shown (%v)", err)
	}
	if err := chromedp.Do(br.ctx, chromedp.Click(chromedp.ID("play"))); err != nil {
		t.Fatal(err)
	}
	got := br.waitStats(t, wctx, "audio after the click", func(p pageStats) bool { return p.Audio == "running" && p.PlayedSeconds >= 1 })
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	t.Logf("%s", got)
	// The held-back packets would put seconds of audio ahead of the
	// speaker; what plays is what came after the click, one lead ahead.
	if got.MaxLatencyMs > 1500 || got.DecoderErrors != 0 {
		t.Errorf("after the click: latency up to %.0f ms, %d decoder errors; want no backlog, no error", got.MaxLatencyMs, got.DecoderErrors)
	}
}
