package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestProbe: relay probe hears a relay serve's heartbeat and prints it as
// JSON; with the heartbeat off (nothing to subscribe to) it exits 1; a bad
// pin is a usage error.
func TestProbe(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	on, stopOn := serveInProcess(t, "--udp-buffer", "1MiB", "--heartbeat-interval", "30ms")
	defer stopOn()
	var out, errb bytes.Buffer
	if code := run(ctx, []string{"probe", on + "/", "--window", "500ms", "--json"}, &out, &errb); code != 0 {
		t.Fatalf("probe: exit %d: %s", code, errb.String())
	}
	var res struct {
		Groups int     `json:"groups"`
		Lost   int     `json:"lost"`
		Window float64 `json:"window_ms"`
	}
	if err := json.Unmarshal(out.Bytes(), &res); err != nil || res.Groups < 5 || res.Window != 500 {
		t.Errorf("probe --json printed %q (%v): want about 16 groups in 500 ms", out.String(), err)
	}

	off, stopOff := serveInProcess(t, "--udp-buffer", "1MiB", "--heartbeat-interval", "0")
	defer stopOff()
	out.Reset()
	errb.Reset()
	if code := run(ctx, []string{"probe", off + "/", "--window", "300ms"}, &out, &errb); code != 1 {
		t.Errorf("probe of a relay without heartbeat: exit %d, want 1: %s", code, errb.String())
	}
	if !strings.Contains(errb.String(), "relay probe: ") || !strings.Contains(errb.String(), "heartbeat") {
		t.Errorf("stderr %q", errb.String())
	}
	if _, stderr, code := relayCLI(t, "probe", on+"/", "--cert-sha256", "nothex"); code != 2 || !strings.Contains(stderr, "--cert-sha256") {
		t.Errorf("bad --cert-sha256: exit %d, %q", code, stderr)
	}
}
