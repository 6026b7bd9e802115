package fleethosts

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/relayfleet/relayfleet/infra/releases"
	"github.com/relayfleet/relayfleet/internal/cli"
	"github.com/relayfleet/relayfleet/provision"
)

// book is a releases.HistoryBook in memory.
type book struct{ h releases.History }

func (b *book) Load(context.Context) (*releases.History, error) { c := b.h; return &c, nil }
func (b *book) Record(_ context.Context, r releases.Release) (*releases.History, error) {
	r.Previous = b.h.Current()
	b.h.Releases = append([]releases.Release{r}, b.h.Releases...)
	c := b.h
	return &c, nil
}
func (b *book) RecordFailure(_ context.Context, a releases.Attempt) (*releases.History, error) {
	b.h.Failed = append([]releases.Attempt{a}, b.h.Failed...)
	c := b.h
	return &c, nil
}

// TestRollToRecordsOnce: a completed rollout records its build and
// refreshes the stack; running it again (every process on it already)
// records nothing new but still refreshes.
func TestRollToRecordsOnce(t *testing.T) {
	ctx := context.Background()
	blobs, err := releases.OpenBlobs(ctx, "file://"+filepath.Join(t.TempDir(), "backend"), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer blobs.Close()
	b := &book{}
	store := &releases.Store{Book: b, Blobs: blobs}
	refreshed := 0
	refresh := func(context.Context) error { refreshed++; return nil }
	sha := strings.Repeat("ab", 32)
	fr := provision.FleetRollout{Boxes: 1, Binary: []byte("\x7fELF")}
	var out strings.Builder
	for range 2 {
		if err := rollTo(ctx, &out, nil, store, refresh, fr, sha, "v2", releases.HowRollout); err != nil {
			t.Fatal(err)
		}
	}
	if len(b.h.Releases) != 1 || b.h.Current() != sha || refreshed != 2 {
		t.Fatalf("two runs of one rollout: history %+v, %d refreshes; want one release, two refreshes\n%s", b.h.Releases, refreshed, out.String())
	}
	if !strings.Contains(out.String(), "the fleet's release already") {
		t.Errorf("the re-run does not say the release is recorded already:\n%s", out.String())
	}
}

// TestRollbackTarget: the release before the current one, or the one
// --to names; what cannot be rolled back to is said in one line.
func TestRollbackTarget(t *testing.T) {
	a, b, c := strings.Repeat("a", 64), strings.Repeat("b", 64), "abc"+strings.Repeat("0", 61)
	h := &releases.History{Releases: []releases.Release{{Digest: b}, {Digest: a}, {Digest: c}}}
	if r, err := rollbackTarget(h, ""); err != nil || r.Digest != a {
		t.Errorf("default: %s %v, want the one before", r.Digest, err)
	}
	if r, err := rollbackTarget(h, "abc000"); err != nil || r.Digest != c {
		t.Errorf("--to abc000: %s %v", r.Digest, err)
	}
	var u *cli.UsageError
	for to, want := range map[string]string{"bbbbbb": "already", "cccccc": "no release", "aaaaaa": ""} {
		_, err := rollbackTarget(h, to)
		if want == "" {
			if err != nil {
				t.Errorf("--to %s: %v", to, err)
			}
			continue
		}
		if !errors.As(err, &u) || !strings.Contains(err.Error(), want) {
			t.Errorf("--to %s: %v, want a usage error with %q", to, err, want)
		}
	}
	if _, err := rollbackTarget(&releases.History{Releases: h.Releases[:1]}, ""); err == nil || !strings.Contains(err.Error(), "nothing to go back to") {
		t.Errorf("one release only: %v", err)
	}
	if err := CheckReleaseArg("abc"); err == nil {
		t.Error("3 digits passed")
	}
	if err := CheckReleaseArg("xyz123"); err == nil {
		t.Error("non-hex passed")
	}
}
