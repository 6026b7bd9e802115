package main

import (
	"context"
	"time"

	"github.com/spf13/cobra"

	"github.com/relayfleet/relayfleet/internal/cli"
	"github.com/relayfleet/relayfleet/internal/version"
)

// Exit codes (cli.Execute maps errors to them).
const (
	exitOK      = cli.ExitOK
	exitFailure = cli.ExitFailure
	exitUsage   = cli.ExitUsage
)

// usageError is bad input from the user: exit code 2.
type usageError = cli.UsageError

// usagef makes a usageError.
var usagef = cli.Usagef

// execute runs one fleet command line and returns its exit status
// (cli.Execute: one line on stderr for every failure).
func execute(ctx context.Context, args []string, ios *cli.IOStreams) int {
	return cli.Execute(ctx, rootCommand(ios), args, ios)
}

// rootCommand is the command tree. Each command declares its own flags,
// their ranges and its subcommands where it is built; cobra parses them
// and generates help and completion from the tree.
func rootCommand(ios *cli.IOStreams) *cobra.Command {
	root := cli.NewRoot("fleet", "relayfleet's operator tool", version.String(), ios)
	root.AddCommand(
		planCommand(ios), convergeCommand(ios), rolloutCommand(ios), rollbackCommand(ios), releasesCommand(ios), hostsCommand(ios), statusCommand(ios),
		providersCommand(ios), upCommand(ios), previewCommand(ios), secretCommand(ios), tokenCommand(ios),
		authCommand(ios), destroyCommand(ios), eventsCommand(ios), burstCommand(ios), loadtestCommand(ios),
		monitorCommand(ios), labCommand(ios), unlockCommand(ios), relaysCommand(ios), backupCommand(ios), restoreCommand(ios),
	)
	return root
}

// Ranges shared by several commands' flags.
var (
	parallelRange = cli.Ints(1, 1024)                        // hosts at once
	drainRange    = cli.Durations(0, 24*time.Hour)           // how long listeners get to leave
	leaseRange    = cli.Durations(30*time.Second, time.Hour) // the events reconciler's lease in the Pulumi backend
)
