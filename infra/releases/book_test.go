package releases_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/infra/releases"
	"github.com/relayfleet/relayfleet/internal/testutil"
)

// TestBookInTheBackend: the history written through the real Pulumi CLI
// is read back from another state dir on the same backend.
func TestBookInTheBackend(t *testing.T) {
	testutil.Short(t, "make test-long (runs the Pulumi CLI)")
	if _, err := program.FindPulumi(""); err != nil {
		testutil.Skipf(t, "%v (make pulumi)", err)
	}
	t.Setenv(program.PassphraseEnv, "the same passphrase on every machine")
	dir := filepath.Join(t.TempDir(), "backend")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	be := "file://" + dir
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	book := func(dir string) *releases.Book {
		st := &program.Stack{StateDir: dir, BackendURL: be}
		ws, err := st.ProjectWorkspace(ctx, releases.Project)
		if err != nil {
			t.Fatal(err)
		}
		return releases.NewBook(ws, "lab")
	}
	a, b := book(t.TempDir()), book(t.TempDir())
	if h, err := b.Load(ctx); err != nil || h.Current() != "" {
		t.Fatalf("a fleet without releases: %+v %v", h, err)
	}
	one, two := strings.Repeat("1", 64), strings.Repeat("2", 64)
	if _, err := a.Record(ctx, releases.Release{Digest: one, How: releases.HowFirst, By: "a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Record(ctx, releases.Release{Digest: two, How: releases.HowRollout, By: "a", Version: "v2"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.RecordFailure(ctx, releases.Attempt{Digest: strings.Repeat("3", 64), Why: "heartbeat gate failed"}); err != nil {
		t.Fatal(err)
	}
	h, err := b.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if h.Current() != two || len(h.Releases) != 2 || h.Releases[0].Previous != one || h.Releases[0].Version != "v2" || len(h.Failed) != 1 || h.Failed[0].Why != "heartbeat gate failed" {
		t.Fatalf("read from another state dir: %+v", h)
	}
}
