package main

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/relayfleet/relayfleet/internal/text"

	"github.com/spf13/cobra"

	"github.com/relayfleet/relayfleet/internal/cli"
	"github.com/relayfleet/relayfleet/provision"
	"github.com/relayfleet/relayfleet/sysctl"
)

// statusCommand is fleet status.
func statusCommand(ios *cli.IOStreams) *cobra.Command {
	var hf hostFlags
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "per relay process: listeners, headroom, memory against its ceiling, restarts; per box: release and sysctl drift",
		Args:  cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runStatus(cmd.Context(), &hf, asJSON, ios)
		},
	}
	hf.add(cmd.Flags())
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func runStatus(ctx context.Context, hf *hostFlags, asJSON bool, ios *cli.IOStreams) error {
	stdout := ios.Out
	if err := hf.check(); err != nil {
		return err
	}
	targets, cleanup, err := hf.allTargets(ctx, ios.ErrOut)
	if err != nil {
		return err
	}
	defer cleanup()
	statuses := provision.FleetStatus(ctx, targets, sysctl.Relay())
	boxes, failed := provision.StatusReports(statuses)
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(map[string]any{"boxes": boxes}); err != nil {
			return err
		}
	} else {
		if err := provision.WriteStatusText(stdout, boxes); err != nil {
			return err
		}
	}
	if failed > 0 {
		return &exitError{Code: exitHostsFailed, Msg: fmt.Sprintf("%d of %s could not be read", failed, text.Plural(len(boxes), "box", "boxes"))}
	}
	return nil
}
