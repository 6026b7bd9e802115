package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/relayfleet/relayfleet/provision"
	"github.com/relayfleet/relayfleet/relay/cli"
)

// urlList is a repeatable URL flag.
type urlList []string

func (l *urlList) String() string { return strings.Join(*l, ",") }

func (l *urlList) Set(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("want an http:// or https:// URL, got %q", s)
	}
	*l = append(*l, s)
	return nil
}

// lockedWriter serialises the lines of boxes rolled at once.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func runRollout(ctx context.Context, args []string, ios *cli.IOStreams) error {
	stdout := ios.Out
	fs := newFlags("rollout", stdout)
	var hf hostFlags
	hf.add(fs)
	binaryPath := fs.String("relay-binary", "", "the new relay build (required)")
	boxes := fs.Int("boxes", 1, "boxes rolled at once (each rolls one process at a time)")
	listenerWait := fs.Duration("listener-wait", 30*time.Second, "how long listeners get to come back after each restart (90% of the box's)")
	var routers urlList
	fs.Var(&routers, "router", "a router whose GET /relays tells when it stops routing to a draining process (repeatable; default: wait two --router-poll intervals)")
	routerPoll := fs.Duration("router-poll", time.Second, "the routers' poll interval (relay router --poll)")
	shedRate := fs.Int("shed-rate", provision.DefaultShedRate, "sessions a second a drained process tells to reconnect elsewhere (going-away) before it restarts")
	shedWait := fs.Duration("shed-wait", 30*time.Second, "how long a drained process's sessions get to leave before it restarts anyway")
	rebalance := fs.Bool("rebalance", true, "after the rollout, processes above the fleet's mean by more than 20% shed the excess")
	rebalanceRate := fs.Int("rebalance-rate", 20, "sessions a second a process sheds to rebalance")
	rebalanceWait := fs.Duration("rebalance-wait", time.Minute, "how long the fleet gets to even out after the rebalancing shed")
	if err := fs.parse(args); err != nil {
		return err
	}
	if err := hf.check(); err != nil {
		return err
	}
	switch {
	case *binaryPath == "":
		return usagef("flag --relay-binary: required")
	case *boxes <= 0:
		return usagef("flag --boxes: must be positive, got %d", *boxes)
	case *routerPoll <= 0:
		return usagef("flag --router-poll: must be positive, got %v", *routerPoll)
	case *shedRate <= 0:
		return usagef("flag --shed-rate: must be positive, got %d", *shedRate)
	case *shedWait <= 0:
		return usagef("flag --shed-wait: must be positive, got %v", *shedWait)
	case *rebalanceRate <= 0:
		return usagef("flag --rebalance-rate: must be positive, got %d", *rebalanceRate)
	case *rebalanceWait <= 0:
		return usagef("flag --rebalance-wait: must be positive, got %v", *rebalanceWait)
	}
	binary, err := relayBinary(*binaryPath)
	if err != nil {
		return err
	}
	targets, cleanup, err := hf.targets(ctx)
	if err != nil {
		return err
	}
	defer cleanup()
	out := &lockedWriter{w: stdout}
	start := time.Now()
	logf := func(format string, args ...any) {
		fmt.Fprintf(out, "%6.1fs "+format+"\n", append([]any{time.Since(start).Seconds()}, args...)...)
	}
	sem := make(chan struct{}, *boxes)
	type outcome struct {
		host    string
		r       *provision.RolloutResult
		err     error
		skipped bool
	}
	results := make(chan outcome, len(targets))
	// After a box fails, boxes not yet started are left on their release:
	// a build that fails one box is not pushed onto the next.
	var stopped atomic.Bool
	hc := &http.Client{Timeout: 5 * time.Second}
	for _, t := range targets {
		go func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			if stopped.Load() {
				results <- outcome{host: t.Host.String(), skipped: true}
				return
			}
			insts, err := provision.ActiveInstances(ctx, t.Run)
			if err != nil {
				stopped.Store(true)
				results <- outcome{host: t.Host.String(), err: err}
				return
			}
			// Make before break: each process is drained (the router stops
			// sending it new listeners), then, once no router routes there,
			// told to send its listeners away (going-away close): they
			// reconnect through the router to the other processes while it
			// still runs. Then it restarts on the new build and is checked;
			// the fleet must serve 90% of its listeners again before the
			// next process goes.
			host, _, _ := net.SplitHostPort(t.Host.Addr())
			move := provision.Move{
				Run:       t.Run,
				BlindWait: 2 * *routerPoll,
				// A router notices a drain at its next poll.
				RouterWait: 10 * *routerPoll,
				ShedRate:   *shedRate,
				EmptyWait:  *shedWait,
				Log: func(format string, args ...any) {
					logf("%s: "+format, append([]any{t.Host.String()}, args...)...)
				},
			}
			if len(routers) > 0 {
				move.Routed = func(ctx context.Context, inst string) (bool, bool, error) {
					return routersRoute(ctx, hc, routers, host, inst)
				}
			}
			var before int64
			drain := func(ctx context.Context, inst string) error {
				n, err := fleetListeners(ctx, targets)
				if err != nil {
					return err
				}
				before = n
				_, err = move.Out(ctx, inst)
				return err
			}
			health := func(ctx context.Context, run provision.Runner, inst string) error {
				if err := provision.HealthzOnBox(ctx, run, inst); err != nil {
					return err
				}
				return listenersReturn(ctx, targets, before, 0.9, *listenerWait)
			}
			undrain := func(ctx context.Context, inst string) error { return provision.DrainOnBox(ctx, t.Run, inst, false) }
			r, err := provision.Rollout(ctx, t.Run, provision.Releases{}, binary, insts, health, drain, undrain)
			if err != nil {
				stopped.Store(true)
			}
			results <- outcome{host: t.Host.String(), r: r, err: err}
		}()
	}
	failed, skipped, moved := 0, 0, 0
	for range targets {
		o := <-results
		switch {
		case o.skipped:
			skipped++
			logf("%s: skipped, the rollout stopped after a failure", o.host)
		case o.err != nil:
			failed++
			logf("%s: FAILED: %s", o.host, oneLine(o.err))
		case o.r.From == o.r.To:
			logf("%s: already on %s, every process runs it", o.host, short(o.r.To))
		case o.r.Resumed:
			moved++
			logf("%s: resumed %s -> %s (current pointed at it already): %s still on another release restarted one at a time", o.host, short(o.r.From), short(o.r.To), plural(len(o.r.Restarted), "process", "processes"))
		default:
			moved++
			logf("%s: %s -> %s, %s restarted one at a time", o.host, short(o.r.From), short(o.r.To), plural(len(o.r.Restarted), "process", "processes"))
		}
	}
	if failed > 0 {
		return &exitError{exitHostsFailed, fmt.Sprintf("%d of %s failed and rolled back, %d not started", failed, plural(len(targets), "box", "boxes"), skipped)}
	}
	if *rebalance && moved > 0 {
		bs := make([]provision.Box, len(targets))
		for i, t := range targets {
			bs[i] = provision.Box{Name: t.Host.String(), Run: t.Run}
		}
		logf("rebalancing: processes above the mean by more than 20%% shed the excess, %d sessions a second", *rebalanceRate)
		before, after, err := provision.Rebalance(ctx, bs, rebalanceTolerance, *rebalanceRate, *rebalanceWait, 500*time.Millisecond)
		printBalance(out, before, after)
		if err != nil {
			return fmt.Errorf("rebalance: %w", err)
		}
		if !provision.Balanced(after, rebalanceTolerance) {
			logf("the fleet is still more than 20%% off its mean after %v", *rebalanceWait)
		}
	}
	return nil
}

// rebalanceTolerance is how far above the fleet's mean a process may stay.
const rebalanceTolerance = 0.2

// printBalance shows each process's sessions before and after the
// rebalancing, with the fleet's mean.
func printBalance(w io.Writer, before, after []provision.ProcLoad) {
	mean := func(ps []provision.ProcLoad) float64 {
		m, _ := provision.PlanRebalance(ps, rebalanceTolerance)
		return m
	}
	got := map[string]int64{}
	for _, p := range after {
		got[p.Box+" "+p.Unit] = p.Sessions
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "box\tprocess\tsessions before\tafter")
	for _, p := range before {
		a, ok := got[p.Box+" "+p.Unit]
		after := "?"
		if ok {
			after = fmt.Sprint(a)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", p.Box, p.Unit, p.Sessions, after)
	}
	fmt.Fprintf(tw, "mean\t\t%.1f\t%.1f\n", mean(before), mean(after))
	tw.Flush()
}

// routersRoute asks every router whether it still routes new listeners
// to the instance on host: routed when any does, known when any lists it.
func routersRoute(ctx context.Context, hc *http.Client, routers []string, host, inst string) (routed, known bool, err error) {
	port, err := provision.InstancePort(inst)
	if err != nil {
		return false, false, err
	}
	var errs []error
	for _, r := range routers {
		rt, kn, err := provision.RouterRoutes(ctx, hc, r, host, port)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		routed, known = routed || rt, known || kn
	}
	return routed, known, errors.Join(errs...)
}

func short(sha string) string {
	if len(sha) > 12 {
		return sha[:12]
	}
	if sha == "" {
		return "(none)"
	}
	return sha
}

// fleetListeners sums the listeners of every relay process on the targets.
func fleetListeners(ctx context.Context, targets []provision.Target) (int64, error) {
	var total int64
	for _, t := range targets {
		insts, err := provision.ActiveInstances(ctx, t.Run)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", t.Host, err)
		}
		n, err := provision.BoxListeners(ctx, t.Run, insts)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", t.Host, err)
		}
		total += n
	}
	return total, nil
}

// listenersReturn waits until the fleet serves at least frac of want
// listeners again: those of a restarted process reconnect through the
// router, to whichever process has room.
func listenersReturn(ctx context.Context, targets []provision.Target, want int64, frac float64, limit time.Duration) error {
	need := int64(float64(want) * frac)
	deadline := time.Now().Add(limit)
	for {
		got, err := fleetListeners(ctx, targets)
		if err == nil && got >= need {
			return nil
		}
		if time.Now().After(deadline) {
			if err != nil {
				return err
			}
			return fmt.Errorf("listeners did not come back: the fleet serves %d of the %d before the restart after %v", got, want, limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}
