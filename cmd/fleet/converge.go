package main

import (
	"context"
	"io"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/relayfleet/relayfleet/infra/fleethosts"
	"github.com/relayfleet/relayfleet/infra/lab"
	"github.com/relayfleet/relayfleet/internal/cli"
	"github.com/relayfleet/relayfleet/inventories"
	"github.com/relayfleet/relayfleet/provision"
)

// convergeCommand is fleet converge.
func convergeCommand(ios *cli.IOStreams) *cobra.Command {
	var hf hostFlags
	var o provision.Options
	var asJSON bool
	var binaryPath string
	var lf lockFlags
	cmd := &cobra.Command{
		Use:   "converge",
		Short: "converge the steady boxes: sysctl, relay units per core, the relay release",
		Args:  cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := hf.openFleet(ios.ErrOut, func() error {
				if binaryPath == "" {
					return nil
				}
				_, err := provision.FindRelay(binaryPath)
				return err
			})
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if !o.Check {
				var unlock func()
				if ctx, unlock, err = lf.lockStack(ctx, ios, cmd, f.Stack); err != nil {
					return err
				}
				defer unlock()
			}
			return lf.result(f.Converge(ctx, ios.Out, o, binaryPath, asJSON))
		},
	}
	fs := cmd.Flags()
	hf.add(fs)
	lf.add(fs)
	fs.BoolVar(&o.Check, "check", false, "print what would change and exit 1 if anything would")
	fs.BoolVar(&asJSON, "json", false, "print JSON lines: progress events, one result per host, a summary")
	fs.StringVar(&binaryPath, "relay-binary", "", "the fleet's release, or a fleet's first (default: the recorded release; for a fleet without one, relay beside the fleet binary); a new build goes through fleet rollout")
	fs.IntVar(&o.Parallel, "parallel", 16, "hosts converged at once")
	cli.Ranged(fs, "parallel", parallelRange)
	return cmd
}

// convergeTargets converges targets and reports (provision.RunConverge).
func convergeTargets(ctx context.Context, stdout io.Writer, targets []provision.Target, binary []byte, check, asJSON bool, parallel int) error {
	return provision.RunConverge(ctx, stdout, targets, provision.Options{Binary: binary, Check: check, Parallel: parallel}, asJSON)
}

// hostFlags say where a fleet's boxes are listed and how they are reached.
type hostFlags struct {
	inventory, sshKey, labDir string
	keyFlags
}

func (h *hostFlags) add(fs *pflag.FlagSet) {
	fs.StringVar(&h.inventory, "inventory", "", "fleet file (required)")
	fs.StringVar(&h.sshKey, "ssh-key", "", "private key for cloud and static hosts (default: ssh-agent at SSH_AUTH_SOCK)")
	fs.StringVar(&h.labDir, "lab-dir", "", "lab state directory, whose admin key reaches lab boxes (default: the stack's, else $"+lab.DirEnv+", else "+lab.DefaultDir+")")
	h.keyFlags.add(fs)
}

func (h *hostFlags) check() error {
	if h.inventory == "" {
		return usagef("flag --inventory: required")
	}
	return nil
}

// openFleet loads the fleet file, runs before, and opens its steady stack.
func (h *hostFlags) openFleet(errOut io.Writer, before ...func() error) (*fleethosts.Fleet, error) {
	if err := h.check(); err != nil {
		return nil, err
	}
	f, err := loadFleet(h.inventory)
	if err != nil {
		return nil, err
	}
	for _, check := range before {
		if err := check(); err != nil {
			return nil, err
		}
	}
	return h.open(f, errOut)
}

// open is the fleet's steady stack as the flags say; warnings to errOut.
func (h *hostFlags) open(f *inventories.Fleet, errOut io.Writer) (*fleethosts.Fleet, error) {
	st, err := h.stackFor(f)
	if err != nil {
		return nil, err
	}
	return &fleethosts.Fleet{Stack: st, Keys: openKeyStore(st), Now: clock, Access: fleethosts.Access{LabDir: h.labDir, SSHKey: h.sshKey}, Warnings: errOut}, nil
}

// loadFleet reads a fleet file with the catalogue beside it (or shipped).
func loadFleet(path string) (*inventories.Fleet, error) {
	f, _, err := inventories.LoadFleetFile(path)
	return f, err
}
