package main

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/relayfleet/relayfleet/infra/events/exporter"
	"github.com/relayfleet/relayfleet/internal/cli"
)

// eventsExporterCommand is fleet events exporter.
func eventsExporterCommand(ios *cli.IOStreams) *cobra.Command {
	var o exporter.RunOptions
	var p pulumiFlags
	cmd := &cobra.Command{
		Use:   "exporter",
		Short: "serve the reconciler's heartbeat and every burst box the backends list by label on /metrics (fleet events install runs it)",
		Args:  cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Stack = p.eventsStack
			return exporter.Run(cmd.Context(), ios.Out, o)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.EventsFile, "events", "", "events file the reconciler follows (required)")
	fs.StringVar(&o.Listen, "listen", "", "HOST:PORT to serve /metrics on (required)")
	fs.DurationVar(&o.ListEvery, "list-every", exporter.DefaultListEvery, "how often the backends are listed by label and the Pulumi backend read (scrapes in between read the last)")
	cli.Ranged(fs, "list-every", cli.Durations(5*time.Second, time.Hour))
	fs.DurationVar(&o.StaleAfter, "stale-after", exporter.DefaultStaleAfter, "how old the last reconcile without an error may be before ReconcilerStale fires (fleet events install sets it from --interval)")
	cli.Ranged(fs, "stale-after", cli.Durations(10*time.Second, 24*time.Hour))
	p.register(fs, false)
	return cmd
}
