package events

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/internal/testutil"
)

// TestOutcomes: each event's phase, boxes and next step as its record
// says after the reconcile, and only this run's actions.
func TestOutcomes(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	before := h.ev.UpAt().Add(-time.Hour)
	if _, err := h.r.Reconcile(ctx, before); err != nil {
		t.Fatal(err)
	}
	up := h.ev.UpAt()
	results, err := h.r.Reconcile(ctx, up)
	if err != nil {
		t.Fatal(err)
	}
	got := h.r.Outcomes(up, results)
	if len(got) != 1 || got[0].Event != h.ev.Name || got[0].Phase != Up || got[0].Boxes != 1 || got[0].Next == "" || got[0].Error != "" {
		t.Fatalf("outcomes %+v", got)
	}
	if len(got[0].Actions) == 0 {
		t.Errorf("no actions in %+v", got[0])
	}
	for _, a := range got[0].Actions {
		if !a.At.Equal(up) {
			t.Errorf("action %+v is not this run's", a)
		}
	}
	// A failed event: its error on one line; one no longer in the file:
	// no next step.
	got = h.r.Outcomes(up, []Result{{Event: "gone", Phase: Destroying, Err: errors.New("a\nb")}})
	if len(got) != 1 || got[0].Error != "a; b" || got[0].Next != "" || got[0].Boxes != 0 || got[0].Actions == nil {
		t.Errorf("outcomes %+v", got)
	}
	if got := h.r.Outcomes(up, nil); got == nil || len(got) != 0 {
		t.Errorf("no results: %#v, want an empty list (JSON [])", got)
	}
}

// TestReadRecordsEmpty: a backend with no records, and where it is.
func TestReadRecordsEmpty(t *testing.T) {
	pulumiCLI, err := program.FindPulumi("")
	if err != nil {
		testutil.Skipf(t, "%v (make pulumi)", err)
	}
	t.Setenv(program.PassphraseEnv, "")
	t.Setenv(program.BackendEnv, "")
	state := t.TempDir()
	recs, where, err := ReadRecords(context.Background(), StoreOptions{StateDir: state, Pulumi: pulumiCLI})
	if err != nil || len(recs) != 0 || where != "file://"+filepath.Join(state, "backend") {
		t.Errorf("records %v, where %q, err %v", recs, where, err)
	}
}
