package router_test

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/internal/cli"
	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/relay"
	"github.com/relayfleet/relayfleet/relay/router"
)

// TestFlagsErrors: relay router's bad flags are usage errors naming the
// flag; files that cannot be used are plain errors.
func TestFlagsErrors(t *testing.T) {
	dir := t.TempDir()
	relays := filepath.Join(dir, "relays.json")
	writeFile(t, relays)
	ok := router.Flags{Listen: "127.0.0.1:0", Relays: relays, LogLevel: "info", Poll: time.Second}
	for _, tc := range []struct {
		set   func(*router.Flags)
		want  string
		usage bool
	}{
		{func(f *router.Flags) { f.Listen = "" }, "--listen is required (HOST:PORT)", true},
		{func(f *router.Flags) { f.Relays = "" }, "--relays is required", true},
		{func(f *router.Flags) { f.CertFile = "c" }, "--cert and --key must be given together", true},
		{func(f *router.Flags) { f.CertFile, f.KeyFile, f.TLSKeyFile = "c", "k", "t" }, "give --cert/--key or --tls-key, not both", true},
		{func(f *router.Flags) { f.Listen = "x" }, `--listen "x": want HOST:PORT`, true},
		{func(f *router.Flags) { f.LogLevel = "loud" }, `flag --log-level: "loud" is not debug, info, warn or error`, true},
		{func(f *router.Flags) { f.Rate = -1 }, "--rate -1: want requests a second, 0 or more (0: no limit)", true},
		{func(f *router.Flags) { f.Rate, f.Burst = 10, 0 }, "--burst 0: want 1 or more", true},
		{func(f *router.Flags) { f.TLSKeyFile = filepath.Join(dir, "none") }, "--tls-key: open ", false},
		{func(f *router.Flags) { f.Relays = filepath.Join(dir, "none") }, "", false},
	} {
		f := ok
		tc.set(&f)
		err := f.Run(context.Background(), &bytes.Buffer{})
		var ue *cli.UsageError
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) || errors.As(err, &ue) != tc.usage {
			t.Errorf("%+v: %v\nwant %q (usage error %v)", f, err, tc.want, tc.usage)
		}
	}
}

// TestFlagsRunServesUntilCancel: with --tls-key the router logs the key's
// SPKI pin, and Run ends cleanly when its context does.
func TestFlagsRunServesUntilCancel(t *testing.T) {
	dir := t.TempDir()
	relays, keyFile := filepath.Join(dir, "relays.json"), filepath.Join(dir, "key")
	writeFile(t, relays)
	key, err := relay.WriteTLSKey(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	spki, err := relay.SPKIHash(key.Public())
	if err != nil {
		t.Fatal(err)
	}
	var log testutil.SyncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		f := router.Flags{Listen: "127.0.0.1:0", Relays: relays, LogLevel: "info", Poll: time.Second, TLSKeyFile: keyFile}
		done <- f.Run(ctx, &log)
	}()
	testutil.WaitFor(t, 10*time.Second, "the router's listening line", func() bool {
		return strings.Contains(log.String(), "msg=\"router listening\"")
	})
	if !strings.Contains(log.String(), "tls=self-signed spki_sha256="+spki) {
		t.Errorf("log: %s", log.String())
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run still serving 10s after its context ended")
	}
}
