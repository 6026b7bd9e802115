package events

import (
	"context"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/internal/testutil"
)

// heartStore is a memStore that keeps the heartbeat.
type heartStore struct {
	memStore
	beat Beat
}

func (h *heartStore) Beat(_ context.Context, at time.Time, ok bool) error {
	h.beat.Run = at
	if ok {
		h.beat.OK = at
	}
	return nil
}

func (h *heartStore) LastBeat(context.Context) (Beat, error) { return h.beat, nil }

// TestReconcileBeats: a reconcile that finished writes the heartbeat on
// the wall clock, not the simulated one it ran for; one with an error
// moves Run but not OK; the records and the event's record follow the
// file (its start, end and drain time).
func TestReconcileBeats(t *testing.T) {
	h := newHarness(t)
	hs := &heartStore{}
	h.r.Store = hs
	wall := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	h.r.WallClock = func() time.Time { return wall }

	rec := h.run(t, h.ev.UpAt().Add(-time.Hour))
	if !hs.beat.OK.Equal(wall) || !hs.beat.Run.Equal(wall) {
		t.Fatalf("after a clean reconcile: beat %+v, want run and ok at %s", hs.beat, wall)
	}
	if !rec.Start.Equal(h.ev.Start.Time) || !rec.End.Equal(h.ev.End.Time) || rec.DrainTime != h.ev.DrainTime {
		t.Fatalf("record start/end/drain %s %s %s, want the file's %s %s %s", rec.Start, rec.End, rec.DrainTime.D(), h.ev.Start, h.ev.End, h.ev.DrainTime.D())
	}

	okAt := wall
	wall = wall.Add(time.Minute)
	h.stacks.failUp = 1
	h.run(t, h.ev.UpAt())
	if !hs.beat.Run.Equal(wall) || !hs.beat.OK.Equal(okAt) {
		t.Fatalf("after a failed reconcile: beat %+v, want run %s and ok still %s", hs.beat, wall, okAt)
	}
}

// TestPulumiStoreHeartbeat: the beat goes through the real Pulumi CLI
// into a stack of its own and is read back from another state dir; a
// failed run moves only Run; the lease shows while a reconcile holds it.
func TestPulumiStoreHeartbeat(t *testing.T) {
	testutil.Short(t, "make test-long (runs the Pulumi CLI)")
	be := sharedBackend(t)
	ctx := context.Background()
	a, b := pulumiStore(t, t.TempDir(), be), pulumiStore(t, t.TempDir(), be)
	if got, err := b.LastBeat(ctx); err != nil || !got.Run.IsZero() || !got.OK.IsZero() {
		t.Fatalf("before any beat: %+v, %v", got, err)
	}
	t1 := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	if err := a.Beat(ctx, t1, true); err != nil {
		t.Fatal(err)
	}
	t2 := t1.Add(time.Minute)
	if err := a.Beat(ctx, t2, false); err != nil {
		t.Fatal(err)
	}
	got, err := b.LastBeat(ctx)
	if err != nil || !got.Run.Equal(t2) || !got.OK.Equal(t1) {
		t.Fatalf("LastBeat = %+v, %v; want run %s ok %s", got, err, t2, t1)
	}
	if until, err := b.LeaseUntil(ctx); err != nil || !until.IsZero() {
		t.Fatalf("no reconcile running: lease until %s, %v", until, err)
	}
	_, unlock, err := a.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	if until, err := b.LeaseUntil(ctx); err != nil || !until.After(time.Now()) {
		t.Fatalf("while a reconcile holds the lease: until %s, %v; want in the future", until, err)
	}
}
