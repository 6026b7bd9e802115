package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/crypto/ssh"

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

// labOpts are the flags every lab subcommand takes.
type labOpts struct{ dir, bridge, subnet, images string }

func (o *labOpts) add(fs *pflag.FlagSet) {
	fs.StringVar(&o.dir, "dir", "", "state directory (default $"+lab.DirEnv+", else "+lab.DefaultDir+")")
	fs.StringVar(&o.bridge, "bridge", "", "the lab's bridge (default "+lab.DefaultBridge+"): a lab of its own beside another")
	fs.StringVar(&o.subnet, "subnet", "", "the lab bridge's subnet (default "+lab.DefaultSubnet.String()+")")
	fs.StringVar(&o.images, "images", "", "image cache directory (default DIR/images)")
}

// newLab checks for root and opens the lab; its progress goes to logw.
func newLab(o *labOpts, logw io.Writer) (*lab.Lab, error) {
	var subnet netip.Prefix
	if o.subnet != "" {
		var err error
		if subnet, err = netip.ParsePrefix(o.subnet); err != nil {
			return nil, usagef("flag --subnet: %q: want an IPv4 prefix such as 10.231.77.0/24", o.subnet)
		}
	}
	if geteuid() != 0 {
		return nil, usagef("%s", lab.ErrNotRoot)
	}
	l, err := lab.New(lab.Config{Dir: o.dir, ImageDir: o.images, Bridge: o.bridge, Subnet: subnet, Logf: func(format string, args ...any) {
		fmt.Fprintf(logw, "lab: "+format+"\n", args...)
	}})
	if err != nil {
		return nil, usagef("%s", err)
	}
	return l, nil
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

var shapes = map[string]lab.Shape{"small": lab.Small, "medium": lab.Medium}

// labCount reads N of fleet lab up N.
func labCount(arg string) (int, error) {
	n, err := strconv.Atoi(arg)
	if err != nil || n < 1 || n > lab.MaxUp {
		return 0, usagef("want the number of boxes (1-%d), got %q", lab.MaxUp, arg)
	}
	return n, nil
}

func labUpCommand(ios *cli.IOStreams) *cobra.Command {
	var o labOpts
	var shapeName string
	cmd := &cobra.Command{
		Use:   "up N",
		Short: "start boxes box1..boxN (those running stay as they are)",
		Args: func(cmd *cobra.Command, args []string) error {
			if err := oneArg("the number of boxes: fleet lab up N")(cmd, args); err != nil {
				return err
			}
			_, err := labCount(args[0])
			return err
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := labCount(args[0])
			if err != nil {
				return err
			}
			shape, ok := shapes[shapeName]
			if !ok {
				return usagef("flag --shape: want small or medium, got %q", shapeName)
			}
			l, err := newLab(&o, ios.ErrOut)
			if err != nil {
				return err
			}
			results, err := lab.Up(cmd.Context(), l, n, shape)
			lab.WriteStarted(ios.Out, results)
			return err
		},
	}
	o.add(cmd.Flags())
	cmd.Flags().StringVar(&shapeName, "shape", "small", "box shape: small (1 core, 1 GiB) or medium (2 cores, 2 GiB)")
	return cmd
}

func labDownCommand(ios *cli.IOStreams) *cobra.Command {
	var o labOpts
	cmd := &cobra.Command{
		Use:   "down",
		Short: "delete every lab box, then the bridge",
		Args:  cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			l, err := newLab(&o, ios.ErrOut)
			if err != nil {
				return err
			}
			deleted, err := lab.Down(ctx, l)
			for _, name := range deleted {
				fmt.Fprintf(ios.Out, "%s\tdeleted\n", name)
			}
			return err
		},
	}
	o.add(cmd.Flags())
	return cmd
}

func labStatusCommand(ios *cli.IOStreams) *cobra.Command {
	var o labOpts
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "the lab boxes: address, state, cores, memory, whether SSH answers",
		Args:  cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return labStatus(cmd.Context(), &o, asJSON, ios)
		},
	}
	o.add(cmd.Flags())
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the boxes as JSON")
	return cmd
}

func labStatus(ctx context.Context, o *labOpts, asJSON bool, ios *cli.IOStreams) error {
	stdout := ios.Out
	l, err := newLab(o, ios.ErrOut)
	if err != nil {
		return err
	}
	boxes, err := l.Status(ctx)
	if err != nil {
		return err
	}
	return lab.WriteStatus(stdout, boxes, asJSON)
}

func labSSHCommand(ios *cli.IOStreams) *cobra.Command {
	var o labOpts
	cmd := &cobra.Command{
		Use:   "ssh BOX [-- CMD]",
		Short: "a root shell on a box, or CMD run there",
		Args: func(cmd *cobra.Command, args []string) error {
			if d := cmd.ArgsLenAtDash(); d >= 0 {
				args = args[:d]
			}
			return oneArg("a box: fleet lab ssh BOX [-- CMD]")(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			var command []string
			if d := cmd.ArgsLenAtDash(); d >= 0 {
				command = args[d:]
			}
			return labSSH(cmd.Context(), &o, args[0], command, ios)
		},
	}
	o.add(cmd.Flags())
	return cmd
}

func labSSH(ctx context.Context, o *labOpts, name string, command []string, ios *cli.IOStreams) error {
	stdout := ios.Out
	if err := lab.ValidName(name); err != nil {
		return usagef("%s", err)
	}
	l, err := newLab(o, ios.ErrOut)
	if err != nil {
		return err
	}
	b, err := l.Get(ctx, name)
	if errors.Is(err, lab.ErrNotFound) {
		return usagef("no box %q (fleet lab status lists them)", name)
	} else if err != nil {
		return err
	}
	if b.State != lab.StateRunning {
		return fmt.Errorf("box %s is %s (fleet lab up starts it)", name, b.State)
	}
	if len(command) == 0 {
		return interactiveSSH(ctx, l, b, ios)
	}
	c, err := l.Dial(ctx, name)
	if err != nil {
		return err
	}
	defer c.Close()
	err = lab.Run(ctx, c, strings.Join(command, " "), commandStdin(ios), stdout, ios.ErrOut)
	var ee *ssh.ExitError
	if errors.As(err, &ee) {
		return fmt.Errorf("%s: the command exited with status %d", name, ee.ExitStatus())
	}
	return err
}

// commandStdin is fleet's stdin for a remote command unless it is a
// terminal (or /dev/null, which has nothing to give): the SSH session
// would wait for its end.
func commandStdin(ios *cli.IOStreams) io.Reader {
	f, ok := ios.In.(*os.File)
	if !ok {
		return ios.In
	}
	if st, err := f.Stat(); err != nil || st.Mode()&os.ModeCharDevice != 0 {
		return nil
	}
	return f
}

// interactiveSSH runs the ssh client with the lab's key and pinned host key.
func interactiveSSH(ctx context.Context, l *lab.Lab, b lab.Box, ios *cli.IOStreams) error {
	client, err := exec.LookPath("ssh")
	if err != nil {
		return usagef("give a command (fleet lab ssh %s -- CMD): an interactive shell needs the ssh client", b.Name)
	}
	cmd := l.SSHCommand(ctx, client, b)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = ios.In, ios.Out, ios.ErrOut
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("ssh %s: %w", b.Name, err)
	}
	return nil
}
