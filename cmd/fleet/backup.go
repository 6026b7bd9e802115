package main

import (
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/relayfleet/relayfleet/infra/backup"
	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/internal/cli"
)

// backupFlags say which fleet's state, and where it lives.
type backupFlags struct {
	inventory string
	set       program.Settings
	lf        lockFlags
}

func (b *backupFlags) add(fs *pflag.FlagSet) {
	fs.StringVar(&b.inventory, "inventory", "", "fleet file (required)")
	fs.StringVar(&b.set.StateDir, "state-dir", "", "state directory (default $"+program.StateDirEnv+", else ~/.local/state/relayfleet)")
	fs.StringVar(&b.set.BackendURL, "backend", "", "Pulumi backend URL (default: the fleet file's state.backend, else $"+program.BackendEnv+", else file:// under the state dir; one other than the fleet file's is refused)")
	fs.StringVar(&b.set.Pulumi, "pulumi", "", "the Pulumi CLI (default $"+program.PulumiEnv+", else the make pulumi build, else pulumi on $PATH)")
	b.lf.add(fs)
}

// options are backup.Options for the flags' fleet and file.
func (b *backupFlags) options(ios *cli.IOStreams, cmd *cobra.Command, file string) (backup.Options, error) {
	if b.inventory == "" {
		return backup.Options{}, usagef("flag --inventory: required")
	}
	if err := b.set.Check(); err != nil {
		return backup.Options{}, err
	}
	f, err := loadFleet(b.inventory)
	if err != nil {
		return backup.Options{}, err
	}
	st, err := b.set.StackFor(f)
	if err != nil {
		return backup.Options{}, err
	}
	return backup.Options{Stack: st, File: file, Lock: b.lf.locker(ios, cmd), Out: ios.Out}, nil
}

// backupCommand is fleet backup (backup.Backup).
func backupCommand(ios *cli.IOStreams) *cobra.Command {
	var b backupFlags
	var out string
	cmd := &cobra.Command{
		Use:   "backup",
		Short: "copy the fleet's state (every stack, secrets encrypted; its relay builds) out of its backend into one file: --out FILE",
		Args:  cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return usagef("flag --out: required")
			}
			o, err := b.options(ios, cmd, out)
			if err != nil {
				return err
			}
			_, err = backup.Backup(cmd.Context(), o)
			return b.lf.result(err)
		},
	}
	b.add(cmd.Flags())
	cmd.Flags().StringVar(&out, "out", "", "the backup file, written atomically, mode 0600 (required)")
	return cmd
}

// restoreCommand is fleet restore (backup.Restore).
func restoreCommand(ios *cli.IOStreams) *cobra.Command {
	var b backupFlags
	var in string
	var force bool
	cmd := &cobra.Command{
		Use:   "restore",
		Short: "put a fleet backup into the fleet's backend (refused where the fleet has stacks, unless --force): --in FILE",
		Args:  cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if in == "" {
				return usagef("flag --in: required")
			}
			o, err := b.options(ios, cmd, in)
			if err != nil {
				return err
			}
			o.Force = force
			_, err = backup.Restore(cmd.Context(), o)
			return b.lf.result(err)
		},
	}
	b.add(cmd.Flags())
	cmd.Flags().StringVar(&in, "in", "", "the backup file fleet backup wrote (required)")
	cmd.Flags().BoolVar(&force, "force", false, "write the backup over the stacks the fleet has in the backend")
	return cmd
}
