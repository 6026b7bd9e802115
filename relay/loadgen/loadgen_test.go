package loadgen_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/relay"
	"github.com/relayfleet/relayfleet/relay/client"
	"github.com/relayfleet/relayfleet/relay/loadgen"
	"github.com/relayfleet/relayfleet/relay/router"
)

func TestFrameRoundTrip(t *testing.T) {
	fi := loadgen.FrameInfo{Group: 1 << 40, Index: 3, Count: 6, SentNs: 1234567890123}
	got, ok := loadgen.ParseFrame(loadgen.Frame(fi, 600))
	if !ok || got != fi {
		t.Fatalf("ParseFrame(Frame(%+v)) = %+v, %v", fi, got, ok)
	}
	if len(loadgen.Frame(fi, 3)) != 28 {
		t.Fatal("a frame is never shorter than its header")
	}
	if _, ok := loadgen.ParseFrame([]byte("g1 f0 xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx")); ok {
		t.Fatal("parsed a frame without the magic")
	}
}

// startRelayAndPublisher runs a relay and a publisher of 20 ms frames,
// framesPerGroup to a group.
func startRelayAndPublisher(t *testing.T, framesPerGroup int) *relay.Relay {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r, err := relay.Start(ctx, relay.Config{Listen: "127.0.0.1:0", Logger: testutil.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- loadgen.Publish(ctx, fmt.Sprintf("http://%s/", r.Addr()), loadgen.PublishOptions{
			Broadcast: "live", FrameTime: 20 * time.Millisecond, FramesPerGroup: framesPerGroup, FrameSize: 100, Logger: testutil.Logger(),
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("publish: %v", err)
		}
		r.Close()
	})
	testutil.WaitFor(t, 10*time.Second, "the publisher's announce", func() bool { return r.Stats().Broadcasts > 0 })
	return r
}

// TestRunCountsWhatArrives: every listener connects and receives frames
// at the publisher's bitrate, none lost.
func TestRunCountsWhatArrives(t *testing.T) {
	for _, fpg := range []int{1, 5} {
		t.Run(fmt.Sprintf("%d frames per group", fpg), func(t *testing.T) {
			r := startRelayAndPublisher(t, fpg)
			// A loaded machine (-race, other builds) can starve a listener
			// for seconds: a 5 s silence timeout keeps a frame that late
			// in flight, not lost, and its listener not silent.
			rep, err := loadgen.Run(context.Background(), loadgen.Options{
				URL: fmt.Sprintf("http://%s/", r.Addr()), Broadcast: "live", Listeners: 20, Shards: 4,
				Duration: time.Second, Late: time.Hour, Silence: 5 * time.Second, Logger: testutil.Logger(),
			})
			if err != nil {
				t.Fatal(err)
			}
			if rep.Connected != 20 || rep.Failed != 0 || rep.Ended != 0 {
				t.Fatalf("report %+v: want 20 connected, none failed or ended", rep)
			}
			if rep.FramesReceived == 0 || rep.BitrateBpsMean <= 0 {
				t.Fatalf("report %+v: nothing received", rep)
			}
			// Nothing lost but the groups the relay dropped for a
			// listener too slow (a starved one can be).
			if dropped := r.Stats().GroupsDropped; rep.GroupsMissing+rep.GroupsCut > dropped || rep.LateFrames != 0 ||
				rep.FramesExpected != rep.FramesReceived+rep.FramesLost || (rep.FramesLost == 0) != (rep.LossRatio == 0) {
				t.Fatalf("report %+v: frames lost that the relay did not drop (%d groups), or late, on a loopback", rep, dropped)
			}
			// Every listener heard frames to the end; each waited at least
			// one frame time (20 ms) between two.
			if rep.SilentAtEnd != 0 || rep.GapMs.P50 < 10 || rep.GapMs.P50 > rep.GapMs.P99 || rep.GapMs.P99 > rep.GapMs.Max {
				t.Fatalf("report %+v: want nobody silent at the end, and ordered gap percentiles of at least a frame time", rep)
			}
		})
	}
}

// TestRunFreezes: frozen listeners are reported apart and stop counting.
func TestRunFreezes(t *testing.T) {
	r := startRelayAndPublisher(t, 1)
	rep, err := loadgen.Run(context.Background(), loadgen.Options{
		URL: fmt.Sprintf("http://%s/", r.Addr()), Broadcast: "live", Listeners: 8, Shards: 4,
		Duration: time.Second, Freeze: 0.5, FreezeAt: 200 * time.Millisecond, Late: time.Hour, Logger: testutil.Logger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Frozen != 4 || rep.Connected != 8 {
		t.Fatalf("report %+v: want 8 connected of which 4 frozen", rep)
	}
	if rep.FramesReceived == 0 || rep.FramesLost != 0 {
		t.Fatalf("report %+v: the live half should receive everything", rep)
	}
}

// TestRunReportsFailures: listeners that cannot connect are counted, with
// the reason.
func TestRunReportsFailures(t *testing.T) {
	r := startRelayAndPublisher(t, 1)
	rep, err := loadgen.Run(context.Background(), loadgen.Options{
		URL: fmt.Sprintf("http://%s/", r.Addr()), Broadcast: "nope", Listeners: 3,
		Duration: 100 * time.Millisecond, Logger: testutil.Logger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Failed+rep.Ended != 3 || len(rep.Errors) == 0 {
		t.Fatalf("report %+v: want 3 failed with reasons", rep)
	}
	// They heard nothing: silent for the whole run.
	if rep.SilentAtEnd != 3 || rep.GapMs.P50 <= 0 {
		t.Fatalf("report %+v: want 3 silent at the end, silent all along", rep)
	}
}

func TestRunRefusesNoListeners(t *testing.T) {
	if _, err := loadgen.Run(context.Background(), loadgen.Options{}); err == nil {
		t.Fatal("Run with no listeners succeeded")
	}
}

// TestRunThroughRouter: each listener asks the router for its relay.
func TestRunThroughRouter(t *testing.T) {
	r := startRelayAndPublisher(t, 1)
	path := filepath.Join(t.TempDir(), "relays.json")
	file := fmt.Sprintf(`{"relays": [{"url": "http://%s/", "stats": "http://%s/stats"}]}`, r.Addr(), r.Addr())
	if err := os.WriteFile(path, []byte(file), 0o644); err != nil {
		t.Fatal(err)
	}
	rt, err := router.New(router.Options{File: path, Logger: testutil.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	rt.PollOnce(context.Background())
	srv := httptest.NewServer(rt)
	defer srv.Close()
	rep, err := loadgen.Run(context.Background(), loadgen.Options{
		Router: srv.URL, Broadcast: "live", Listeners: 5, Duration: 500 * time.Millisecond, Late: time.Hour, Logger: testutil.Logger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Connected != 5 || rep.FramesReceived == 0 {
		t.Fatalf("report %+v: want 5 listeners connected through the router, receiving", rep)
	}
	if st := r.Stats(); st.SessionsTotal < 6 {
		t.Fatalf("relay saw %d sessions, want the publisher and 5 listeners", st.SessionsTotal)
	}
}

// TestRunLeavesNoGoroutines: a run, frozen listeners included, ends every
// goroutine it started once it returns.
func TestRunLeavesNoGoroutines(t *testing.T) {
	testutil.NoLeaks(t)
	func() {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		r, err := relay.Start(ctx, relay.Config{Listen: "127.0.0.1:0", Logger: testutil.Logger()})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		url := fmt.Sprintf("http://%s/", r.Addr())
		done := make(chan error, 1)
		go func() {
			done <- loadgen.Publish(ctx, url, loadgen.PublishOptions{Broadcast: "live", FrameTime: 20 * time.Millisecond, FramesPerGroup: 1, FrameSize: 64, Logger: testutil.Logger()})
		}()
		defer func() { cancel(); <-done }()
		testutil.WaitFor(t, 10*time.Second, "the broadcast", func() bool { return r.Stats().Broadcasts > 0 })
		if _, err := loadgen.Run(ctx, loadgen.Options{
			URL: url, Broadcast: "live", Listeners: 6, Shards: 2, Duration: 300 * time.Millisecond,
			Freeze: 0.5, FreezeAt: 100 * time.Millisecond, Reconnect: true, Progress: func(loadgen.Snapshot) {}, Logger: testutil.Logger(),
		}); err != nil {
			t.Fatal(err)
		}
	}()
}

// idleTimeout bounds how long a listener takes to notice a relay that
// closed without telling it: Relay.Close does not always get its
// CONNECTION_CLOSE frames out before it closes its socket.
const idleTimeout = 1500 * time.Millisecond

// startEdge runs a relay on addr that pulls from origin; it is closed at
// the test's end unless the returned stop was called first.
func startEdge(t *testing.T, addr string, origin *relay.Relay) (*relay.Relay, func()) {
	t.Helper()
	edge, err := relay.Start(context.Background(), relay.Config{
		Listen: addr, Upstreams: []string{fmt.Sprintf("http://%s/", origin.Addr())}, Logger: testutil.Logger(),
	})
	if err != nil {
		t.Fatalf("start edge on %s: %v", addr, err)
	}
	var once sync.Once
	stop := func() { once.Do(func() { edge.Close() }) }
	t.Cleanup(stop)
	return edge, stop
}

// runAcrossEdgeRestart measures 20 listeners on an edge relay (pulling
// from an origin with a publisher) that is closed 500 ms into the window
// and started again on the same address, with a new certificate.
func runAcrossEdgeRestart(t *testing.T, reconnect bool, progress func(loadgen.Snapshot)) *loadgen.Report {
	origin := startRelayAndPublisher(t, 1)
	edge, stopEdge := startEdge(t, "127.0.0.1:0", origin)
	addr := edge.Addr().String()
	restarted := make(chan struct{})
	window := func(start bool) {
		if !start {
			return
		}
		go func() {
			defer close(restarted)
			time.Sleep(500 * time.Millisecond) // the fault comes mid-window, after the listeners are counting
			stopEdge()
			startEdge(t, addr, origin)
		}()
	}
	rep, err := loadgen.Run(context.Background(), loadgen.Options{
		URL: fmt.Sprintf("http://%s/", addr), Broadcast: "live", Listeners: 20, Shards: 4,
		// 6 s: time after the restart for 20 new dials on a loaded
		// machine (with 3.5 s one listener was still dialling at the end).
		Duration: 6 * time.Second, Late: time.Hour, Reconnect: reconnect, Window: window, Progress: progress,
		IdleTimeout: idleTimeout, Logger: testutil.Logger(),
	})
	<-restarted
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("report: %+v", rep)
	if rep.Connected != 20 {
		t.Fatalf("report %+v: want 20 connected", rep)
	}
	return rep
}

// TestRunReconnectsAcrossRelayRestart: with Reconnect, every listener of a
// relay that restarts mid-window comes back, and the time away is counted.
func TestRunReconnectsAcrossRelayRestart(t *testing.T) {
	var (
		mu    sync.Mutex
		snaps []loadgen.Snapshot
	)
	rep := runAcrossEdgeRestart(t, true, func(s loadgen.Snapshot) {
		mu.Lock()
		snaps = append(snaps, s)
		mu.Unlock()
	})
	if rep.ListenersLost != 0 || rep.Reconnects < 20 || rep.GapMs.P50 <= 0 {
		t.Fatalf("report %+v: want no listener lost, at least 20 reconnects, a gap", rep)
	}
	var byReason int64
	for _, n := range rep.ReconnectsByReason {
		byReason += n
	}
	if byReason != rep.Reconnects {
		t.Fatalf("report %+v: reconnects by reason add up to %d", rep, byReason)
	}
	if rep.Ended != 20 {
		t.Fatalf("report %+v: want all 20 to have seen their subscription end", rep)
	}
	if rep.FramesReceived == 0 || rep.FramesLost == 0 || rep.GroupsMissing == 0 {
		t.Fatalf("report %+v: want frames received, and those sent while away lost", rep)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(snaps) < 2 {
		t.Fatalf("%d progress snapshots over a 6 s window, want at least 2", len(snaps))
	}
	if last := snaps[len(snaps)-1]; last.Connected != 20 || last.FramesReceived == 0 || last.Reconnects > rep.Reconnects {
		t.Fatalf("last snapshot %+v, report %+v", last, rep)
	}
}

// TestRunWithoutReconnectLosesListeners: without Reconnect the same
// restart loses every listener.
func TestRunWithoutReconnectLosesListeners(t *testing.T) {
	rep := runAcrossEdgeRestart(t, false, nil)
	if rep.ListenersLost != 20 || rep.Ended != 20 || rep.Reconnects != 0 || rep.GapMs.P50 <= 0 {
		t.Fatalf("report %+v: want all 20 lost and ended, no reconnect", rep)
	}
	if rep.SilentAtEnd != 20 || rep.FramesLost == 0 {
		t.Fatalf("report %+v: want all 20 silent at the end, and what was sent since lost", rep)
	}
}

// TestRunReconnectsThroughRouter: a rolling upgrade. The router hands out
// edge A until it goes, then edge B; A's listeners come back through the
// router on B.
func TestRunReconnectsThroughRouter(t *testing.T) {
	origin := startRelayAndPublisher(t, 1)
	a, stopA := startEdge(t, "127.0.0.1:0", origin)
	b, _ := startEdge(t, "127.0.0.1:0", origin)
	var current atomic.Pointer[relay.Relay]
	current.Store(a)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/route" || r.URL.Query().Get("broadcast") != "live" {
			http.NotFound(w, r)
			return
		}
		r2 := current.Load()
		fmt.Fprintf(w, `{"url": "http://%s/", "certificate_sha256": %q}`, r2.Addr(), r2.CertificateHash())
	}))
	defer srv.Close()
	window, faulted := faultMidWindow(300*time.Millisecond, func() {
		current.Store(b) // drained: the router sends new listeners elsewhere
		stopA()
	})
	rep, err := loadgen.Run(context.Background(), loadgen.Options{
		Router: srv.URL, Broadcast: "live", Listeners: 20, Shards: 4, Duration: 6 * time.Second, Late: time.Hour,
		Reconnect: true, IdleTimeout: idleTimeout, Silence: 3 * time.Second, Logger: testutil.Logger(),
		Window: window,
	})
	faulted()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("report: %+v", rep)
	if rep.Connected != 20 || rep.ListenersLost != 0 || rep.Reconnects < 20 {
		t.Fatalf("report %+v: want 20 connected, none lost, at least 20 reconnects", rep)
	}
	if st := b.Stats(); st.SessionsTotal < 20 {
		t.Fatalf("edge B saw %d sessions, want the 20 listeners", st.SessionsTotal)
	}
}

// faultMidWindow is a Window hook that, once the window starts, waits d
// and calls fault, in a goroutine of its own; faulted waits until fault
// returned.
func faultMidWindow(d time.Duration, fault func()) (window func(start bool), faulted func()) {
	done := make(chan struct{})
	window = func(start bool) {
		if start {
			go func() {
				defer close(done)
				time.Sleep(d)
				fault()
			}()
		}
	}
	return window, func() { <-done }
}

// TestRunReconnectGivesUpAtEnd: listeners of a relay that never comes back
// keep trying until the run ends, which it does on time; they are lost,
// silent at the end for at least as long as the relay has been gone, and
// what the publisher sent meanwhile counts as lost.
func TestRunReconnectGivesUpAtEnd(t *testing.T) {
	origin := startRelayAndPublisher(t, 1)
	edge, stopEdge := startEdge(t, "127.0.0.1:0", origin)
	var stopped time.Time // when the edge was gone: no frame after this
	window, faulted := faultMidWindow(200*time.Millisecond, func() {
		stopEdge()
		stopped = time.Now()
	})
	start := time.Now()
	rep, err := loadgen.Run(context.Background(), loadgen.Options{
		URL: fmt.Sprintf("http://%s/", edge.Addr()), Broadcast: "live", Listeners: 5, Duration: 2500 * time.Millisecond,
		Late: time.Hour, Reconnect: true, IdleTimeout: idleTimeout, Logger: testutil.Logger(),
		Window: window,
	})
	faulted()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("report: %+v", rep)
	if d := time.Since(start); d > 6*time.Second {
		t.Fatalf("Run took %v for a 2.5 s window", d)
	}
	if rep.Connected != 5 || rep.ListenersLost != 5 || rep.Reconnects != 0 || rep.Ended != 5 {
		t.Fatalf("report %+v: want 5 connected, all lost, no reconnect", rep)
	}
	// The run ended rep.Seconds after its window started, which was after
	// start: every listener was silent at least from stopped to then.
	silentFor := start.Add(time.Duration(rep.Seconds * float64(time.Second))).Sub(stopped)
	if rep.SilentAtEnd != 5 || rep.GapMs.P50 < float64(silentFor.Milliseconds()) {
		t.Fatalf("report %+v: want 5 silent at the end, each for at least %v", rep, silentFor)
	}
	// 20 ms frames: what was sent from the stop to a silence timeout
	// before the end is lost, at least half of it (the estimate starts at
	// the last frame's arrival), and no more than the run sent.
	perListener := int64((silentFor - client.DefaultSilence) / (20 * time.Millisecond))
	if rep.FramesLost < 5*perListener/2 || rep.FramesLost > 5*int64(time.Since(start)/(20*time.Millisecond)) || rep.LossRatio <= 0 {
		t.Fatalf("report %+v: want about %d frames lost per listener", rep, perListener)
	}
}

// TestRunReportsFrozenGap: listeners frozen for 1.5 s (their packets
// dropped both ways, nothing read) and then thawed report an audible gap
// of at least 1.5 s, and are measured like the others; the rest are not.
func TestRunReportsFrozenGap(t *testing.T) {
	for _, reconnect := range []bool{false, true} {
		t.Run(fmt.Sprintf("reconnect %v", reconnect), func(t *testing.T) {
			r := startRelayAndPublisher(t, 1)
			const freezeFor = 1500 * time.Millisecond
			rep, err := loadgen.Run(context.Background(), loadgen.Options{
				URL: fmt.Sprintf("http://%s/", r.Addr()), Broadcast: "live", Listeners: 8, Shards: 4,
				Duration: 3 * time.Second, Freeze: 0.5, FreezeAt: 300 * time.Millisecond, FreezeFor: freezeFor,
				Late: time.Hour, Reconnect: reconnect, Logger: testutil.Logger(),
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("report: %+v", rep)
			if rep.Connected != 8 || rep.Frozen != 0 {
				t.Fatalf("report %+v: want 8 connected, none frozen at the end", rep)
			}
			if rep.GapMs.Max < float64(freezeFor.Milliseconds()) || rep.GapMs.P99 < float64(freezeFor.Milliseconds()) {
				t.Fatalf("report %+v: want the frozen listeners' gap of at least %v", rep, freezeFor)
			}
			// Half the listeners were never frozen: the median listener
			// (nearest rank: the 4th of 8) did not suffer the freeze.
			if rep.GapMs.P50 >= float64(freezeFor.Milliseconds()) {
				t.Fatalf("report %+v: the listeners never frozen report a gap of the freeze", rep)
			}
			if rep.SilentAtEnd != 0 {
				t.Fatalf("report %+v: thawed listeners hear again by the end", rep)
			}
		})
	}
}

func TestReportWriteText(t *testing.T) {
	rep := &loadgen.Report{
		Listeners: 10, Connected: 9, Failed: 1, GapMs: loadgen.GapStats{P50: 40, P99: 2300, Max: 2512.4}, SilentAtEnd: 2,
		FramesReceived: 990, FramesLost: 10, FramesExpected: 1000, LossRatio: 0.01, Seconds: 2,
		Reconnects: 3, ReconnectsByReason: map[string]int64{"silent": 2, "going-away": 1}, Errors: map[string]int{"dial: timeout": 1},
	}
	var b strings.Builder
	rep.WriteText(&b)
	for _, want := range []string{
		"audible gap per listener: p50 40 ms, p99 2300 ms, longest 2512 ms; silent at the end 2\n",
		"frames received 990, lost 10 of 1000 expected (1.000%), late 0 over 2.0 s\n",
		"reconnects 3 (going-away 1, silent 2), listeners lost 0\n",
		"error x1: dial: timeout\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, b.String())
		}
	}
}

// startAvoidRouter is a router that answers /route?broadcast=live with
// urlA (its certificate hash hashA), or with b when asked to avoid urlA
// (counted in avoided, if not nil). It is closed at the test's end.
func startAvoidRouter(t *testing.T, urlA, hashA string, b *relay.Relay, avoided *atomic.Int64) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/route" || r.URL.Query().Get("broadcast") != "live" {
			http.NotFound(w, r)
			return
		}
		if slices.Contains(r.URL.Query()["avoid"], urlA) {
			if avoided != nil {
				avoided.Add(1)
			}
			fmt.Fprintf(w, `{"url": "http://%s/", "certificate_sha256": %q}`, b.Addr(), b.CertificateHash())
			return
		}
		fmt.Fprintf(w, `{"url": %q, "certificate_sha256": %q}`, urlA, hashA)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestRunReconnectAvoidsTheFailedRelay: the router has not noticed that
// edge A is gone and still answers it, unless asked to avoid it: the
// listeners that lost A pass avoid=A and come back on B.
func TestRunReconnectAvoidsTheFailedRelay(t *testing.T) {
	origin := startRelayAndPublisher(t, 1)
	a, stopA := startEdge(t, "127.0.0.1:0", origin)
	b, _ := startEdge(t, "127.0.0.1:0", origin)
	var avoided atomic.Int64
	srv := startAvoidRouter(t, fmt.Sprintf("http://%s/", a.Addr()), a.CertificateHash(), b, &avoided)
	window, faulted := faultMidWindow(300*time.Millisecond, stopA)
	rep, err := loadgen.Run(context.Background(), loadgen.Options{
		Router: srv.URL, Broadcast: "live", Listeners: 10, Shards: 2, Duration: 3 * time.Second, Late: time.Hour,
		Reconnect: true, IdleTimeout: idleTimeout, Logger: testutil.Logger(),
		Window: window,
	})
	faulted()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("report: %+v", rep)
	if rep.Connected != 10 || rep.ListenersLost != 0 || rep.Reconnects < 10 || rep.SilentAtEnd != 0 {
		t.Fatalf("report %+v: want 10 connected, none lost or silent at the end, at least 10 reconnects", rep)
	}
	if n := avoided.Load(); n < 10 {
		t.Fatalf("%d route requests avoided A, want at least the 10 reconnects", n)
	}
	if st := b.Stats(); st.SessionsTotal < 10 {
		t.Fatalf("edge B saw %d sessions, want the 10 listeners", st.SessionsTotal)
	}
}

// udpProxy forwards UDP between clients and a relay until blackholed:
// then it drops everything, both ways, as a relay killed or cut off does
// (nothing closes the listeners' connections). With proxyFaults it also
// delays every datagram and drops chosen ones from the relay.
type udpProxy struct {
	conn    *net.UDPConn
	dead    atomic.Bool
	dropped atomic.Int64 // datagrams from the relay dropped by proxyFaults.Drop
}

// proxyFaults is what a udpProxy does besides forwarding.
type proxyFaults struct {
	// Delay holds every datagram, both ways, this long (one way).
	Delay time.Duration
	// Drop, if set, makes a client's dropper when the client's first
	// datagram comes: it is asked about every datagram from the relay to
	// that client, and true drops it.
	Drop func() func(b []byte) bool
}

func startUDPProxy(t *testing.T, to net.Addr) *udpProxy {
	return startFaultyUDPProxy(t, to, proxyFaults{})
}

func startFaultyUDPProxy(t *testing.T, to net.Addr, f proxyFaults) *udpProxy {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	p := &udpProxy{conn: c}
	var mu sync.Mutex
	up := map[string]*net.UDPConn{}
	t.Cleanup(func() {
		c.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, u := range up {
			u.Close()
		}
	})
	// send writes b now, or a copy of it after f.Delay.
	send := func(b []byte, write func([]byte)) {
		if f.Delay <= 0 {
			write(b)
			return
		}
		b = slices.Clone(b)
		time.AfterFunc(f.Delay, func() { write(b) })
	}
	go func() {
		buf := make([]byte, 65536)
		for {
			n, from, err := c.ReadFromUDP(buf)
			if err != nil {
				return
			}
			if p.dead.Load() {
				continue
			}
			mu.Lock()
			u := up[from.String()]
			if u == nil {
				if u, err = net.DialUDP("udp", nil, to.(*net.UDPAddr)); err != nil {
					mu.Unlock()
					continue
				}
				up[from.String()] = u
				drop := func([]byte) bool { return false }
				if f.Drop != nil {
					drop = f.Drop()
				}
				go func() {
					b := make([]byte, 65536)
					for {
						n, err := u.Read(b)
						if err != nil {
							return
						}
						if drop(b[:n]) {
							p.dropped.Add(1)
							continue
						}
						send(b[:n], func(b []byte) {
							if !p.dead.Load() {
								_, _ = c.WriteToUDP(b, from)
							}
						})
					}
				}()
			}
			mu.Unlock()
			send(buf[:n], func(b []byte) { _, _ = u.Write(b) })
		}
	}()
	return p
}

// TestRunCountsARelayGoneSilent: the relay goes silent without closing
// anything (killed, or cut off), and the listeners, not reconnecting, keep
// their subscriptions for the 30 s idle timeout, past the end of the run.
// They hear nothing from the cut to the end, and the report says so: all
// silent at the end, a gap at least that long, and what the publisher sent
// meanwhile lost. (The load generator used to report no gap, no loss and
// nothing ended here.)
func TestRunCountsARelayGoneSilent(t *testing.T) {
	r := startRelayAndPublisher(t, 1)
	p := startUDPProxy(t, r.Addr())
	var cut time.Time
	start := time.Now()
	window, faulted := faultMidWindow(300*time.Millisecond, func() {
		p.dead.Store(true)
		cut = time.Now()
	})
	rep, err := loadgen.Run(context.Background(), loadgen.Options{
		URL: fmt.Sprintf("http://%s/", p.conn.LocalAddr()), CertificateHash: r.CertificateHash(), Broadcast: "live",
		Listeners: 6, Shards: 2, Duration: 2500 * time.Millisecond, Late: time.Hour, Logger: testutil.Logger(),
		Window: window,
	})
	faulted()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("report: %+v", rep)
	if rep.Connected != 6 || rep.Ended != 0 {
		t.Fatalf("report %+v: want 6 connected, their subscriptions still open at the end", rep)
	}
	silentFor := start.Add(time.Duration(rep.Seconds * float64(time.Second))).Sub(cut)
	if rep.SilentAtEnd != 6 || rep.GapMs.P50 < float64(silentFor.Milliseconds()) {
		t.Fatalf("report %+v: want all 6 silent at the end, each for at least %v", rep, silentFor)
	}
	perListener := int64((silentFor - client.DefaultSilence) / (20 * time.Millisecond))
	if rep.FramesLost < 6*perListener/2 || rep.LossRatio <= 0 {
		t.Fatalf("report %+v: want about %d frames lost per listener", rep, perListener)
	}
}

// TestRunReconnectsWhenSilent: edge A goes silent without closing
// anything (blackholed), long before the 30 s idle timeout; the listeners
// notice the silence, reconnect through the router avoiding A, and end up
// on B, having heard nothing for about the silence timeout. With 1 s
// groups (50 frames of 20 ms) the silence falls within a group: the next
// frame, not the next group, fails to come.
func TestRunReconnectsWhenSilent(t *testing.T) {
	for _, fpg := range []int{1, 50} {
		t.Run(fmt.Sprintf("%d frames per group", fpg), func(t *testing.T) { testRunReconnectsWhenSilent(t, fpg) })
	}
}

func testRunReconnectsWhenSilent(t *testing.T, fpg int) {
	origin := startRelayAndPublisher(t, fpg)
	a, _ := startEdge(t, "127.0.0.1:0", origin)
	b, _ := startEdge(t, "127.0.0.1:0", origin)
	p := startUDPProxy(t, a.Addr())
	srv := startAvoidRouter(t, fmt.Sprintf("http://%s/", p.conn.LocalAddr()), a.CertificateHash(), b, nil)
	rep, err := loadgen.Run(context.Background(), loadgen.Options{
		// 8 s: after the cut at 1.5 s and the silence, time for the
		// listeners' new dials on a loaded machine (with 4 s, some were
		// still dialling at the end: "dial: context canceled").
		Router: srv.URL, Broadcast: "live", Listeners: 6, Shards: 2, Duration: 8 * time.Second, Late: time.Hour,
		Reconnect: true, Logger: testutil.Logger(),
		Window: func(start bool) {
			if start {
				// 1.5 s: after the first 1 s group began (a publisher with
				// no subscriber skips whole groups).
				time.AfterFunc(1500*time.Millisecond, func() { p.dead.Store(true) })
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("report: %+v", rep)
	if rep.Connected != 6 || rep.ListenersLost != 0 || rep.SilentAtEnd != 0 || rep.ReconnectsByReason["silent"] < 6 {
		t.Fatalf("report %+v: want the 6 listeners back after noticing the silence", rep)
	}
	// Silent for at least the silence timeout; far less than the idle
	// timeout (30 s), which the run is too short to reach.
	if rep.GapMs.Max < float64(client.DefaultSilence.Milliseconds()) || rep.GapMs.Max > 7000 {
		t.Fatalf("report %+v: want the longest gap from the silence timeout to the run's length", rep)
	}
	if st := b.Stats(); st.SessionsTotal < 6 {
		t.Fatalf("edge B saw %d sessions, want the 6 listeners", st.SessionsTotal)
	}
}

// TestRunFirstConnectAvoidsADeadRelay: the router still names a relay
// that is gone (blackholed) when the listeners start; the first attempt
// times out there, the next asks the router to avoid it and connects to B.
func TestRunFirstConnectAvoidsADeadRelay(t *testing.T) {
	origin := startRelayAndPublisher(t, 1)
	a, _ := startEdge(t, "127.0.0.1:0", origin)
	b, _ := startEdge(t, "127.0.0.1:0", origin)
	p := startUDPProxy(t, a.Addr())
	p.dead.Store(true)
	srv := startAvoidRouter(t, fmt.Sprintf("http://%s/", p.conn.LocalAddr()), a.CertificateHash(), b, nil)
	rep, err := loadgen.Run(context.Background(), loadgen.Options{
		Router: srv.URL, Broadcast: "live", Listeners: 4, Duration: 500 * time.Millisecond, Late: time.Hour, Logger: testutil.Logger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Connected != 4 || rep.Failed != 0 || rep.FramesReceived == 0 {
		t.Fatalf("report %+v: want the 4 listeners connected to B", rep)
	}
	if st := b.Stats(); st.SessionsTotal < 4 {
		t.Fatalf("edge B saw %d sessions, want the 4 listeners", st.SessionsTotal)
	}
}
