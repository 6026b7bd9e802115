package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/relayfleet/relayfleet/internal/text"
	"io"
	"os"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/relayfleet/relayfleet/infra/lab"
	"github.com/relayfleet/relayfleet/internal/cli"
	"github.com/relayfleet/relayfleet/inventories"
	"github.com/relayfleet/relayfleet/provision"
)

// exitError ends a command with a given exit code and one line.
type exitError = cli.ExitError

// Exit codes of fleet converge beyond the common ones.
const (
	exitChanges     = 1 // --check found changes
	exitHostsFailed = 3 // some hosts failed; the others were converged
)

// convergeCommand is fleet converge.
func convergeCommand(ios *cli.IOStreams) *cobra.Command {
	var o convergeOptions
	cmd := &cobra.Command{
		Use:   "converge",
		Short: "converge the steady boxes: sysctl, relay units per core, the relay release",
		Args:  cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runConverge(cmd.Context(), &o, ios)
		},
	}
	fs := cmd.Flags()
	o.hf.add(fs)
	fs.BoolVar(&o.check, "check", false, "print what would change and exit 1 if anything would")
	fs.BoolVar(&o.asJSON, "json", false, "print JSON lines: progress events, one result per host, a summary")
	fs.StringVar(&o.binaryPath, "relay-binary", "", "the relay build to release (default: relay beside the fleet binary)")
	fs.IntVar(&o.parallel, "parallel", 16, "hosts converged at once")
	cli.Ranged(fs, "parallel", parallelRange)
	return cmd
}

// convergeOptions are fleet converge's flags.
type convergeOptions struct {
	hf            hostFlags
	check, asJSON bool
	binaryPath    string
	parallel      int
}

func runConverge(ctx context.Context, o *convergeOptions, ios *cli.IOStreams) error {
	hf := &o.hf
	if err := hf.check(); err != nil {
		return err
	}
	fleet, err := loadFleet(hf.inventory)
	if err != nil {
		return err
	}
	_, binary, err := relayBinary(o.binaryPath)
	if err != nil {
		return err
	}
	st, err := hf.stackFor(fleet)
	if err != nil {
		return err
	}
	// The relays verify tokens with the fleet's key, kept in its stack: a
	// fleet converged for the first time gets its first key.
	keys, _, err := fleetAuthKeys(ctx, openKeyStore(st), !o.check)
	if err != nil {
		return err
	}
	targets, cleanup, err := steadyTargets(ctx, st, hf.sshKey, hf.labDir, ios.ErrOut)
	if err != nil {
		return err
	}
	defer cleanup()
	for i := range targets {
		targets[i].AuthKeys = []byte(keys)
		targets[i].PublicListen = fleet.Access.PublicListen
	}
	return convergeTargets(ctx, ios.Out, targets, binary, o.check, o.asJSON, o.parallel)
}

// convergeTargets converges targets and reports per host, as text or
// JSON lines.
func convergeTargets(ctx context.Context, stdout io.Writer, targets []provision.Target, binary []byte, check, asJSON bool, parallel int) error {
	start := time.Now()
	var mu sync.Mutex
	enc := json.NewEncoder(stdout)
	var live *liveLines
	if !asJSON && cli.IsTerminal(stdout) {
		var hosts []string
		for _, t := range targets {
			hosts = append(hosts, t.Host.String())
		}
		live = newLiveLines(stdout, hosts)
	}
	progress := func(host, step string) {
		if live != nil {
			live.set(host, step)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if asJSON {
			enc.Encode(map[string]any{"event": "progress", "host": host, "step": step, "seconds": time.Since(start).Seconds()})
			return
		}
		if step == "converge" {
			fmt.Fprintf(stdout, "%6.1fs %s: %s\n", time.Since(start).Seconds(), host, map[bool]string{true: "checking", false: "converging"}[check])
		}
	}
	results := provision.ConvergeFleet(ctx, targets, provision.Options{Binary: binary, Check: check, Parallel: parallel, Progress: progress})
	if asJSON {
		if err := provision.WriteConvergeJSON(enc, results); err != nil {
			return err
		}
	} else {
		provision.WriteConvergeText(stdout, results, check)
	}
	switch tally := provision.TallyResults(results); {
	case tally.Failed > 0:
		return &exitError{Code: exitHostsFailed, Msg: fmt.Sprintf("%d of %s failed: %s", tally.Failed, text.Plural(len(results), "host", "hosts"), oneLine(provision.Failed(results)))}
	case check && tally.Changed > 0:
		return &exitError{Code: exitChanges, Msg: fmt.Sprintf("%d of %s would change", tally.Changed, text.Plural(len(results), "host", "hosts"))}
	}
	return nil
}

// hostFlags are the flags of the commands that reach a fleet's boxes:
// its fleet file, the stacks that list the boxes (keyFlags), and how
// they are reached over SSH.
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

// targets loads the inventory and resolves its steady boxes from the
// steady stack; warnings go to errOut.
func (h *hostFlags) targets(ctx context.Context, errOut io.Writer) ([]provision.Target, func(), error) {
	fleet, err := loadFleet(h.inventory)
	if err != nil {
		return nil, nil, err
	}
	st, err := h.stackFor(fleet)
	if err != nil {
		return nil, nil, err
	}
	return steadyTargets(ctx, st, h.sshKey, h.labDir, errOut)
}

// loadFleet reads a fleet file with the catalogue beside it (or the
// shipped one).
func loadFleet(path string) (*inventories.Fleet, error) {
	cat, err := inventories.LoadCatalogue(inventories.Beside(path, inventories.ProvidersFile))
	if err != nil {
		return nil, err
	}
	return inventories.LoadFleet(path, cat)
}

// relayBinary finds the relay build the --relay-binary flag names
// (provision.RelayBinary: the flag, else relay beside the fleet binary)
// and reads it.
func relayBinary(flagValue string) (path string, data []byte, err error) {
	if path, err = findRelay(flagValue); err != nil {
		return "", nil, err
	}
	if data, err = os.ReadFile(path); err != nil {
		return "", nil, usagef("flag --relay-binary: %v", err)
	}
	return path, data, nil
}

// findRelay is --relay-binary's build (provision.RelayBinary), its
// errors naming the flag.
func findRelay(flagValue string) (string, error) {
	path, err := provision.RelayBinary(flagValue)
	if errors.Is(err, provision.ErrNoRelay) {
		return "", usagef("flag --relay-binary: %v; build it with make build or give --relay-binary", err)
	}
	if err != nil {
		return "", usagef("flag --relay-binary: %v", err)
	}
	return path, nil
}
