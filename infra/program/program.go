package program

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/relayfleet/relayfleet/infra/provider"
	"github.com/relayfleet/relayfleet/inventories"
	"github.com/relayfleet/relayfleet/provision"
)

// Options are what the program needs besides the inventory.
type Options struct {
	// RelayBinary is the relay build every host runs, as a path on the
	// machine that runs the provider; Release is its SHA-256
	// (provision.Digest).
	RelayBinary string
	Release     string
	// AuthKeys is the fleet's relay auth key file (the stack secret
	// relayfleet:relayAuthKeys): every Host gets it as a secret input, so
	// Pulumi keeps it encrypted. Required.
	AuthKeys string
	// TLSSeed is the fleet's relay TLS seed (the stack secret
	// relayfleet:relayTLSSeed): each Host gets its box's key, derived
	// from it and the box's name (provision.BoxTLSKey), as a secret
	// input, and reports the key's SPKI, which the router's relays file
	// pins. Required.
	TLSSeed string
	// Existing are the names the stack's state gives its boxes and
	// firewalls, by Pulumi resource name (Stack fills it before a run).
	// A box or firewall made before names carried their tier keeps its
	// old name (LegacyBoxName, LegacyBurstBoxName, LegacyFirewallName)
	// rather than be replaced for a rename; any other name is made anew.
	Existing map[string]string
	// Upstream, for an event's stack (DeployBurst) of a fleet with an
	// origin group, are the origins' URLs with their pins, as the steady
	// stack's "origins" output has them: its edges pull from them.
	Upstream []string
}

// ErrNoTLSSeed says the program was given no relay TLS seed.
var ErrNoTLSSeed = errors.New("no relay TLS seed: fleet up keeps one in the fleet's stack (" + SecretNamespace + ":" + RelayTLSSeedKey + ")")

// ErrNoAuthKeys says the program was given no relay auth key file.
var ErrNoAuthKeys = errors.New("no relay auth key: fleet up keeps one in the fleet's stack (" + SecretNamespace + ":" + RelayAuthKeysKey + ")")

// Box is a registered relayfleet Box.
type Box struct {
	pulumi.CustomResourceState

	Name           pulumi.StringOutput      `pulumi:"name"`
	Backend        pulumi.StringOutput      `pulumi:"backend"`
	Addresses      pulumi.StringArrayOutput `pulumi:"addresses"`
	SSHAddress     pulumi.StringOutput      `pulumi:"sshAddress"`
	Cores          pulumi.IntOutput         `pulumi:"cores"`
	RAM            pulumi.IntOutput         `pulumi:"ram"`
	HostPublicKey  pulumi.StringOutput      `pulumi:"hostPublicKey"`
	HostPrivateKey pulumi.StringOutput      `pulumi:"hostPrivateKey"`
	BackendID      pulumi.StringOutput      `pulumi:"backendId"`
	AllLabels      pulumi.StringMapOutput   `pulumi:"allLabels"`
}

// Host is a registered relayfleet Host.
type Host struct {
	pulumi.CustomResourceState

	Ports       pulumi.IntArrayOutput    `pulumi:"ports"`
	Drift       pulumi.StringArrayOutput `pulumi:"drift"`
	DesiredHash pulumi.StringOutput      `pulumi:"desiredHash"`
	SPKI        pulumi.StringOutput      `pulumi:"spki"`
}

// Firewall is a registered relayfleet Firewall.
type Firewall struct {
	pulumi.CustomResourceState
}

// HostEntry is one host in the stack output "hosts": what provision and
// the router need to reach it.
type HostEntry struct {
	Name       string `json:"name"`
	Group      string `json:"group"`
	Backend    string `json:"backend"`
	Address    string `json:"address"`
	SSHAddress string `json:"sshAddress"`
	HostKey    string `json:"hostKey"`
	User       string `json:"user"`
	Ports      []int  `json:"ports"`
	// SPKI is the SHA-256 of the box's relay TLS key's public key (hex,
	// the Host's spki output): every relay process of the box serves
	// certificates for that key, and the relays file pins it.
	SPKI string `json:"spki,omitempty"`
	// Tier is "origin" for the fleet's origin boxes (which the router's
	// relays file leaves out: listeners go to the edges), else empty.
	Tier string `json:"tier,omitempty"`
	// Region is the box's region in a fleet with regions, else empty.
	Region string `json:"region,omitempty"`
}

// IsOrigin says whether the host is one of the fleet's origin boxes.
func (h HostEntry) IsOrigin() bool { return h.Tier == provider.TierOrigin }

// OriginURL is the URL edges pull from an origin relay at address and
// port, pinned to the key whose SPKI is spki: http://ADDR:PORT/#spki=HEX
// (the relay's TCP port answers TLS too; the pin, not a CA, is what the
// edge trusts).
func OriginURL(address string, port int, spki string) string {
	host := address
	if strings.Contains(host, ":") {
		host = "[" + host + "]" // IPv6
	}
	return fmt.Sprintf("http://%s:%d/#spki=%s", host, port, spki)
}

// OriginURLs are the origin hosts' URLs (OriginURL of each one's first
// port) in the order the program gives the edges (origin-2 before
// origin-10: shorter names first, then by name); the other hosts are left
// out, and so, with regions, are the origins of every region but the
// publishers' (whose group is inventories.OriginGroup): what publishers
// and burst boxes use.
func OriginURLs(hosts []HostEntry) []string {
	return OriginURLsOf(hosts, inventories.OriginGroup)
}

// OriginURLsOf is OriginURLs of the origin group called group.
func OriginURLsOf(hosts []HostEntry, group string) []string {
	hosts = slices.Clone(hosts)
	slices.SortStableFunc(hosts, func(a, b HostEntry) int {
		return cmp.Or(cmp.Compare(len(a.Name), len(b.Name)), cmp.Compare(a.Name, b.Name))
	})
	var out []string
	for _, h := range hosts {
		// (an entry without a group, from before regions, is the
		// publishers' origin group's)
		if h.IsOrigin() && (h.Group == group || h.Group == "" && group == inventories.OriginGroup) && len(h.Ports) > 0 {
			out = append(out, OriginURL(h.Address, h.Ports[0], h.SPKI))
		}
	}
	return out
}

// Deployed is what the program registered.
type Deployed struct {
	Boxes     []*Box
	Hosts     []*Host
	Firewalls []*Firewall
	// HostsOutput is the "hosts" stack output, one HostEntry each.
	HostsOutput pulumi.Array
	// Provider is the explicit relayfleet provider every resource uses.
	Provider pulumi.ProviderResource
}

// newDeployed registers the provider the program's resources use.
func newDeployed(ctx *pulumi.Context) (*Deployed, error) {
	p, err := registerProvider(ctx)
	if err != nil {
		return nil, err
	}
	return &Deployed{Provider: p}, nil
}

// Program returns the inline program for a fleet.
func Program(f *inventories.Fleet, cat *inventories.Catalogue, o Options) pulumi.RunFunc {
	return func(ctx *pulumi.Context) error {
		_, err := Deploy(ctx, f, cat, o)
		return err
	}
}

// Deploy registers the fleet's resources and exports the stack outputs:
// "fleet" (its name), "hosts" (one HostEntry per steady box and origin
// box) and, for a fleet with an origin group, "origins" (the origins'
// URLs with their pins, OriginURL, which the edges pull from).
func Deploy(ctx *pulumi.Context, f *inventories.Fleet, cat *inventories.Catalogue, o Options) (*Deployed, error) {
	d, err := newDeployed(ctx)
	if err != nil {
		return nil, err
	}
	sets, err := steadySets(f, o)
	if err != nil {
		return nil, err
	}
	var hosts pulumi.Array
	// The edges' upstream: the static origin URLs, or the origin boxes'
	// URLs, pinned to the keys the fleet made for them, from their Hosts'
	// outputs (never fetched over HTTP). With regions, each region's
	// edges pull from their region's origins, and the origins of every
	// region but the publishers' pull from the publishers' region's
	// origins: one long-haul link per origin box.
	var upstream pulumi.StringArrayInput = pulumi.ToStringArray(f.Origin)
	regionUpstream := map[string]pulumi.StringArrayInput{}
	for i, og := range originSets(f) {
		var from pulumi.StringArrayInput // the root's: none
		if i > 0 {
			from = upstream
		}
		hs, urls, err := d.boxes(ctx, f, cat, o, og, from)
		if err != nil {
			return nil, fmt.Errorf("origins: %w", err)
		}
		hosts = append(hosts, hs...)
		regionUpstream[og.region] = urls
		if i == 0 {
			upstream = urls
			ctx.Export("origins", urls)
		}
	}
	for i, g := range f.Steady {
		up := upstream
		if ru, ok := regionUpstream[f.RegionOfGroup(g.Name)]; ok {
			up = ru
		}
		hs, _, err := d.boxes(ctx, f, cat, o, sets[i], up)
		if err != nil {
			return nil, fmt.Errorf("steady group %s: %w", g.Name, err)
		}
		hosts = append(hosts, hs...)
	}
	ctx.Export("fleet", pulumi.String(f.Name))
	ctx.Export("hosts", hosts)
	d.HostsOutput = hosts
	return d, nil
}

// Burst is one event's burst boxes: Boxes boxes of the event's pool (its
// first candidate), and the boxes it spills onto later candidates.
type Burst struct {
	Event string
	Pool  inventories.Pool
	Boxes int
	Spill []Spill
}

// Spill is an event's boxes on one of its pool's later candidates.
type Spill struct {
	// Candidate indexes the pool's Choices (1 or more).
	Candidate int `json:"candidate"`
	Boxes     int `json:"boxes"`
}

// DeployBurst registers one event's burst boxes (its own stack: the steady
// fleet's resources are not in it) and exports "fleet", "event" and
// "hosts".
func DeployBurst(ctx *pulumi.Context, f *inventories.Fleet, cat *inventories.Catalogue, b Burst, o Options) (*Deployed, error) {
	if b.Pool.Provider == inventories.ProviderStatic {
		return nil, fmt.Errorf("event %s: static servers cannot burst", b.Event)
	}
	d, err := newDeployed(ctx)
	if err != nil {
		return nil, err
	}
	sets, err := burstSets(f, b, o)
	if err != nil {
		return nil, err
	}
	var upstream pulumi.StringArrayInput = pulumi.ToStringArray(f.Origin)
	if f.Origins != nil {
		if len(o.Upstream) == 0 {
			return nil, fmt.Errorf("event %s: the fleet's origin group has no URLs in the fleet's stack (its \"origins\" output): fleet up first", b.Event)
		}
		upstream = pulumi.ToStringArray(o.Upstream)
	}
	var hosts pulumi.Array
	for _, set := range sets {
		hs, _, err := d.boxes(ctx, f, cat, o, set, upstream)
		if err != nil {
			return nil, fmt.Errorf("event %s: %w", b.Event, err)
		}
		hosts = append(hosts, hs...)
	}
	ctx.Export("fleet", pulumi.String(f.Name))
	ctx.Export("event", pulumi.String(b.Event))
	ctx.Export("hosts", hosts)
	d.HostsOutput = hosts
	return d, nil
}

// boxSet is a steady group's or an event's boxes.
type boxSet struct {
	group, backend string
	box            inventories.Box
	names          []string
	statics        []inventories.StaticHost
	tier, event    string
	firewall       string
	// region is the set's region (a fleet with regions; else "").
	region string
}

// boxes registers a set's firewall (on clouds), boxes and hosts, and
// returns their "hosts" output entries and their relays' URLs as origins
// (OriginURL of each box's first port). upstream is what the hosts' relays
// pull from (nil: nothing, as origins).
func (d *Deployed) boxes(ctx *pulumi.Context, f *inventories.Fleet, cat *inventories.Catalogue, o Options, s boxSet, upstream pulumi.StringArrayInput) (pulumi.Array, pulumi.StringArrayOutput, error) {
	hosts, urls, err := d.boxesOf(ctx, f, cat, o, s, upstream)
	return hosts, urls.ToStringArrayOutput(), err
}

func (d *Deployed) boxesOf(ctx *pulumi.Context, f *inventories.Fleet, cat *inventories.Catalogue, o Options, s boxSet, upstream pulumi.StringArrayInput) (pulumi.Array, pulumi.StringArray, error) {
	if o.AuthKeys == "" {
		return nil, nil, ErrNoAuthKeys
	}
	if o.TLSSeed == "" {
		return nil, nil, ErrNoTLSSeed
	}
	if upstream == nil {
		upstream = pulumi.StringArray{}
	}
	var urls pulumi.StringArray
	// One secret for every host: the engine keeps it encrypted in the
	// state and shows [secret] in diffs.
	authKeys := pulumi.ToSecret(pulumi.String(o.AuthKeys)).(pulumi.StringOutput)
	cloud := s.backend == provider.BackendHcloud || s.backend == provider.BackendDigitalOcean
	labels := map[string]string{"group": s.group}
	if cloud {
		rules, err := FirewallRules(f, cat, s.box)
		if err != nil {
			return nil, nil, err
		}
		fw := &Firewall{}
		in, err := argsInput(&provider.FirewallArgs{
			Backend: s.backend,
			Name:    s.firewall,
			Labels:  map[string]string{"fleet": f.Name, "tier": s.tier, "event": s.event, "group": s.group},
			Rules:   rules,
		}, nil)
		if err != nil {
			return nil, nil, err
		}
		err = ctx.RegisterResource(provider.FirewallType, firewallResource(s.group), in, fw, pulumi.Provider(d.Provider))
		if err != nil {
			return nil, nil, err
		}
		d.Firewalls = append(d.Firewalls, fw)
	}
	var hosts pulumi.Array
	for i, name := range s.names {
		logical := boxResource(s.group, i+1)
		args := provider.BoxArgs{
			Backend:        s.backend,
			Name:           name,
			Fleet:          f.Name,
			Tier:           s.tier,
			Event:          s.event,
			Shape:          s.box.Shape,
			Location:       s.box.Location,
			Image:          s.box.Image,
			Labels:         labels,
			AuthorizedKeys: append([]string{}, f.Admin.SSHKeys...),
		}
		user := "root"
		if s.backend == provider.BackendStatic {
			h := s.statics[i]
			args.Address, args.HostKey = h.Address, h.HostKey
			if h.User != "" {
				user = h.User
			}
			args.User = user
		}
		in, err := argsInput(&args, nil)
		if err != nil {
			return nil, nil, err
		}
		box := &Box{}
		// The provider marks hostPrivateKey secret itself.
		if err := ctx.RegisterResource(provider.BoxType, logical, in, box, pulumi.Provider(d.Provider)); err != nil {
			return nil, nil, err
		}
		// The host is converged onto the box: its address, host key
		// and size are the box's outputs.
		ha := provider.HostArgs{
			Backend:               s.backend,
			User:                  user,
			Processes:             int(s.box.Processes),
			BasePort:              s.box.BasePort,
			Release:               o.Release,
			RelayBinary:           o.RelayBinary,
			PublicListen:          f.Access.PublicListen,
			MaxSessionsPerAddress: f.Access.SessionsPerAddress(),
			UncappedAddresses:     f.Access.UncappedAddresses(),
			// Relays pull from the origins alone: only their key files
			// keep the link key's public half, which takes link tokens.
			AcceptLinkTokens: s.tier == provider.TierOrigin,
		}
		// The box's relay TLS key, a secret like the auth keys; its
		// SPKI comes back as the Host's spki output once converged.
		tlsKey, _, err := provision.BoxTLSKey(o.TLSSeed, name)
		if err != nil {
			return nil, nil, err
		}
		in, err = argsInput(&ha, map[any]pulumi.Input{
			&ha.TLSKey:     pulumi.ToSecret(pulumi.String(string(tlsKey))).(pulumi.StringOutput),
			&ha.Box:        box.Name,
			&ha.SSHAddress: box.SSHAddress,
			&ha.HostKey:    box.HostPublicKey,
			&ha.Cores:      box.Cores,
			&ha.RAM:        box.RAM,
			&ha.AuthKeys:   authKeys,
			&ha.Upstream:   upstream,
		})
		if err != nil {
			return nil, nil, err
		}
		host := &Host{}
		if err := ctx.RegisterResource(provider.HostType, logical, in, host, pulumi.DependsOn([]pulumi.Resource{box}), pulumi.Provider(d.Provider)); err != nil {
			return nil, nil, err
		}
		d.Boxes = append(d.Boxes, box)
		d.Hosts = append(d.Hosts, host)
		entry := pulumi.Map{
			"name":       box.Name,
			"group":      pulumi.String(s.group),
			"backend":    pulumi.String(s.backend),
			"address":    box.Addresses.Index(pulumi.Int(0)),
			"sshAddress": box.SSHAddress,
			"hostKey":    box.HostPublicKey,
			"user":       pulumi.String(user),
			"ports":      host.Ports,
			"spki":       host.SPKI,
		}
		if s.tier == provider.TierOrigin {
			entry["tier"] = pulumi.String(s.tier)
		}
		if s.region != "" {
			entry["region"] = pulumi.String(s.region)
		}
		hosts = append(hosts, entry)
		urls = append(urls, pulumi.All(box.Addresses, host.Ports, host.SPKI).ApplyT(func(v []any) string {
			addrs, ports, spki := v[0].([]string), v[1].([]int), v[2].(string)
			if len(addrs) == 0 || len(ports) == 0 {
				return ""
			}
			return OriginURL(addrs[0], ports[0], spki)
		}).(pulumi.StringOutput))
	}
	return hosts, urls, nil
}
