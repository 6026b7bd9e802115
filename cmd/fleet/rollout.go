package main

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/relayfleet/relayfleet/provision"
)

func runRollout(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlags("rollout", stdout)
	var hf hostFlags
	hf.add(fs)
	binaryPath := fs.String("relay-binary", "", "the new relay build (required)")
	boxes := fs.Int("boxes", 1, "boxes rolled at once (each rolls one process at a time)")
	listenerWait := fs.Duration("listener-wait", 30*time.Second, "how long listeners get to come back after each restart (90% of the box's)")
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
	start := time.Now()
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
			// Each process is drained first (the router stops sending it new
			// listeners), restarted and checked; its listeners reconnect
			// through the router to any process of the fleet, and the
			// fleet must serve 90% of its listeners again before the next
			// process goes.
			var before int64
			drain := func(_ context.Context, inst string) error {
				n, err := fleetListeners(ctx, targets)
				if err != nil {
					return err
				}
				before = n
				return provision.DrainOnBox(ctx, t.Run, inst, true)
			}
			health := func(ctx context.Context, run provision.Runner, inst string) error {
				if err := provision.HealthzOnBox(ctx, run, inst); err != nil {
					return err
				}
				return listenersReturn(ctx, targets, before, 0.9, *listenerWait)
			}
			undrain := func(_ context.Context, inst string) error { return provision.DrainOnBox(ctx, t.Run, inst, false) }
			r, err := provision.Rollout(ctx, t.Run, provision.Releases{}, binary, insts, health, drain, undrain)
			if err != nil {
				stopped.Store(true)
			}
			results <- outcome{host: t.Host.String(), r: r, err: err}
		}()
	}
	failed, skipped := 0, 0
	for range targets {
		o := <-results
		switch {
		case o.skipped:
			skipped++
			fmt.Fprintf(stdout, "%6.1fs %s: skipped, the rollout stopped after a failure\n", time.Since(start).Seconds(), o.host)
		case o.err != nil:
			failed++
			fmt.Fprintf(stdout, "%6.1fs %s: FAILED: %s\n", time.Since(start).Seconds(), o.host, oneLine(o.err))
		case o.r.From == o.r.To:
			fmt.Fprintf(stdout, "%6.1fs %s: already on %s\n", time.Since(start).Seconds(), o.host, short(o.r.To))
		default:
			fmt.Fprintf(stdout, "%6.1fs %s: %s -> %s, %d processes restarted one at a time\n", time.Since(start).Seconds(), o.host, short(o.r.From), short(o.r.To), len(o.r.Restarted))
		}
	}
	if failed > 0 {
		return &exitError{exitHostsFailed, fmt.Sprintf("%d of %d boxes failed and rolled back, %d not started", failed, len(targets), skipped)}
	}
	return nil
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
