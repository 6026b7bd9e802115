package relay_test

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/relay"
	"github.com/relayfleet/relayfleet/relay/loadgen"
)

// Environment of the listener process TestListenerFootprint starts: this
// test binary again, running only TestFootprintListeners.
const (
	envFootprintURL       = "RELAY_FOOTPRINT_URL"
	envFootprintListeners = "RELAY_FOOTPRINT_LISTENERS"
)

// footprintListeners is how many raw-QUIC listeners TestListenerFootprint
// connects: enough that a goroutine or a few KiB per session stand out of
// the relay's fixed overhead, few enough for -short.
const footprintListeners = 100

// Bounds per listener session (issue 17: at most 96 KiB of RSS per
// listener). Goroutines: quic-go's connection loop (packets are written
// from it: Config.SendQueue off, no send queue goroutine), the session's
// bidi accept loop, the announce stream the relay reads and the subscribe
// stream it reads; the uni-stream accept loop starts only for publishers,
// and a subscription's writer runs only while it has something to write
// (it was 7 per session: docs/benchmarks.md, "Memory per listener"). The
// slack is for writers caught mid-write. Heap: live
// bytes after a GC, about 33-39 KiB a session with the quic-go patch
// (45-50 without), nearly all of it quic-go's connection state; the bound
// catches a per-session buffer added, not noise (not checked under the
// race detector).
const (
	maxGoroutinesPerListener = 4.5
	maxHeapPerListenerKiB    = 64
	// maxTLSPerListenerKiB bounds what crypto/tls still holds per session
	// after the handshake: about 9-10 KiB with quic-go as released (its
	// tls.QUICConn, the handshake buffers, a tls.Config clone), under 1
	// with the patched copy in third_party/quic-go that drops them
	// (docs/quic-go-patch.md).
	maxTLSPerListenerKiB = 2
)

// footprintProfileRate is the heap profile sampling rate while
// TestListenerFootprint runs: fine enough to tell what crypto/tls holds
// per session.
const footprintProfileRate = 64

// TestListenerFootprint connects footprintListeners real QUIC listeners
// from another process (this test binary, TestFootprintListeners) to an
// in-process relay serving a paced publisher, and checks the relay's
// goroutines, live heap and what crypto/tls still holds per listener
// session (the quic-go patch, docs/quic-go-patch.md): only the relay's own
// count, since the listeners live elsewhere. RELAY_FOOTPRINT_HEAP=FILE
// writes a heap profile of every allocation at the measurement:
//
//	RELAY_FOOTPRINT_HEAP=/tmp/heap.pprof go test -run 'TestListenerFootprint$' -v ./relay/
func TestListenerFootprint(t *testing.T) {
	defer func(rate int) { runtime.MemProfileRate = rate }(runtime.MemProfileRate)
	runtime.MemProfileRate = footprintProfileRate // every allocation, near enough
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r := startRelay(t, relay.Config{MaxSessionsPerAddress: -1}) // every listener from 127.0.0.1
	pubCtx, stopPub := context.WithCancel(ctx)
	pubDone := make(chan error, 1)
	go func() {
		pubDone <- loadgen.Publish(pubCtx, relayURL(r, ""), loadgen.PublishOptions{
			Broadcast: "live", FrameTime: 120 * time.Millisecond, FramesPerGroup: 1, FrameSize: 600, Logger: quietLogger(),
		})
	}()
	defer func() { stopPub(); <-pubDone }()
	testutil.WaitFor(t, 10*time.Second, "the broadcast", func() bool { return r.Stats().Broadcasts == 1 })
	// The publisher's session, its track and the relay's fixed goroutines
	// are in the baseline.
	time.Sleep(500 * time.Millisecond)
	g0, heap0, used0, alloc0 := footprint()
	tls0 := heldBy(t, "crypto/tls.")

	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestFootprintListeners$", "-test.v")
	cmd.Env = append(os.Environ(), envFootprintURL+"="+relayURL(r, ""), envFootprintListeners+"="+strconv.Itoa(footprintListeners))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	connected := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "FOOTPRINT CONNECTED") {
				close(connected)
				break
			}
		}
		for sc.Scan() {
		}
	}()
	select {
	case <-connected:
	case <-ctx.Done():
		t.Fatal("the listener process did not connect its listeners")
	}
	// On a loaded machine (or under the race detector) a few listeners may
	// give up connecting: the figures are per session the relay holds.
	const enough = footprintListeners * 9 / 10
	testutil.WaitFor(t, 2*time.Minute, "the listeners' subscriptions", func() bool {
		st := r.Stats()
		return st.Sessions-1 >= enough && st.Subscribers >= enough
	})
	// A few groups to every listener: the writers have run, the streams
	// opened and closed.
	frames0 := r.Stats().FramesOut
	testutil.WaitFor(t, 2*time.Minute, "three frames to every listener", func() bool {
		return r.Stats().FramesOut-frames0 >= 3*enough
	})
	sessions := r.Stats().Sessions - 1 // the publisher's is in the baseline
	// Writers run while they write (a burst every 120 ms; long under the
	// race detector): the fewest goroutines seen is what the sessions
	// hold between frames.
	fewest := math.MaxInt
	testutil.Poll(10*time.Second, func() bool {
		fewest = min(fewest, runtime.NumGoroutine())
		return float64(fewest-g0)/float64(max(sessions, 1)) <= maxGoroutinesPerListener
	})
	_, heap1, used1, alloc1 := footprint()
	tls1 := heldBy(t, "crypto/tls.")
	if f := os.Getenv("RELAY_FOOTPRINT_HEAP"); f != "" { // a heap profile of the relay's process
		if err := writeHeapProfile(f); err != nil {
			t.Error(err)
		}
	}
	if sessions < enough {
		t.Fatalf("only %d listener sessions at the measurement, want %d", sessions, footprintListeners)
	}
	n := float64(sessions)
	gPer := float64(fewest-g0) / n
	heapPer := float64(int64(heap1)-int64(heap0)) / n / 1024
	usedPer := float64(int64(used1)-int64(used0)) / n / 1024
	allocPer := float64(int64(alloc1)-int64(alloc0)) / n / 1024
	tlsPer := (tls1 - tls0) / n / 1024
	t.Logf("per listener session: %.2f goroutines, %.1f KiB live heap (%.1f KiB of it allocated by crypto/tls), goroutine stacks %.1f KiB used, %.1f KiB allocated (%d listeners, %s)",
		gPer, heapPer, tlsPer, usedPer, allocPer, sessions, runtime.Version())
	if tlsPer > maxTLSPerListenerKiB {
		t.Errorf("crypto/tls holds %.1f KiB per listener session after the handshake, want at most %d (is the quic-go replace in go.mod gone?)", tlsPer, maxTLSPerListenerKiB)
	}
	if gPer > maxGoroutinesPerListener {
		t.Errorf("%.2f goroutines per listener session, want at most %.1f", gPer, maxGoroutinesPerListener)
	}
	if !raceEnabled && heapPer > maxHeapPerListenerKiB {
		t.Errorf("%.1f KiB live heap per listener session, want at most %d", heapPer, maxHeapPerListenerKiB)
	}
}

// footprint is the process's goroutines, live heap, and goroutine stacks
// (used: what the last GC scanned; allocated: the stack spans) after a GC.
func footprint() (goroutines int, heap, stackUsed, stackAlloc uint64) {
	runtime.GC()
	runtime.GC() // sync.Pool keeps its contents through one GC
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	sm := []metrics.Sample{{Name: "/gc/scan/stack:bytes"}}
	metrics.Read(sm)
	return runtime.NumGoroutine(), ms.HeapAlloc, sm[0].Value.Uint64(), ms.StackInuse
}

// heldBy estimates the live heap bytes allocated with a function whose
// name starts with prefix on the stack, from the heap profile as of the
// last GC (footprint runs two), scaled for sampling as pprof does. A
// profile it cannot read (still growing past the room given, or empty:
// profiling off) fails the test: a 0 would pass any bound.
func heldBy(t testing.TB, prefix string) float64 {
	t.Helper()
	n, _ := runtime.MemProfile(nil, true)
	recs := make([]runtime.MemProfileRecord, n+64)
	n, ok := runtime.MemProfile(recs, true)
	if !ok {
		t.Fatalf("heap profile unavailable: it holds more than the %d records read", len(recs))
	}
	if n == 0 {
		t.Fatalf("heap profile empty (MemProfileRate %d): nothing to measure %s by", runtime.MemProfileRate, prefix)
	}
	var total float64
	for _, r := range recs[:n] {
		objs, bytes := r.InUseObjects(), r.InUseBytes()
		if objs <= 0 || bytes <= 0 {
			continue
		}
		frames := runtime.CallersFrames(r.Stack())
		for {
			f, more := frames.Next()
			if strings.HasPrefix(f.Function, prefix) {
				avg := float64(bytes) / float64(objs)
				total += float64(bytes) / (1 - math.Exp(-avg/float64(runtime.MemProfileRate)))
				break
			}
			if !more {
				break
			}
		}
	}
	return total
}

func writeHeapProfile(name string) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// TestFootprintListeners is TestListenerFootprint's listener process; it
// does nothing unless started by it.
func TestFootprintListeners(t *testing.T) {
	url := testutil.HelperProcess(t, envFootprintURL, "TestListenerFootprint")
	n, err := strconv.Atoi(os.Getenv(envFootprintListeners))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, err = loadgen.Run(ctx, loadgen.Options{
		URL: url, Broadcast: "live", Listeners: n, Duration: 90 * time.Second, Parallel: 16, Logger: quietLogger(),
		Window: func(start bool) {
			if start {
				fmt.Println("FOOTPRINT CONNECTED")
			}
		},
	})
	if err != nil && ctx.Err() == nil {
		t.Fatal(err)
	}
}
