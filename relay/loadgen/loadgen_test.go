package loadgen_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/relay"
	"github.com/relayfleet/relayfleet/relay/loadgen"
	"github.com/relayfleet/relayfleet/relay/router"
)

func quietLogger() *slog.Logger {
	if os.Getenv("RELAY_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

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
	r, err := relay.Start(ctx, relay.Config{Listen: "127.0.0.1:0", Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- loadgen.Publish(ctx, fmt.Sprintf("http://%s/", r.Addr()), loadgen.PublishOptions{
			Broadcast: "live", FrameTime: 20 * time.Millisecond, FramesPerGroup: framesPerGroup, FrameSize: 100, Logger: quietLogger(),
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("publish: %v", err)
		}
		r.Close()
	})
	deadline := time.Now().Add(10 * time.Second)
	for r.Stats().Broadcasts == 0 {
		if time.Now().After(deadline) {
			t.Fatal("publisher never announced")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return r
}

// TestRunCountsWhatArrives: every listener connects and receives frames
// at the publisher's bitrate, none lost.
func TestRunCountsWhatArrives(t *testing.T) {
	for _, fpg := range []int{1, 5} {
		t.Run(fmt.Sprintf("%d frames per group", fpg), func(t *testing.T) {
			r := startRelayAndPublisher(t, fpg)
			rep, err := loadgen.Run(context.Background(), loadgen.Options{
				URL: fmt.Sprintf("http://%s/", r.Addr()), Broadcast: "live", Listeners: 20, Shards: 4,
				Duration: time.Second, Late: time.Hour, Logger: quietLogger(),
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
			if rep.FramesLost != 0 || rep.LateFrames != 0 {
				t.Fatalf("report %+v: frames lost or late on an idle loopback", rep)
			}
		})
	}
}

// TestRunFreezes: frozen listeners are reported apart and stop counting.
func TestRunFreezes(t *testing.T) {
	r := startRelayAndPublisher(t, 1)
	rep, err := loadgen.Run(context.Background(), loadgen.Options{
		URL: fmt.Sprintf("http://%s/", r.Addr()), Broadcast: "live", Listeners: 8, Shards: 4,
		Duration: time.Second, Freeze: 0.5, FreezeAt: 200 * time.Millisecond, Late: time.Hour, Logger: quietLogger(),
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
		Duration: 100 * time.Millisecond, Logger: quietLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Failed+rep.Ended != 3 || len(rep.Errors) == 0 {
		t.Fatalf("report %+v: want 3 failed with reasons", rep)
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
	rt, err := router.New(router.Options{File: path, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	rt.PollOnce(context.Background())
	srv := httptest.NewServer(rt)
	defer srv.Close()
	rep, err := loadgen.Run(context.Background(), loadgen.Options{
		Router: srv.URL, Broadcast: "live", Listeners: 5, Duration: 500 * time.Millisecond, Late: time.Hour, Logger: quietLogger(),
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
	before := runtime.NumGoroutine()
	func() {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		r, err := relay.Start(ctx, relay.Config{Listen: "127.0.0.1:0", Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		url := fmt.Sprintf("http://%s/", r.Addr())
		done := make(chan error, 1)
		go func() {
			done <- loadgen.Publish(ctx, url, loadgen.PublishOptions{Broadcast: "live", FrameTime: 20 * time.Millisecond, FramesPerGroup: 1, FrameSize: 64, Logger: quietLogger()})
		}()
		defer func() { cancel(); <-done }()
		for r.Stats().Broadcasts == 0 {
			time.Sleep(10 * time.Millisecond)
		}
		if _, err := loadgen.Run(ctx, loadgen.Options{
			URL: url, Broadcast: "live", Listeners: 6, Shards: 2, Duration: 300 * time.Millisecond,
			Freeze: 0.5, FreezeAt: 100 * time.Millisecond, Logger: quietLogger(),
		}); err != nil {
			t.Fatal(err)
		}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines left, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(20 * time.Millisecond)
	}
}
