package relay_test

import (
	"context"
	"runtime/debug"
	"testing"

	"github.com/relayfleet/relayfleet/relay"
)

// TestRunSetsGCPercent: Run sets the GC target to DefaultGCPercent, and
// leaves the one GOGC in the environment gave.
func TestRunSetsGCPercent(t *testing.T) {
	for _, tc := range []struct {
		name, env string
		want      int
	}{{"default", "", relay.DefaultGCPercent}, {"GOGC set", "100", 100}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("GOGC", tc.env)
			before := debug.SetGCPercent(100) // what GOGC=100 (or none) starts with
			defer debug.SetGCPercent(before)
			ctx, cancel := context.WithCancel(context.Background())
			got := make(chan int, 1)
			done := make(chan error, 1)
			go func() {
				done <- relay.Run(ctx, relay.Config{Listen: "127.0.0.1:0", Logger: quietLogger(), ShutdownGrace: -1}, func(*relay.Relay) {
					p := debug.SetGCPercent(100)
					debug.SetGCPercent(p)
					got <- p
				})
			}()
			p := <-got
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if p != tc.want {
				t.Fatalf("GC percent %d with GOGC=%q, want %d", p, tc.env, tc.want)
			}
		})
	}
}
