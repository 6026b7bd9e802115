package provision

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
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
// again within ListenerWait, then pass Gate. The rollout's first restarted
// process (the fleet's canary) is then baked (Bake) before anything else
// moves. On each box the first process restarted runs the new build
// through a runtime drop-in while current still points at the old one
// (Rollout). A box that fails rolls back (Rollout does, on a fresh
// context, so a cancelled rollout still puts it back); boxes not yet
// started are then skipped, so that a build that fails one box is not
// pushed onto the next; boxes already rolling finish or fail; then every
// box that moved to the new build is moved back to what it ran before,
// make before break.
type FleetRollout struct {
	// Binary is the new relay build. When nil, the release is Digest.
	Binary []byte
	// Digest names the release to roll out when Binary is nil (its
	// SHA-256, hex): a box that keeps releases/Digest/relay already (the
	// last Releases.Keep) needs no bytes, so a rollback to a recent
	// release works from any machine; a box that lacks it gets Fetch's.
	Digest string
	// Fetch gives the bytes of release sha for a box that lacks it; they
	// are checked against sha on the box. Nil: such a box fails.
	Fetch func(ctx context.Context, sha string) ([]byte, error)
	// Gate, when set, judges every process restarted on the new build
	// after its /healthz and the fleet's listeners passed, before it
	// admits again: its error fails the process (a *CheckError, or one
	// made of it, names the check and the figure).
	Gate func(ctx context.Context, t Target, inst string) error
	// Bake, when set, is called once per rollout, on its first restarted
	// process (the fleet's canary) once it admits again, before any other
	// process moves (boxes start one at a time until it returned). It
	// blocks for the bake and returns an error when the canary did worse
	// than the rest of the fleet, which fails the rollout like a failed
	// process.
	Bake func(ctx context.Context, t Target, inst string) error
	// Probe, when set, is the Gate and (with its BakeFor) the Bake where
	// those are unset: the fleet heartbeat through each restarted
	// process. Its Log is the rollout's and its Baseline a process of the
	// targets on the old build. When no process of the fleet hears the
	// heartbeat before anything moves (an origin that publishes none),
	// the rollout says so and goes on without it.
	Probe *ServiceProbe
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
	// roll is the box's rollout, which a fleet-wide rollback reverses.
	roll *boxRoll
}

// Moved reports whether the box changed release (or finished a rollout
// cut off before) and stayed there.
func (b BoxRollout) Moved() bool {
	return !b.Skipped && b.Err == nil && b.Result != nil && b.Result.From != b.Result.To && !b.Result.RolledBack
}

// FleetRolloutReport is what Run did.
type FleetRolloutReport struct {
	// Boxes are the boxes' outcomes in the order they ended.
	Boxes                  []BoxRollout
	Failed, Skipped, Moved int
	// RolledBack are the boxes moved back to what they ran before after
	// a box failed: those that had finished on the new build, and a failed
	// one that had not rolled itself back (it failed after its last
	// restart), in the order they were; each one's Result says
	// RolledBack, and RollbackErr when its rollback did not finish.
	RolledBack []string
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

// release is the release to roll out and where its bytes come from.
func (f *FleetRollout) release() (string, func(context.Context, string) ([]byte, error), error) {
	if f.Binary == nil {
		if !shaRE.MatchString(f.Digest) {
			return "", nil, fmt.Errorf("fleet rollout: no binary, and the digest %q is not a sha256", f.Digest)
		}
		return f.Digest, f.Fetch, nil
	}
	sha := Digest(f.Binary)
	if f.Digest != "" && f.Digest != sha {
		return "", nil, fmt.Errorf("fleet rollout: the binary is %s, the digest says %s", text.ShortSHA(sha), text.ShortSHA(f.Digest))
	}
	return sha, func(context.Context, string) ([]byte, error) { return f.Binary, nil }, nil
}

// Run rolls the build out over targets. Its error wraps ErrBoxesFailed
// when a box failed (the report tells which, and which boxes were rolled
// back after it), or is the rebalancing's.
func (f *FleetRollout) Run(ctx context.Context, targets []Target) (*FleetRolloutReport, error) {
	if f.Boxes <= 0 {
		return nil, fmt.Errorf("fleet rollout: boxes must be positive, got %d", f.Boxes)
	}
	to, fetch, err := f.release()
	if err != nil {
		return nil, err
	}
	targets = originsLast(targets)
	f.useProbe(ctx, targets)
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
	// The fleet's canary: the first box to restart a process claims the
	// bake; until it passed, boxes start one at a time.
	var bakeClaimed, baked atomic.Bool
	for _, t := range targets {
		if t.Origin != "" {
			// An origin rolls alone, whatever --boxes: the edges keep
			// the other origins.
			wg.Wait()
		}
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
		settled := make(chan struct{}) // the bake passed, or the box ended
		var settle sync.Once
		bake := func(ctx context.Context, host, inst string) error {
			// An origin carries no listeners to judge a build by: the
			// canary is an edge's process.
			if f.Bake == nil || t.Origin != "" || !bakeClaimed.CompareAndSwap(false, true) {
				return nil
			}
			f.logf("%s: %s is the fleet's canary: baking", t.Host, inst)
			if err := f.Bake(ctx, t, inst); err != nil {
				return checkFailed(err, "bake", host, inst)
			}
			baked.Store(true)
			settle.Do(func() { close(settled) })
			return nil
		}
		wg.Go(func() {
			defer func() { <-sem }()
			defer settle.Do(func() { close(settled) })
			b, err := f.box(ctx, hc, t, targets, to, fetch, bake)
			if err != nil {
				stopped.Do(func() { close(stop) })
			}
			done(BoxRollout{Host: t.Host.String(), Result: b.r, Err: err, roll: b})
		})
		if f.Bake != nil && !baked.Load() {
			<-settled
		}
		if t.Origin != "" {
			wg.Wait()
		}
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
		rep.Moved = 0 // each box that moved is rolled back (Moved says no)
		return rep, f.rollBack(ctx, rep, len(targets))
	}
	if !f.Rebalance || rep.Moved == 0 {
		return rep, nil
	}
	// The edges only: an origin's sessions are publishers and the edges'
	// links, which shedding would cut, not listeners to spread.
	var bs []Box
	for _, t := range targets {
		if t.Origin == "" {
			bs = append(bs, Box{Name: t.Host.String(), Run: t.Run})
		}
	}
	f.logf("rebalancing: processes above the mean by more than %.0f%% shed the excess, %d sessions a second", f.RebalanceTolerance*100, f.RebalanceRate)
	rep.Rebalanced = true
	rep.Before, rep.After, err = Rebalance(ctx, bs, f.RebalanceTolerance, f.RebalanceRate, f.RebalanceWait, f.poll)
	if err != nil {
		return rep, fmt.Errorf("rebalance: %w", err)
	}
	rep.Balanced = Balanced(rep.After, f.RebalanceTolerance)
	return rep, nil
}

// originsLast is the order boxes roll in: the edges first (one of them
// carries the canary), the fleet's origin boxes (Target.Origin) last, one
// at a time as every box, so that the edges always have another origin.
func originsLast(targets []Target) []Target {
	out := slices.Clone(targets)
	slices.SortStableFunc(out, func(a, b Target) int {
		return cmp.Compare(boolInt(a.Origin != ""), boolInt(b.Origin != ""))
	})
	return out
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// rollBack moves every box on which processes moved to the new build and
// stayed there (a box that finished, or one that failed after its last
// restart) back to what it ran before, after a box failed, at most Boxes
// at once, each process make before break (boxRoll.undo). Its error wraps
// ErrBoxesFailed.
func (f *FleetRollout) rollBack(ctx context.Context, rep *FleetRolloutReport, boxes int) error {
	var undo []BoxRollout
	for _, o := range rep.Boxes {
		if r := o.Result; r != nil && !r.RolledBack && r.From != r.To && len(r.Restarted)+len(r.already) > 0 {
			undo = append(undo, o)
		}
	}
	var mu sync.Mutex
	var errs []error
	sem := make(chan struct{}, f.Boxes)
	var wg sync.WaitGroup
	for _, o := range undo {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			f.logf("%s: rolling back %s -> %s, one process at a time, after the failure", o.Host, text.ShortSHA(o.Result.To), text.ShortSHA(o.Result.From))
			err := o.roll.undo(ctx)
			mu.Lock()
			defer mu.Unlock()
			rep.RolledBack = append(rep.RolledBack, o.Host)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", o.Host, err))
				f.logf("%s: rollback FAILED: %v", o.Host, err)
				return
			}
			f.logf("%s: rolled back to %s", o.Host, text.ShortSHA(o.Result.From))
		})
	}
	wg.Wait()
	err := fmt.Errorf("%d of %s failed, %d rolled back after it, %d not started: %w", rep.Failed, text.Plural(boxes, "box", "boxes"), len(rep.RolledBack), rep.Skipped, ErrBoxesFailed)
	if len(errs) > 0 {
		return fmt.Errorf("%w; rollback failed on %w", err, errors.Join(errs...))
	}
	return err
}

// box rolls one box: each process moved out, restarted, checked; bake is
// asked once its first process admits again. The boxRoll it returns is
// never nil.
func (f *FleetRollout) box(ctx context.Context, hc *http.Client, t Target, fleet []Target, to string, fetch func(context.Context, string) ([]byte, error), bake func(ctx context.Context, host, inst string) error) (*boxRoll, error) {
	host, _, err := net.SplitHostPort(t.Host.Addr())
	if err != nil {
		host = t.Host.Addr()
	}
	b := &boxRoll{run: t.Run, rel: f.Releases}
	insts, err := ActiveInstances(ctx, t.Run)
	if err != nil {
		return b, err
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
	b.drain = func(ctx context.Context, inst string) error {
		n, err := FleetListeners(ctx, fleet)
		if err != nil {
			return err
		}
		before = n
		_, err = move.Out(ctx, inst)
		return err
	}
	b.health = func(ctx context.Context, run Runner, inst string) error {
		if err := HealthzOnBox(ctx, run, inst); err != nil {
			if ctx.Err() != nil {
				return err
			}
			return checkFailed(err, "healthz", host, inst)
		}
		// ListenersReturn waits ListenerWait itself: asking again would
		// multiply it.
		if err := ListenersReturn(ctx, fleet, before, frac, f.ListenerWait, f.poll); err != nil {
			return &FinalHealthError{Err: checkFailed(err, "", host, inst)}
		}
		return nil
	}
	b.undrain = func(ctx context.Context, inst string) error { return DrainOnBox(ctx, t.Run, inst, false) }
	if f.Gate != nil {
		b.gate = func(ctx context.Context, inst string) error {
			return checkFailed(f.Gate(ctx, t, inst), "gate", host, inst)
		}
	}
	b.passed = func(ctx context.Context, inst string) error { return bake(ctx, host, inst) }
	_, err = b.roll(ctx, to, fetch, insts)
	var ce *CheckError
	if errors.As(err, &ce) && ce.Host == "" {
		ce.Host = host // a start check names the instance only
	}
	return b, err
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
			return &CheckError{Check: "listener check", Figure: fmt.Sprintf("listeners did not come back: the fleet serves %d of the %d before the restart after %v", got, want, limit)}
		}
		if err := ctxtime.Sleep(ctx, poll); err != nil {
			return err
		}
	}
}

// useProbe makes Probe the Gate and Bake, once a process of the targets
// was heard on the heartbeat.
func (f *FleetRollout) useProbe(ctx context.Context, targets []Target) {
	if f.Probe == nil {
		return
	}
	sp := *f.Probe
	if sp.Log == nil {
		sp.Log = f.logf
	}
	if sp.Baseline == nil {
		sp.Baseline = OldBuildBaseline(ctx, targets)
	}
	if len(targets) > 0 {
		if bt, inst, ok := sp.Baseline(targets[0], ""); ok {
			res, err := sp.Hear(ctx, bt, inst, 2*time.Second)
			if err != nil || res.Groups == 0 {
				f.logf("warning: no fleet heartbeat through %s %s (%v, %d groups): its origin publishes none (a relay build older than the heartbeat?); this rollout is judged on /healthz and listeners alone", bt.Host, inst, err, res.Groups)
				return
			}
		}
	}
	if f.Gate == nil {
		f.Gate = sp.Gate
	}
	if f.Bake == nil && sp.BakeFor > 0 {
		f.Bake = sp.Bake
	}
}
