package provision

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/relay/client"
)

// statsBox answers /stats with a certificate hash, NRestarts with
// *restarts and MemoryCurrent with *memory (0 when nil).
type statsBox struct {
	restarts *int
	memory   *int64
	// stats, when set, gives the /stats counters (a JSON object's
	// fields, without braces).
	stats func() string
}

func (b statsBox) Run(_ context.Context, cmd string, _ io.Reader) ([]byte, error) {
	if strings.Contains(cmd, "MemoryCurrent") {
		var m int64
		if b.memory != nil {
			m = *b.memory
		}
		return []byte(strconv.FormatInt(m, 10) + "\n"), nil
	}
	if strings.Contains(cmd, "NRestarts") {
		return []byte(strconv.Itoa(*b.restarts) + "\n"), nil
	}
	if strings.Contains(cmd, "/stats") {
		more := `,"admitting":true`
		if b.stats != nil {
			more = "," + b.stats()
		}
		return []byte(`{"certificate_sha256":"` + strings.Repeat("ab", 32) + `"` + more + `}`), nil
	}
	return nil, errors.New("unexpected command " + cmd)
}

// TestServiceProbeGate: a process that passes on the heartbeat passes; one
// that hears nothing (a build that pulls nothing from its origin) fails
// with the figure; the probe dials the box's address and the port of the
// instance, pinned by the hash the box reported.
func TestServiceProbeGate(t *testing.T) {
	n := 0
	target := Target{Host: Host{Name: "b1", Address: "10.0.0.2:22"}, Run: statsBox{restarts: &n}}
	var dialed client.ProbeOptions
	groups := 25
	s := ServiceProbe{probe: func(_ context.Context, o client.ProbeOptions) (client.ProbeResult, error) {
		dialed = o
		return client.ProbeResult{Groups: groups}, nil
	}}
	if err := s.Gate(context.Background(), target, "relay@4444.service"); err != nil {
		t.Fatalf("a process passing on the heartbeat: %v", err)
	}
	if dialed.URL != "https://10.0.0.2:4444/" || dialed.Dial.CertificateHash != strings.Repeat("ab", 32) || dialed.Window != 3*time.Second {
		t.Errorf("probe dialed %+v", dialed)
	}
	groups = 0
	err := s.Gate(context.Background(), target, "relay@4444.service")
	var ce *CheckError
	if !errors.As(err, &ce) || ce.Check != "heartbeat gate" || !strings.Contains(ce.Figure, "0 heartbeat groups in 3s through it, want at least 20") {
		t.Fatalf("a silent process: %v, want a heartbeat gate failure with the figure", err)
	}
}

// TestServiceProbeBake: the canary is judged against a process on the old
// build heard at the same time: as good passes, 5% more groups lost
// fails, a restart during the bake fails.
func TestServiceProbeBake(t *testing.T) {
	n := 0
	canary := Target{Host: Host{Name: "b1", Address: "10.0.0.2:22"}, Run: statsBox{restarts: &n}}
	old := Target{Host: Host{Name: "b2", Address: "10.0.0.3:22"}, Run: statsBox{restarts: new(int)}}
	lost := map[string]int{}
	s := ServiceProbe{BakeFor: 24 * time.Second,
		Baseline: func(Target, string) (Target, string, bool) { return old, "relay@4443.service", true },
		probe: func(_ context.Context, o client.ProbeOptions) (client.ProbeResult, error) {
			return client.ProbeResult{Groups: 200 - lost[o.URL], Lost: lost[o.URL]}, nil
		}}
	ctx := context.Background()
	lost["https://10.0.0.3:4443/"] = 1
	if err := s.Bake(ctx, canary, "relay@4443.service"); err != nil {
		t.Fatalf("a canary as good as the old build: %v", err)
	}
	lost["https://10.0.0.2:4443/"] = 10 // 5% of 200
	err := s.Bake(ctx, canary, "relay@4443.service")
	if err == nil || !strings.Contains(err.Error(), "canary bake failed") || !strings.Contains(err.Error(), "10 of 200 heartbeat groups lost") || !strings.Contains(err.Error(), "old build: 1 lost") {
		t.Fatalf("a canary dropping 5%%: %v", err)
	}
	lost["https://10.0.0.2:4443/"] = 0
	s.probe = func(_ context.Context, o client.ProbeOptions) (client.ProbeResult, error) {
		if strings.Contains(o.URL, "10.0.0.2") {
			n++ // the canary's unit restarted meanwhile
		}
		return client.ProbeResult{Groups: 200}, nil
	}
	if err := s.Bake(ctx, canary, "relay@4443.service"); err == nil || !strings.Contains(err.Error(), "restarted 1 time") {
		t.Fatalf("a canary that restarted during its bake: %v", err)
	}
}

// TestServiceProbeBakeMemory: a canary that grows far more than the old
// build over the bake (a leak) fails with both figures; growing like it
// passes.
func TestServiceProbeBakeMemory(t *testing.T) {
	var mem, baseMem int64 = 100 << 20, 100 << 20
	canary := Target{Host: Host{Name: "b1", Address: "10.0.0.2:22"}, Run: statsBox{restarts: new(int), memory: &mem}}
	old := Target{Host: Host{Name: "b2", Address: "10.0.0.3:22"}, Run: statsBox{restarts: new(int), memory: &baseMem}}
	grow := int64(0)
	s := ServiceProbe{BakeFor: 24 * time.Second,
		Baseline: func(Target, string) (Target, string, bool) { return old, "relay@4443.service", true },
		probe: func(_ context.Context, o client.ProbeOptions) (client.ProbeResult, error) {
			if strings.Contains(o.URL, "10.0.0.2") {
				mem += grow
			} else {
				baseMem += 10 << 20
			}
			return client.ProbeResult{Groups: 200}, nil
		}}
	grow = 20 << 20
	if err := s.Bake(context.Background(), canary, "relay@4443.service"); err != nil {
		t.Fatalf("a canary growing about as the old build: %v", err)
	}
	grow = 200 << 20
	err := s.Bake(context.Background(), canary, "relay@4443.service")
	if err == nil || !strings.Contains(err.Error(), "memory grew 200 MiB") || !strings.Contains(err.Error(), "the old build's 10 MiB") {
		t.Fatalf("a leaking canary: %v", err)
	}
}

// TestServiceProbeBakeListeners: the canary's own listeners are judged
// from its counters against the old build's over the same bake: sessions
// that ended (listeners that had to reconnect) and groups dropped. A
// canary whose listeners keep losing their sessions fails with both
// figures, one that drops 5% of groups fails, one like the old build
// passes, and one with too few listeners to judge passes on them.
func TestServiceProbeBakeListeners(t *testing.T) {
	type counters struct {
		sessions, total, out, dropped int
		refusing                      bool
	}
	var after atomic.Bool // the probes of both run at once
	box := func(before, then *counters) statsBox {
		return statsBox{restarts: new(int), stats: func() string {
			c := before
			if after.Load() {
				c = then
			}
			return fmt.Sprintf(`"sessions":%d,"sessions_total":%d,"groups_out":%d,"groups_dropped":%d,"admitting":%v`, c.sessions, c.total, c.out, c.dropped, !c.refusing)
		}}
	}
	cb, ca := &counters{}, &counters{}
	bb, ba := &counters{}, &counters{}
	canary := Target{Host: Host{Name: "b1", Address: "10.0.0.2:22"}, Run: box(cb, ca)}
	old := Target{Host: Host{Name: "b2", Address: "10.0.0.3:22"}, Run: box(bb, ba)}
	s := ServiceProbe{BakeFor: 24 * time.Second,
		Baseline: func(Target, string) (Target, string, bool) { return old, "relay@4443.service", true },
		probe: func(context.Context, client.ProbeOptions) (client.ProbeResult, error) {
			after.Store(true) // the bake's window passes
			return client.ProbeResult{Groups: 200}, nil
		}}
	bake := func() error {
		after.Store(false)
		return s.Bake(context.Background(), canary, "relay@4443.service")
	}
	// The old build: 50 listeners, 2 sessions ended (and the probe's).
	*bb, *ba = counters{50, 100, 1000, 0, false}, counters{50, 103, 2000, 0, false}
	*cb, *ca = counters{50, 100, 1000, 0, false}, counters{50, 104, 2000, 0, false}
	if err := bake(); err != nil {
		t.Fatalf("a canary whose listeners fare as on the old build: %v", err)
	}
	*ca = counters{50, 141, 2000, 0, false} // 40 sessions ended: 0.8 per listener
	err := bake()
	var ce *CheckError
	if !errors.As(err, &ce) || !strings.Contains(ce.Figure, "0.80 sessions ended per listener (50 listeners), the old build's 0.04") {
		t.Fatalf("a canary whose listeners keep reconnecting: %v", err)
	}
	*ca = counters{50, 104, 1950, 50, false} // 5% of groups dropped
	if err := bake(); err == nil || !strings.Contains(err.Error(), "5.0% of groups dropped, the old build's 0.0%") {
		t.Fatalf("a canary dropping 5%% of its listeners' groups: %v", err)
	}
	*cb, *ca = counters{5, 10, 100, 0, false}, counters{5, 20, 150, 10, false} // 5 listeners: too few to judge
	if err := bake(); err != nil {
		t.Fatalf("a canary with 5 listeners judged on them: %v", err)
	}
	ca.refusing = true // undrained, yet it admits nobody: the router sends it nothing
	if err := bake(); err == nil || !strings.Contains(err.Error(), "does not admit new sessions") {
		t.Fatalf("a canary that admits nobody after its undrain: %v", err)
	}
}
