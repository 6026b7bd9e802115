package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/relayfleet/relayfleet/internal/cli"
	"github.com/relayfleet/relayfleet/provision"
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
	hf.add(fs.FlagSet)
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
	targets, cleanup, err := hf.targets(ctx, ios.ErrOut)
	if err != nil {
		return err
	}
	defer cleanup()
	out := &lockedWriter{w: stdout}
	start := time.Now()
	logf := func(format string, args ...any) {
		fmt.Fprintf(out, "%6.1fs "+format+"\n", append([]any{time.Since(start).Seconds()}, args...)...)
	}
	fr := &provision.FleetRollout{
		Binary:             binary,
		Boxes:              *boxes,
		ListenerWait:       *listenerWait,
		Routers:            routers,
		RouterPoll:         *routerPoll,
		ShedRate:           *shedRate,
		ShedWait:           *shedWait,
		Rebalance:          *rebalance,
		RebalanceTolerance: rebalanceTolerance,
		RebalanceRate:      *rebalanceRate,
		RebalanceWait:      *rebalanceWait,
		Log:                logf,
		Done: func(o provision.BoxRollout) {
			switch {
			case o.Skipped:
				logf("%s: skipped, the rollout stopped after a failure", o.Host)
			case o.Err != nil:
				logf("%s: FAILED: %s", o.Host, oneLine(o.Err))
			case o.Result.From == o.Result.To:
				logf("%s: already on %s, every process runs it", o.Host, short(o.Result.To))
			case o.Result.Resumed:
				logf("%s: resumed %s -> %s (current pointed at it already): %s still on another release restarted one at a time", o.Host, short(o.Result.From), short(o.Result.To), plural(len(o.Result.Restarted), "process", "processes"))
			default:
				logf("%s: %s -> %s, %s restarted one at a time", o.Host, short(o.Result.From), short(o.Result.To), plural(len(o.Result.Restarted), "process", "processes"))
			}
		},
	}
	rep, err := fr.Run(ctx, targets)
	if errors.Is(err, provision.ErrBoxesFailed) {
		return &exitError{Code: exitHostsFailed, Msg: fmt.Sprintf("%d of %s failed and rolled back, %d not started", rep.Failed, plural(len(targets), "box", "boxes"), rep.Skipped)}
	}
	if rep != nil && rep.Rebalanced {
		printBalance(out, rep.Before, rep.After)
	}
	if err != nil {
		return err
	}
	if rep.Rebalanced && !rep.Balanced {
		logf("the fleet is still more than 20%% off its mean after %v", *rebalanceWait)
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

func short(sha string) string {
	if len(sha) > 12 {
		return sha[:12]
	}
	if sha == "" {
		return "(none)"
	}
	return sha
}
