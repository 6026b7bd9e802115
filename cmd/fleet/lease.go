package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/relayfleet/relayfleet/infra/lease"
	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/internal/cli"
)

// waitRange is --wait's: how long a command waits for the fleet's lease.
var waitRange = cli.Durations(0, 24*time.Hour)

// lockFlags are the flags of a command that takes the fleet's lease.
type lockFlags struct {
	wait time.Duration
	held *lease.Held
}

func (l *lockFlags) add(fs *pflag.FlagSet) {
	fs.DurationVar(&l.wait, "wait", 0, "wait up to this long for another fleet command that holds the fleet's lock (default: refuse at once, naming it)")
	cli.Ranged(fs, "wait", waitRange)
}

// lockExit is how long a command whose lease was lost gets to stop by
// itself before the process exits (1).
var lockExit = func(ttl time.Duration) time.Duration { return ttl / 4 }

// locker takes the fleet's lease for cmd (program.Env.Lock). Should the
// lease be lost (its renewals failed), the command's context ends, and
// the process exits non-zero if the command has not returned before the
// lease could expire.
func (l *lockFlags) locker(ios *cli.IOStreams, cmd *cobra.Command) func(ctx context.Context, st *program.Stack) (context.Context, func(), error) {
	return l.lockerFor(ios, cmd, false)
}

// lockerFor is locker; existing is program.LockOptions.Existing.
func (l *lockFlags) lockerFor(ios *cli.IOStreams, cmd *cobra.Command, existing bool) func(ctx context.Context, st *program.Stack) (context.Context, func(), error) {
	return func(ctx context.Context, st *program.Stack) (context.Context, func(), error) {
		held, release, err := program.LockFleet(ctx, st, program.LockOptions{Command: cmd.CommandPath(), Wait: l.wait, Waiting: ios.ErrOut, Existing: existing})
		if err != nil {
			return nil, nil, err
		}
		if held == nil {
			return ctx, release, nil
		}
		l.held = held
		done := make(chan struct{})
		go func() {
			select {
			case <-done:
				return
			case <-held.Context().Done():
			}
			lost := held.Lost()
			if lost == nil {
				return
			}
			fmt.Fprintf(ios.ErrOut, "%s: %v: stopping\n", cmd.CommandPath(), lost)
			select {
			case <-done:
			case <-time.After(lockExit(lease.DefaultTTL)):
				fmt.Fprintf(ios.ErrOut, "%s: still running after the fleet's lease was lost: exiting\n", cmd.CommandPath())
				os.Exit(exitFailure)
			}
		}()
		return held.Context(), func() { close(done); release() }, nil
	}
}

// lockStack takes the fleet's lease for a command that works on st
// outside program's commands (converge, rollout, rollback).
func (l *lockFlags) lockStack(ctx context.Context, ios *cli.IOStreams, cmd *cobra.Command, st *program.Stack) (context.Context, func(), error) {
	return l.lockerFor(ios, cmd, true)(ctx, st)
}

// result is the command's error, or the lost lease that ended it.
func (l *lockFlags) result(err error) error {
	if l.held != nil {
		if lost := l.held.Lost(); lost != nil {
			return lost
		}
	}
	return err
}

// unlockCommand is fleet unlock.
func unlockCommand(ios *cli.IOStreams) *cobra.Command {
	var hf hostFlags
	cmd := &cobra.Command{
		Use:   "unlock",
		Short: "clear the fleet's lock and the Pulumi stack locks a dead command left (refused while its holder may run)",
		Args:  cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := hf.check(); err != nil {
				return err
			}
			f, err := loadFleet(hf.inventory)
			if err != nil {
				return err
			}
			st, err := hf.stackFor(f)
			if err != nil {
				return err
			}
			backend, err := st.Backend()
			if err != nil {
				return err
			}
			l, err := lease.Open(cmd.Context(), backend, f.Name)
			if err != nil {
				return err
			}
			defer l.Close()
			return l.Unlock(cmd.Context(), ios.Out, lease.Self(cmd.CommandPath()))
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&hf.inventory, "inventory", "", "fleet file (required)")
	hf.keyFlags.add(fs)
	return cmd
}
