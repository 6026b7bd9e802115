//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// procScanner runs scanProcs over every process again and again, and
// remembers each process where it found needle and each read error.
type procScanner struct {
	needle []byte
	mu     sync.Mutex
	hits   map[string]bool
	errs   map[string]bool
	scans  int
	pids   map[string]bool
}

func (s *procScanner) scanOnce() {
	dirs := procDirs()
	hits, errs := scanProcs(dirs, s.needle)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.scans++
	for _, d := range dirs {
		s.pids[d] = true
	}
	for _, h := range hits {
		s.hits[h.Line] = true
	}
	for _, err := range errs {
		s.errs[err.Error()] = true
	}
}

// run scans until ctx ends.
func (s *procScanner) run(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	for ctx.Err() == nil {
		s.scanOnce()
		time.Sleep(2 * time.Millisecond) // paces the scan: it polls /proc
	}
}

// TestE2ESecretNeverOnACommandLine: a cloud token set with fleet secret
// set, then carried by fleet events reconcile into an event's stack and
// its provider, never shows in any process's command line or environment
// (/proc/PID/cmdline is readable by every local user). The Automation
// API's SetConfig would put it in the pulumi CLI's argv; the scanner
// catches a process that lives a few milliseconds. Two canaries, one
// with the token on its command line and one in its environment, show
// first that the scan over every process sees a hit; a read error other
// than a vanished process's fails the test, since a process it cannot
// read could hold the token.
func TestE2ESecretNeverOnACommandLine(t *testing.T) {
	t.Parallel() // its own lab and fleet: see e2eLab
	cli, work, fleetBin, _ := e2eBuildSetup(t)
	state := filepath.Join(work, "state")
	const token = "hc-argv-0123456789abcdefSECRETtoken"

	// A Hetzner Cloud API that refuses everything: the reconcile opens the
	// event's stack with the token and its provider calls the API, which
	// is all this test needs to see.
	var apiCalls sync.Map
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		apiCalls.Store(r.Method+" "+r.URL.Path, r.Header.Get("Authorization") == "Bearer "+token)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, `{"error":{"code":"unauthorized","message":"test cloud refuses"}}`)
	}))
	defer api.Close()

	inv := filepath.Join(work, "lab.yaml")
	writeInventory(t, inv, 1, "small")
	// Cloud boxes need the admin's keys and ranges.
	data, err := os.ReadFile(inv)
	if err != nil {
		t.Fatal(err)
	}
	admin := "admin:\n  ranges: [192.0.2.0/24]\n  ssh_keys: [\"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGnd7BMg0cLrgCeNLFt8lkRmE//JWhgNuihOIjKtGw/o admin@example\"]\n"
	data = bytes.Replace(data, []byte("steady:\n"), []byte(admin+"steady:\n"), 1)
	if err := os.WriteFile(inv, data, 0o644); err != nil {
		t.Fatal(err)
	}
	evPath := filepath.Join(work, "events.yaml")
	ev := `version: 1
fleet: lab.yaml
events:
  - name: argv
    start: 2026-12-01T20:00:00Z
    end: 2026-12-01T21:00:00Z
    peak_listeners: 5000
    broadcast: live/argv
    burst:
      provider: hcloud
      shape: cx23
      location: fsn1
      max: 1
    lead_time: 10m
    drain_time: 5m
`
	if err := os.WriteFile(evPath, []byte(ev), 0o644); err != nil {
		t.Fatal(err)
	}

	// The canaries, before the real scan: a full scan must report each.
	argv, envCanary := startCanaries(t, token)
	hits, errs := scanProcs(procDirs(), []byte(token))
	for _, err := range errs {
		t.Errorf("scanning /proc with the canaries: %v", err)
	}
	checkCanaries(t, hits, argv, envCanary)
	if t.Failed() {
		t.FailNow()
	}
	argv.Kill()
	envCanary.Kill()

	sc := &procScanner{needle: []byte(token), hits: map[string]bool{}, errs: map[string]bool{}, pids: map[string]bool{}}
	ctx, cancel := context.WithCancel(context.Background())
	scanDone := make(chan struct{})
	go sc.run(ctx, scanDone)

	env := append(os.Environ(), "PULUMI_CONFIG_PASSPHRASE=", "HCLOUD_ENDPOINT="+api.URL, "HCLOUD_TOKEN=")
	set := exec.Command(fleetBin, "secret", "set", "hcloud-token", "--inventory", inv, "--state-dir", state, "--pulumi", cli)
	set.Stdin = strings.NewReader(token + "\n")
	set.Env = env
	if out, err := set.CombinedOutput(); err != nil {
		cancel()
		t.Fatalf("fleet secret set: %v: %s", err, out)
	}
	rec := exec.Command(fleetBin, "events", "reconcile", "--events", evPath, "--now", "2026-12-01T19:55:00Z",
		"--state-dir", state, "--pulumi", cli)
	rec.Env = env
	out, recErr := rec.CombinedOutput()
	cancel()
	<-scanDone
	t.Logf("reconcile (expected to fail against a refusing cloud): %v\n%s", recErr, out)
	if bytes.Contains(out, []byte(token)) {
		t.Errorf("the reconcile printed the token")
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	t.Logf("%d scans of /proc saw %d processes", sc.scans, len(sc.pids))
	for h := range sc.hits {
		t.Errorf("token found in %s", h)
	}
	for e := range sc.errs {
		t.Errorf("the scan could not read a process (not one that ended): %s", e)
	}
	// The token did reach the event's provider (so the path under test
	// really ran): the API saw it as a bearer token.
	sawToken := false
	apiCalls.Range(func(k, v any) bool {
		if v.(bool) {
			sawToken = true
		}
		return true
	})
	if !sawToken {
		t.Fatalf("the cloud API never saw the token: the reconcile did not carry it to the event's provider (output above)")
	}
}
