package releases

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/internal/cli"
)

// memBook is a HistoryBook in memory.
type memBook struct{ h History }

func (m *memBook) Load(context.Context) (*History, error) { c := m.h; return &c, nil }
func (m *memBook) Record(_ context.Context, r Release) (*History, error) {
	m.h.add(r)
	c := m.h
	return &c, nil
}
func (m *memBook) RecordFailure(_ context.Context, a Attempt) (*History, error) {
	m.h.Failed = append([]Attempt{a}, m.h.Failed...)
	c := m.h
	return &c, nil
}

// build writes a fake relay build (an ELF header and tag) into dir.
func build(t *testing.T, dir, tag string) (path string, data []byte) {
	t.Helper()
	data = append([]byte("\x7fELF"), tag...)
	path = filepath.Join(dir, "relay-"+tag)
	if err := os.WriteFile(path, data, 0o755); err != nil {
		t.Fatal(err)
	}
	return path, data
}

func fileStore(t *testing.T) (*Store, string) {
	t.Helper()
	backend := filepath.Join(t.TempDir(), "backend")
	b, err := OpenBlobs(context.Background(), "file://"+backend, filepath.Join(t.TempDir(), "cache"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return &Store{Book: &memBook{}, Blobs: b, Now: func() time.Time { return time.Date(2026, 12, 3, 17, 0, 0, 0, time.UTC) }}, backend
}

// TestBlobsKeepBuildsByDigest: a build put in the backend comes back from
// another cache, checked against its digest; a corrupted object is
// refused, not handed to a box.
func TestBlobsKeepBuildsByDigest(t *testing.T) {
	ctx := context.Background()
	s, backend := fileStore(t)
	_, data := build(t, t.TempDir(), "a")
	sha, err := s.Blobs.Put(ctx, data)
	if err != nil || sha != Digest(data) {
		t.Fatalf("put: %s %v", sha, err)
	}
	other, err := OpenBlobs(ctx, "file://"+backend, filepath.Join(t.TempDir(), "cache2"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	p, err := other.Path(ctx, sha)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(p)
	if string(got) != string(data) {
		t.Fatalf("read back %q, want %q", got, data)
	}
	if st, _ := os.Stat(p); st.Mode()&0o100 == 0 {
		t.Errorf("cached build %s is not executable: %v", p, st.Mode())
	}
	if _, err := other.Path(ctx, Digest([]byte("never put"))); !errors.Is(err, ErrMissing) {
		t.Errorf("a build never put: %v, want ErrMissing", err)
	}
	// Corrupt the object in the backend; a fresh cache must refuse it.
	obj := filepath.Join(backend, BlobPrefix, sha)
	if err := os.WriteFile(obj, []byte("\x7fELFevil"), 0o644); err != nil {
		t.Fatal(err)
	}
	third, _ := OpenBlobs(ctx, "file://"+backend, filepath.Join(t.TempDir(), "cache3"))
	defer third.Close()
	if _, err := third.Path(ctx, sha); err == nil || !strings.Contains(err.Error(), "corrupt") {
		t.Errorf("a corrupted build in the backend: %v, want it refused as corrupt", err)
	}
	if _, err := OpenBlobs(ctx, "https://api.pulumi.com", t.TempDir()); err == nil || !strings.Contains(err.Error(), "bucket backend") {
		t.Errorf("a Pulumi Cloud backend: %v, want a one-line refusal", err)
	}
}

// TestResolveTakesTheRecordedRelease: a fleet without a release takes
// the build it is given as its first (recorded only when first is set);
// after that the recorded release is what every command gets, another
// build given by hand is refused pointing to fleet rollout, and the same
// build given by hand is fine.
func TestResolveTakesTheRecordedRelease(t *testing.T) {
	ctx := context.Background()
	s, _ := fileStore(t)
	dir := t.TempDir()
	pathA, dataA := build(t, dir, "a")
	pathB, dataB := build(t, dir, "b")

	// preview on a fleet without a release: used, not recorded.
	r, err := s.Resolve(ctx, pathA, false)
	if err != nil || r.Digest != Digest(dataA) {
		t.Fatalf("preview without a release: %+v %v", r, err)
	}
	if h, _ := s.Book.Load(ctx); h.Current() != "" {
		t.Fatalf("preview recorded %s", h.Current())
	}
	// fleet up: recorded as the first.
	if r, err = s.Resolve(ctx, pathA, true); err != nil || r.Digest != Digest(dataA) || !strings.Contains(r.Note, "first release") {
		t.Fatalf("up without a release: %+v %v", r, err)
	}
	h, _ := s.Book.Load(ctx)
	if h.Current() != Digest(dataA) || h.Releases[0].How != HowFirst || h.Releases[0].By == "" {
		t.Fatalf("history after the first up: %+v", h)
	}
	// A rollout recorded B: no flag now takes B from the backend.
	if _, err := s.Blobs.Put(ctx, dataB); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Record(ctx, Digest(dataB), "v2", HowRollout); err != nil {
		t.Fatal(err)
	}
	r, err = s.Resolve(ctx, "", true)
	if err != nil || r.Digest != Digest(dataB) {
		t.Fatalf("after the rollout, no flag: %+v %v, want B", r, err)
	}
	if got, _ := os.ReadFile(r.Path); string(got) != string(dataB) {
		t.Fatalf("the path given holds %q, want B's bytes", got)
	}
	// A by hand: refused, a usage error pointing to fleet rollout.
	_, err = s.Resolve(ctx, pathA, true)
	var u *cli.UsageError
	if !errors.As(err, &u) || !strings.Contains(err.Error(), "fleet rollout") || !strings.Contains(err.Error(), "--relay-binary") {
		t.Fatalf("the old build by hand: %v, want a usage error naming the flag and fleet rollout", err)
	}
	if h, _ := s.Book.Load(ctx); h.Current() != Digest(dataB) || h.Releases[0].Previous != Digest(dataA) {
		t.Fatalf("a refused build changed the history: %+v", h)
	}
	// B by hand: fine.
	if r, err = s.Resolve(ctx, pathB, true); err != nil || r.Digest != Digest(dataB) {
		t.Fatalf("the release by hand: %+v %v", r, err)
	}
}

// TestHistoryKeepsTheLastReleases: each build once, newest first, Keep
// of them; a rollback to an old release makes it the newest again.
func TestHistoryKeepsTheLastReleases(t *testing.T) {
	var h History
	for i := range Keep + 2 {
		h.add(Release{Digest: strings.Repeat(string(rune('a'+i)), 64)})
	}
	if len(h.Releases) != Keep || h.Current() != strings.Repeat("g", 64) || h.Releases[0].Previous != strings.Repeat("f", 64) {
		t.Fatalf("history %+v", h.Releases)
	}
	h.add(Release{Digest: strings.Repeat("e", 64), How: HowRollback})
	if h.Current() != strings.Repeat("e", 64) || h.Releases[1].Digest != strings.Repeat("g", 64) || len(h.Releases) != Keep {
		t.Fatalf("after a rollback to e: %+v", h.Releases)
	}
	for i, r := range h.Releases {
		for _, o := range h.Releases[i+1:] {
			if o.Digest == r.Digest {
				t.Fatalf("%s listed twice", r.Digest)
			}
		}
	}
}
