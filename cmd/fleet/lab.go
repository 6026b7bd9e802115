package main

import (
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/relayfleet/relayfleet/infra/lab"
	"github.com/relayfleet/relayfleet/internal/cli"
)

// geteuid is who runs fleet; tests replace it.
var geteuid = os.Geteuid

// labCommand is `fleet lab`: boxes on this machine (systemd-nspawn
// containers on a private bridge) for the demo and the integration tests.
func labCommand(ios *cli.IOStreams) *cobra.Command {
	return cli.Group("lab", "boxes on this machine for the demo and tests: up N | down | status | ssh BOX (root)",
		labUpCommand(ios), labDownCommand(ios), labStatusCommand(ios), labSSHCommand(ios), labCloudCommand(ios))
}

// addLabFlags declares the flags every lab subcommand takes, into o.
func addLabFlags(fs *pflag.FlagSet, o *lab.Options) {
	fs.StringVar(&o.Dir, "dir", "", "state directory (default $"+lab.DirEnv+", else "+lab.DefaultDir+")")
	fs.StringVar(&o.Bridge, "bridge", "", "the lab's bridge (default "+lab.DefaultBridge+"): a lab of its own beside another")
	fs.StringVar(&o.Subnet, "subnet", "", "the lab bridge's subnet (default "+lab.DefaultSubnet.String()+")")
	fs.StringVar(&o.Images, "images", "", "image cache directory (default DIR/images)")
	o.Geteuid = func() int { return geteuid() }
}

// oneArg is an Args validator for one positional argument, what: its
// absence is "want WHAT", a second one unexpected.
func oneArg(what string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		switch len(args) {
		case 0:
			return usagef("want %s", what)
		case 1:
			return nil
		}
		return usagef("unexpected argument %q", args[1])
	}
}

// labSubcommand is a lab subcommand that takes the lab flags (addLabFlags)
// and runs run with the options they set.
func labSubcommand(use, short string, args cobra.PositionalArgs, run func(cmd *cobra.Command, args []string, o lab.Options) error) *cobra.Command {
	var o lab.Options
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  args,
		RunE: func(cmd *cobra.Command, args []string) error {
			return run(cmd, args, o)
		},
	}
	addLabFlags(cmd.Flags(), &o)
	return cmd
}

func labUpCommand(ios *cli.IOStreams) *cobra.Command {
	var shape string
	cmd := labSubcommand("up N", "start boxes box1..boxN (those running stay as they are)",
		func(cmd *cobra.Command, args []string) error {
			if err := oneArg("the number of boxes: fleet lab up N")(cmd, args); err != nil {
				return err
			}
			_, err := lab.ParseCount(args[0])
			return err
		},
		func(cmd *cobra.Command, args []string, o lab.Options) error {
			return lab.UpBoxes(cmd.Context(), o, args[0], shape, ios)
		})
	cmd.Flags().StringVar(&shape, "shape", "small", "box shape: small (1 core, 1 GiB) or medium (2 cores, 2 GiB)")
	return cmd
}

func labDownCommand(ios *cli.IOStreams) *cobra.Command {
	return labSubcommand("down", "delete every lab box, then the bridge", cli.NoArgs,
		func(cmd *cobra.Command, _ []string, o lab.Options) error {
			return lab.DownBoxes(cmd.Context(), o, ios)
		})
}

func labStatusCommand(ios *cli.IOStreams) *cobra.Command {
	var asJSON bool
	cmd := labSubcommand("status", "the lab boxes: address, state, cores, memory, whether SSH answers", cli.NoArgs,
		func(cmd *cobra.Command, _ []string, o lab.Options) error {
			return lab.ShowStatus(cmd.Context(), o, asJSON, ios)
		})
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the boxes as JSON")
	return cmd
}

func labSSHCommand(ios *cli.IOStreams) *cobra.Command {
	return labSubcommand("ssh BOX [-- CMD]", "a root shell on a box, or CMD run there",
		func(cmd *cobra.Command, args []string) error {
			if d := cmd.ArgsLenAtDash(); d >= 0 {
				args = args[:d]
			}
			return oneArg("a box: fleet lab ssh BOX [-- CMD]")(cmd, args)
		},
		func(cmd *cobra.Command, args []string, o lab.Options) error {
			var command []string
			if d := cmd.ArgsLenAtDash(); d >= 0 {
				command = args[d:]
			}
			return lab.SSH(cmd.Context(), o, args[0], command, ios)
		})
}
