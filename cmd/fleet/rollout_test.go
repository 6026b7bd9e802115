package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/relayfleet/relayfleet/provision"
	"github.com/relayfleet/relayfleet/relay/router"
)

func TestRolloutBadInput(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"bad router", []string{"rollout", "--inventory", "x", "--relay-binary", "y", "--router", "localhost:8080"}, `fleet rollout: flag --router: invalid value "localhost:8080": want an http:// or https:// URL, got "localhost:8080"` + "\n"},
		{"bad shed rate", []string{"rollout", "--inventory", "x", "--relay-binary", "y", "--shed-rate", "0"}, "fleet rollout: flag --shed-rate: 0 is out of range: want 1 to 100000\n"},
		{"bad shed wait", []string{"rollout", "--inventory", "x", "--relay-binary", "y", "--shed-wait", "0s"}, "fleet rollout: flag --shed-wait: 0s is out of range: want 1s to 1h\n"},
		{"bad rebalance rate", []string{"rollout", "--inventory", "x", "--relay-binary", "y", "--rebalance-rate", "-1"}, "fleet rollout: flag --rebalance-rate: -1 is out of range: want 1 to 100000\n"},
		{"bad router poll", []string{"rollout", "--inventory", "x", "--relay-binary", "y", "--router-poll", "0s"}, "fleet rollout: flag --router-poll: 0s is out of range: want 100ms to 1m\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, code := fleet(t, tc.args...)
			if code != 2 || out != "" || errOut != tc.want {
				t.Errorf("exit %d, stdout %q, stderr %q; want 2, nothing, %q", code, out, errOut, tc.want)
			}
		})
	}
}

// TestRoutersRoute asks a real router's GET /relays whether it still
// routes to a relay process: yes while it reports headroom, no once a poll
// saw it drained; a process no router lists is unknown.
func TestRoutersRoute(t *testing.T) {
	var draining atomic.Bool
	relay := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		headroom := 50
		if draining.Load() {
			headroom = 0
		}
		fmt.Fprintf(w, `{"sessions": 3, "headroom": %d, "certificate_sha256": "%s"}`, headroom, strings.Repeat("ab", 32))
	}))
	t.Cleanup(relay.Close)
	host, port, _ := net.SplitHostPort(relay.Listener.Addr().String())
	path := filepath.Join(t.TempDir(), "relays.json")
	data, _ := json.Marshal(router.File{Relays: []router.Relay{{URL: "http://" + relay.Listener.Addr().String() + "/", Stats: relay.URL + "/stats"}}})
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	rt, err := router.New(router.Options{File: path, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(rt)
	t.Cleanup(srv.Close)
	ctx := context.Background()
	rt.PollOnce(ctx)
	inst := "relay@" + port + ".service"
	routers := []string{srv.URL, srv.URL + "/"}
	if routed, known, err := routersRoute(ctx, nil, routers, host, inst); err != nil || !routed || !known {
		t.Fatalf("before the drain: routed %v known %v err %v; want routed", routed, known, err)
	}
	draining.Store(true)
	rt.PollOnce(ctx)
	if routed, known, err := routersRoute(ctx, nil, routers, host, inst); err != nil || routed || !known {
		t.Fatalf("after the drain: routed %v known %v err %v; want known, not routed", routed, known, err)
	}
	if _, known, err := routersRoute(ctx, nil, routers, "10.9.9.9", inst); err != nil || known {
		t.Fatalf("another host: known %v err %v", known, err)
	}
	if _, _, err := routersRoute(ctx, nil, []string{"http://127.0.0.1:1"}, host, inst); err == nil {
		t.Fatal("an unreachable router gave no error")
	}
}

func TestPrintBalance(t *testing.T) {
	var b bytes.Buffer
	printBalance(&b, []provision.ProcLoad{{Box: "a", Unit: "relay@4443.service", Sessions: 230}, {Box: "b", Unit: "relay@4443.service", Sessions: 10}},
		[]provision.ProcLoad{{Box: "a", Unit: "relay@4443.service", Sessions: 121}, {Box: "b", Unit: "relay@4443.service", Sessions: 119}})
	var rows []string
	for line := range strings.SplitSeq(strings.TrimSpace(b.String()), "\n") {
		rows = append(rows, strings.Join(strings.Fields(line), " "))
	}
	want := []string{"box process sessions before after", "a relay@4443.service 230 121", "b relay@4443.service 10 119", "mean 120.0 120.0"}
	if strings.Join(rows, "\n") != strings.Join(want, "\n") {
		t.Errorf("table:\n%s\nwant rows\n%s", b.String(), strings.Join(want, "\n"))
	}
}
