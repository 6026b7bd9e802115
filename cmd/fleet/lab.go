package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/relayfleet/relayfleet/infra/lab"
	"github.com/relayfleet/relayfleet/internal/cli"
	"golang.org/x/crypto/ssh"
)

// geteuid is who runs fleet; tests replace it.
var geteuid = os.Geteuid

const labUsage = "want a subcommand: up N | down | status [--json] | ssh BOX [-- CMD] | cloud hcloud|digitalocean --listen ADDR"

// runLab is `fleet lab`: boxes on this machine (systemd-nspawn containers
// on a private bridge) for the demo and the integration tests.
func runLab(ctx context.Context, args []string, ios *cli.IOStreams) error {
	stdout := ios.Out
	if len(args) == 0 {
		return usagef("%s", labUsage)
	}
	switch args[0] {
	case "up":
		return labUp(ctx, args[1:], ios)
	case "down":
		return labDown(ctx, args[1:], ios)
	case "status":
		return labStatus(ctx, args[1:], ios)
	case "ssh":
		return labSSH(ctx, args[1:], ios)
	case "cloud":
		return labCloud(ctx, args[1:], ios)
	case "-h", "--help", "help":
		fmt.Fprintln(stdout, "usage: fleet lab up N [--shape small|medium] | down | status [--json] | ssh BOX [-- CMD] | cloud hcloud|digitalocean --listen ADDR")
		return flag.ErrHelp
	}
	return usagef("unknown subcommand %q; %s", args[0], labUsage)
}

// labFlags are the flags every lab subcommand takes.
func labFlags(name string, stdout io.Writer) (flags, *labOpts) {
	fs := newFlags("lab "+name, stdout)
	o := &labOpts{}
	fs.StringVar(&o.dir, "dir", "", "state directory (default $"+lab.DirEnv+", else "+lab.DefaultDir+")")
	fs.StringVar(&o.bridge, "bridge", "", "the lab's bridge (default "+lab.DefaultBridge+"): a lab of its own beside another")
	fs.StringVar(&o.subnet, "subnet", "", "the lab bridge's subnet (default "+lab.DefaultSubnet.String()+")")
	fs.StringVar(&o.images, "images", "", "image cache directory (default DIR/images)")
	return fs, o
}

// labOpts are the lab flags' values.
type labOpts struct{ dir, bridge, subnet, images string }

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

// positional takes the leading argument that is not a flag.
func positional(args []string, what string) (string, []string, error) {
	if len(args) == 0 || args[0] == "" {
		return "", nil, usagef("want %s", what)
	}
	if strings.HasPrefix(args[0], "-") {
		if args[0] == "-h" || args[0] == "--help" || args[0] == "-help" {
			return "", args, nil
		}
		return "", nil, usagef("want %s before the flags, got %q", what, args[0])
	}
	return args[0], args[1:], nil
}

var shapes = map[string]lab.Shape{"small": lab.Small, "medium": lab.Medium}

func labUp(ctx context.Context, args []string, ios *cli.IOStreams) error {
	stdout := ios.Out
	arg, rest, err := positional(args, "the number of boxes: fleet lab up N")
	if err != nil {
		return err
	}
	fs, dir := labFlags("up N", stdout)
	shapeName := fs.String("shape", "small", "box shape: small (1 core, 1 GiB) or medium (2 cores, 2 GiB)")
	if err := fs.parse(rest); err != nil {
		return err
	}
	n, err := strconv.Atoi(arg)
	if err != nil || n < 1 || n > 200 {
		return usagef("want the number of boxes (1-200), got %q", arg)
	}
	shape, ok := shapes[*shapeName]
	if !ok {
		return usagef("flag --shape: want small or medium, got %q", *shapeName)
	}
	l, err := newLab(dir, ios.ErrOut)
	if err != nil {
		return err
	}
	if _, err := l.EnsureImage(ctx); err != nil {
		return err
	}
	type result struct {
		box   lab.Box
		start time.Time
		took  time.Duration
		was   bool
		err   error
	}
	// Start the boxes in order (quick: their addresses follow their
	// names), then wait for them together.
	results := make([]result, n)
	for i := range results {
		r := &results[i]
		name := fmt.Sprintf("box%d", i+1)
		prev, perr := l.Get(ctx, name)
		r.was = perr == nil && prev.State == lab.StateRunning
		r.start = time.Now()
		r.box, r.err = l.Start(ctx, lab.Spec{Name: name, Shape: shape, Labels: map[string]string{"fleet": "lab"}})
	}
	var wg sync.WaitGroup
	for i := range results {
		r := &results[i]
		if r.err != nil {
			continue
		}
		wg.Go(func() {
			r.err = l.Wait(ctx, r.box.Name)
			r.took = time.Since(r.start)
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		// Stopped (a signal): the boxes this run started are removed, on
		// a context of their own, so that none is left half up; those
		// that ran before stay.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		var removed []string
		for i, r := range results {
			if r.was {
				continue
			}
			name := fmt.Sprintf("box%d", i+1)
			if err := l.Delete(cctx, name); err != nil {
				return fmt.Errorf("%w; removing %s: %v", ctx.Err(), name, err)
			}
			removed = append(removed, name)
		}
		return fmt.Errorf("removed the boxes it had started (%s)", strings.Join(removed, ", "))
	}
	var errs []error
	for _, r := range results {
		if r.err != nil {
			errs = append(errs, r.err)
			continue
		}
		how := fmt.Sprintf("ready in %.1fs", r.took.Seconds())
		if r.was {
			how = "already running"
		}
		fmt.Fprintf(stdout, "%s\t%s\t%s\t%d MiB\t%s\n", r.box.Name, r.box.Address, plural(r.box.Cores, "core", "cores"), r.box.RAM>>20, how)
	}
	return errors.Join(errs...)
}

func labDown(ctx context.Context, args []string, ios *cli.IOStreams) error {
	stdout := ios.Out
	fs, dir := labFlags("down", stdout)
	if err := fs.parse(args); err != nil {
		return err
	}
	l, err := newLab(dir, ios.ErrOut)
	if err != nil {
		return err
	}
	boxes, err := l.List(ctx, nil)
	if err != nil {
		return err
	}
	errs := make([]error, len(boxes))
	var wg sync.WaitGroup
	for i, b := range boxes {
		wg.Go(func() { errs[i] = l.Delete(ctx, b.Name) })
	}
	wg.Wait()
	for i, b := range boxes {
		if errs[i] == nil {
			fmt.Fprintf(stdout, "%s\tdeleted\n", b.Name)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return l.Cleanup(ctx)
}

// labBoxJSON is one box in `fleet lab status --json`.
type labBoxJSON struct {
	Name       string            `json:"name"`
	Address    string            `json:"address"`
	State      string            `json:"state"`
	Cores      int               `json:"cores"`
	CPUs       string            `json:"cpus"`
	RAM        int64             `json:"ram"`
	MemoryUsed int64             `json:"memory_used"`
	SSH        bool              `json:"ssh"`
	HostKey    string            `json:"host_key"`
	Labels     map[string]string `json:"labels,omitempty"`
	PID        int               `json:"pid,omitempty"`
}

func labStatus(ctx context.Context, args []string, ios *cli.IOStreams) error {
	stdout := ios.Out
	fs, dir := labFlags("status", stdout)
	asJSON := fs.Bool("json", false, "print the boxes as JSON")
	if err := fs.parse(args); err != nil {
		return err
	}
	l, err := newLab(dir, ios.ErrOut)
	if err != nil {
		return err
	}
	boxes, err := l.List(ctx, nil)
	if err != nil {
		return err
	}
	signer, err := l.Signer()
	if err != nil {
		return err
	}
	out := make([]labBoxJSON, len(boxes))
	var wg sync.WaitGroup
	for i, b := range boxes {
		out[i] = labBoxJSON{b.Name, b.Address.String(), b.State, b.Cores, b.CPUs, b.RAM, b.MemoryUsed, false, b.HostKey, b.Labels, b.PID}
		if b.State != lab.StateRunning {
			continue
		}
		wg.Go(func() {
			hk, err := lab.ParseHostKey(b.HostKey)
			out[i].SSH = err == nil && lab.WaitSSH(ctx, b.SSHAddr(), signer, hk, 2*time.Second) == nil
		})
	}
	wg.Wait()
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	if len(out) == 0 {
		fmt.Fprintln(stdout, "no lab boxes (fleet lab up N makes some)")
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "BOX\tADDRESS\tSTATE\tCORES\tCPUS\tMEMORY\tSSH")
	for _, b := range out {
		ok := "no"
		if b.SSH {
			ok = "ok"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%d/%d MiB\t%s\n", b.Name, b.Address, b.State, b.Cores, b.CPUs, b.MemoryUsed>>20, b.RAM>>20, ok)
	}
	return tw.Flush()
}

func labSSH(ctx context.Context, args []string, ios *cli.IOStreams) error {
	stdout := ios.Out
	var command []string
	for i, a := range args {
		if a == "--" {
			args, command = args[:i], args[i+1:]
			break
		}
	}
	name, rest, err := positional(args, "a box: fleet lab ssh BOX [-- CMD]")
	if err != nil {
		return err
	}
	fs, dir := labFlags("ssh BOX [-- CMD]", stdout)
	if err := fs.parse(rest); err != nil {
		return err
	}
	if err := lab.ValidName(name); err != nil {
		return usagef("%s", err)
	}
	l, err := newLab(dir, ios.ErrOut)
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
	cmd := exec.CommandContext(ctx, client, "-i", l.AdminKeyPath(),
		"-o", "UserKnownHostsFile="+l.KnownHostsPath(), "-o", "StrictHostKeyChecking=yes",
		"-o", "LogLevel=ERROR", "root@"+b.Address.String())
	cmd.Stdin, cmd.Stdout, cmd.Stderr = ios.In, ios.Out, ios.ErrOut
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("ssh %s: %w", b.Name, err)
	}
	return nil
}
