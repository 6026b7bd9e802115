package main

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/relayfleet/relayfleet/infra/events"
	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/internal/cli"
)

// syncShared rewrites the state dir's relays file from the backend once
// what changed the fleet is done, on a shared backend
// (events.SyncIfShared), and says so.
func syncShared(ctx context.Context, ios *cli.IOStreams, st *program.Stack, what string) error {
	path, err := events.SyncIfShared(ctx, st)
	if err != nil {
		return fmt.Errorf("%s done, but the relays file was not rewritten from the backend (run fleet relays): %w", what, err)
	}
	if path != "" {
		fmt.Fprintf(ios.Out, "relays file: %s (every stack of the fleet in the backend)\n", path)
	}
	return nil
}

// relaysCommand is fleet relays: the router's relays file from the
// backend, once or kept current.
func relaysCommand(ios *cli.IOStreams) *cobra.Command {
	var k keyFlags
	var inventory, out string
	var every time.Duration
	cmd := &cobra.Command{
		Use:   "relays",
		Short: "write the router's relays file from the fleet's stacks in the backend (steady hosts, each event's), once or every --watch",
		Long: `Read what the fleet puts in the router's list from its Pulumi backend (the
steady stack's hosts, each event's entry as its record keeps it) and write
the relays file: with --out to that file, for a router on a machine that
runs no other fleet command, else the state dir's relays file (and its
hosts/ entries). With --watch it reads the backend again every INTERVAL and
rewrites the file when it changed, so a router following it sees a
teammate's fleet up within one interval; a read that fails leaves the file
as it was. The backend's credentials come from the environment
(AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_SHARED_CREDENTIALS_FILE),
the passphrase from $PULUMI_CONFIG_PASSPHRASE_FILE or $PULUMI_CONFIG_PASSPHRASE.`,
		Args: cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if inventory == "" {
				return usagef("flag --inventory: required")
			}
			if every > 0 && every < time.Second {
				return usagef("flag --watch: want 0 (once) or at least 1s, got %v", every)
			}
			if every > 0 && out == "" {
				return usagef("flag --watch: needs --out (the file the router reads)")
			}
			f, err := loadFleet(inventory)
			if err != nil {
				return err
			}
			st, err := k.stackFor(f)
			if err != nil {
				return err
			}
			if out == "" {
				path, err := events.SyncRelays(cmd.Context(), st)
				if err != nil {
					return err
				}
				fmt.Fprintf(ios.Out, "relays file: %s\n", path)
				return nil
			}
			abs, err := filepath.Abs(out)
			if err != nil {
				return usagef("flag --out: %v", err)
			}
			return events.RelaysWatch{Stack: st, Out: abs, Every: every, Log: ios.ErrOut}.Run(cmd.Context())
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&inventory, "inventory", "", "fleet file (required)")
	fs.StringVar(&out, "out", "", "the relays file to write (default: the state dir's relays file)")
	fs.DurationVar(&every, "watch", 0, "read the backend again every INTERVAL, until stopped (0: once)")
	cli.Ranged(fs, "watch", cli.Durations(0, time.Hour))
	k.add(fs)
	return cmd
}
