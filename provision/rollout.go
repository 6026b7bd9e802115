package provision

import (
	"github.com/relayfleet/relayfleet/internal/text"

	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Health checks one relay instance on a box after a restart. It is asked
// again while it fails (the HTTP side may lag READY), unless its error is
// a FinalHealthError: a check that did its own waiting.
type Health func(ctx context.Context, run Runner, instance string) error

// FinalHealthError is a Health error that asking again would not change
// (the check waited already): the restart counts as failed at once.
type FinalHealthError struct{ Err error }

func (e *FinalHealthError) Error() string { return e.Err.Error() }
func (e *FinalHealthError) Unwrap() error { return e.Err }

// HealthzOnBox asks the instance's /healthz from the box itself (the
// instance name carries its port), so that no relay port needs to be
// open to the operator.
func HealthzOnBox(ctx context.Context, run Runner, instance string) error {
	out, err := run.Run(ctx, onBox(instance, "GET", "/healthz", "tail -n1"), nil)
	if err != nil {
		return fmt.Errorf("%s /healthz: %w", instance, err)
	}
	if strings.TrimSpace(string(out)) != "ok" {
		return fmt.Errorf("%s /healthz answered %q", instance, strings.TrimSpace(string(out)))
	}
	return nil
}

// RolloutResult is one box's rollout.
type RolloutResult struct {
	From, To string
	// Restarted are the instances restarted on the new release, in order.
	Restarted []string
	// RolledBack is set when an instance failed its check and the box went
	// back to From.
	RolledBack bool
	// Resumed is set when current already pointed at To but processes
	// still ran another release (a rollout cut off before): those were
	// restarted, and From is the release current pointed at before To.
	Resumed bool
	// already are the instances found running To at the start: a
	// rollback restarts them too.
	already []string
	// kept are the instances found drained on purpose (draining without
	// a rollout's mark): each is drained again after its restart.
	kept map[string]bool
}

// Rollout moves one box to a new relay build, one process at a time: it
// uploads the release, switches current to it, then restarts each
// instance whose process does not run it yet (Releases.Running: a re-run
// after a rollout was cut off resumes where it stopped, even though
// current already points at the new release) and waits until systemd has
// its READY and health says it serves, before the next. The other processes keep serving throughout.
// When an instance fails, the box switches back to the previous release,
// restarts the instances already moved, and Rollout returns the error.
// drain, when set, is called before each restart: mark it draining and
// move its listeners elsewhere (Move.Out), make before break; undrain
// after it passed its check. The rollback, and the undrain of an instance
// drained but not restarted, run on a fresh context: a rollout cut off by
// Ctrl-C (ctx cancelled) still puts the box back as it was.
func Rollout(ctx context.Context, run Runner, rel Releases, binary []byte, instances []string, health Health, drain, undrain func(ctx context.Context, instance string) error) (*RolloutResult, error) {
	if health == nil {
		health = HealthzOnBox
	}
	from, _, err := rel.Current(ctx, run)
	if err != nil {
		return nil, err
	}
	to, _, err := rel.Install(ctx, run, binary)
	if err != nil {
		return nil, err
	}
	r := &RolloutResult{From: from, To: to}
	// What each process runs, not only where current points, decides what
	// is left to do: a rollout cut off after the switch left processes on
	// the old release (and maybe one draining), which this one finishes.
	runs, err := rel.Running(ctx, run, instances)
	if err != nil {
		return r, err
	}
	var todo []string
	for _, inst := range instances {
		if runs[inst] == to {
			r.already = append(r.already, inst)
		} else {
			todo = append(todo, inst)
		}
	}
	if len(todo) == 0 {
		if from != to {
			// Every process runs to already (a rollback cut off after
			// the switch back): point current at it again.
			_, err = rel.Activate(ctx, run, to)
		}
		r.From = to
		return r, err
	}
	if from == to {
		r.Resumed = true
		if _, r.From, err = rel.Current(ctx, run); err != nil {
			return r, err
		}
	}
	if drain != nil {
		if r.kept, err = drainedOnPurpose(ctx, run, rel, todo); err != nil {
			return r, err
		}
	}
	if _, err := rel.Activate(ctx, run, to); err != nil {
		return r, err
	}
	for _, inst := range todo {
		if drain != nil {
			// The mark first: a rollout cut off after its drain is
			// finished by converge, which undrains only what a rollout
			// marked (drainmark.go). One drained on purpose keeps no
			// mark: it stays draining.
			if !r.kept[inst] {
				if err := rel.MarkRolloutDrain(ctx, run, inst); err != nil {
					return r, r.rollback(ctx, run, rel, health, "", undrain, err)
				}
			}
			if err := drain(ctx, inst); err != nil {
				return r, r.rollback(ctx, run, rel, health, r.undrainable(inst), undrain, fmt.Errorf("drain %s: %w", inst, err))
			}
		}
		err := restartChecked(ctx, run, inst, health)
		r.Restarted = append(r.Restarted, inst)
		if err != nil {
			return r, r.rollback(ctx, run, rel, health, "", undrain, err)
		}
		switch {
		case r.kept[inst]:
			if err := DrainOnBox(ctx, run, inst, true); err != nil {
				return r, fmt.Errorf("drain %s again (drained on purpose before the rollout): %w", inst, err)
			}
			continue
		case undrain != nil:
			if err := undrain(ctx, inst); err != nil {
				return r, fmt.Errorf("undrain %s: %w", inst, err)
			}
		}
		// Restarted and admitting: no rollout drain of it (this one's,
		// or a cut-off one's) is left to finish.
		if err := rel.ClearRolloutDrain(ctx, run, inst); err != nil {
			return r, err
		}
	}
	if _, err := rel.Prune(ctx, run); err != nil {
		return r, err
	}
	return r, nil
}

func restartChecked(ctx context.Context, run Runner, inst string, health Health) error {
	if _, err := run.Run(ctx, "systemctl restart "+text.ShellQuote(inst), nil); err != nil {
		return fmt.Errorf("restart %s: %w", inst, err)
	}
	if err := waitActive(ctx, run, inst, 20*time.Second); err != nil {
		return err
	}
	var err error
	for range healthTries { // READY came first; give the HTTP side a moment
		if err = health(ctx, run, inst); err == nil {
			return nil
		}
		var final *FinalHealthError
		if errors.As(err, &final) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(healthRetry):
		}
	}
	return err
}

// healthTries is how often a restarted instance's health is asked, every
// healthRetry, before it counts as failed.
var (
	healthTries = 25
	healthRetry = 200 * time.Millisecond
)

// undrainable is inst unless it was drained on purpose ("": a rollback
// leaves it draining).
func (r *RolloutResult) undrainable(inst string) string {
	if r.kept[inst] {
		return ""
	}
	return inst
}

// drainedOnPurpose are the instances draining without a rollout's mark.
func drainedOnPurpose(ctx context.Context, run Runner, rel Releases, instances []string) (map[string]bool, error) {
	draining, err := DrainingInstances(ctx, run, instances)
	if err != nil {
		return nil, err
	}
	marked, err := rel.RolloutDrained(ctx, run)
	if err != nil {
		return nil, err
	}
	kept := map[string]bool{}
	for _, inst := range draining {
		if !slices.Contains(marked, inst) {
			kept[inst] = true
		}
	}
	return kept, nil
}

// RollbackTimeout bounds a rollback, which runs on a context of its own.
const RollbackTimeout = 5 * time.Minute

// rollback returns the box to r.From and restarts what was moved; drained,
// when set, is an instance drained but not restarted, made admitting
// again. It runs on a fresh context (ctx's values, not its cancellation).
func (r *RolloutResult) rollback(ctx context.Context, run Runner, rel Releases, health Health, drained string, undrain func(context.Context, string) error, cause error) error {
	r.RolledBack = true
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), RollbackTimeout)
	defer cancel()
	if drained != "" && undrain != nil {
		if err := undrain(ctx, drained); err != nil {
			cause = fmt.Errorf("%w; undrain %s: %v", cause, drained, err)
		} else if err := rel.ClearRolloutDrain(ctx, run, drained); err != nil {
			cause = fmt.Errorf("%w; %v", cause, err)
		}
	}
	if r.From == "" {
		return fmt.Errorf("%w; no previous release to roll back to", cause)
	}
	if _, err := rel.Activate(ctx, run, r.From); err != nil {
		return fmt.Errorf("%w; rollback failed: %v", cause, err)
	}
	for _, inst := range append(append([]string(nil), r.already...), r.Restarted...) {
		if err := restartChecked(ctx, run, inst, health); err != nil {
			return fmt.Errorf("%w; rolled back, but %v", cause, err)
		}
	}
	// Restarted, each admits again: no rollout drain is left to finish;
	// one drained on purpose is drained again.
	for _, inst := range r.Restarted {
		if r.kept[inst] {
			if err := DrainOnBox(ctx, run, inst, true); err != nil {
				return fmt.Errorf("%w; rolled back, but drain %s again: %v", cause, inst, err)
			}
			continue
		}
		if err := rel.ClearRolloutDrain(ctx, run, inst); err != nil {
			return fmt.Errorf("%w; rolled back, but %v", cause, err)
		}
	}
	return fmt.Errorf("%w; rolled back to %s", cause, text.ShortSHA(r.From))
}

// ActiveInstances lists the relay instances active on a box.
func ActiveInstances(ctx context.Context, run Runner) ([]string, error) {
	out, err := run.Run(ctx, "systemctl list-units --type=service --all --plain --no-legend --no-pager 'relay@*.service'", nil)
	if err != nil {
		return nil, fmt.Errorf("list relay instances: %w", err)
	}
	return parseActiveUnits(string(out)), nil
}

// DrainOnBox marks a relay instance draining (on) or admitting again,
// asked from the box itself: a draining relay refuses new sessions and
// reports headroom 0, so the router sends new listeners elsewhere while
// the instance's open sessions are served on. A relay build without
// /drain is left as it is.
func DrainOnBox(ctx context.Context, run Runner, instance string, on bool) error {
	method := "DELETE"
	if on {
		method = "POST"
	}
	out, err := run.Run(ctx, onBox(instance, method, "/drain", "head -n1"), nil)
	if err != nil {
		return fmt.Errorf("drain %s: %w", instance, err)
	}
	status := strings.TrimSpace(string(out))
	switch {
	case strings.Contains(status, " 200 "):
		return nil
	case strings.Contains(status, " 404 ") || strings.Contains(status, " 405 "):
		return nil // a build from before /drain: restarted without draining
	}
	return fmt.Errorf("drain %s: relay answered %q", instance, status)
}

// BoxListeners sums the listeners of every relay instance on a box.
func BoxListeners(ctx context.Context, run Runner, instances []string) (int64, error) {
	var total int64
	for _, inst := range instances {
		p := processStatus(ctx, run, inst)
		if p.Error != "" {
			return 0, fmt.Errorf("%s: %s", inst, p.Error)
		}
		total += p.Listeners
	}
	return total, nil
}

// onBox is a shell command that sends one HTTP/1.0 request to a relay
// instance from the box itself (the instance name carries its port) and
// pipes the answer through filter.
func onBox(instance, method, path, filter string) string {
	port := strings.TrimSuffix(strings.TrimPrefix(instance, "relay@"), ".service")
	return fmt.Sprintf(`exec 3<>/dev/tcp/127.0.0.1/%s 2>/dev/null && printf '%s %s HTTP/1.0\r\n\r\n' >&3 && %s <&3`, text.ShellQuote(port), method, path, filter)
}
