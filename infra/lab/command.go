package lab

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

	"golang.org/x/crypto/ssh"

	"github.com/relayfleet/relayfleet/internal/cli"
)

// Options are what every fleet lab command is given: its lab, as the
// flags name it, and who runs fleet.
type Options struct {
	// Dir, Bridge and Images are Config's Dir, Bridge and ImageDir.
	Dir, Bridge, Images string
	// Subnet is the bridge's subnet as given ("": DefaultSubnet).
	Subnet string
	// Geteuid is who runs fleet (nil: os.Geteuid); tests replace it.
	Geteuid func() int
}

// Open checks the options and that root runs fleet, then opens the lab
// (New); its progress goes to logw. Every error is a cli usage error.
func Open(o Options, logw io.Writer) (*Lab, error) {
	var subnet netip.Prefix
	if o.Subnet != "" {
		var err error
		if subnet, err = netip.ParsePrefix(o.Subnet); err != nil {
			return nil, cli.Usagef("flag --subnet: %q: want an IPv4 prefix such as 10.231.77.0/24", o.Subnet)
		}
	}
	geteuid := o.Geteuid
	if geteuid == nil {
		geteuid = os.Geteuid
	}
	if geteuid() != 0 {
		return nil, cli.Usagef("%s", ErrNotRoot)
	}
	l, err := New(Config{Dir: o.Dir, ImageDir: o.Images, Bridge: o.Bridge, Subnet: subnet, Logf: func(format string, args ...any) {
		fmt.Fprintf(logw, "lab: "+format+"\n", args...)
	}})
	if err != nil {
		return nil, cli.Usagef("%s", err)
	}
	return l, nil
}

// ParseCount reads N of fleet lab up N: 1 to MaxUp.
func ParseCount(arg string) (int, error) {
	n, err := strconv.Atoi(arg)
	if err != nil || n < 1 || n > MaxUp {
		return 0, cli.Usagef("want the number of boxes (1-%d), got %q", MaxUp, arg)
	}
	return n, nil
}

// shapes are the shapes fleet lab up --shape names.
var shapes = map[string]Shape{"small": Small, "medium": Medium}

// UpBoxes is fleet lab up N: it starts count (ParseCount) boxes of the
// shape named (small or medium) and writes what it started to ios.Out,
// its progress to ios.ErrOut.
func UpBoxes(ctx context.Context, o Options, count, shapeName string, ios *cli.IOStreams) error {
	n, err := ParseCount(count)
	if err != nil {
		return err
	}
	shape, ok := shapes[shapeName]
	if !ok {
		return cli.Usagef("flag --shape: want small or medium, got %q", shapeName)
	}
	l, err := Open(o, ios.ErrOut)
	if err != nil {
		return err
	}
	results, err := Up(ctx, l, n, shape)
	WriteStarted(ios.Out, results)
	return err
}

// DownBoxes is fleet lab down: it deletes every box, then the bridge,
// and writes a line to ios.Out for each box deleted.
func DownBoxes(ctx context.Context, o Options, ios *cli.IOStreams) error {
	l, err := Open(o, ios.ErrOut)
	if err != nil {
		return err
	}
	deleted, err := Down(ctx, l)
	for _, name := range deleted {
		fmt.Fprintf(ios.Out, "%s\tdeleted\n", name)
	}
	return err
}

// ShowStatus is fleet lab status: the boxes, as a table or as JSON, on
// ios.Out.
func ShowStatus(ctx context.Context, o Options, asJSON bool, ios *cli.IOStreams) error {
	l, err := Open(o, ios.ErrOut)
	if err != nil {
		return err
	}
	boxes, err := l.Status(ctx)
	if err != nil {
		return err
	}
	return WriteStatus(ios.Out, boxes, asJSON)
}

// SSH is fleet lab ssh BOX [-- CMD]: command run on the box with fleet's
// streams, or with no command an interactive shell (the ssh client).
// A command's nonzero exit status is an error saying so.
func SSH(ctx context.Context, o Options, name string, command []string, ios *cli.IOStreams) error {
	if err := ValidName(name); err != nil {
		return cli.Usagef("%s", err)
	}
	l, err := Open(o, ios.ErrOut)
	if err != nil {
		return err
	}
	b, err := l.Get(ctx, name)
	if errors.Is(err, ErrNotFound) {
		return cli.Usagef("no box %q (fleet lab status lists them)", name)
	} else if err != nil {
		return err
	}
	if b.State != StateRunning {
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
	err = Run(ctx, c, strings.Join(command, " "), commandStdin(ios.In), ios.Out, ios.ErrOut)
	var ee *ssh.ExitError
	if errors.As(err, &ee) {
		return fmt.Errorf("%s: the command exited with status %d", name, ee.ExitStatus())
	}
	return err
}

// commandStdin is in, fleet's stdin, for a remote command unless it is a
// terminal (or /dev/null, which has nothing to give): the SSH session
// would wait for its end.
func commandStdin(in io.Reader) io.Reader {
	f, ok := in.(*os.File)
	if !ok {
		return in
	}
	if st, err := f.Stat(); err != nil || st.Mode()&os.ModeCharDevice != 0 {
		return nil
	}
	return f
}

// interactiveSSH runs the ssh client with the lab's key and pinned host key.
func interactiveSSH(ctx context.Context, l *Lab, b Box, ios *cli.IOStreams) error {
	client, err := exec.LookPath("ssh")
	if err != nil {
		return cli.Usagef("give a command (fleet lab ssh %s -- CMD): an interactive shell needs the ssh client", b.Name)
	}
	cmd := l.SSHCommand(ctx, client, b)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = ios.In, ios.Out, ios.ErrOut
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("ssh %s: %w", b.Name, err)
	}
	return nil
}
