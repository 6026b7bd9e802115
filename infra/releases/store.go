package releases

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"

	"github.com/relayfleet/relayfleet/internal/cli"
	"github.com/relayfleet/relayfleet/internal/text"
	"github.com/relayfleet/relayfleet/provision"
)

// HistoryBook reads and writes a fleet's History (Book does it in the
// Pulumi backend).
type HistoryBook interface {
	Load(ctx context.Context) (*History, error)
	Record(ctx context.Context, r Release) (*History, error)
	RecordFailure(ctx context.Context, a Attempt) (*History, error)
}

// Store is a fleet's release state in its backend: the History (Book)
// and the builds (Blobs).
type Store struct {
	Book  HistoryBook
	Blobs *Blobs
	// Now is the clock releases are stamped with (nil: time.Now).
	Now func() time.Time
	// Fence, when set, is checked before the history is written: the
	// fleet's lease is still this command's (lease.Held.Check).
	Fence func(ctx context.Context) error
}

func (s *Store) fence(ctx context.Context) error {
	if s.Fence == nil {
		return nil
	}
	if err := s.Fence(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("release history: not written: %w", err)
	}
	return nil
}

// OpenStore opens fleet's release state: its history in ws (a workspace
// of Project) and the builds in the backend at backendURL, cached under
// cacheDir. Close it when done.
func OpenStore(ctx context.Context, ws auto.Workspace, fleet, backendURL, cacheDir string) (*Store, error) {
	blobs, err := OpenBlobs(ctx, backendURL, cacheDir)
	if err != nil {
		return nil, err
	}
	return &Store{Book: NewBook(ws, fleet), Blobs: blobs}, nil
}

// Close closes the builds' bucket.
func (s *Store) Close() error { return s.Blobs.Close() }

func (s *Store) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now().UTC().Truncate(time.Second)
}

// Resolved is the relay build a command puts on boxes.
type Resolved struct {
	// Path is a file holding the build; Digest its SHA-256.
	Path, Digest string
	// Note, when not "", says where the build came from, for the
	// operator (the recorded release taken over the build beside the
	// command, or a fleet's first release recorded).
	Note string
}

// Resolve is the relay build a command that creates or converges boxes
// puts on them: the fleet's recorded release, whatever binary lies
// beside the command. flagValue is its --relay-binary: a build other
// than the recorded one is refused (a new build goes through fleet
// rollout); the recorded one is taken (and kept in the backend, when the
// backend had lost it). A fleet without a release takes flagValue, or
// the build beside the command, as its first: recorded when first is
// set (fleet up, converge), used unrecorded when not (preview).
func (s *Store) Resolve(ctx context.Context, flagValue string, first bool) (Resolved, error) {
	h, err := s.Book.Load(ctx)
	if err != nil {
		return Resolved{}, err
	}
	current := h.Current()
	if current != "" && flagValue == "" {
		p, err := s.Blobs.Path(ctx, current)
		if errors.Is(err, ErrMissing) {
			return Resolved{}, fmt.Errorf("the fleet's release %s is recorded but its build is not kept in the backend: give the build with --relay-binary", text.ShortSHA(current))
		}
		if err != nil {
			return Resolved{}, err
		}
		r := Resolved{Path: p, Digest: current}
		if beside, err := provision.RelayBinary(""); err == nil {
			if data, err := os.ReadFile(beside); err == nil && Digest(data) != current {
				r.Note = fmt.Sprintf("relay build: the fleet's release %s (%s), not %s beside this command (%s); a new build goes through fleet rollout", text.ShortSHA(current), s.version(h, current), beside, text.ShortSHA(Digest(data)))
			}
		}
		return r, nil
	}
	path, data, err := provision.ReadRelay(flagValue)
	if err != nil {
		return Resolved{}, err
	}
	sha := Digest(data)
	if current != "" && sha != current {
		return Resolved{}, cli.Usagef("flag --relay-binary: %s is build %s, but the fleet runs release %s: a new build reaches the fleet through fleet rollout --relay-binary %s", path, text.ShortSHA(sha), text.ShortSHA(current), path)
	}
	r := Resolved{Path: path, Digest: sha}
	if current == sha || first {
		// Kept in the backend before any box gets it, so that every
		// machine finds the build the boxes run.
		if _, err := s.Blobs.Put(ctx, data); err != nil {
			return Resolved{}, err
		}
	}
	if current == "" && first {
		rel := Release{Digest: sha, Version: BuildVersion(path), At: s.now(), By: Who(), How: HowFirst}
		if err := s.fence(ctx); err != nil {
			return Resolved{}, err
		}
		if _, err := s.Book.Record(ctx, rel); err != nil {
			return Resolved{}, err
		}
		r.Note = fmt.Sprintf("relay build: %s (%s) recorded as the fleet's first release", text.ShortSHA(sha), orUnknown(rel.Version))
	}
	return r, nil
}

// version is the recorded version of digest in h.
func (s *Store) version(h *History, digest string) string {
	if r := h.Find(digest); r != nil {
		return orUnknown(r.Version)
	}
	return "version unknown"
}

func orUnknown(v string) string {
	if v == "" {
		return "version unknown"
	}
	return v
}

// BuildVersion is a relay build's own version string (its --version
// output: "relay VERSION"), or "" when it does not say within 5 s.
func BuildVersion(path string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "--version").Output()
	if err != nil {
		return ""
	}
	f := strings.Fields(string(out))
	if len(f) != 2 || f[0] != "relay" {
		return ""
	}
	return f[1]
}

// Record makes digest (a build kept in the backend) the fleet's release,
// how (HowRollout or HowRollback); version is the build's.
func (s *Store) Record(ctx context.Context, digest, version, how string) (*History, error) {
	if err := s.fence(ctx); err != nil {
		return nil, err
	}
	return s.Book.Record(ctx, Release{Digest: digest, Version: version, At: s.now(), By: Who(), How: how})
}

// RecordFailure keeps a failed rollout of digest and why it failed.
func (s *Store) RecordFailure(ctx context.Context, digest, version, why string) (*History, error) {
	if err := s.fence(ctx); err != nil {
		return nil, err
	}
	return s.Book.RecordFailure(ctx, Attempt{Digest: digest, Version: version, At: s.now(), By: Who(), Why: why})
}
