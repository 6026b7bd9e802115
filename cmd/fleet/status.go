package main

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/relayfleet/relayfleet/internal/cli"
)

// statusCommand is fleet status.
func statusCommand(ios *cli.IOStreams) *cobra.Command {
	var hf hostFlags
	var asJSON bool
	var heartbeat time.Duration
	cmd := &cobra.Command{
		Use:   "status",
		Short: "per relay process: listeners, headroom, memory against its ceiling, restarts; per box: release and sysctl drift",
		Args:  cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := hf.openFleet(ios.ErrOut)
			if err != nil {
				return err
			}
			return f.Status(cmd.Context(), ios.Out, asJSON, heartbeat)
		},
	}
	hf.add(cmd.Flags())
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().DurationVar(&heartbeat, "heartbeat", time.Second, "listen this long to the fleet heartbeat through every process, end to end from here (0: do not)")
	cli.Ranged(cmd.Flags(), "heartbeat", cli.Durations(0, time.Minute))
	return cmd
}
