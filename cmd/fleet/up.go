package main

import (
	"context"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/relayfleet/relayfleet/infra/events"
	"github.com/relayfleet/relayfleet/infra/lab"
	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/infra/provider"
	"github.com/relayfleet/relayfleet/internal/cli"
	"github.com/relayfleet/relayfleet/monitoring"
)

// stackFlags are the flags of the stack commands: up, preview, destroy, secret, token, auth.
type stackFlags struct{ pulumiFlags }

// pulumiFlags say where stacks live and how their boxes are reached:
// shared by fleet up, preview, destroy, events and burst.
type pulumiFlags struct {
	set        program.Settings
	monitorDir string
}

// add declares the stack flags on fs; needsRelay adds --relay-binary.
func (s *stackFlags) add(fs *pflag.FlagSet, needsRelay bool) {
	fs.StringVar(&s.set.Inventory, "inventory", "", "fleet file (required)")
	fs.StringVar(&s.set.Name, "stack", "", "stack name (default: the fleet's name)")
	fs.BoolVar(&s.set.Refresh, "refresh", true, "read every box's real state first, so drift shows and is repaired")
	s.pulumiFlags.register(fs, needsRelay)
}

func (p *pulumiFlags) register(fs *pflag.FlagSet, needsRelay bool) {
	p.set.NeedsRelay = needsRelay
	fs.StringVar(&p.set.BackendURL, "backend", "", "Pulumi backend URL (default: the fleet file's state.backend, else $"+program.BackendEnv+", else file:// under the state dir; one other than the fleet file's is refused)")
	fs.StringVar(&p.set.StateDir, "state-dir", "", "state directory: file backend, passphrase, relays file (default $"+program.StateDirEnv+", else ~/.local/state/relayfleet)")
	fs.StringVar(&p.set.Pulumi, "pulumi", "", "the Pulumi CLI (default $"+program.PulumiEnv+", else the make pulumi build, else pulumi on $PATH)")
	if needsRelay {
		fs.StringVar(&p.set.RelayBinary, "relay-binary", "", "the fleet's release, or a fleet's first (default: the recorded release; for a fleet without one, relay beside the fleet binary); a new build goes through fleet rollout")
	}
	fs.StringVar(&p.set.SSHKey, "ssh-key", "", "private key for static servers (default: ssh-agent at SSH_AUTH_SOCK)")
	fs.StringVar(&p.set.LabDir, "lab-dir", "", "lab state directory (default $"+lab.DirEnv+", else "+lab.DefaultDir+")")
	fs.StringVar(&p.set.LabImages, "lab-images", "", "lab image cache (default LAB-DIR/images)")
	fs.StringVar(&p.set.LabBridge, "lab-bridge", "", "lab bridge (default "+lab.DefaultBridge+")")
	fs.StringVar(&p.set.LabSubnet, "lab-subnet", "", "lab subnet (default "+lab.DefaultSubnet.String()+")")
	fs.StringVar(&p.monitorDir, "monitor-dir", "", "fleet monitor's directory: rewrite its targets after the change (default $"+monitoring.DirEnv+"; none if unset)")
}

// env binds the flags into the stack commands' program.Env.
func (s *stackFlags) env(ios *cli.IOStreams) program.Env {
	return program.Env{Settings: s.set, IO: ios, Keys: openKeyStore, Clock: clock, Release: useRelease}
}

// applyCommand is fleet up, preview or destroy (run); yes, when not "",
// declares --yes with that usage.
// yes, when not "", also makes it take the fleet's lock (--wait).
func applyCommand(ios *cli.IOStreams, use, short string, needsRelay bool, yes string, run func(context.Context, program.ApplyOptions) error) *cobra.Command {
	var s stackFlags
	var lf lockFlags
	o := program.ApplyOptions{Prober: func(c provider.Config) program.ListenerProber { return &events.SSHProbe{Lab: c, KeyFile: c.SSHKeyFile} }}
	cmd := &cobra.Command{Use: use, Short: short, Args: cli.NoArgs, RunE: func(cmd *cobra.Command, _ []string) error {
		o.Env, o.Changed = s.env(ios), func(stateDir string) { refreshMonitor(ios.Out, s.monitorDir, stateDir, nil) }
		if yes != "" {
			o.Lock = lf.locker(ios, cmd)
		}
		o.Sync = events.SyncIfShared
		return lf.result(run(cmd.Context(), o))
	}}
	s.add(cmd.Flags(), needsRelay)
	if yes != "" {
		cmd.Flags().BoolVar(&o.Yes, "yes", false, yes)
		lf.add(cmd.Flags())
	}
	return cmd
}

func upCommand(ios *cli.IOStreams) *cobra.Command {
	return applyCommand(ios, "up", "bring the fleet to the inventory through Pulumi (boxes, converged hosts) and write the router's relays file", true,
		"replace or destroy boxes that serve listeners without asking", program.FleetUp)
}

func previewCommand(ios *cli.IOStreams) *cobra.Command {
	return applyCommand(ios, "preview", "show what fleet up would change, drift included", true,
		"", program.FleetPreview)
}

func destroyCommand(ios *cli.IOStreams) *cobra.Command {
	return applyCommand(ios, "destroy", "destroy the stack's boxes (static servers are left as they are)", false,
		"destroy boxes that serve listeners without asking", program.FleetDestroy)
}
