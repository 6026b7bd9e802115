package main

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/relayfleet/relayfleet/infra/lab"
	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/inventories"
	"github.com/relayfleet/relayfleet/provision"
)

// stackFlags are the flags of fleet up, preview and destroy.
type stackFlags struct {
	fs         flags
	inventory  *string
	stack      *string
	backend    *string
	stateDir   *string
	pulumi     *string
	relay      *string
	sshKey     *string
	labDir     *string
	labImages  *string
	labBridge  *string
	labSubnet  *string
	refresh    *bool
	needsRelay bool
}

func newStackFlags(name string, stdout io.Writer, needsRelay bool) *stackFlags {
	fs := newFlags(name, stdout)
	s := &stackFlags{fs: fs, needsRelay: needsRelay}
	s.inventory = fs.String("inventory", "", "fleet file (required)")
	s.stack = fs.String("stack", "", "stack name (default: the fleet's name)")
	s.backend = fs.String("backend", "", "Pulumi backend URL (default $"+program.BackendEnv+", else file:// under the state dir)")
	s.stateDir = fs.String("state-dir", "", "state directory: file backend, passphrase, relays file (default $"+program.StateDirEnv+", else ~/.local/state/relayfleet)")
	s.pulumi = fs.String("pulumi", "", "the Pulumi CLI (default $"+program.PulumiEnv+", else the make pulumi build, else pulumi on $PATH)")
	s.refresh = fs.Bool("refresh", true, "read every box's real state first, so drift shows and is repaired")
	if needsRelay {
		s.relay = fs.String("relay-binary", "", "the relay build the hosts run (default: relay beside the fleet binary)")
	}
	s.sshKey = fs.String("ssh-key", "", "private key for static servers (default: ssh-agent at SSH_AUTH_SOCK)")
	s.labDir = fs.String("lab-dir", "", "lab state directory (default $"+lab.DirEnv+", else "+lab.DefaultDir+")")
	s.labImages = fs.String("lab-images", "", "lab image cache (default LAB-DIR/images)")
	s.labBridge = fs.String("lab-bridge", "", "lab bridge (default "+lab.DefaultBridge+")")
	s.labSubnet = fs.String("lab-subnet", "", "lab subnet (default "+lab.DefaultSubnet.String()+")")
	return s
}

var stackNameRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,100}$`)

// stack parses args and builds the stack they describe.
func (s *stackFlags) parse(args []string, progress io.Writer) (*program.Stack, error) {
	if err := s.fs.parse(args); err != nil {
		return nil, err
	}
	if *s.inventory == "" {
		return nil, usagef("flag --inventory: required")
	}
	if *s.stack != "" && !stackNameRE.MatchString(*s.stack) {
		return nil, usagef("flag --stack: want letters, digits, '-', '_' or '.', got %q", *s.stack)
	}
	if *s.backend != "" && !strings.Contains(*s.backend, "://") {
		return nil, usagef("flag --backend: want a URL such as file:///var/lib/relayfleet/state or s3://bucket, got %q", *s.backend)
	}
	if *s.labSubnet != "" {
		if _, err := netip.ParsePrefix(*s.labSubnet); err != nil {
			return nil, usagef("flag --lab-subnet: want a CIDR, got %q", *s.labSubnet)
		}
	}
	if *s.sshKey != "" {
		if _, err := os.Stat(*s.sshKey); err != nil {
			return nil, usagef("flag --ssh-key: %v", err)
		}
	}
	cat, err := inventories.LoadCatalogue(inventories.Beside(*s.inventory, inventories.ProvidersFile))
	if err != nil {
		return nil, err
	}
	fleet, err := inventories.LoadFleet(*s.inventory, cat)
	if err != nil {
		return nil, err
	}
	st := &program.Stack{
		Fleet: fleet, Catalogue: cat, Name: *s.stack, BackendURL: *s.backend,
		Pulumi: *s.pulumi, Progress: progress, Refresh: *s.refresh, Config: map[string]string{},
	}
	if *s.stateDir != "" {
		abs, err := filepath.Abs(*s.stateDir)
		if err != nil {
			return nil, usagef("flag --state-dir: %v", err)
		}
		st.StateDir = abs
	}
	for key, v := range map[string]string{"labDir": *s.labDir, "labImages": *s.labImages, "labBridge": *s.labBridge, "labSubnet": *s.labSubnet, "sshKeyFile": *s.sshKey} {
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
	if s.needsRelay {
		path, err := relayPath(*s.relay)
		if err != nil {
			return nil, err
		}
		data, err := relayBinary(path)
		if err != nil {
			return nil, err
		}
		st.Program = program.Options{RelayBinary: path, Release: provision.Digest(data)}
	}
	if *s.pulumi != "" {
		if _, err := program.FindPulumi(*s.pulumi); err != nil {
			return nil, usagef("flag --pulumi: %v", err)
		}
	}
	return st, nil
}

// relayPath is the relay build's absolute path: the flag, else relay
// beside the fleet binary.
func relayPath(flagValue string) (string, error) {
	if flagValue == "" {
		exe, err := os.Executable()
		if err != nil {
			return "", err
		}
		flagValue = filepath.Join(filepath.Dir(exe), "relay")
	}
	return filepath.Abs(flagValue)
}

func runUp(ctx context.Context, args []string, stdout io.Writer) error {
	s := newStackFlags("up", stdout, true)
	st, err := s.parse(args, stdout)
	if err != nil {
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
	return nil
}

func runPreview(ctx context.Context, args []string, stdout io.Writer) error {
	s := newStackFlags("preview", stdout, true)
	st, err := s.parse(args, stdout)
	if err != nil {
		return err
	}
	changes, err := st.Preview(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\npreview: stack %s: %s\n", st.Name, changeSummary(changes))
	return nil
}

func runDestroy(ctx context.Context, args []string, stdout io.Writer) error {
	s := newStackFlags("destroy", stdout, false)
	st, err := s.parse(args, stdout)
	if err != nil {
		return err
	}
	changes, err := st.Destroy(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\ndestroy: stack %s: %s\n", st.Name, changeSummary(changes))
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
