package main

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/relayfleet/relayfleet/internal/cli"
	"github.com/relayfleet/relayfleet/provision"
	"github.com/relayfleet/relayfleet/relay"
)

// rolloutCommand is fleet rollout.
func rolloutCommand(ios *cli.IOStreams) *cobra.Command {
	var hf hostFlags
	var binaryPath string
	fr := provision.FleetRollout{RebalanceTolerance: provision.DefaultRebalanceTolerance}
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
			var err error
			if _, fr.Binary, err = provision.ReadRelay(binaryPath); err != nil {
				return err
			}
			f, err := hf.openFleet(ios.ErrOut)
			if err != nil {
				return err
			}
			return f.Rollout(cmd.Context(), ios.Out, fr)
		},
	}
	fs := cmd.Flags()
	hf.add(fs)
	fs.StringVar(&binaryPath, "relay-binary", "", "the new relay build (required)")
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
	return cmd
}
