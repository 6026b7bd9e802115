package main

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/relayfleet/relayfleet/infra/lab"
	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/infra/provider"
	"github.com/relayfleet/relayfleet/internal/cli"
	"github.com/relayfleet/relayfleet/inventories"
	"github.com/relayfleet/relayfleet/provision"
)

// stackFlags are the flags of fleet up, preview and destroy (and of
// the commands that work on the stack: secret, token, auth).
type stackFlags struct {
	inventory string
	stack     string
	refresh   bool
	pulumiFlags
}

// pulumiFlags say where stacks live and how their boxes are reached:
// shared by fleet up, preview, destroy, events and burst.
type pulumiFlags struct {
	backend    *string
	stateDir   *string
	pulumi     *string
	relay      *string
	sshKey     *string
	labDir     *string
	labImages  *string
	labBridge  *string
	labSubnet  *string
	monitorDir *string
	needsRelay bool
}

// add declares the stack flags on fs; needsRelay adds --relay-binary.
func (s *stackFlags) add(fs *pflag.FlagSet, needsRelay bool) {
	fs.StringVar(&s.inventory, "inventory", "", "fleet file (required)")
	fs.StringVar(&s.stack, "stack", "", "stack name (default: the fleet's name)")
	fs.BoolVar(&s.refresh, "refresh", true, "read every box's real state first, so drift shows and is repaired")
	s.pulumiFlags.register(fs, needsRelay)
}

func (p *pulumiFlags) register(fs *pflag.FlagSet, needsRelay bool) {
	p.needsRelay = needsRelay
	p.backend = fs.String("backend", "", "Pulumi backend URL (default $"+program.BackendEnv+", else file:// under the state dir)")
	p.stateDir = fs.String("state-dir", "", "state directory: file backend, passphrase, relays file (default $"+program.StateDirEnv+", else ~/.local/state/relayfleet)")
	p.pulumi = fs.String("pulumi", "", "the Pulumi CLI (default $"+program.PulumiEnv+", else the make pulumi build, else pulumi on $PATH)")
	if needsRelay {
		p.relay = fs.String("relay-binary", "", "the relay build the hosts run (default: relay beside the fleet binary)")
	}
	p.sshKey = fs.String("ssh-key", "", "private key for static servers (default: ssh-agent at SSH_AUTH_SOCK)")
	p.labDir = fs.String("lab-dir", "", "lab state directory (default $"+lab.DirEnv+", else "+lab.DefaultDir+")")
	p.labImages = fs.String("lab-images", "", "lab image cache (default LAB-DIR/images)")
	p.labBridge = fs.String("lab-bridge", "", "lab bridge (default "+lab.DefaultBridge+")")
	p.labSubnet = fs.String("lab-subnet", "", "lab subnet (default "+lab.DefaultSubnet.String()+")")
	p.monitorDir = fs.String("monitor-dir", "", "fleet monitor's directory: rewrite its targets after the change (default $"+MonitorDirEnv+"; none if unset)")
}

// load checks the flags and builds the stack they describe.
func (s *stackFlags) load(progress io.Writer) (*program.Stack, error) {
	if s.inventory == "" {
		return nil, usagef("flag --inventory: required")
	}
	if err := program.CheckStackName(s.stack); err != nil {
		return nil, usagef("flag --stack: %v", err)
	}
	if err := s.check(); err != nil {
		return nil, err
	}
	cat, err := inventories.LoadCatalogue(inventories.Beside(s.inventory, inventories.ProvidersFile))
	if err != nil {
		return nil, err
	}
	fleet, err := inventories.LoadFleet(s.inventory, cat)
	if err != nil {
		return nil, err
	}
	st, err := s.template(fleet, cat, progress)
	if err != nil {
		return nil, err
	}
	st.Name, st.Refresh = s.stack, s.refresh
	return st, nil
}

// check validates the flags that need no file.
func (p *pulumiFlags) check() error {
	if err := program.CheckBackendURL(*p.backend); err != nil {
		return usagef("flag --backend: %v", err)
	}
	if *p.labSubnet != "" {
		if _, err := netip.ParsePrefix(*p.labSubnet); err != nil {
			return usagef("flag --lab-subnet: want a CIDR, got %q", *p.labSubnet)
		}
	}
	if *p.sshKey != "" {
		if _, err := os.Stat(*p.sshKey); err != nil {
			return usagef("flag --ssh-key: %v", err)
		}
	}
	if *p.pulumi != "" {
		if _, err := program.FindPulumi(*p.pulumi); err != nil {
			return usagef("flag --pulumi: %v", err)
		}
	}
	return nil
}

// template is a stack for fleet with everything the flags say; its Name
// is left to the caller.
func (p *pulumiFlags) template(fleet *inventories.Fleet, cat *inventories.Catalogue, progress io.Writer) (*program.Stack, error) {
	st := &program.Stack{
		Fleet: fleet, Catalogue: cat, BackendURL: *p.backend,
		Pulumi: *p.pulumi, Progress: progress, Config: map[string]string{},
	}
	if *p.stateDir != "" {
		abs, err := filepath.Abs(*p.stateDir)
		if err != nil {
			return nil, usagef("flag --state-dir: %v", err)
		}
		st.StateDir = abs
	}
	for key, v := range map[string]string{"labDir": *p.labDir, "labImages": *p.labImages, "labBridge": *p.labBridge, "labSubnet": *p.labSubnet, "sshKeyFile": *p.sshKey} {
		if v == "" {
			continue
		}
		if key != "labBridge" && key != "labSubnet" {
			abs, err := filepath.Abs(v)
			if err != nil {
				return nil, err
			}
			v = abs
		}
		st.Config[key] = v
	}
	if p.needsRelay {
		path, data, err := relayBinary(*p.relay)
		if err != nil {
			return nil, err
		}
		st.Program = program.Options{RelayBinary: path, Release: provision.Digest(data)}
	}
	return st, nil
}

// labConfig is the provider configuration the lab flags give.
func (p *pulumiFlags) labConfig(st *program.Stack) provider.Config {
	return provider.Config{LabDir: st.Config["labDir"], LabImages: st.Config["labImages"], LabBridge: st.Config["labBridge"], LabSubnet: st.Config["labSubnet"], SSHKeyFile: st.Config["sshKeyFile"]}
}

// upCommand is fleet up.
func upCommand(ios *cli.IOStreams) *cobra.Command {
	var s stackFlags
	var yes bool
	cmd := &cobra.Command{
		Use:   "up",
		Short: "bring the fleet to the inventory through Pulumi (boxes, converged hosts) and write the router's relays file",
		Args:  cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runUp(cmd.Context(), &s, yes, ios)
		},
	}
	s.add(cmd.Flags(), true)
	cmd.Flags().BoolVar(&yes, "yes", false, "replace or destroy boxes that serve listeners without asking")
	return cmd
}

func runUp(ctx context.Context, s *stackFlags, yes bool, ios *cli.IOStreams) error {
	stdout := ios.Out
	st, err := s.load(stdout)
	if err != nil {
		return err
	}
	// The fleet's relay auth key: made on the first up, kept encrypted in
	// the stack, handed to every Host as a secret input.
	if st.Program.AuthKeys, _, err = fleetAuthKeys(ctx, openKeyStore(st), true); err != nil {
		return err
	}
	// Boxes the up would replace or destroy, and the listeners on them:
	// asked for on a terminal, else --yes, before any goes.
	if err := guardUp(ctx, s, st, yes, ios); err != nil {
		return err
	}
	res, err := st.Up(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nup: stack %s: %s\n", st.Name, changeSummary(res.Changes))
	for _, h := range res.Hosts {
		fmt.Fprintf(stdout, "  %-14s %-8s %-16s ports %s\n", h.Name, h.Backend, h.Address, ports(h.Ports))
	}
	fmt.Fprintf(stdout, "relays file: %s\n", res.RelaysFile)
	refreshMonitor(stdout, monitorDir(s.monitorDir), filepath.Dir(res.RelaysFile), nil)
	return nil
}

// previewCommand is fleet preview.
func previewCommand(ios *cli.IOStreams) *cobra.Command {
	var s stackFlags
	cmd := &cobra.Command{
		Use:   "preview",
		Short: "show what fleet up would change, drift included",
		Args:  cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runPreview(cmd.Context(), &s, ios)
		},
	}
	s.add(cmd.Flags(), true)
	return cmd
}

func runPreview(ctx context.Context, s *stackFlags, ios *cli.IOStreams) error {
	stdout := ios.Out
	st, err := s.load(stdout)
	if err != nil {
		return err
	}
	if st.Program.AuthKeys, _, err = fleetAuthKeys(ctx, openKeyStore(st), true); err != nil {
		return err
	}
	changes, err := st.Preview(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\npreview: stack %s: %s\n", st.Name, changeSummary(changes))
	return nil
}

// destroyCommand is fleet destroy.
func destroyCommand(ios *cli.IOStreams) *cobra.Command {
	var s stackFlags
	var yes bool
	cmd := &cobra.Command{
		Use:   "destroy",
		Short: "destroy the stack's boxes (static servers are left as they are)",
		Args:  cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runDestroy(cmd.Context(), &s, yes, ios)
		},
	}
	s.add(cmd.Flags(), false)
	cmd.Flags().BoolVar(&yes, "yes", false, "destroy boxes that serve listeners without asking")
	return cmd
}

func runDestroy(ctx context.Context, s *stackFlags, yes bool, ios *cli.IOStreams) error {
	stdout := ios.Out
	st, err := s.load(stdout)
	if err != nil {
		return err
	}
	// The boxes it would destroy, and the listeners on them: asked for on
	// a terminal, else --yes.
	if err := guardDestroy(ctx, s, st, yes, ios); err != nil {
		return err
	}
	changes, err := st.Destroy(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\ndestroy: stack %s: %s\n", st.Name, changeSummary(changes))
	if dir := monitorDir(s.monitorDir); dir != "" {
		stateDir, err := stateDirOr(st.StateDir)
		if err != nil {
			return err
		}
		refreshMonitor(stdout, dir, stateDir, nil)
	}
	return nil
}

func changeSummary(m map[string]int) string {
	if len(m) == 0 {
		return "no changes"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%d %s", m[k], k))
	}
	return strings.Join(parts, ", ")
}

func ports(ps []int) string {
	var s []string
	for _, p := range ps {
		s = append(s, fmt.Sprint(p))
	}
	return strings.Join(s, ",")
}
