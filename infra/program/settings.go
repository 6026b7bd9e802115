package program

import (
	"io"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/relayfleet/relayfleet/infra/provider"
	"github.com/relayfleet/relayfleet/internal/cli"
	"github.com/relayfleet/relayfleet/inventories"
	"github.com/relayfleet/relayfleet/provision"
)

// Settings are the flags of the commands that work on a fleet's stack
// (fleet up, preview, destroy, secret, token, auth; fleet events and
// burst without Inventory, Name and Refresh): which stack, where stacks
// live and how their boxes are reached. Each field is its flag's value,
// "" the flag's default; the errors of Check, Template and Load name the
// flag and are usage errors (cli.Usagef).
type Settings struct {
	// Inventory is --inventory, the fleet file; Name is --stack (default
	// the fleet's name); Refresh is --refresh.
	Inventory, Name string
	Refresh         bool
	// BackendURL, StateDir and Pulumi are --backend, --state-dir and
	// --pulumi (Stack's fields of the same names).
	BackendURL, StateDir, Pulumi string
	// RelayBinary is --relay-binary; NeedsRelay says the command takes it,
	// and its stack carries the fleet's recorded release (Stack.UseRelease),
	// which the flag may only repeat, or give a fleet without one.
	RelayBinary string
	NeedsRelay  bool
	// SSHKey, LabDir, LabImages, LabBridge and LabSubnet are --ssh-key and
	// the --lab-* flags: the provider configuration (ProviderConfig).
	SSHKey, LabDir, LabImages, LabBridge, LabSubnet string
}

// Check validates the settings that need no file (the fleet file aside):
// the backend URL, the lab subnet, the SSH key and the Pulumi CLI.
func (o Settings) Check() error {
	if err := CheckBackendURL(o.BackendURL); err != nil {
		return cli.Usagef("flag --backend: %v", err)
	}
	if o.LabSubnet != "" {
		if _, err := netip.ParsePrefix(o.LabSubnet); err != nil {
			return cli.Usagef("flag --lab-subnet: want a CIDR, got %q", o.LabSubnet)
		}
	}
	if o.SSHKey != "" {
		if _, err := os.Stat(o.SSHKey); err != nil {
			return cli.Usagef("flag --ssh-key: %v", err)
		}
	}
	if o.Pulumi != "" {
		if _, err := FindPulumi(o.Pulumi); err != nil {
			return cli.Usagef("flag --pulumi: %v", err)
		}
	}
	return nil
}

// Load checks the settings and builds the stack they describe, its
// fleet read from Inventory with the catalogue beside it (or the
// shipped one); the engine's progress goes to progress.
func (o Settings) Load(progress io.Writer) (*Stack, error) {
	if o.Inventory == "" {
		return nil, cli.Usagef("flag --inventory: required")
	}
	if err := CheckStackName(o.Name); err != nil {
		return nil, cli.Usagef("flag --stack: %v", err)
	}
	if err := o.Check(); err != nil {
		return nil, err
	}
	fleet, cat, err := inventories.LoadFleetFile(o.Inventory)
	if err != nil {
		return nil, err
	}
	st, err := o.Template(fleet, cat, progress)
	if err != nil {
		return nil, err
	}
	st.Name, st.Refresh = o.Name, o.Refresh
	return st, nil
}

// Template is a stack for fleet with everything the settings say but its
// Name and Refresh, left to the caller: paths made absolute, the lab and
// SSH settings as provider configuration, and --relay-binary checked
// when NeedsRelay (the caller's Stack.UseRelease takes it).
func (o Settings) Template(fleet *inventories.Fleet, cat *inventories.Catalogue, progress io.Writer) (*Stack, error) {
	st := &Stack{
		Fleet: fleet, Catalogue: cat, BackendURL: o.BackendURL,
		Pulumi: o.Pulumi, Progress: progress, Config: map[string]string{},
	}
	if o.StateDir != "" {
		abs, err := filepath.Abs(o.StateDir)
		if err != nil {
			return nil, cli.Usagef("flag --state-dir: %v", err)
		}
		st.StateDir = abs
	}
	for key, v := range map[string]string{"labDir": o.LabDir, "labImages": o.LabImages, "labBridge": o.LabBridge, "labSubnet": o.LabSubnet, "sshKeyFile": o.SSHKey} {
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
	if o.NeedsRelay && o.RelayBinary != "" {
		// Checked here, taken by UseRelease: a build other than the
		// fleet's recorded release is refused there.
		if _, err := provision.FindRelay(o.RelayBinary); err != nil {
			return nil, err
		}
	}
	return st, nil
}

// StackFor is the stack of fleet that Name, StateDir, BackendURL and
// Pulumi name, for the commands that otherwise work over SSH alone
// (fleet converge, hosts, status): it lists the boxes and keeps the
// relay auth key.
func (o Settings) StackFor(fleet *inventories.Fleet) (*Stack, error) {
	if err := CheckStackName(o.Name); err != nil {
		return nil, cli.Usagef("flag --stack: %v", err)
	}
	if err := CheckBackendURL(o.BackendURL); err != nil {
		return nil, cli.Usagef("flag --backend: %v", err)
	}
	st := &Stack{Fleet: fleet, Name: o.Name, BackendURL: o.BackendURL, Pulumi: o.Pulumi}
	if o.StateDir != "" {
		abs, err := filepath.Abs(o.StateDir)
		if err != nil {
			return nil, cli.Usagef("flag --state-dir: %v", err)
		}
		st.StateDir = abs
	}
	return st, nil
}

// ProviderConfig is the provider configuration the stack's Config holds
// (the lab and SSH settings Template put there).
func (s *Stack) ProviderConfig() provider.Config {
	return provider.Config{LabDir: s.Config["labDir"], LabImages: s.Config["labImages"], LabBridge: s.Config["labBridge"], LabSubnet: s.Config["labSubnet"], SSHKeyFile: s.Config["sshKeyFile"]}
}
