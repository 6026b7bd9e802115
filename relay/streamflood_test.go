package relay_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/relay"
	"github.com/relayfleet/relayfleet/relay/client"
	"github.com/relayfleet/relayfleet/relay/moqlite"
	"github.com/relayfleet/relayfleet/relay/procstat"
	"github.com/relayfleet/relayfleet/relay/transport"
)

// Frame types of the WebSocket framing (relay/transport/websocket.go).
const (
	rawResetStream = 0x04
	rawStopSending = 0x05
	rawStream      = 0x08
)

// rawWS is a WebSocket session spoken frame by frame, for tests that
// misbehave on purpose: streams opened and never written, pings never
// answered (it reads only when told to).
type rawWS struct{ c *websocket.Conn }

// rawWSTo is dialRawWS to r from 127.0.0.1; the connection closes when
// the test ends.
func rawWSTo(t *testing.T, ctx context.Context, r *relay.Relay) *rawWS {
	t.Helper()
	w, err := dialRawWS(ctx, r.Addr().String(), "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.c.CloseNow() })
	return w
}

// dialRawWS opens a WebSocket session to the relay at addr from the local
// address from (127.0.0.1, 127.0.0.2: any loopback address) and does the
// SETUP exchange on stream 0.
func dialRawWS(ctx context.Context, addr, from string) (*rawWS, error) {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	hc := &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
	c, _, err := websocket.Dial(ctx, "ws://"+addr+"/", &websocket.DialOptions{
		HTTPClient: hc, Subprotocols: []string{transport.WebSocketSubprotocol},
	})
	if err != nil {
		return nil, err
	}
	c.SetReadLimit(1 << 20)
	w := &rawWS{c}
	setup, err := moqlite.AppendSetup(nil, moqlite.StreamClientSetup, &moqlite.ClientSetup{Versions: []uint64{moqlite.Version02}})
	if err != nil {
		c.CloseNow()
		return nil, err
	}
	if err := w.frame(ctx, rawStream, 0, setup); err != nil {
		c.CloseNow()
		return nil, err
	}
	if _, err := w.waitFrame(ctx, func(typ byte, id uint64) bool { return typ == rawStream && id == 0 }); err != nil {
		c.CloseNow()
		return nil, fmt.Errorf("server setup: %w", err)
	}
	return w, nil
}

func (w *rawWS) frame(ctx context.Context, typ byte, id uint64, payload []byte) error {
	b := moqlite.AppendVarint([]byte{typ}, id)
	return w.c.Write(ctx, websocket.MessageBinary, append(b, payload...))
}

// waitFrame reads frames until match accepts one, and returns its type.
func (w *rawWS) waitFrame(ctx context.Context, match func(typ byte, id uint64) bool) (byte, error) {
	for {
		_, b, err := w.c.Read(ctx)
		if err != nil {
			return 0, err
		}
		if len(b) < 2 {
			continue
		}
		id, _, err := moqlite.ParseVarint(b[1:])
		if err == nil && match(b[0], id) {
			return b[0], nil
		}
	}
}

// discard reads and drops everything the relay sends from now on (pongs
// answered), so that a session the relay closes fails the next write.
func (w *rawWS) discard(ctx context.Context) {
	go func() {
		for {
			if _, _, err := w.c.Read(ctx); err != nil {
				return
			}
		}
	}()
}

// openSilent opens n bidirectional streams, client indexes first to
// first+n-1, each with one empty STREAM frame and nothing more. It paces
// itself (a millisecond every 8 streams) so that the relay's accept
// backlog, not its budget, never decides. It returns how many it opened
// before the session ended.
func (w *rawWS) openSilent(ctx context.Context, first, n int) int {
	for i := range n {
		if err := w.frame(ctx, rawStream, uint64(first+i)<<2, nil); err != nil {
			return i
		}
		if i%8 == 7 {
			time.Sleep(time.Millisecond)
		}
	}
	return n
}

// Environment of TestStreamFloodRelay, the relay process of
// TestStreamFloodStaysUnderBudget.
const envFloodBudget = "RELAY_FLOOD_BUDGET"

// TestStreamFloodStaysUnderBudget: sessions admitted while memory is low
// each open 4,096 bidirectional streams over WebSocket and send nothing on
// them. The relay, a process of its own with a 256 MiB memory budget (the
// Go soft limit as relay serve sets it), stays alive and under its budget,
// and still serves a new listener. (Before, each silent stream held a
// goroutine blocked in its first read, 4,096 per session: the process
// grew to its Go soft limit, 225 of 256 MiB, and refused every new
// session; past a MemoryMax the kernel kills it.)
func TestStreamFloodStaysUnderBudget(t *testing.T) {
	const sessions, streams = 32, 4096
	const budget = 256 << 20
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestStreamFloodRelay$", "-test.v")
	cmd.Env = append(os.Environ(), envFloodBudget+"="+strconv.Itoa(budget))
	p, lines := testutil.StartLines(t, "relay", cmd)
	var addr string
	for l := range lines {
		if a, ok := strings.CutPrefix(l, "FLOOD RELAY "); ok {
			addr = a
			break
		}
	}
	if addr == "" {
		t.Fatalf("the relay process did not start:\n%s", p.Tail(20))
	}
	go func() { // the rest goes to the log
		for range lines {
		}
	}()
	url := "http://" + addr + "/"
	pid := p.Cmd.Process.Pid

	var peak atomic.Int64
	sampleDone := make(chan struct{})
	sampleCtx, stopSampling := context.WithCancel(ctx)
	go func() {
		defer close(sampleDone)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			if s, err := procstat.Read("/proc", pid); err == nil && s.RSS > peak.Load() {
				peak.Store(s.RSS)
			}
			select {
			case <-sampleCtx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	defer func() { stopSampling(); <-sampleDone }()

	pubCtx, stopPub := context.WithCancel(ctx)
	pubDone := publishLoop(pubCtx, t, url, "live", 0)
	defer func() { stopPub(); <-pubDone }()

	// Every session is admitted first, while memory is low.
	flood := make([]*rawWS, 0, sessions)
	defer func() {
		for _, w := range flood {
			w.c.CloseNow()
		}
	}()
	for i := range sessions {
		w, err := dialRawWS(ctx, addr, "127.0.0.1")
		if err != nil {
			t.Fatalf("flood session %d: %v", i, err)
		}
		w.discard(ctx)
		flood = append(flood, w)
	}
	var st relay.Stats
	testutil.WaitFor(t, 10*time.Second, "every session before the flood", func() bool {
		return getJSON(ctx, url+"stats", &st) == nil && st.Sessions == sessions+1
	})
	goBefore, memBefore := relayGoroutines(t, ctx, url), st.MemoryUsed
	start := time.Now()
	var opened atomic.Int64
	for _, w := range flood {
		opened.Add(int64(w.openSilent(ctx, 1, streams-1))) // and the SETUP stream
	}
	t.Logf("%d sessions sent %d of %d stream openings in %v; relay RSS peak %d MiB so far",
		sessions, opened.Load(), sessions*(streams-1), time.Since(start).Round(time.Millisecond), peak.Load()>>20)
	// The sessions that overstepped are closed, and past the
	// first-message deadline no silent stream is left.
	testutil.Poll(6*time.Second, func() bool { return getJSON(ctx, url+"stats", &st) == nil && st.Sessions == 1 })

	if p.Exited() {
		t.Fatalf("the relay process exited:\n%s", p.Tail(20))
	}
	if err := getJSON(ctx, url+"stats", &st); err != nil {
		t.Fatalf("/stats after the flood: %v", err)
	}
	goAfter := relayGoroutines(t, ctx, url)
	t.Logf("after the flood: RSS peak %d MiB, Go memory %d MiB (%d MiB before; budget %d MiB), goroutines %d (%d before), sessions %d, admitting %v",
		peak.Load()>>20, st.MemoryUsed>>20, memBefore>>20, budget>>20, goAfter, goBefore, st.Sessions, st.Admitting)
	// The flood's sessions are gone, and their goroutines with them.
	if goAfter > goBefore {
		t.Errorf("%d goroutines after the flood, %d before it", goAfter, goBefore)
	}
	if peak.Load() >= budget {
		t.Errorf("relay RSS peaked at %d MiB, over its %d MiB budget", peak.Load()>>20, budget>>20)
	}
	if st.MemoryUsed >= budget {
		t.Errorf("relay holds %d MiB, over its %d MiB budget", st.MemoryUsed>>20, budget>>20)
	}
	if !st.Admitting {
		t.Errorf("relay stopped admitting: it holds %d MiB, above its high-water mark %d MiB", st.MemoryUsed>>20, st.MemoryHighWater>>20)
	}

	// A new listener, from another address, is served.
	lctx, lcancel := context.WithTimeout(ctx, 20*time.Second)
	defer lcancel()
	l, err := client.Dial(lctx, url, &client.Options{Logger: quietLogger(), Transport: client.TransportWebSocket})
	if err != nil {
		t.Fatalf("a new listener after the flood: %v", err)
	}
	defer l.Close()
	sub := subscribeWhenAnnounced(t, lctx, l, "live", "audio")
	if _, err := sub.NextGroup(lctx); err != nil {
		t.Fatalf("a new listener after the flood heard nothing: %v", err)
	}
}

// TestStreamFloodRelay is TestStreamFloodStaysUnderBudget's relay process;
// it does nothing unless started by it.
func TestStreamFloodRelay(t *testing.T) {
	b, err := strconv.ParseInt(testutil.HelperProcess(t, envFloodBudget, "TestStreamFloodStaysUnderBudget"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err = relay.Run(ctx, relay.Config{Listen: "127.0.0.1:0", MemoryBudget: b, Pprof: true, Logger: quietLogger()}, func(r *relay.Relay) {
		fmt.Printf("FLOOD RELAY %s\n", r.Addr())
	})
	if err != nil {
		t.Fatal(err)
	}
}

// relayGoroutines reads the goroutine count of the relay at url from its
// /debug/pprof (Config.Pprof).
func relayGoroutines(t *testing.T, ctx context.Context, url string) int {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"debug/pprof/goroutine?debug=1", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("goroutine profile: %v", err)
	}
	defer resp.Body.Close()
	line, _ := bufio.NewReader(resp.Body).ReadString('\n')
	n, err := strconv.Atoi(strings.TrimPrefix(strings.TrimSpace(line), "goroutine profile: total "))
	if err != nil {
		t.Fatalf("goroutine profile starts %q", line)
	}
	return n
}

func getJSON(ctx context.Context, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// TestSessionsPerAddressCap: with the default cap, the 65th session from
// one address is refused, on WebSocket, WebTransport and raw QUIC alike, while another
// address is admitted; a session ended frees its place.
func TestSessionsPerAddressCap(t *testing.T) {
	ctx := testContext(t)
	r := startRelay(t, relay.Config{MemoryBudget: -1})
	addr := r.Addr().String()
	var held []*rawWS
	defer func() {
		for _, w := range held {
			w.c.CloseNow()
		}
	}()
	for i := range 64 {
		w, err := dialRawWS(ctx, addr, "127.0.0.1")
		if err != nil {
			t.Fatalf("session %d from 127.0.0.1: %v", i+1, err)
		}
		held = append(held, w)
	}
	testutil.WaitFor(t, 10*time.Second, "64 sessions", func() bool { return r.Stats().Sessions == 64 })
	if w, err := dialRawWS(ctx, addr, "127.0.0.1"); err == nil {
		w.c.CloseNow()
		t.Fatal("65th WebSocket session from 127.0.0.1 admitted")
	}
	for _, tr := range []string{client.TransportQUIC, client.TransportWebTransport} {
		if s, err := client.Dial(ctx, relayURL(r, ""), &client.Options{Logger: quietLogger(), Transport: tr}); err == nil {
			s.Close()
			t.Fatalf("65th session from 127.0.0.1, over %s, admitted", tr)
		}
	}
	other, err := dialRawWS(ctx, addr, "127.0.0.2")
	if err != nil {
		t.Fatalf("a session from 127.0.0.2: %v", err)
	}
	defer other.c.CloseNow()
	if st := r.Stats(); st.RefusedByReason[relay.ReasonOverloaded] != 3 {
		t.Errorf("refused %v, want 3 overloaded", st.RefusedByReason)
	}
	held[0].c.CloseNow()
	testutil.WaitFor(t, 10*time.Second, "the closed session to go", func() bool { return r.Stats().Sessions == 64 })
	// The session's place is given back as its last deferred step, just
	// after it leaves the registry (Stats): try until it is.
	testutil.WaitFor(t, 10*time.Second, "a session from 127.0.0.1 after one ended", func() bool {
		w, err := dialRawWS(ctx, addr, "127.0.0.1")
		if err != nil {
			return false
		}
		held[0] = w
		return true
	})
}

// TestUncappedAddressesExempt: sessions from an uncapped address (the
// fleet's own load generator) are not counted by the per-address cap,
// while the cap still refuses the 65th from any other address, on every
// transport.
func TestUncappedAddressesExempt(t *testing.T) {
	ctx := testContext(t)
	uncapped, err := relay.ParseAddressList("127.0.0.2, 10.0.0.0/8")
	if err != nil {
		t.Fatal(err)
	}
	r := startRelay(t, relay.Config{MemoryBudget: -1, UncappedAddresses: uncapped})
	addr := r.Addr().String()
	var held []*rawWS
	defer func() {
		for _, w := range held {
			w.c.CloseNow()
		}
	}()
	for i := range 64 {
		w, err := dialRawWS(ctx, addr, "127.0.0.1")
		if err != nil {
			t.Fatalf("session %d from 127.0.0.1: %v", i+1, err)
		}
		held = append(held, w)
	}
	const generator = 100 // sessions from the uncapped address
	for i := range generator {
		w, err := dialRawWS(ctx, addr, "127.0.0.2")
		if err != nil {
			t.Fatalf("session %d from the uncapped 127.0.0.2: %v", i+1, err)
		}
		held = append(held, w)
	}
	testutil.WaitFor(t, 10*time.Second, "every session", func() bool { return r.Stats().Sessions == 64+generator })
	if w, err := dialRawWS(ctx, addr, "127.0.0.1"); err == nil {
		w.c.CloseNow()
		t.Fatal("65th WebSocket session from 127.0.0.1 admitted beside an uncapped address")
	}
	if s, err := client.Dial(ctx, relayURL(r, ""), &client.Options{Logger: quietLogger(), Transport: client.TransportQUIC}); err == nil {
		s.Close()
		t.Fatal("65th session from 127.0.0.1, over QUIC, admitted")
	}
	if st := r.Stats(); st.RefusedByReason[relay.ReasonOverloaded] != 2 {
		t.Errorf("refused %v, want 2 overloaded", st.RefusedByReason)
	}
	for _, bad := range []string{"127.0.0.300", "10.0.0.0/33", "relay.example"} {
		if _, err := relay.ParseAddressList("127.0.0.2," + bad); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("ParseAddressList %q: %v, want an error naming it", bad, err)
		}
	}
}

// TestSilentStreamIsReset: a stream that carries no message within the
// first-message deadline is reset; the session stays.
func TestSilentStreamIsReset(t *testing.T) {
	ctx := testContext(t)
	r := startRelay(t, relay.Config{MemoryBudget: -1})
	w := rawWSTo(t, ctx, r)
	start := time.Now()
	if w.openSilent(ctx, 1, 1) != 1 {
		t.Fatal("could not open the stream")
	}
	wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	typ, err := w.waitFrame(wctx, func(typ byte, id uint64) bool {
		return id == 1<<2 && (typ == rawResetStream || typ == rawStopSending)
	})
	if err != nil {
		t.Fatalf("the silent stream was not reset within 15 s: %v", err)
	}
	t.Logf("silent stream reset (frame %#x) after %v", typ, time.Since(start).Round(time.Millisecond))
	if st := r.Stats(); st.Sessions != 1 {
		t.Fatalf("%d sessions after the reset, want the session kept", st.Sessions)
	}
}

// TestWebSocketStreamCap: a WebSocket session may hold as many
// bidirectional streams open as a QUIC one (100); one more ends it.
func TestWebSocketStreamCap(t *testing.T) {
	ctx := testContext(t)
	r := startRelay(t, relay.Config{MemoryBudget: -1})
	w := rawWSTo(t, ctx, r)
	// The SETUP stream is one of the 100.
	if n := w.openSilent(ctx, 1, 99); n != 99 {
		t.Fatalf("opened %d of 99 streams", n)
	}
	time.Sleep(200 * time.Millisecond)
	if st := r.Stats(); st.Sessions != 1 {
		t.Fatalf("%d sessions with 100 streams open, want 1", st.Sessions)
	}
	w.openSilent(ctx, 100, 1)
	testutil.WaitFor(t, 10*time.Second, "the session over the stream cap to end", func() bool { return r.Stats().Sessions == 0 })
}

// TestStreamsRefusedUnderPressure: above the memory high-water mark an
// open session's new streams are refused; below it they are served.
func TestStreamsRefusedUnderPressure(t *testing.T) {
	ctx := testContext(t)
	var used atomic.Uint64
	used.Store(10 << 20)
	r := startRelay(t, relay.Config{MemoryBudget: 100 << 20, MemoryUsage: used.Load})
	for _, tr := range []string{client.TransportQUIC, client.TransportWebSocket} {
		s := dial(t, ctx, relayURL(r, ""), &client.Options{Transport: tr})
		used.Store(90 << 20)
		testutil.WaitFor(t, 10*time.Second, "memory pressure", func() bool { return !r.Stats().Admitting })
		if a, err := s.Announced(ctx, ""); err == nil {
			a.Close()
			t.Errorf("%s: a new stream served above the high-water mark", tr)
		}
		used.Store(10 << 20)
		testutil.WaitFor(t, 10*time.Second, "pressure to end", func() bool { return r.Stats().Admitting })
		a, err := s.Announced(ctx, "")
		if err != nil {
			t.Fatalf("%s: a new stream below the low-water mark: %v", tr, err)
		}
		a.Close()
	}
}

// TestIdleWebSocketSessionReaped: a WebSocket session whose peer answers
// nothing (no message, no pong to the relay's pings) is reaped like a
// silent QUIC session; a live WebSocket listener that sends nothing but
// pongs is kept.
func TestIdleWebSocketSessionReaped(t *testing.T) {
	ctx := testContext(t)
	r := startRelay(t, relay.Config{ReapAfter: 2 * time.Second, MemoryBudget: -1})
	live := dial(t, ctx, relayURL(r, ""), &client.Options{Transport: client.TransportWebSocket})
	rawWSTo(t, ctx, r) // a peer that answers nothing
	testutil.WaitFor(t, 10*time.Second, "two sessions", func() bool { return r.Stats().Sessions == 2 })
	testutil.WaitFor(t, 15*time.Second, "the silent session to be reaped", func() bool { return r.Stats().Reaped == 1 })
	testutil.WaitFor(t, 10*time.Second, "its state to go", func() bool { return r.Stats().Sessions == 1 })
	time.Sleep(3 * time.Second) // more than ReapAfter again
	if st := r.Stats(); st.Reaped != 1 || st.Sessions != 1 {
		t.Fatalf("reaped %d, sessions %d: want the live listener kept", st.Reaped, st.Sessions)
	}
	select {
	case <-live.Done():
		t.Fatal("the live WebSocket session was ended")
	default:
	}
}

// TestSilentStreamsCapped: streams waiting for their first message are
// capped per source address (256) and over the relay (its memory budget
// over 32 KiB, 1,024 at least): past either, a new stream is refused at
// once, while streams from under the caps are taken. (Before, 64 sessions
// from one address held 6,336 silent streams for the 5 s deadline, and
// 512 sessions from 8 addresses took a 256 MiB relay past its budget:
// make test-hostile.)
func TestSilentStreamsCapped(t *testing.T) {
	ctx := testContext(t)
	const budget = 32 << 20 // 1,024 streams
	r := startRelay(t, relay.Config{MemoryBudget: budget, MemoryUsage: func() uint64 { return 1 << 20 }})
	addr := r.Addr().String()
	openFrom := func(from string, sessions int) {
		t.Helper()
		for range sessions {
			w, err := dialRawWS(ctx, addr, from)
			if err != nil {
				t.Fatalf("a session from %s: %v", from, err)
			}
			t.Cleanup(func() { _ = w.c.CloseNow() })
			w.discard(ctx)
			if n := w.openSilent(ctx, 1, 99); n != 99 {
				t.Fatalf("a session from %s opened %d of 99 streams", from, n)
			}
		}
	}
	refused := func(want int64, what string) {
		t.Helper()
		// Refusals come at once, well before the first-message deadline
		// frees a place.
		if !testutil.Poll(2*time.Second, func() bool { return r.Stats().StreamsRefused == want }) {
			t.Fatalf("%s: %d streams refused, want %d", what, r.Stats().StreamsRefused, want)
		}
	}
	start := time.Now()
	openFrom("127.0.0.1", 3) // 297 silent streams from one address
	refused(297-256, "297 silent streams from one address")
	openFrom("127.0.0.2", 2) // 198 more from another: under both caps
	refused(297-256, "198 silent streams from another address")
	for _, from := range []string{"127.0.0.3", "127.0.0.4", "127.0.0.5"} {
		openFrom(from, 3)
	}
	// 127.0.0.3 and .4 get 256 each (41 refused each), and .5 the 58
	// left of 1,024: 297-58 refused.
	refused(3*(297-256)+297-(1024-256-198-2*256), "1,485 silent streams from five addresses")
	if took := time.Since(start); took >= 5*time.Second {
		t.Fatalf("the flood took %v, past the first-message deadline: the counts prove nothing", took)
	}
	if st := r.Stats(); st.StreamsTimedOut != 0 {
		t.Fatalf("%d streams timed out already", st.StreamsTimedOut)
	}
	// Once the silent ones time out, new streams are taken again.
	testutil.WaitFor(t, 15*time.Second, "the silent streams to time out", func() bool { return r.Stats().StreamsTimedOut == 1024 })
	s := dial(t, ctx, relayURL(r, ""), &client.Options{Transport: client.TransportWebSocket})
	a, err := s.Announced(ctx, "")
	if err != nil {
		t.Fatalf("a new stream after the flood: %v", err)
	}
	a.Close()
}
