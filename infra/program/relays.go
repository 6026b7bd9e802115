package program

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"

	"github.com/relayfleet/relayfleet/internal/atomicfile"
	"github.com/relayfleet/relayfleet/inventories"
	"github.com/relayfleet/relayfleet/relay/wire"
)

// HostsDir is where each stack's hosts are kept in the state dir, one file
// per stack; the router's relay list is composed from all of them.
const HostsDir = "hosts"

// StackHosts is one stack's hosts as kept in HostsDir.
type StackHosts struct {
	Stack string `json:"stack"`
	// Draining marks every relay of the stack draining in the router's
	// list: the router sends it no new listeners.
	Draining bool `json:"draining,omitempty"`
	// DrainingHosts marks the relays of these hosts (by name) draining:
	// the boxes an event's resize down removes once they are empty.
	DrainingHosts []string `json:"draining_hosts,omitempty"`
	// LastResort marks every relay of the stack that is not draining
	// last_resort in the router's list: new listeners go there only when
	// no other relay has headroom (an event's relays after its end).
	LastResort bool        `json:"last_resort,omitempty"`
	Hosts      []HostEntry `json:"hosts"`
	// Regions, on the steady stack's record of a fleet with regions, are
	// the regions and their listener prefixes the router matches
	// (RouterRegions).
	Regions []wire.Region `json:"regions,omitempty"`
}

func hostsPath(stateDir, stack string) string {
	return filepath.Join(stateDir, HostsDir, stack+".json")
}

// SetStackHosts records a stack's hosts (nil: the stack has none left)
// and rewrites the router's relay list. It returns the list's path.
func SetStackHosts(stateDir, stack string, hosts []HostEntry) (string, error) {
	return SetStackHostsRegions(stateDir, stack, hosts, nil)
}

// SetStackHostsRegions is SetStackHosts for the steady stack of a fleet
// with regions: the router's list carries them (RouterRegions).
func SetStackHostsRegions(stateDir, stack string, hosts []HostEntry, regions []wire.Region) (string, error) {
	return updateStack(stateDir, stack, func(sh *StackHosts) bool {
		sh.Hosts, sh.Regions = hosts, regions
		return len(hosts) > 0
	})
}

// RouterRegions are the fleet's regions as the router's relays file has
// them: each region's name and listener prefixes (nil without regions).
func RouterRegions(f *inventories.Fleet) []wire.Region {
	var out []wire.Region
	for _, rg := range f.Regions {
		out = append(out, wire.Region{Name: rg.Name, Prefixes: slices.Clone(rg.Prefixes)})
	}
	return out
}

// SetDraining marks a stack's relays draining (or routable again) in the
// router's relay list.
func SetDraining(stateDir, stack string, draining bool) (string, error) {
	return updateStack(stateDir, stack, func(sh *StackHosts) bool {
		sh.Draining = draining
		return len(sh.Hosts) > 0
	})
}

// SetHostsDraining marks the relays of the stack's hosts called names
// draining in the router's relay list, and the stack's other hosts' not
// (nil: none is).
func SetHostsDraining(stateDir, stack string, names []string) (string, error) {
	return updateStack(stateDir, stack, func(sh *StackHosts) bool {
		sh.DrainingHosts = slices.Clone(names)
		return len(sh.Hosts) > 0
	})
}

// PutStackHosts replaces a stack's record (its hosts and which are
// draining) with sh, as kept elsewhere (the event reconciler keeps its
// stacks' in the Pulumi backend), and rewrites the router's relay list.
func PutStackHosts(stateDir string, sh StackHosts) (string, error) {
	return updateStack(stateDir, sh.Stack, func(cur *StackHosts) bool {
		*cur = sh
		cur.Hosts = slices.Clone(sh.Hosts)
		cur.DrainingHosts = slices.Clone(sh.DrainingHosts)
		return len(sh.Hosts) > 0
	})
}

// ReadStackHosts returns a stack's recorded hosts; a stack never recorded
// has none.
func ReadStackHosts(stateDir, stack string) (StackHosts, error) {
	sh := StackHosts{Stack: stack}
	data, err := os.ReadFile(hostsPath(stateDir, stack))
	if errors.Is(err, fs.ErrNotExist) {
		return sh, nil
	}
	if err != nil {
		return sh, fmt.Errorf("stack hosts: %w", err)
	}
	if err := json.Unmarshal(data, &sh); err != nil {
		return sh, fmt.Errorf("stack hosts %s: %w", hostsPath(stateDir, stack), err)
	}
	return sh, nil
}

// updateStack changes one stack's record under the relays lock and
// rewrites the relay list; keep false removes the record.
func updateStack(stateDir, stack string, change func(*StackHosts) bool) (string, error) {
	dir := filepath.Join(stateDir, HostsDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("stack hosts: %w", err)
	}
	unlock, err := lockFile(filepath.Join(stateDir, "relays.lock"))
	if err != nil {
		return "", err
	}
	defer unlock()
	sh, err := ReadStackHosts(stateDir, stack)
	if err != nil {
		return "", err
	}
	if change(&sh) {
		data, err := json.MarshalIndent(sh, "", "  ")
		if err != nil {
			return "", err
		}
		if err := atomicfile.Write(hostsPath(stateDir, stack), append(data, '\n'), 0o600); err != nil {
			return "", fmt.Errorf("stack hosts: %w", err)
		}
	} else if err := os.Remove(hostsPath(stateDir, stack)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("stack hosts: %w", err)
	}
	return composeRelays(stateDir)
}

// composeRelays writes the router's relay list from every stack's hosts:
// the steady fleet's and each event's, an event's marked last resort once
// it ended and draining once its boxes go.
func composeRelays(stateDir string) (string, error) {
	entries, err := os.ReadDir(filepath.Join(stateDir, HostsDir))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("stack hosts: %w", err)
	}
	var names []string
	for _, e := range entries {
		if n, ok := strings.CutSuffix(e.Name(), ".json"); ok && !e.IsDir() {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	var stacks []StackHosts
	for _, n := range names {
		sh, err := ReadStackHosts(stateDir, n)
		if err != nil {
			return "", err
		}
		stacks = append(stacks, sh)
	}
	path := filepath.Join(stateDir, RelaysFile)
	return path, writeRelaysFile(path, ComposeRelaysFile(stacks))
}

// ComposeRelaysFile is the router's relays file of the stacks' records:
// ComposeRelays, and the regions of the first record that has them.
func ComposeRelaysFile(stacks []StackHosts) wire.RelaysFile {
	f := wire.RelaysFile{Relays: ComposeRelays(stacks)}
	for _, sh := range stacks {
		if len(sh.Regions) > 0 {
			f.Regions = slices.Clone(sh.Regions)
			break
		}
	}
	return f
}

// ComposeRelays is the router's relay list of the stacks' records, in
// their order: each host's relays, draining when its stack or the host
// is, else last resort when its stack is.
func ComposeRelays(stacks []StackHosts) []Relay {
	rs := []Relay{}
	for _, sh := range stacks {
		for _, h := range sh.Hosts {
			for _, r := range Relays([]HostEntry{h}) {
				r.Draining = sh.Draining || slices.Contains(sh.DrainingHosts, h.Name)
				r.LastResort = sh.LastResort && !r.Draining
				rs = append(rs, r)
			}
		}
	}
	return rs
}

// WriteRelaysFile writes the router's relay list to path (atomically,
// mode 0644): what fleet relays --out keeps current.
func WriteRelaysFile(path string, rs []Relay) error { return writeRelayList(path, rs) }

// WriteRelaysFileOf writes a whole relays file (relays and regions) to
// path, as WriteRelaysFile does.
func WriteRelaysFileOf(path string, f wire.RelaysFile) error { return writeRelaysFile(path, f) }

// ReplaceStackHosts makes the state dir's records of the stacks owned
// accepts exactly stacks (a record of an owned stack not among them goes;
// other stacks' records stay), under the relays lock, and rewrites the
// router's relay list. It returns the list's path.
func ReplaceStackHosts(stateDir string, owned func(stack string) bool, stacks []StackHosts) (string, error) {
	dir := filepath.Join(stateDir, HostsDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("stack hosts: %w", err)
	}
	unlock, err := lockFile(filepath.Join(stateDir, "relays.lock"))
	if err != nil {
		return "", err
	}
	defer unlock()
	keep := map[string]bool{}
	for _, sh := range stacks {
		if err := CheckStackName(sh.Stack); err != nil || sh.Stack == "" {
			return "", fmt.Errorf("stack hosts: stack %q: not a stack name", sh.Stack)
		}
		keep[sh.Stack] = true
		data, err := json.MarshalIndent(sh, "", "  ")
		if err != nil {
			return "", err
		}
		if err := atomicfile.Write(hostsPath(stateDir, sh.Stack), append(data, '\n'), 0o600); err != nil {
			return "", fmt.Errorf("stack hosts: %w", err)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", fmt.Errorf("stack hosts: %w", err)
	}
	for _, e := range entries {
		n, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || e.IsDir() || keep[n] || !owned(n) {
			continue
		}
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("stack hosts: %w", err)
		}
	}
	return composeRelays(stateDir)
}

// lockFile takes an exclusive flock on path, waiting for it.
func lockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}
