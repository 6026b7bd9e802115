package provision

import (
	"github.com/relayfleet/relayfleet/internal/text"

	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestReleaseInstallActivateRollbackPrune(t *testing.T) {
	t.Parallel()
	run := sshRunner(t)
	ctx := context.Background()
	r := Releases{Root: t.TempDir()}

	bins := [][]byte{[]byte("#!/bin/sh\necho v1\n"), []byte("#!/bin/sh\necho v2\n"), []byte("#!/bin/sh\necho v3\n"), []byte("#!/bin/sh\necho v4\n"), []byte("#!/bin/sh\necho v5\n")}
	sha1, up, err := r.Install(ctx, run, bins[0])
	if err != nil || !up || sha1 != Digest(bins[0]) {
		t.Fatalf("Install = %s, %v, %v", sha1, up, err)
	}
	if _, up, _ := r.Install(ctx, run, bins[0]); up {
		t.Error("a release the box has was uploaded again")
	}
	got, _ := os.ReadFile(filepath.Join(r.Root, "releases", sha1, "relay"))
	if string(got) != string(bins[0]) {
		t.Errorf("release content %q", got)
	}
	if was, err := r.Activate(ctx, run, sha1); err != nil || was != "" {
		t.Fatalf("Activate = %q, %v", was, err)
	}
	out, err := run.Run(ctx, r.Root+"/current/relay", nil)
	if err != nil || string(out) != "v1\n" {
		t.Fatalf("current/relay = %q, %v", out, err)
	}

	var shas []string
	for _, b := range bins {
		sha, _, err := r.Install(ctx, run, b)
		if err != nil {
			t.Fatal(err)
		}
		shas = append(shas, sha)
		time.Sleep(20 * time.Millisecond) // distinct mtimes for Prune's order
	}
	if was, err := r.Activate(ctx, run, shas[1]); err != nil || was != sha1 {
		t.Fatalf("Activate v2 = %q, %v", was, err)
	}
	cur, prev, _ := r.Current(ctx, run)
	if cur != shas[1] || prev != sha1 {
		t.Errorf("current %s previous %s", text.ShortSHA(cur), text.ShortSHA(prev))
	}
	to, err := r.Rollback(ctx, run)
	if err != nil || to != sha1 {
		t.Fatalf("Rollback = %s, %v", text.ShortSHA(to), err)
	}
	if out, _ := run.Run(ctx, r.Root+"/current/relay", nil); string(out) != "v1\n" {
		t.Errorf("after rollback current/relay says %q", out)
	}
	// Five releases: v3, v4, v5 are the newest three; v1 is current and
	// v2 previous, so nothing else goes... until v1 and v2 are neither.
	removed, err := r.Prune(ctx, run)
	if err != nil || len(removed) != 0 {
		t.Errorf("Prune = %v, %v; want nothing removed", removed, err)
	}
	r.Activate(ctx, run, shas[4])
	r.Activate(ctx, run, shas[3])
	removed, err = r.Prune(ctx, run)
	if err != nil || strings.Join(removed, " ") != strings.Join([]string{shas[1], shas[0]}, " ") && strings.Join(removed, " ") != strings.Join([]string{shas[0], shas[1]}, " ") {
		t.Errorf("Prune removed %v, want v1 and v2", removed)
	}
	entries, _ := os.ReadDir(filepath.Join(r.Root, "releases"))
	var left []string
	for _, e := range entries {
		if e.IsDir() {
			left = append(left, e.Name())
		}
	}
	if len(left) != 3 {
		t.Errorf("%d releases left, want 3", len(left))
	}
	if _, err := r.Activate(ctx, run, strings.Repeat("ab", 32)); err == nil {
		t.Error("activating a release the box lacks succeeded")
	}
}

// stallingReader sends part of a binary, then blocks until its context
// ends: a connection cut mid-upload.
type stallingReader struct {
	data []byte
	ctx  context.Context
}

func (s *stallingReader) Read(p []byte) (int, error) {
	if len(s.data) > 0 {
		n := copy(p, s.data)
		s.data = s.data[n:]
		return n, nil
	}
	<-s.ctx.Done()
	return 0, io.ErrUnexpectedEOF
}

func TestReleaseCutMidUploadLeavesNothingHalfWritten(t *testing.T) {
	t.Parallel()
	run := sshRunner(t)
	r := Releases{Root: t.TempDir()}
	binary := make([]byte, 4<<20)
	for i := range binary {
		binary[i] = byte(i * 7)
	}
	sha := Digest(binary)
	// Run the upload script by hand with a reader that stalls half-way,
	// then cut it.
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, _, err := r.Install(ctx, stallRunner{run, &stallingReader{data: binary[:1<<20], ctx: ctx}}, binary)
	if err == nil {
		t.Fatal("a stalled upload succeeded")
	}
	if _, err := os.Stat(filepath.Join(r.Root, "releases", sha)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the release directory exists after a cut upload: %v", err)
	}
	// The next install cleans up and completes.
	got, up, err := r.Install(context.Background(), run, binary)
	if err != nil || !up || got != sha {
		t.Fatalf("Install after a cut = %v, %v", up, err)
	}
	matches, _ := filepath.Glob(filepath.Join(r.Root, "releases", ".upload.*"))
	if len(matches) != 0 {
		t.Errorf("leftover uploads: %v", matches)
	}
}

// stallRunner replaces a command's stdin with its own reader.
type stallRunner struct {
	Runner
	in io.Reader
}

func (s stallRunner) Run(ctx context.Context, cmd string, stdin io.Reader) ([]byte, error) {
	if stdin != nil {
		stdin = s.in
	}
	return s.Runner.Run(ctx, cmd, stdin)
}

func TestReleaseRootIsChecked(t *testing.T) {
	for _, root := range []string{"relative", "/opt/it's", "/opt/a b"} {
		if _, _, err := (Releases{Root: root}).Install(context.Background(), nil, nil); err == nil {
			t.Errorf("root %q accepted", root)
		}
	}
}

func TestReleaseCorruptUploadIsRefused(t *testing.T) {
	t.Parallel()
	run := sshRunner(t)
	r := Releases{Root: t.TempDir()}
	binary := []byte("#!/bin/sh\necho good\n")
	_, _, err := r.Install(context.Background(), stallRunner{run, strings.NewReader("#!/bin/sh\necho evil\n")}, binary)
	if err == nil || !strings.Contains(err.Error(), "upload is corrupt") {
		t.Fatalf("err = %v, want a corrupt upload", err)
	}
	if _, err := os.Stat(filepath.Join(r.Root, "releases", Digest(binary))); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a corrupt release was installed: %v", err)
	}
}
