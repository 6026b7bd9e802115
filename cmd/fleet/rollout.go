package main

import (
	"context"
	"errors"
	"fmt"
	"github.com/relayfleet/relayfleet/internal/text"
	"io"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/relayfleet/relayfleet/internal/cli"
	"github.com/relayfleet/relayfleet/provision"
	"github.com/relayfleet/relayfleet/relay"
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

// rolloutCommand is fleet rollout.
func rolloutCommand(ios *cli.IOStreams) *cobra.Command {
	var o rolloutOptions
	cmd := &cobra.Command{
		Use:   "rollout",
		Short: "roll a new relay build through the steady boxes, one process at a time, rolling back on failure",
		Args:  cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runRollout(cmd.Context(), &o, ios)
		},
	}
	fs := cmd.Flags()
	o.hf.add(fs)
	fs.StringVar(&o.binaryPath, "relay-binary", "", "the new relay build (required)")
	fs.IntVar(&o.boxes, "boxes", 1, "boxes rolled at once (each rolls one process at a time)")
	cli.Ranged(fs, "boxes", cli.Ints(1, 1000))
	fs.DurationVar(&o.listenerWait, "listener-wait", 30*time.Second, "how long listeners get to come back after each restart (90% of the box's)")
	cli.Ranged(fs, "listener-wait", cli.Durations(time.Second, time.Hour))
	fs.Var(cli.GoValue(&o.routers), "router", "a router whose GET /relays tells when it stops routing to a draining process (repeatable; default: wait two --router-poll intervals)")
	fs.DurationVar(&o.routerPoll, "router-poll", time.Second, "the routers' poll interval (relay router --poll)")
	cli.Ranged(fs, "router-poll", cli.Durations(100*time.Millisecond, time.Minute))
	fs.IntVar(&o.shedRate, "shed-rate", provision.DefaultShedRate, "sessions a second a drained process tells to reconnect elsewhere (going-away) before it restarts")
	cli.Ranged(fs, "shed-rate", cli.Ints(1, relay.MaxShedRate))
	fs.DurationVar(&o.shedWait, "shed-wait", 30*time.Second, "how long a drained process's sessions get to leave before it restarts anyway")
	cli.Ranged(fs, "shed-wait", cli.Durations(time.Second, time.Hour))
	fs.BoolVar(&o.rebalance, "rebalance", true, "after the rollout, processes above the fleet's mean by more than 20% shed the excess")
	fs.IntVar(&o.rebalanceRate, "rebalance-rate", 20, "sessions a second a process sheds to rebalance")
	cli.Ranged(fs, "rebalance-rate", cli.Ints(1, relay.MaxShedRate))
	fs.DurationVar(&o.rebalanceWait, "rebalance-wait", time.Minute, "how long the fleet gets to even out after the rebalancing shed")
	cli.Ranged(fs, "rebalance-wait", cli.Durations(time.Second, time.Hour))
	return cmd
}

// rolloutOptions are fleet rollout's flags.
type rolloutOptions struct {
	hf                       hostFlags
	binaryPath               string
	boxes, shedRate          int
	rebalanceRate            int
	listenerWait, routerPoll time.Duration
	shedWait, rebalanceWait  time.Duration
	routers                  urlList
	rebalance                bool
}

func runRollout(ctx context.Context, o *rolloutOptions, ios *cli.IOStreams) error {
	stdout := ios.Out
	hf := &o.hf
	if err := hf.check(); err != nil {
		return err
	}
	if o.binaryPath == "" {
		return usagef("flag --relay-binary: required")
	}
	_, binary, err := relayBinary(o.binaryPath)
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
		Boxes:              o.boxes,
		ListenerWait:       o.listenerWait,
		Routers:            o.routers,
		RouterPoll:         o.routerPoll,
		ShedRate:           o.shedRate,
		ShedWait:           o.shedWait,
		Rebalance:          o.rebalance,
		RebalanceTolerance: provision.DefaultRebalanceTolerance,
		RebalanceRate:      o.rebalanceRate,
		RebalanceWait:      o.rebalanceWait,
		Log:                logf,
		Done:               func(o provision.BoxRollout) { logf("%s", o.Summary()) },
	}
	rep, err := fr.Run(ctx, targets)
	if errors.Is(err, provision.ErrBoxesFailed) {
		return &exitError{Code: exitHostsFailed, Msg: fmt.Sprintf("%d of %s failed and rolled back, %d not started", rep.Failed, text.Plural(len(targets), "box", "boxes"), rep.Skipped)}
	}
	if rep != nil && rep.Rebalanced {
		provision.WriteBalance(out, rep.Before, rep.After, provision.DefaultRebalanceTolerance)
	}
	if err != nil {
		return err
	}
	if rep.Rebalanced && !rep.Balanced {
		logf("the fleet is still more than 20%% off its mean after %v", o.rebalanceWait)
	}
	return nil
}
