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

// CheckError is a restarted process that failed a check: the check's
// name, where, and the figure that failed it, for the line a rollout
// ends with ("heartbeat gate failed on 10.0.0.2 relay@4443.service: 0
// groups in 3s, want 20").
type CheckError struct {
	Check          string
	Host, Instance string
	Figure         string
	err            error // what the figure came from, if an error
}

// Unwrap is the error the figure came from, if any.
func (e *CheckError) Unwrap() error { return e.err }

func (e *CheckError) Error() string {
	where := strings.TrimSpace(e.Host + " " + e.Instance)
	if where == "" {
		return e.Check + " failed: " + e.Figure
	}
	return e.Check + " failed on " + where + ": " + e.Figure
}

// checkFailed is err as a CheckError of the instance on host: one of the
// check's own with the place filled in, or, when check is set, a new one
// named check whose figure is err's text (less the instance's name in
// front). Any other error is returned as it is.
func checkFailed(err error, check, host, inst string) error {
	if err == nil {
		return nil
	}
	var ce *CheckError
	if !errors.As(err, &ce) {
		if check == "" {
			return err
		}
		return &CheckError{Check: check, Host: host, Instance: inst, Figure: strings.TrimPrefix(err.Error(), inst+" "), err: err}
	}
	c := *ce
	if c.Host == "" {
		c.Host = host
	}
	if c.Instance == "" {
		c.Instance = inst
	}
	return &c
}

// RolloutResult is one box's rollout.
type RolloutResult struct {
	From, To string
	// Restarted are the instances restarted on the new release, in order.
	Restarted []string
	// RolledBack is set when the box went back to From: an instance
	// failed its check, or another box failed in a fleet rollout.
	RolledBack bool
	// RollbackErr is why the rollback did not finish (nil when it did or
	// none ran): processes may still run To.
	RollbackErr error
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
// uploads the release, then restarts each instance whose process does not
// run it yet (Releases.Running: a re-run after a rollout was cut off
// resumes where it stopped, even though current already points at the
// new release) and waits until systemd has its READY and health says it
// serves, before the next. The other processes keep serving throughout.
//
// The first instance restarted (the box's canary) runs the new release
// through a runtime drop-in (/run/systemd/system/INSTANCE.d/50-release.conf)
// while current still points at the old one: a crash or a reboot of
// another process meanwhile starts the old build. Only once the canary
// passed its checks does current move to the new release and the drop-in
// go. A drop-in left by a cut-off rollout is removed first.
//
// When an instance fails, the box goes back to the previous release: the
// drop-in removed, current back, the failed instance restarted, and the
// instances already moved moved back one at a time as they were moved
// (make before break); Rollout returns the error. drain, when set, is
// called before each restart: mark it draining and move its listeners
// elsewhere (Move.Out), make before break; undrain after it passed its
// check. The rollback, and the undrain of an instance drained but not
// restarted, run on a fresh context: a rollout cut off by Ctrl-C (ctx
// cancelled) still puts the box back as it was.
func Rollout(ctx context.Context, run Runner, rel Releases, binary []byte, instances []string, health Health, drain, undrain func(ctx context.Context, instance string) error) (*RolloutResult, error) {
	b := &boxRoll{run: run, rel: rel, health: health, drain: drain, undrain: undrain}
	return b.roll(ctx, Digest(binary), func(context.Context, string) ([]byte, error) { return binary, nil }, instances)
}

// boxRoll is one box's rollout: the box, how its processes are moved and
// checked, and once it ran, its result, which a rollback reverses.
type boxRoll struct {
	run            Runner
	rel            Releases
	health         Health
	drain, undrain func(ctx context.Context, instance string) error
	// gate, when set, is asked after a process restarted on the new
	// release passed health, before it admits again: its error fails it.
	gate func(ctx context.Context, instance string) error
	// passed, when set, is called once the box's first restarted process
	// admits again, before current moves: its error fails that process.
	passed func(ctx context.Context, instance string) error
	r      *RolloutResult
}

// roll is Rollout to the release to, whose bytes fetch gives when the box
// lacks them.
func (b *boxRoll) roll(ctx context.Context, to string, fetch func(context.Context, string) ([]byte, error), instances []string) (*RolloutResult, error) {
	run, rel := b.run, b.rel
	if b.health == nil {
		b.health = HealthzOnBox
	}
	from, _, err := rel.Current(ctx, run)
	if err != nil {
		return nil, err
	}
	if _, err := rel.InstallFrom(ctx, run, to, fetch); err != nil {
		return nil, err
	}
	r := &RolloutResult{From: from, To: to}
	b.r = r
	// A drop-in left by a rollout cut off before its canary passed goes
	// first: from here on a restart runs current, or this rollout's canary.
	if _, err := clearReleaseDropIns(ctx, run); err != nil {
		return r, err
	}
	// What each process runs, not only where current points, decides what
	// is left to do: a rollout cut off after the switch left processes on
	// the old release (and maybe one draining), which this one finishes.
	runs, err := rel.Running(ctx, run, instances)
	if err != nil {
		return r, err
	}
	todo, already, canary := rolloutOrder(instances, runs, from, to)
	r.already = already
	if len(todo) == 0 {
		r.From = to
		return r, nil
	}
	if !canary {
		r.Resumed = true
		if _, r.From, err = rel.Current(ctx, run); err != nil {
			return r, err
		}
	}
	if b.drain != nil {
		if r.kept, err = drainedOnPurpose(ctx, run, rel, todo); err != nil {
			return r, err
		}
	}
	for i, inst := range todo {
		if i == 0 && canary {
			if err := rel.tryRelease(ctx, run, inst, to); err != nil {
				return r, b.rollback(ctx, "", "", err)
			}
		}
		stage, err := b.step(ctx, inst, true)
		if stage >= stepRestart {
			r.Restarted = append(r.Restarted, inst)
		}
		switch stage {
		case stepMark:
			return r, b.rollback(ctx, "", "", err)
		case stepDrain:
			return r, b.rollback(ctx, r.undrainable(inst), "", err)
		case stepRestart:
			return r, b.rollback(ctx, "", inst, err)
		case stepAdmit:
			return r, err
		}
		if i > 0 {
			continue
		}
		if b.passed != nil {
			if err := b.passed(ctx, inst); err != nil {
				return r, b.rollback(ctx, "", "", err)
			}
		}
		if canary {
			// The canary passed: current moves, the drop-in goes (its
			// process runs on, its executable releases/TO/relay either way).
			if _, err := rel.Activate(ctx, run, to); err != nil {
				return r, b.rollback(ctx, "", "", err)
			}
			if _, err := clearReleaseDropIns(ctx, run); err != nil {
				return r, b.rollback(ctx, "", "", err)
			}
		}
	}
	if _, err := rel.Prune(ctx, run); err != nil {
		return r, err
	}
	return r, nil
}

// rolloutOrder splits a box's instances into those a rollout from -> to
// restarts, in order, and those already on to, which it leaves; canary is
// set when the first restart is a canary (current points elsewhere).
// When every process runs to already while current points elsewhere (a
// rollout cut off before its canary passed, a rollback cut off), the
// first is restarted as the canary again: nothing says it passed.
func rolloutOrder(instances []string, runs map[string]string, from, to string) (todo, already []string, canary bool) {
	for _, inst := range instances {
		if runs[inst] == to {
			already = append(already, inst)
		} else {
			todo = append(todo, inst)
		}
	}
	canary = from != to
	if canary && len(todo) == 0 && len(already) > 0 {
		todo, already = already[:1], already[1:]
	}
	return todo, already, canary
}

// stage is how far step got with a process.
type stage int

const (
	stepMark    stage = iota // marking its drain failed: nothing changed
	stepDrain                // draining or moving it out failed
	stepRestart              // its restart or a check failed
	stepAdmit                // it passed; admitting again failed
	stepDone
)

// step moves one process make before break: its drain marked (one drained
// on purpose gets no mark), drained and moved out (drain), restarted and
// checked (health, and the gate when forward), then admitting again (one
// drained on purpose draining again) and its mark cleared. Without drain
// it is restarted and checked as it is.
func (b *boxRoll) step(ctx context.Context, inst string, forward bool) (stage, error) {
	r := b.r
	if b.drain != nil {
		// The mark first: a rollout cut off after its drain is finished
		// by converge, which undrains only what a rollout marked
		// (drainmark.go).
		if !r.kept[inst] {
			if err := b.rel.MarkRolloutDrain(ctx, b.run, inst); err != nil {
				return stepMark, err
			}
		}
		if err := b.drain(ctx, inst); err != nil {
			return stepDrain, fmt.Errorf("drain %s: %w", inst, err)
		}
	}
	if err := restartChecked(ctx, b.run, inst, b.health); err != nil {
		return stepRestart, err
	}
	if forward && b.gate != nil {
		if err := b.gate(ctx, inst); err != nil {
			return stepRestart, err
		}
	}
	switch {
	case r.kept[inst]:
		if err := DrainOnBox(ctx, b.run, inst, true); err != nil {
			return stepAdmit, fmt.Errorf("drain %s again (drained on purpose before the rollout): %w", inst, err)
		}
		return stepDone, nil
	case b.undrain != nil:
		if err := b.undrain(ctx, inst); err != nil {
			return stepAdmit, fmt.Errorf("undrain %s: %w", inst, err)
		}
	}
	// Restarted and admitting: no rollout drain of it (this one's, or a
	// cut-off one's) is left to finish.
	if err := b.rel.ClearRolloutDrain(ctx, b.run, inst); err != nil {
		return stepAdmit, err
	}
	return stepDone, nil
}

func restartChecked(ctx context.Context, run Runner, inst string, health Health) error {
	// A build that exits before systemd's READY fails the restart
	// itself, or leaves the unit failed: the start check.
	if _, err := run.Run(ctx, "systemctl restart "+text.ShellQuote(inst), nil); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("restart %s: %w", inst, err)
		}
		return &CheckError{Check: "start", Instance: inst, Figure: "systemctl restart failed: " + text.OneLine(err), err: err}
	}
	if err := waitActive(ctx, run, inst, 20*time.Second); err != nil {
		if ctx.Err() != nil {
			return err
		}
		return &CheckError{Check: "start", Instance: inst, Figure: err.Error(), err: err}
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

// rollback returns the box to r.From after cause; drained, when set, is
// an instance drained but not restarted, made admitting again; failed,
// when set, the instance that failed its check, restarted at once. It
// runs on a fresh context (ctx's values, not its cancellation).
func (b *boxRoll) rollback(ctx context.Context, drained, failed string, cause error) error {
	r := b.r
	r.RolledBack = true
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), RollbackTimeout)
	defer cancel()
	if drained != "" && b.undrain != nil {
		if err := b.undrain(ctx, drained); err != nil {
			cause = fmt.Errorf("%w; undrain %s: %v", cause, drained, err)
		} else if err := b.rel.ClearRolloutDrain(ctx, b.run, drained); err != nil {
			cause = fmt.Errorf("%w; %v", cause, err)
		}
	}
	if err := b.back(ctx, failed); err != nil {
		return fmt.Errorf("%w; %v", cause, err)
	}
	return fmt.Errorf("%w; rolled back to %s", cause, text.ShortSHA(r.From))
}

// undo rolls a box that finished back to r.From, as rollback does, after
// another box failed.
func (b *boxRoll) undo(ctx context.Context) error {
	b.r.RolledBack = true
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), RollbackTimeout)
	defer cancel()
	return b.back(ctx, "")
}

// back puts the box on r.From: no release drop-in, current back, and each
// process found on or moved to r.To restarted on it, failed at once, the
// others moved out first, one at a time (step). Its error is set as
// r.RollbackErr.
func (b *boxRoll) back(ctx context.Context, failed string) (err error) {
	r := b.r
	defer func() { r.RollbackErr = err }()
	if r.From == "" {
		return errors.New("no previous release to roll back to")
	}
	if _, err := clearReleaseDropIns(ctx, b.run); err != nil {
		return fmt.Errorf("rollback failed: %v", err)
	}
	if _, err := b.rel.Activate(ctx, b.run, r.From); err != nil {
		return fmt.Errorf("rollback failed: %v", err)
	}
	for _, inst := range append(append([]string(nil), r.already...), r.Restarted...) {
		if inst != failed && b.drain != nil {
			if _, err := b.step(ctx, inst, false); err != nil {
				return fmt.Errorf("rolled back, but %v", err)
			}
			continue
		}
		if err := restartChecked(ctx, b.run, inst, b.health); err != nil {
			return fmt.Errorf("rolled back, but %v", err)
		}
		if !slices.Contains(r.Restarted, inst) {
			continue
		}
		// Restarted, it admits again: no rollout drain is left to
		// finish; one drained on purpose is drained again.
		if r.kept[inst] {
			if err := DrainOnBox(ctx, b.run, inst, true); err != nil {
				return fmt.Errorf("rolled back, but drain %s again: %v", inst, err)
			}
			continue
		}
		if err := b.rel.ClearRolloutDrain(ctx, b.run, inst); err != nil {
			return fmt.Errorf("rolled back, but %v", err)
		}
	}
	return nil
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
