package main

import (
	"context"
	"io"

	"github.com/spf13/cobra"

	"github.com/relayfleet/relayfleet/infra/fleethosts"
	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/internal/cli"
	"github.com/relayfleet/relayfleet/provision"
)

// readHosts lists the stacks' hosts, warnings to errOut (Fleet.ReadHosts).
func readHosts(ctx context.Context, st *program.Stack, errOut io.Writer) (*fleethosts.Set, error) {
	return (&fleethosts.Fleet{Stack: st, Warnings: errOut}).ReadHosts(ctx)
}

// steadyTargets are the steady stack's hosts' targets; warnings to errOut.
func steadyTargets(ctx context.Context, st *program.Stack, sshKey, labDir string, errOut io.Writer) ([]provision.Target, func(), error) {
	return (&fleethosts.Fleet{Stack: st, Access: fleethosts.Access{LabDir: labDir, SSHKey: sshKey}, Warnings: errOut}).SteadyTargets(ctx)
}

// hostsCommand is fleet hosts.
func hostsCommand(ios *cli.IOStreams) *cobra.Command {
	var hf hostFlags
	var asJSON, release, origins bool
	cmd := &cobra.Command{
		Use:   "hosts",
		Short: "the fleet's hosts as its stacks list them (steady and events, any backend): stack, group, tier, address, host key, processes",
		Args:  cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := hf.openFleet(ios.ErrOut)
			if err != nil {
				return err
			}
			if origins {
				if asJSON || release {
					return cli.Usagef("--origins prints URLs only: not with --json or --release")
				}
				return f.ListOrigins(cmd.Context(), ios.Out)
			}
			return f.List(cmd.Context(), ios.Out, asJSON, release)
		},
	}
	fs := cmd.Flags()
	hf.add(fs)
	fs.BoolVar(&asJSON, "json", false, "print JSON: every host with its stack, tier, event, addresses, host key and ports")
	fs.BoolVar(&origins, "origins", false, "print the URLs, pinned, of the origins publishers publish to, one a line: relay publish $(fleet hosts --origins) --name ROOM")
	fs.BoolVar(&release, "release", false, "read each box's current relay release over SSH (default: the stacks alone, no connection)")
	return cmd
}
