package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/relay/client"
	"github.com/relayfleet/relayfleet/relay/moqlite"
	"github.com/relayfleet/relayfleet/relay/transport"
)

// Frame types of the WebSocket framing (relay/transport/websocket.go).
const (
	wsStreamFrame      = 0x08
	wsStopSendingFrame = 0x05
)

// floodSession is a WebSocket session spoken frame by frame from a given
// loopback address: SETUP on stream 0, then silent bidirectional streams.
// stopped counts the relay's STOP_SENDING frames: streams it reset.
type floodSession struct {
	c       *websocket.Conn
	stopped atomic.Int64
}

func dialFlood(ctx context.Context, addr, from string) (*floodSession, error) {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	hc := &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
	c, _, err := websocket.Dial(ctx, "ws://"+addr+"/", &websocket.DialOptions{
		HTTPClient: hc, Subprotocols: []string{transport.WebSocketSubprotocol},
	})
	if err != nil {
		return nil, err
	}
	c.SetReadLimit(1 << 20)
	f := &floodSession{c: c}
	setup, err := moqlite.AppendSetup(nil, moqlite.StreamClientSetup, &moqlite.ClientSetup{Versions: []uint64{moqlite.Version02}})
	if err == nil {
		err = f.open(ctx, 0, setup)
	}
	if err != nil {
		c.CloseNow()
		return nil, err
	}
	// Read whatever the relay sends (pongs answered), so that a session
	// it closes fails the next write; count the streams it stops.
	go func() {
		for {
			_, b, err := c.Read(ctx)
			if err != nil {
				return
			}
			if len(b) > 0 && b[0] == wsStopSendingFrame {
				f.stopped.Add(1)
			}
		}
	}()
	return f, nil
}

// open sends one STREAM frame on client bidirectional stream index.
func (f *floodSession) open(ctx context.Context, index uint64, payload []byte) error {
	b := moqlite.AppendVarint([]byte{wsStreamFrame}, index<<2)
	return f.c.Write(ctx, websocket.MessageBinary, append(b, payload...))
}

// silent opens n silent streams from index first on, pace apart (so
// that the relay's accept backlog of 64 does not end the session); it
// returns how many it sent before the session ended.
func (f *floodSession) silent(ctx context.Context, first uint64, n int, pace time.Duration) int {
	for i := range n {
		if f.open(ctx, first+uint64(i), nil) != nil {
			return i
		}
		time.Sleep(pace)
	}
	return n
}

// goroutines reads the relay's goroutine count from /debug/pprof (--pprof).
func goroutines(addr string) (int, error) {
	resp, err := http.Get("http://" + addr + "/debug/pprof/goroutine?debug=1")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil {
		return 0, err
	}
	n, ok := strings.CutPrefix(strings.TrimSpace(line), "goroutine profile: total ")
	if !ok {
		return 0, fmt.Errorf("goroutine profile starts %q", line)
	}
	return strconv.Atoi(n)
}

// TestStreamFloodOverWebSocket runs the relay binary with --memory-budget
// 256MiB and floods it with silent streams over WebSocket, from eight
// loopback addresses (64 sessions each: the cap per address), in two
// shapes: every session opens 4,095 silent streams (the relay closes a
// session past 100 open), then every session holds 99 (under the cap)
// and opens new ones as the relay resets the old ones past the
// first-message deadline. The relay must stay up, its resident memory and
// its Go memory under the budget, and serve a new listener after each;
// the silent streams' goroutines must be gone once the flood stops. It
// prints RSS idle and peak beside the budget, and the goroutines. (Before
// the stream cap and the deadline, each silent stream held a goroutine
// for good: 512 sessions of 4,095 streams is two million goroutines, some
// 14 GiB. With them and before the cap on silent streams, the second
// shape held 32,000 goroutines, RSS 281 MiB, and the relay refused new
// listeners with 503.)
func TestStreamFloodOverWebSocket(t *testing.T) {
	testutil.Short(t, "make test-hostile (builds and runs the binary)")
	const (
		budget             = 256 << 20
		perAddr            = 64
		maxOpen            = 100 // transport.MaxIncomingStreams
		deadline           = 5 * time.Second
		awaitingPerAddress = 256 // silent streams (relay/server.go)
		perSession         = 8   // goroutines of a session, its streams apart
	)
	// The publisher and the listeners come from 127.0.0.1.
	froms := []string{"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5", "127.0.0.6", "127.0.0.7", "127.0.0.8", "127.0.0.9"}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bin := buildRelay(t)
	serve, addr := startRelayProcess(t, ctx, bin, "--memory-budget", "256MiB", "--pprof", "--log-level", "error")
	pid := serve.Cmd.Process.Pid
	time.Sleep(500 * time.Millisecond)
	idle := vmRSS(t, pid)
	idleG, err := goroutines(addr)
	if err != nil {
		t.Fatal(err)
	}

	// A publisher, for the new listener at the end of each shape.
	pctx, stopPub := context.WithCancel(ctx)
	defer stopPub()
	pub, err := client.Dial(pctx, "http://"+addr+"/", &client.Options{Transport: client.TransportQUIC, Logger: testutil.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	tw := pub.Publish("live").Track("audio")
	go func() {
		for seq := uint64(0); pctx.Err() == nil; seq++ {
			_ = tw.WriteGroup(pctx, seq, [][]byte{make([]byte, 64)})
			time.Sleep(20 * time.Millisecond)
		}
	}()

	var peak atomic.Int64
	peak.Store(idle)
	sctx, stopSampling := context.WithCancel(ctx)
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for sctx.Err() == nil {
			if rss := vmRSS(t, pid); rss > peak.Load() {
				peak.Store(rss)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	defer func() { stopSampling(); <-sampled }()

	flood := func(name string, streams int, pace, hold time.Duration) {
		t.Helper()
		var sessions []*floodSession
		defer func() {
			for _, s := range sessions {
				s.c.CloseNow()
			}
		}()
		for _, from := range froms {
			for range perAddr {
				s, err := dialFlood(ctx, addr, from)
				if err != nil {
					t.Fatalf("%s: a session from %s: %v", name, from, err)
				}
				sessions = append(sessions, s)
			}
		}
		start := time.Now()
		var sent atomic.Int64
		var wg sync.WaitGroup
		for _, s := range sessions {
			wg.Go(func() { sent.Add(int64(s.silent(ctx, 1, streams, pace))) })
		}
		wg.Wait()
		maxG := 0
		// Hold them, opening a new stream for each the relay resets:
		// each session keeps its silent streams at the cap.
		next := make([]uint64, len(sessions))
		for time.Since(start) < hold {
			if g, err := goroutines(addr); err == nil {
				maxG = max(maxG, g)
			}
			for i, s := range sessions {
				n := int(s.stopped.Swap(0))
				if next[i] == 0 {
					next[i] = uint64(streams + 1)
				}
				sent.Add(int64(s.silent(ctx, next[i], n, 0)))
				next[i] += uint64(n)
			}
			time.Sleep(250 * time.Millisecond)
		}
		if g, err := goroutines(addr); err == nil {
			maxG = max(maxG, g)
		}
		if serve.Exited() {
			t.Fatalf("%s: the relay process exited:\n%s", name, serve.Tail(20))
		}
		st, err := relayStats(addr)
		if err != nil {
			t.Fatalf("%s: /stats: %v", name, err)
		}
		used, _ := st["memory_used"].(float64)
		admitting, _ := st["admitting"].(bool)
		fmt.Printf("stream flood over WebSocket (%s): %d sessions from %d addresses sent %d stream openings; relay RSS idle %.1f MiB, peak %.1f MiB, budget %.0f MiB; Go memory_used %.1f MiB; goroutines idle %d, peak %d; sessions open %v; streams timed out %v, refused %v; admitting %v\n",
			name, len(sessions), len(froms), sent.Load(), mib(idle), mib(peak.Load()), mib(budget), used/(1<<20), idleG, maxG,
			st["sessions"], st["streams_timed_out_total"], st["streams_refused_total"], admitting)
		if peak.Load() >= budget {
			t.Errorf("%s: relay RSS peaked at %.1f MiB, over its %.0f MiB budget", name, mib(peak.Load()), mib(budget))
		}
		if used >= budget {
			t.Errorf("%s: relay's Go runtime holds %.1f MiB, over its %.0f MiB budget", name, used/(1<<20), mib(budget))
		}
		// A session's own goroutines, and a goroutine per silent stream:
		// at most awaitingPerAddress per address.
		if want := idleG + len(sessions)*perSession + len(froms)*awaitingPerAddress + 200; maxG > want {
			t.Errorf("%s: %d goroutines under the flood, want at most %d (%d silent streams per address)", name, maxG, want, awaitingPerAddress)
		}
		// A new listener, from another address, is served meanwhile.
		lctx, lcancel := context.WithTimeout(ctx, 20*time.Second)
		defer lcancel()
		l, err := client.Dial(lctx, "http://"+addr+"/", &client.Options{Transport: client.TransportWebSocket, Logger: testutil.Logger()})
		if err != nil {
			t.Fatalf("%s: a new listener: %v", name, err)
		}
		defer l.Close()
		sub, err := l.Subscribe(lctx, "live", "audio")
		if err != nil {
			t.Fatalf("%s: a new listener's subscribe: %v", name, err)
		}
		defer sub.Close()
		if _, err := sub.NextGroup(lctx); err != nil {
			t.Fatalf("%s: a new listener heard nothing: %v", name, err)
		}
	}
	flood("4,095 streams a session", 4095, 100*time.Microsecond, 0)
	flood("99 streams a session, held", maxOpen-1, 20*time.Millisecond, deadline+2*time.Second)

	// Once the flood stops, its goroutines are gone.
	var g int
	if !testutil.Poll(10*time.Second, func() bool { g, err = goroutines(addr); return err == nil && g < idleG+50 }) {
		t.Errorf("%d goroutines 10 s after the flood, idle %d", g, idleG)
	}
}
