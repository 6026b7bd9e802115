package main

import (
	"context"
	"fmt"
	"github.com/relayfleet/relayfleet/internal/text"
	"io"

	"github.com/spf13/cobra"

	"github.com/relayfleet/relayfleet/infra/fleethosts"
	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/internal/cli"
	"github.com/relayfleet/relayfleet/provision"
)

// readHosts lists the fleet's hosts from its stacks (the steady stack st
// and its events'); what differs from the inventory is a warning on
// errOut (the command's stderr).
func readHosts(ctx context.Context, st *program.Stack, errOut io.Writer) (*fleethosts.Set, error) {
	set, err := fleethosts.Read(ctx, st)
	if err != nil {
		return nil, err
	}
	for _, w := range set.Warnings {
		fmt.Fprintf(errOut, "fleet: warning: %s\n", w)
	}
	return set, nil
}

// hostTargets are the provision targets for hosts
// (fleethosts.StackTargets).
func hostTargets(ctx context.Context, st *program.Stack, hosts []fleethosts.Host, sshKey, labDir string) ([]provision.Target, func(), error) {
	return fleethosts.StackTargets(ctx, st, hosts, fleethosts.Access{LabDir: labDir, SSHKey: sshKey})
}

// steadyTargets are the targets of the steady stack's hosts; warnings go
// to errOut.
func steadyTargets(ctx context.Context, st *program.Stack, sshKey, labDir string, errOut io.Writer) ([]provision.Target, func(), error) {
	set, err := readHosts(ctx, st, errOut)
	if err != nil {
		return nil, nil, err
	}
	return hostTargets(ctx, st, set.SteadyHosts(), sshKey, labDir)
}

// hostsCommand is fleet hosts.
func hostsCommand(ios *cli.IOStreams) *cobra.Command {
	var hf hostFlags
	var asJSON, release bool
	cmd := &cobra.Command{
		Use:   "hosts",
		Short: "the fleet's hosts as its stacks list them (steady and events, any backend): stack, group, tier, address, host key, processes",
		Args:  cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runHosts(cmd.Context(), &hf, asJSON, release, ios)
		},
	}
	fs := cmd.Flags()
	hf.add(fs)
	fs.BoolVar(&asJSON, "json", false, "print JSON: every host with its stack, tier, event, addresses, host key and ports")
	fs.BoolVar(&release, "release", false, "read each box's current relay release over SSH (default: the stacks alone, no connection)")
	return cmd
}

func runHosts(ctx context.Context, hf *hostFlags, asJSON, release bool, ios *cli.IOStreams) error {
	stdout := ios.Out
	if err := hf.check(); err != nil {
		return err
	}
	fleet, err := loadFleet(hf.inventory)
	if err != nil {
		return err
	}
	st, err := hf.stackFor(fleet)
	if err != nil {
		return err
	}
	set, err := fleethosts.Read(ctx, st)
	if err != nil {
		return err
	}
	rows := set.Rows()
	failed := 0
	if release && len(set.Hosts) > 0 {
		targets, cleanup, err := hostTargets(ctx, st, set.Hosts, hf.sshKey, hf.labDir)
		if err != nil {
			return err
		}
		defer cleanup()
		failed = fleethosts.ReadReleases(ctx, targets, rows)
	}
	if asJSON {
		if err := fleethosts.WriteJSON(stdout, set, rows); err != nil {
			return err
		}
	} else if err := fleethosts.WriteText(stdout, set, rows, release); err != nil {
		return err
	}
	if failed > 0 {
		return &exitError{Code: exitHostsFailed, Msg: fmt.Sprintf("%d of %s could not be read", failed, text.Plural(len(rows), "host", "hosts"))}
	}
	return nil
}

// allTargets loads the inventory and resolves every box of its stacks:
// the steady stack's and its events'. Warnings go to errOut.
func (h *hostFlags) allTargets(ctx context.Context, errOut io.Writer) ([]provision.Target, func(), error) {
	fleet, err := loadFleet(h.inventory)
	if err != nil {
		return nil, nil, err
	}
	st, err := h.stackFor(fleet)
	if err != nil {
		return nil, nil, err
	}
	set, err := readHosts(ctx, st, errOut)
	if err != nil {
		return nil, nil, err
	}
	return hostTargets(ctx, st, set.Hosts, h.sshKey, h.labDir)
}
