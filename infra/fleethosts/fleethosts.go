// Package fleethosts lists a fleet's hosts from its stacks, the host list
// of record: the steady stack's "hosts" output and every event stack's,
// whatever the backend (lab, hcloud, digitalocean, static). It builds the
// provision targets the SSH commands (converge, status, rollout, loadtest,
// auth rotate) work on, each host's key pinned from its stack, and the
// entries fleet monitor writes targets for.
//
// Reading needs no Pulumi up: the outputs are read from the backend as
// they are (program.Stack.ReadOutputs).
package fleethosts

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"golang.org/x/crypto/ssh"

	"github.com/relayfleet/relayfleet/infra/events"
	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/infra/provider"
	"github.com/relayfleet/relayfleet/inventories"
	"github.com/relayfleet/relayfleet/provision"
)

// Tiers of a host.
const (
	TierSteady = "steady" // the steady stack's boxes
	TierBurst  = "burst"  // an event's boxes
	TierOrigin = "origin" // the origin group's boxes, in the steady stack
)

// Host is one box of the fleet as its stack records it.
type Host struct {
	Stack   string `json:"stack"`
	Name    string `json:"name"`
	Group   string `json:"group"`
	Tier    string `json:"tier"`
	Event   string `json:"event,omitempty"`
	Backend string `json:"backend"`
	// Address is the relays' address; SSHAddress is HOST:PORT.
	Address    string `json:"address"`
	SSHAddress string `json:"ssh_address"`
	// HostKey is the box's SSH host key ("TYPE BASE64"), pinned for every
	// connection; Fingerprint its SHA256 fingerprint.
	HostKey     string `json:"host_key"`
	Fingerprint string `json:"host_key_sha256"`
	User        string `json:"user"`
	// Ports are the relay processes' ports, one per process.
	Ports []int `json:"ports"`
	// SPKI is the SHA-256 of the box's relay TLS key's public key, the
	// pin of its relays in the router's relays file.
	SPKI string `json:"spki_sha256,omitempty"`
	// Region is the box's region in a fleet with regions (its stack
	// entry's), else empty.
	Region string `json:"region,omitempty"`
}

// Entry is the host as the stack output has it (program.HostEntry).
func (h Host) Entry() program.HostEntry {
	return program.HostEntry{Name: h.Name, Group: h.Group, Backend: h.Backend, Address: h.Address,
		SSHAddress: h.SSHAddress, HostKey: h.HostKey, User: h.User, Ports: slices.Clone(h.Ports), SPKI: h.SPKI, Tier: originTier(h.Tier),
		Region: h.Region}
}

// originTier is the stack output's tier of a host of tier t: "origin"
// for an origin, else none.
func originTier(t string) string {
	if t == TierOrigin {
		return provider.TierOrigin
	}
	return ""
}

// IsOrigin says whether the host is one of the fleet's origin boxes.
func (h Host) IsOrigin() bool { return h.Tier == TierOrigin }

// Origins are the origin hosts among hosts.
func Origins(hosts []Host) []Host {
	return slices.DeleteFunc(slices.Clone(hosts), func(h Host) bool { return !h.IsOrigin() })
}

// OriginURLs are the URLs, pinned, that the edges pull from: one per
// origin host among hosts (program.OriginURLs: with regions, the
// publishers' region's).
func OriginURLs(hosts []Host) []string {
	return OriginURLsOf(hosts, inventories.OriginGroup)
}

// PublisherOrigins are the origins a publisher publishes to, each once:
// the fleet's origin boxes (with regions, the publishers' region's) as
// the stack lists them, pinned, or the fleet file's static origin: list;
// an error when the fleet has neither, or its origin group has no box in
// the stacks yet.
func PublisherOrigins(f *inventories.Fleet, s *Set) ([]string, error) {
	if urls := OriginURLs(s.Hosts); len(urls) > 0 {
		return urls, nil
	}
	if f != nil && f.Origins == nil && len(f.Origin) > 0 {
		return slices.Clone(f.Origin), nil
	}
	if f != nil && f.Origins != nil {
		return nil, fmt.Errorf("fleet %s: no origin box in its stacks yet (fleet up makes the origins: group)", s.Fleet)
	}
	return nil, fmt.Errorf("fleet %s has no origins: neither an origins: group nor an origin: list in its fleet file", s.Fleet)
}

// OriginURLsOf is OriginURLs of the origin group called group.
func OriginURLsOf(hosts []Host, group string) []string {
	var es []program.HostEntry
	for _, h := range Origins(hosts) {
		es = append(es, h.Entry())
	}
	return program.OriginURLsOf(es, group)
}

// upstreamOf is what host h's relays pull from: nothing for the
// publishers' origins; the publishers' region's origins (root) for the
// origins of another region, and for burst boxes; its region's origins
// for a steady box of a region.
func upstreamOf(f *inventories.Fleet, hosts []Host, h Host, root []string) []string {
	if len(f.Regions) == 0 {
		return root
	}
	region := f.RegionOfGroup(h.Group)
	if h.IsOrigin() || region == "" || h.Tier != TierSteady {
		return root
	}
	return OriginURLsOf(hosts, f.OriginGroupOf(region))
}

// Set is a fleet's hosts, steady first (by name), then each event's (by
// stack, then name), with what does not match the inventory.
type Set struct {
	Fleet string
	// Steady is the steady stack's name.
	Steady string
	Hosts  []Host
	// Warnings say where the stacks and the inventory differ in ways that
	// leave every host usable (a group with fewer boxes than it wants, a
	// group the inventory no longer has).
	Warnings []string
}

// SteadyHosts are the steady stack's hosts: its steady boxes and its
// origin boxes.
func (s *Set) SteadyHosts() []Host {
	return slices.DeleteFunc(slices.Clone(s.Hosts), func(h Host) bool { return h.Tier != TierSteady && h.Tier != TierOrigin })
}

// Entries are the hosts as stack output entries, by stack.
func (s *Set) Entries() map[string][]program.HostEntry {
	out := map[string][]program.HostEntry{}
	for _, h := range s.Hosts {
		out[h.Stack] = append(out[h.Stack], h.Entry())
	}
	return out
}

// IsEventStack says whether name can be one of fleet's event stacks
// (events.StackName).
func IsEventStack(fleet, name string) bool {
	return strings.HasPrefix(name, events.StackName(fleet, ""))
}

// Read lists the fleet's hosts from the backend st names: st itself (the
// steady stack) and the fleet's event stacks beside it. It needs no up
// and changes nothing.
func Read(ctx context.Context, st *program.Stack) (*Set, error) {
	if st.Fleet == nil {
		return nil, errors.New("hosts: no fleet")
	}
	outs, err := st.ReadOutputs(ctx, func(name string) bool { return IsEventStack(st.Fleet.Name, name) })
	if err != nil {
		if errors.Is(err, program.ErrNoStack) {
			return nil, fmt.Errorf("%w: run fleet up first", err)
		}
		return nil, err
	}
	return FromOutputs(st.Fleet, st.Name, outs)
}

// FromOutputs builds the fleet's host list from its stacks' outputs: the
// steady stack (named steady, which must be among them) and event stacks,
// told apart by their "event" output. Every steady group of the inventory
// must have boxes in the steady stack; every host must carry its SSH
// address and a host key to pin.
func FromOutputs(f *inventories.Fleet, steady string, stacks []program.StackOutputs) (*Set, error) {
	set := &Set{Fleet: f.Name, Steady: steady}
	found := false
	var eventHosts []Host
	for _, so := range stacks {
		isSteady := so.Stack == steady
		if !isSteady && !IsEventStack(f.Name, so.Stack) {
			continue
		}
		if fl, ok := so.Outputs["fleet"]; ok && fl != f.Name {
			if isSteady {
				return nil, fmt.Errorf("stack %s: holds fleet %v, not %s (the wrong --stack?)", so.Stack, fl, f.Name)
			}
			continue // another fleet's stack that shares the prefix
		}
		ev, _ := so.Outputs["event"].(string)
		if isSteady {
			found = true
			if ev != "" {
				return nil, fmt.Errorf("stack %s: an event's stack (event %s), not a steady fleet's", so.Stack, ev)
			}
		} else if ev == "" {
			// An event's stack whose first up never finished: no hosts.
			continue
		}
		v, ok := so.Outputs["hosts"]
		if !ok || v == nil {
			if isSteady {
				return nil, fmt.Errorf("stack %s: no hosts output: run fleet up first", so.Stack)
			}
			continue
		}
		if s, ok := v.(string); ok && s == "[secret]" {
			return nil, fmt.Errorf("stack %s: the hosts output is secret; fleet up again to rewrite it", so.Stack)
		}
		entries, err := so.Hosts()
		if err != nil {
			return nil, fmt.Errorf("stack %s: %w", so.Stack, err)
		}
		for i, e := range entries {
			h, err := fromEntry(so.Stack, e)
			if err != nil {
				return nil, fmt.Errorf("stack %s: hosts[%d]: %w", so.Stack, i, err)
			}
			if isSteady {
				h.Tier = TierSteady
				if e.IsOrigin() {
					h.Tier = TierOrigin
				}
				set.Hosts = append(set.Hosts, h)
			} else {
				h.Tier, h.Event = TierBurst, ev
				eventHosts = append(eventHosts, h)
			}
		}
	}
	if !found {
		return nil, fmt.Errorf("stack %s: %w: run fleet up first", steady, program.ErrNoStack)
	}
	// Each steady group of the inventory against the stack's boxes.
	var missing []string
	for _, g := range f.Steady {
		n := 0
		for _, h := range set.Hosts {
			if h.Group == g.Name {
				n++
			}
		}
		switch want := g.BoxCount(); {
		case n == 0:
			missing = append(missing, fmt.Sprintf("steady group %s: no boxes in stack %s (fleet up)", g.Name, steady))
		case n != want:
			set.Warnings = append(set.Warnings, fmt.Sprintf("steady group %s: %d %s in stack %s, the inventory wants %d (fleet up)", g.Name, n, map[bool]string{true: "box", false: "boxes"}[n == 1], steady, want))
		}
	}
	type originGroup struct {
		name string
		o    *inventories.Origins
	}
	originGroups := []originGroup{{inventories.OriginGroup, f.Origins}}
	for _, rg := range f.Regions {
		if g := f.OriginGroupOf(rg.Name); g != inventories.OriginGroup {
			originGroups = append(originGroups, originGroup{g, rg.Origins})
		}
	}
	for _, og := range originGroups {
		group, o := og.name, og.o
		if o == nil {
			continue
		}
		what := "origins"
		if group != inventories.OriginGroup {
			what = "origin group " + group
		}
		n := 0
		for _, h := range Origins(set.Hosts) {
			if h.Group == group || h.Group == "" && group == inventories.OriginGroup {
				n++
			}
		}
		switch {
		case n == 0:
			missing = append(missing, fmt.Sprintf("%s: no origin boxes in stack %s (fleet up)", what, steady))
		case n != o.Count:
			set.Warnings = append(set.Warnings, fmt.Sprintf("%s: %d in stack %s, the inventory wants %d (fleet up)", what, n, steady, o.Count))
		}
	}
	if len(missing) > 0 {
		return nil, errors.New(strings.Join(missing, "; "))
	}
	var gone []string
	for _, h := range set.Hosts {
		if h.IsOrigin() {
			if f.Origins == nil && !slices.Contains(gone, h.Group) {
				gone = append(gone, h.Group)
				set.Warnings = append(set.Warnings, fmt.Sprintf("origins: in stack %s, not in the inventory (fleet up removes their boxes)", steady))
			}
			continue
		}
		if groupOf(f, h.Group) == nil && !slices.Contains(gone, h.Group) {
			gone = append(gone, h.Group)
			set.Warnings = append(set.Warnings, fmt.Sprintf("steady group %s: in stack %s, not in the inventory (fleet up removes its boxes)", h.Group, steady))
		}
	}
	sort.SliceStable(eventHosts, func(i, j int) bool { return eventHosts[i].Stack < eventHosts[j].Stack })
	set.Hosts = append(set.Hosts, eventHosts...)
	return set, nil
}

// fromEntry checks one stack output entry.
func fromEntry(stack string, e program.HostEntry) (Host, error) {
	h := Host{Stack: stack, Name: e.Name, Group: e.Group, Backend: e.Backend, Address: e.Address,
		SSHAddress: e.SSHAddress, HostKey: strings.TrimSpace(e.HostKey), User: e.User, Ports: slices.Clone(e.Ports), SPKI: e.SPKI,
		Region: e.Region}
	if e.IsOrigin() {
		h.Tier = TierOrigin
	}
	if h.Name == "" {
		return h, errors.New("no name")
	}
	if h.SSHAddress == "" {
		return h, fmt.Errorf("%s: no sshAddress (fleet up again)", h.Name)
	}
	if _, _, err := net.SplitHostPort(h.SSHAddress); err != nil {
		return h, fmt.Errorf("%s: sshAddress %q: want HOST:PORT", h.Name, h.SSHAddress)
	}
	if h.HostKey == "" {
		return h, fmt.Errorf("%s: no hostKey to pin (fleet up again)", h.Name)
	}
	key, _, _, _, err := ssh.ParseAuthorizedKey([]byte(h.HostKey))
	if err != nil {
		return h, fmt.Errorf("%s: hostKey: %v", h.Name, err)
	}
	h.Fingerprint = ssh.FingerprintSHA256(key)
	if h.User == "" {
		h.User = "root"
	}
	if h.Address == "" {
		h.Address, _, _ = net.SplitHostPort(h.SSHAddress)
	}
	sort.Ints(h.Ports)
	return h, nil
}

func groupOf(f *inventories.Fleet, name string) *inventories.Group {
	for i := range f.Steady {
		if f.Steady[i].Name == name {
			return &f.Steady[i]
		}
	}
	return nil
}

// Access says how the hosts are reached: lab boxes with the admin key of
// the lab in LabDir (default $RELAYFLEET_LAB_DIR, else the lab's default),
// the others with SSHKey, else the ssh-agent.
type Access struct {
	LabDir string
	SSHKey string
}

// StackAccess is a, with the lab a stack was brought up with (its labDir
// configuration) as LabDir when a leaves it empty and a host is a lab
// box: its admin key reaches them. The stack is not read otherwise.
func StackAccess(ctx context.Context, st *program.Stack, hosts []Host, a Access) (Access, error) {
	if a.LabDir != "" {
		return a, nil
	}
	for _, h := range hosts {
		if h.Backend == provider.BackendLab {
			d, err := st.ReadConfig(ctx, "labDir")
			if err != nil {
				return a, err
			}
			a.LabDir = d
			return a, nil
		}
	}
	return a, nil
}

// Targets are the provision targets for hosts, each host's key pinned from
// its stack (a host whose key differs is refused: nothing is trusted on
// first use). A steady host of a group in the inventory takes the group's
// processes and base port (what converge brings it to); an origin host
// the origin group's one process and port, and no upstream; any other
// its stack's ports. The edges (every host but the origins) pull from
// the fleet's static origin URLs, or, for a fleet with an origin group,
// from the origin hosts among hosts, pinned to the keys their stack
// reports (OriginURLs). Close the returned closer when done.
func Targets(f *inventories.Fleet, hosts []Host, a Access) ([]provision.Target, io.Closer, error) {
	upstream := f.Origin
	if f.Origins != nil {
		upstream = OriginURLs(hosts)
		if len(upstream) == 0 {
			return nil, nil, errors.New("origins: no origin host among the hosts: the edges would have nothing to pull from (fleet up)")
		}
	}
	c := &closers{}
	dir, err := os.MkdirTemp("", "relayfleet-hosts-")
	if err != nil {
		return nil, nil, err
	}
	c.add(func() { os.RemoveAll(dir) })
	pools := map[bool]*provision.Pool{} // by lab
	pool := func(lab bool) (*provision.Pool, error) {
		if p := pools[lab]; p != nil {
			return p, nil
		}
		backend, name := provider.BackendStatic, "known_hosts"
		if lab {
			backend, name = provider.BackendLab, "known_hosts_lab"
		}
		auth, closer, err := provider.Auth(backend, provider.Config{LabDir: a.LabDir}, a.SSHKey)
		if err != nil {
			if lab {
				return nil, fmt.Errorf("lab admin key: %w", err)
			}
			return nil, fmt.Errorf("flag --ssh-key: %w", err)
		}
		c.add(func() { closer.Close() })
		p := &provision.Pool{Auth: auth, Keys: &provision.HostKeys{File: filepath.Join(dir, name)}}
		c.add(func() { p.Close() })
		pools[lab] = p
		return p, nil
	}
	var targets []provision.Target
	pinned := map[string]Host{}
	for _, h := range hosts {
		// One known_hosts line per address: two hosts at one address
		// with different keys would each let the other's key in.
		if o, ok := pinned[h.SSHAddress]; ok && o.HostKey != h.HostKey {
			c.Close()
			return nil, nil, fmt.Errorf("stack %s: %s and stack %s: %s: one ssh address %s, two host keys", o.Stack, o.Name, h.Stack, h.Name, h.SSHAddress)
		}
		pinned[h.SSHAddress] = h
		p, err := pool(h.Backend == provider.BackendLab)
		if err != nil {
			c.Close()
			return nil, nil, err
		}
		key, _, _, _, err := ssh.ParseAuthorizedKey([]byte(h.HostKey))
		if err != nil {
			c.Close()
			return nil, nil, fmt.Errorf("stack %s: %s: hostKey: %v", h.Stack, h.Name, err)
		}
		ph := provision.Host{Name: h.Name, Address: h.SSHAddress, User: h.User}
		if err := provision.PinKey(p.Keys.File, ph.Addr(), key); err != nil {
			c.Close()
			return nil, nil, err
		}
		t := provision.Target{Host: ph, Run: p.Runner(ph), Upstream: upstreamOf(f, hosts, h, upstream), PublicListen: f.Access.PublicListen, MaxSessionsPerAddress: f.Access.SessionsPerAddress(), UncappedAddresses: f.Access.UncappedAddresses()}
		t.Region = f.RegionOfGroup(h.Group)
		if len(t.Upstream) == 0 && len(upstream) > 0 {
			c.Close()
			return nil, nil, fmt.Errorf("stack %s: %s: no origin host of its region (%s) among the hosts: its relays would have nothing to pull from (fleet up)", h.Stack, h.Name, f.RegionOfGroup(h.Group))
		}
		if h.IsOrigin() {
			// Relays pull from it: it takes their link tokens.
			t.Processes, t.AcceptLinkTokens = 1, true
			if h.Group == inventories.OriginGroup {
				t.Upstream = nil // the publishers' origins pull from nobody
			}
			if len(h.Ports) > 0 {
				t.Origin = program.OriginURL(h.Address, h.Ports[0], h.SPKI)
			}
			if o := f.RegionOrigins(f.RegionOfGroup(h.Group)); o != nil {
				t.BasePort = o.BasePort
			} else if f.Origins != nil {
				t.BasePort = f.Origins.BasePort
			} else if len(h.Ports) > 0 {
				t.BasePort = h.Ports[0]
			}
		} else if g := groupOf(f, h.Group); g != nil && h.Tier == TierSteady {
			t.Processes, t.BasePort = int(g.Processes), g.BasePort
		} else if len(h.Ports) > 0 {
			t.Processes, t.BasePort = len(h.Ports), h.Ports[0]
		}
		targets = append(targets, t)
	}
	return targets, c, nil
}

// closers closes what Targets opened, last first.
type closers struct{ fs []func() }

func (c *closers) add(f func()) { c.fs = append(c.fs, f) }

// Close implements io.Closer.
func (c *closers) Close() error {
	for i := len(c.fs) - 1; i >= 0; i-- {
		c.fs[i]()
	}
	c.fs = nil
	return nil
}
