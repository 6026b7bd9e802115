package provision

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/relayfleet/relayfleet/internal/ctxtime"
	"github.com/relayfleet/relayfleet/internal/text"
)

// FleetRollout is the fleet-wide rollout policy around the per-box
// Rollout: which boxes go and when, how each process is moved out before
// its restart, when the fleet counts as serving again, what a failure
// stops, and the rebalancing after it.
//
// Boxes start in the order given, at most Boxes at once; each rolls one
// process at a time (Rollout). Each process is drained and its
// listeners moved to the other processes first (Move.Out, make before
// break), and after its restart it must answer /healthz and the fleet
// must serve ListenerFrac of the listeners it served before the drain
// again within ListenerWait. A box that fails rolls back (Rollout does,
// on a fresh context, so a cancelled rollout still puts it back); boxes
// not yet started are then skipped, so that a build that fails one box
// is not pushed onto the next; boxes already rolling finish.
type FleetRollout struct {
	// Binary is the new relay build.
	Binary []byte
	// Releases is where the boxes keep their releases (zero: the default
	// root).
	Releases Releases
	// Boxes is how many boxes roll at once (at least 1).
	Boxes int
	// ListenerWait is how long the listeners of a restarted process get
	// to come back; ListenerFrac what share of the fleet's must (0: 0.9).
	ListenerWait time.Duration
	ListenerFrac float64
	// Routers are routers whose GET /relays says when they stop routing
	// to a draining process; none: the move waits two RouterPoll blind.
	Routers RouterURLs
	// RouterPoll is the routers' poll interval.
	RouterPoll time.Duration
	// ShedRate is the sessions a second a drained process tells to
	// reconnect elsewhere; ShedWait how long they get to leave.
	ShedRate int
	ShedWait time.Duration
	// Rebalance, when set, evens out the fleet after a rollout that moved
	// a box: processes above the mean by more than RebalanceTolerance
	// shed the excess, RebalanceRate sessions a second, for at most
	// RebalanceWait.
	Rebalance          bool
	RebalanceTolerance float64
	RebalanceRate      int
	RebalanceWait      time.Duration
	// HTTP asks the routers (nil: a client with a 5 s timeout).
	HTTP *http.Client
	// Log gets the progress lines (each process's move, the rebalancing).
	Log func(format string, args ...any)
	// Done, when set, is told each box's outcome as it ends, one at a
	// time, in the order they end.
	Done func(BoxRollout)
	// poll is how often the listener count is read (0: 500 ms).
	poll time.Duration
}

// RouterURLs are routers' http:// or https:// URLs. As a flag value
// (flag.Value) each Set adds one, and refuses anything else.
type RouterURLs []string

func (l *RouterURLs) String() string { return strings.Join(*l, ",") }

// Set adds s, an http:// or https:// URL with a host.
func (l *RouterURLs) Set(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("want an http:// or https:// URL, got %q", s)
	}
	*l = append(*l, s)
	return nil
}

// BoxRollout is one box's part in a fleet rollout.
type BoxRollout struct {
	Host   string
	Result *RolloutResult
	Err    error
	// Skipped: the rollout stopped after another box failed before this
	// one started; it was not touched.
	Skipped bool
}

// Moved reports whether the box changed release (or finished a rollout
// cut off before).
func (b BoxRollout) Moved() bool {
	return !b.Skipped && b.Err == nil && b.Result != nil && b.Result.From != b.Result.To
}

// FleetRolloutReport is what Run did.
type FleetRolloutReport struct {
	// Boxes are the boxes' outcomes in the order they ended.
	Boxes                  []BoxRollout
	Failed, Skipped, Moved int
	// Rebalanced is set when the rebalancing ran; Before and After are
	// the processes' sessions around it, Balanced whether After is within
	// the tolerance.
	Rebalanced    bool
	Before, After []ProcLoad
	Balanced      bool
}

// ErrBoxesFailed is wrapped by Run's error when a box failed (and rolled
// back).
var ErrBoxesFailed = errors.New("the rollout stopped")

func (f *FleetRollout) logf(format string, args ...any) {
	if f.Log != nil {
		f.Log(format, args...)
	}
}

// Run rolls the build out over targets. Its error wraps ErrBoxesFailed
// when a box failed (the report tells which), or is the rebalancing's.
func (f *FleetRollout) Run(ctx context.Context, targets []Target) (*FleetRolloutReport, error) {
	if f.Boxes <= 0 {
		return nil, fmt.Errorf("fleet rollout: boxes must be positive, got %d", f.Boxes)
	}
	hc := f.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 5 * time.Second}
	}
	rep := &FleetRolloutReport{}
	var mu sync.Mutex // rep.Boxes, Done
	done := func(o BoxRollout) {
		mu.Lock()
		defer mu.Unlock()
		rep.Boxes = append(rep.Boxes, o)
		if f.Done != nil {
			f.Done(o)
		}
	}
	var stopped sync.Once
	stop := make(chan struct{})
	sem := make(chan struct{}, f.Boxes)
	var wg sync.WaitGroup
	for _, t := range targets {
		sem <- struct{}{}
		select {
		case <-stop:
			// After a box failed, boxes not yet started stay on their
			// release.
			<-sem
			done(BoxRollout{Host: t.Host.String(), Skipped: true})
			continue
		default:
		}
		wg.Go(func() {
			defer func() { <-sem }()
			r, err := f.box(ctx, hc, t, targets)
			if err != nil {
				stopped.Do(func() { close(stop) })
			}
			done(BoxRollout{Host: t.Host.String(), Result: r, Err: err})
		})
	}
	wg.Wait()
	for _, o := range rep.Boxes {
		switch {
		case o.Skipped:
			rep.Skipped++
		case o.Err != nil:
			rep.Failed++
		case o.Moved():
			rep.Moved++
		}
	}
	if rep.Failed > 0 {
		return rep, fmt.Errorf("%d of %s failed and rolled back, %d not started: %w", rep.Failed, text.Plural(len(targets), "box", "boxes"), rep.Skipped, ErrBoxesFailed)
	}
	if !f.Rebalance || rep.Moved == 0 {
		return rep, nil
	}
	bs := make([]Box, len(targets))
	for i, t := range targets {
		bs[i] = Box{Name: t.Host.String(), Run: t.Run}
	}
	f.logf("rebalancing: processes above the mean by more than %.0f%% shed the excess, %d sessions a second", f.RebalanceTolerance*100, f.RebalanceRate)
	rep.Rebalanced = true
	var err error
	rep.Before, rep.After, err = Rebalance(ctx, bs, f.RebalanceTolerance, f.RebalanceRate, f.RebalanceWait, f.poll)
	if err != nil {
		return rep, fmt.Errorf("rebalance: %w", err)
	}
	rep.Balanced = Balanced(rep.After, f.RebalanceTolerance)
	return rep, nil
}

// box rolls one box: each process moved out, restarted, checked.
func (f *FleetRollout) box(ctx context.Context, hc *http.Client, t Target, fleet []Target) (*RolloutResult, error) {
	insts, err := ActiveInstances(ctx, t.Run)
	if err != nil {
		return nil, err
	}
	host, _, err := net.SplitHostPort(t.Host.Addr())
	if err != nil {
		host = t.Host.Addr()
	}
	move := Move{
		Run:       t.Run,
		BlindWait: 2 * f.RouterPoll,
		// A router notices a drain at its next poll.
		RouterWait: 10 * f.RouterPoll,
		ShedRate:   f.ShedRate,
		EmptyWait:  f.ShedWait,
		Log: func(format string, args ...any) {
			f.logf("%s: "+format, append([]any{t.Host.String()}, args...)...)
		},
	}
	if len(f.Routers) > 0 {
		move.Routed = func(ctx context.Context, inst string) (bool, bool, error) {
			return RoutersRoute(ctx, hc, f.Routers, host, inst)
		}
	}
	frac := f.ListenerFrac
	if frac <= 0 {
		frac = 0.9
	}
	var before int64
	drain := func(ctx context.Context, inst string) error {
		n, err := FleetListeners(ctx, fleet)
		if err != nil {
			return err
		}
		before = n
		_, err = move.Out(ctx, inst)
		return err
	}
	health := func(ctx context.Context, run Runner, inst string) error {
		if err := HealthzOnBox(ctx, run, inst); err != nil {
			return err
		}
		// ListenersReturn waits ListenerWait itself: asking again would
		// multiply it.
		if err := ListenersReturn(ctx, fleet, before, frac, f.ListenerWait, f.poll); err != nil {
			return &FinalHealthError{Err: err}
		}
		return nil
	}
	undrain := func(ctx context.Context, inst string) error { return DrainOnBox(ctx, t.Run, inst, false) }
	return Rollout(ctx, t.Run, f.Releases, f.Binary, insts, health, drain, undrain)
}

// RoutersRoute asks every router whether it still routes new listeners
// to the instance on host: routed when any does, known when any lists it.
func RoutersRoute(ctx context.Context, hc *http.Client, routers []string, host, inst string) (routed, known bool, err error) {
	port, err := InstancePort(inst)
	if err != nil {
		return false, false, err
	}
	var errs []error
	for _, r := range routers {
		rt, kn, err := RouterRoutes(ctx, hc, r, host, port)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		routed, known = routed || rt, known || kn
	}
	return routed, known, errors.Join(errs...)
}

// FleetListeners sums the listeners of every relay process on the targets.
func FleetListeners(ctx context.Context, targets []Target) (int64, error) {
	var total int64
	for _, t := range targets {
		insts, err := ActiveInstances(ctx, t.Run)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", t.Host, err)
		}
		n, err := BoxListeners(ctx, t.Run, insts)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", t.Host, err)
		}
		total += n
	}
	return total, nil
}

// ListenersReturn waits until the fleet serves at least frac of want
// listeners again, at most limit, reading them every poll (0: 500 ms):
// those of a restarted process reconnect through the router, to whichever
// process has room.
func ListenersReturn(ctx context.Context, targets []Target, want int64, frac float64, limit, poll time.Duration) error {
	if poll <= 0 {
		poll = 500 * time.Millisecond
	}
	need := int64(float64(want) * frac)
	deadline := time.Now().Add(limit)
	for {
		got, err := FleetListeners(ctx, targets)
		if err == nil && got >= need {
			return nil
		}
		if time.Now().After(deadline) {
			if err != nil {
				return err
			}
			return fmt.Errorf("listeners did not come back: the fleet serves %d of the %d before the restart after %v", got, want, limit)
		}
		if err := ctxtime.Sleep(ctx, poll); err != nil {
			return err
		}
	}
}
