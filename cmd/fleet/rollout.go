package main

import (
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/relayfleet/relayfleet/infra/fleethosts"
	"github.com/relayfleet/relayfleet/internal/cli"
	"github.com/relayfleet/relayfleet/provision"
	"github.com/relayfleet/relayfleet/relay"
)

// rolloutCommand is fleet rollout.
func rolloutCommand(ios *cli.IOStreams) *cobra.Command {
	var hf hostFlags
	var binaryPath string
	var dryRun bool
	var lf lockFlags
	fr := provision.FleetRollout{RebalanceTolerance: provision.DefaultRebalanceTolerance, Probe: &provision.ServiceProbe{}}
	cmd := &cobra.Command{
		Use:   "rollout",
		Short: "roll a new relay build through the steady boxes, one process at a time, rolling back on failure",
		Args:  cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := hf.check(); err != nil {
				return err
			}
			if binaryPath == "" {
				return usagef("flag --relay-binary: required")
			}
			f, err := hf.openFleet(ios.ErrOut, func() error {
				_, err := provision.FindRelay(binaryPath)
				return err
			})
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if !dryRun {
				var unlock func()
				if ctx, unlock, err = lf.lockStack(ctx, ios, cmd, f.Stack); err != nil {
					return err
				}
				defer unlock()
			}
			if err := f.Rollout(ctx, ios.Out, fr, binaryPath, dryRun); err != nil || dryRun {
				return lf.result(err)
			}
			return lf.result(syncShared(ctx, ios, f.Stack, "rollout"))
		},
	}
	fs := cmd.Flags()
	lf.add(fs)
	fs.StringVar(&binaryPath, "relay-binary", "", "the new relay build (required); recorded as the fleet's release once every process runs it")
	fs.BoolVar(&dryRun, "dry-run", false, "print the plan (each box's processes, from and to, the canary) and change nothing")
	addRolloutFlags(fs, &hf, &fr)
	return cmd
}

// rollbackCommand is fleet rollback.
func rollbackCommand(ios *cli.IOStreams) *cobra.Command {
	var hf hostFlags
	var to string
	var lf lockFlags
	fr := provision.FleetRollout{RebalanceTolerance: provision.DefaultRebalanceTolerance, Probe: &provision.ServiceProbe{}}
	cmd := &cobra.Command{
		Use:   "rollback",
		Short: "roll the steady boxes back to the fleet's previous release (its build from the backend), as a rollout does",
		Args:  cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := fleethosts.CheckReleaseArg(to); err != nil {
				return usagef("flag --to: %v", err)
			}
			f, err := hf.openFleet(ios.ErrOut)
			if err != nil {
				return err
			}
			ctx, unlock, err := lf.lockStack(cmd.Context(), ios, cmd, f.Stack)
			if err != nil {
				return err
			}
			defer unlock()
			if err := f.Rollback(ctx, ios.Out, fr, to); err != nil {
				return lf.result(err)
			}
			return lf.result(syncShared(ctx, ios, f.Stack, "rollback"))
		},
	}
	fs := cmd.Flags()
	lf.add(fs)
	fs.StringVar(&to, "to", "", "a release listed by fleet releases (6 or more digits of its digest; default: the one before the fleet's release)")
	addRolloutFlags(fs, &hf, &fr)
	return cmd
}

// releasesCommand is fleet releases.
func releasesCommand(ios *cli.IOStreams) *cobra.Command {
	var hf hostFlags
	cmd := &cobra.Command{
		Use:   "releases",
		Short: "list the fleet's recorded releases and failed rollouts, with how many relay processes run each",
		Args:  cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := hf.openFleet(ios.ErrOut)
			if err != nil {
				return err
			}
			return f.Releases(cmd.Context(), ios.Out)
		},
	}
	hf.add(cmd.Flags())
	return cmd
}

// addRolloutFlags declares the flags fleet rollout and rollback share.
func addRolloutFlags(fs *pflag.FlagSet, hf *hostFlags, fr *provision.FleetRollout) {
	hf.add(fs)
	fs.DurationVar(&fr.Probe.Window, "gate-window", 3*time.Second, "each restarted process must pass on 80% of the fleet heartbeat's groups through it for this long before it is undrained")
	cli.Ranged(fs, "gate-window", cli.Durations(time.Second, 5*time.Minute))
	fs.DurationVar(&fr.Probe.BakeFor, "canary-bake", 2*time.Minute, "how long the first process on the new build is heard beside one on the old build before any other moves (0: no bake)")
	cli.Ranged(fs, "canary-bake", cli.Durations(0, 24*time.Hour))
	fs.IntVar(&fr.Boxes, "boxes", 1, "boxes rolled at once (each rolls one process at a time)")
	cli.Ranged(fs, "boxes", cli.Ints(1, 1000))
	fs.DurationVar(&fr.ListenerWait, "listener-wait", 30*time.Second, "how long listeners get to come back after each restart (90% of the box's)")
	cli.Ranged(fs, "listener-wait", cli.Durations(time.Second, time.Hour))
	fs.Var(cli.GoValue(&fr.Routers), "router", "a router whose GET /relays tells when it stops routing to a draining process (repeatable; default: wait two --router-poll intervals)")
	fs.DurationVar(&fr.RouterPoll, "router-poll", time.Second, "the routers' poll interval (relay router --poll)")
	cli.Ranged(fs, "router-poll", cli.Durations(100*time.Millisecond, time.Minute))
	fs.IntVar(&fr.ShedRate, "shed-rate", provision.DefaultShedRate, "sessions a second a drained process tells to reconnect elsewhere (going-away) before it restarts")
	cli.Ranged(fs, "shed-rate", cli.Ints(1, relay.MaxShedRate))
	fs.DurationVar(&fr.ShedWait, "shed-wait", 30*time.Second, "how long a drained process's sessions get to leave before it restarts anyway")
	cli.Ranged(fs, "shed-wait", cli.Durations(time.Second, time.Hour))
	fs.BoolVar(&fr.Rebalance, "rebalance", true, "after the rollout, processes above the fleet's mean by more than 20% shed the excess")
	fs.IntVar(&fr.RebalanceRate, "rebalance-rate", 20, "sessions a second a process sheds to rebalance")
	cli.Ranged(fs, "rebalance-rate", cli.Ints(1, relay.MaxShedRate))
	fs.DurationVar(&fr.RebalanceWait, "rebalance-wait", time.Minute, "how long the fleet gets to even out after the rebalancing shed")
	cli.Ranged(fs, "rebalance-wait", cli.Durations(time.Second, time.Hour))
}
