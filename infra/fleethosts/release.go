package fleethosts

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/relayfleet/relayfleet/infra/releases"
	"github.com/relayfleet/relayfleet/internal/cli"
	"github.com/relayfleet/relayfleet/internal/text"
	"github.com/relayfleet/relayfleet/provision"
)

// Rollout is fleet rollout: the build at binaryPath rolled over the
// steady hosts (fr, provision.RunRollout, reporting on w; with dryRun
// only its plan printed), kept in the backend first, and recorded as the fleet's release once every process
// runs it; a rollout that failed and rolled back is recorded as a failed
// attempt, with why, and the fleet's release stays.
func (f *Fleet) Rollout(ctx context.Context, w io.Writer, fr provision.FleetRollout, binaryPath string, dryRun bool) error {
	path, data, err := provision.ReadRelay(binaryPath)
	if err != nil {
		return err
	}
	targets, cleanup, err := f.SteadyTargets(ctx)
	if err != nil {
		return err
	}
	defer cleanup()
	if dryRun {
		fr.Binary = data
		plan, err := fr.Plan(ctx, targets)
		if err != nil {
			return err
		}
		provision.WritePlan(w, plan)
		return nil
	}
	store, err := f.Stack.Releases(ctx)
	if err != nil {
		return err
	}
	defer store.Close()
	h, err := store.Book.Load(ctx)
	if err != nil {
		return err
	}
	sha, err := store.Blobs.Put(ctx, data)
	if err != nil {
		return err
	}
	version := releases.BuildVersion(path)
	fmt.Fprintf(w, "release %s (%s) kept in the backend; the fleet's release is %s\n", text.ShortSHA(sha), orUnknown(version), describe(h, h.Current()))
	fr.Binary = data
	return rollTo(ctx, w, targets, store, f.Stack.RefreshState, fr, sha, version, releases.HowRollout)
}

// Rollback is fleet rollback: the steady hosts moved back to the release
// before the fleet's current one (to, a digest or a prefix of one from
// fleet releases, picks another), with a rollout's make-before-break
// moves and checks; its build comes from the backend, so no file is
// needed. It is recorded as the fleet's release.
func (f *Fleet) Rollback(ctx context.Context, w io.Writer, fr provision.FleetRollout, to string) error {
	targets, cleanup, err := f.SteadyTargets(ctx)
	if err != nil {
		return err
	}
	defer cleanup()
	store, err := f.Stack.Releases(ctx)
	if err != nil {
		return err
	}
	defer store.Close()
	h, err := store.Book.Load(ctx)
	if err != nil {
		return err
	}
	target, err := rollbackTarget(h, to)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "rollback: from %s to %s\n", describe(h, h.Current()), describe(h, target.Digest))
	// Boxes keep their last releases: only one that lacks it gets the
	// build, from the backend.
	fr.Binary, fr.Digest, fr.Fetch = nil, target.Digest, store.Blobs.Bytes
	return rollTo(ctx, w, targets, store, f.Stack.RefreshState, fr, target.Digest, target.Version, releases.HowRollback)
}

// CheckReleaseArg checks a release named by hand (fleet rollback --to):
// "" or 6 to 64 hex digits of a digest.
func CheckReleaseArg(s string) error {
	if s == "" {
		return nil
	}
	if len(s) < 6 || len(s) > 64 || strings.Trim(strings.ToLower(s), "0123456789abcdef") != "" {
		return fmt.Errorf("want at least 6 hex digits of a release's digest (fleet releases lists them), got %q", s)
	}
	return nil
}

// rollbackTarget is the release to roll back to: to (a digest prefix of a
// listed release other than the current one), or the one before the
// current.
func rollbackTarget(h *releases.History, to string) (releases.Release, error) {
	if len(h.Releases) == 0 {
		return releases.Release{}, errors.New("rollback: the fleet has no recorded release (fleet up records its first, fleet rollout the next)")
	}
	if to == "" {
		if len(h.Releases) < 2 {
			return releases.Release{}, fmt.Errorf("rollback: the fleet has had one release only (%s): nothing to go back to", text.ShortSHA(h.Current()))
		}
		return h.Releases[1], nil
	}
	var found []releases.Release
	for _, r := range h.Releases {
		if strings.HasPrefix(r.Digest, strings.ToLower(to)) {
			found = append(found, r)
		}
	}
	switch {
	case len(found) == 0:
		return releases.Release{}, cli.Usagef("flag --to: no release of the fleet starts with %q (fleet releases lists them)", to)
	case len(found) > 1:
		return releases.Release{}, cli.Usagef("flag --to: %q matches %d releases; give more digits", to, len(found))
	case found[0].Digest == h.Current():
		return releases.Release{}, cli.Usagef("flag --to: %s is the fleet's release already", text.ShortSHA(found[0].Digest))
	}
	return found[0], nil
}

// rollTo rolls the targets to sha and records the outcome.
func rollTo(ctx context.Context, w io.Writer, targets []provision.Target, store *releases.Store, refresh func(context.Context) error, fr provision.FleetRollout, sha, version, how string) error {
	err := provision.RunRollout(ctx, w, targets, fr)
	// Recorded on a context of its own: a rollout cut off by Ctrl-C
	// still says what happened.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	if err != nil {
		if _, rerr := store.RecordFailure(rctx, sha, version, err.Error()); rerr != nil {
			fmt.Fprintf(w, "could not record the failed attempt: %v\n", rerr)
		}
		return err
	}
	if cur, err := store.Book.Load(rctx); err == nil && cur.Current() == sha {
		// A re-run (or one that finished a cut-off rollout): the release
		// is recorded already.
		fmt.Fprintf(w, "every process runs %s, the fleet's release already\n", text.ShortSHA(sha))
	} else {
		h, err := store.Record(rctx, sha, version, how)
		if err != nil {
			return fmt.Errorf("every process runs %s, but recording it as the fleet's release failed (run the same command again to record it): %w", text.ShortSHA(sha), err)
		}
		fmt.Fprintf(w, "the fleet's release is now %s (%s), recorded in the backend; before it: %s\n", text.ShortSHA(sha), how, describe(h, h.Releases[0].Previous))
	}
	// The stack's Hosts learn the release their boxes run (Host.Read), so
	// that an up without refresh plans no update either.
	if err := refresh(rctx); err != nil {
		fmt.Fprintf(w, "warning: the stack was not refreshed (%v): fleet up will refresh it\n", err)
	}
	return nil
}

func describe(h *releases.History, digest string) string {
	if digest == "" {
		return "none recorded"
	}
	if r := h.Find(digest); r != nil {
		return fmt.Sprintf("%s (%s)", text.ShortSHA(digest), orUnknown(r.Version))
	}
	return text.ShortSHA(digest)
}

func orUnknown(v string) string {
	if v == "" {
		return "version unknown"
	}
	return v
}

// Releases is fleet releases: the fleet's recorded releases, newest
// first, with how many relay processes of its hosts (steady and events')
// run each, read over SSH, and its failed attempts. Processes on a build
// the history does not list are counted apart.
func (f *Fleet) Releases(ctx context.Context, w io.Writer) error {
	targets, cleanup, err := f.AllTargets(ctx)
	if err != nil {
		return err
	}
	defer cleanup()
	store, err := f.Stack.Releases(ctx)
	if err != nil {
		return err
	}
	defer store.Close()
	h, err := store.Book.Load(ctx)
	if err != nil {
		return err
	}
	counts, failed := RunningReleases(ctx, targets, f.Warnings)
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "RELEASE\tVERSION\tWHEN\tWHO\tHOW\tPROCESSES")
	listed := map[string]bool{}
	for i, r := range h.Releases {
		mark := ""
		if i == 0 {
			mark = " *"
		}
		listed[r.Digest] = true
		fmt.Fprintf(tw, "%s%s\t%s\t%s\t%s\t%s\t%d\n", text.ShortSHA(r.Digest), mark, orUnknown(r.Version), r.At.UTC().Format(time.RFC3339), r.By, r.How, counts[r.Digest])
	}
	for d, n := range counts {
		if !listed[d] {
			fmt.Fprintf(tw, "%s\t(not recorded)\t\t\t\t%d\n", text.ShortSHA(d), n)
		}
	}
	tw.Flush()
	if len(h.Releases) == 0 {
		fmt.Fprintln(w, "no release recorded yet: fleet up records the first")
	} else {
		fmt.Fprintln(w, "* the fleet's release: fleet up, converge and events put it on every box")
	}
	for _, a := range h.Failed {
		fmt.Fprintf(w, "failed: %s (%s) %s by %s: %s\n", text.ShortSHA(a.Digest), orUnknown(a.Version), a.At.UTC().Format(time.RFC3339), a.By, strings.Join(strings.Fields(a.Why), " "))
	}
	if failed > 0 {
		return &cli.ExitError{Code: provision.ExitHostsFailed, Msg: fmt.Sprintf("%d of %s could not be read", failed, text.Plural(len(targets), "host", "hosts"))}
	}
	return nil
}

// RunningReleases counts the relay processes of the targets by the
// release each runs (provision.Releases.Running); failed is how many
// boxes could not be read, each said on warn (nil: not said).
func RunningReleases(ctx context.Context, targets []provision.Target, warn io.Writer) (counts map[string]int, failed int) {
	counts = map[string]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, t := range targets {
		wg.Go(func() {
			insts, err := provision.ActiveInstances(ctx, t.Run)
			var runs map[string]string
			if err == nil {
				runs, err = provision.Releases{}.Running(ctx, t.Run, insts)
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if warn != nil {
					fmt.Fprintf(warn, "fleet: %s: %v\n", t.Host, err)
				}
				failed++
				return
			}
			for _, r := range runs {
				if r != "" {
					counts[r]++
				}
			}
		})
	}
	wg.Wait()
	return counts, failed
}
