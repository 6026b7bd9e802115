package program

import (
	"errors"
	"fmt"

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
// "fleet" (its name) and "hosts" (one HostEntry per steady box).
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
	for i, g := range f.Steady {
		hs, err := d.boxes(ctx, f, cat, o, sets[i])
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
	var hosts pulumi.Array
	for _, set := range sets {
		hs, err := d.boxes(ctx, f, cat, o, set)
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
}

// boxes registers a set's firewall (on clouds), boxes and hosts, and
// returns their "hosts" output entries.
func (d *Deployed) boxes(ctx *pulumi.Context, f *inventories.Fleet, cat *inventories.Catalogue, o Options, s boxSet) (pulumi.Array, error) {
	if o.AuthKeys == "" {
		return nil, ErrNoAuthKeys
	}
	if o.TLSSeed == "" {
		return nil, ErrNoTLSSeed
	}
	// One secret for every host: the engine keeps it encrypted in the
	// state and shows [secret] in diffs.
	authKeys := pulumi.ToSecret(pulumi.String(o.AuthKeys)).(pulumi.StringOutput)
	cloud := s.backend == provider.BackendHcloud || s.backend == provider.BackendDigitalOcean
	labels := map[string]string{"group": s.group}
	if cloud {
		rules, err := FirewallRules(f, cat, s.box)
		if err != nil {
			return nil, err
		}
		fw := &Firewall{}
		in, err := argsInput(&provider.FirewallArgs{
			Backend: s.backend,
			Name:    s.firewall,
			Labels:  map[string]string{"fleet": f.Name, "tier": s.tier, "event": s.event, "group": s.group},
			Rules:   rules,
		}, nil)
		if err != nil {
			return nil, err
		}
		err = ctx.RegisterResource(provider.FirewallType, firewallResource(s.group), in, fw, pulumi.Provider(d.Provider))
		if err != nil {
			return nil, err
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
			return nil, err
		}
		box := &Box{}
		// The provider marks hostPrivateKey secret itself.
		if err := ctx.RegisterResource(provider.BoxType, logical, in, box, pulumi.Provider(d.Provider)); err != nil {
			return nil, err
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
			Upstream:              f.Origin,
			PublicListen:          f.Access.PublicListen,
			MaxSessionsPerAddress: f.Access.MaxSessionsPerAddress,
		}
		// The box's relay TLS key, a secret like the auth keys; its
		// SPKI comes back as the Host's spki output once converged.
		tlsKey, _, err := provision.BoxTLSKey(o.TLSSeed, name)
		if err != nil {
			return nil, err
		}
		in, err = argsInput(&ha, map[any]pulumi.Input{
			&ha.TLSKey:     pulumi.ToSecret(pulumi.String(string(tlsKey))).(pulumi.StringOutput),
			&ha.Box:        box.Name,
			&ha.SSHAddress: box.SSHAddress,
			&ha.HostKey:    box.HostPublicKey,
			&ha.Cores:      box.Cores,
			&ha.RAM:        box.RAM,
			&ha.AuthKeys:   authKeys,
		})
		if err != nil {
			return nil, err
		}
		host := &Host{}
		if err := ctx.RegisterResource(provider.HostType, logical, in, host, pulumi.DependsOn([]pulumi.Resource{box}), pulumi.Provider(d.Provider)); err != nil {
			return nil, err
		}
		d.Boxes = append(d.Boxes, box)
		d.Hosts = append(d.Hosts, host)
		hosts = append(hosts, pulumi.Map{
			"name":       box.Name,
			"group":      pulumi.String(s.group),
			"backend":    pulumi.String(s.backend),
			"address":    box.Addresses.Index(pulumi.Int(0)),
			"sshAddress": box.SSHAddress,
			"hostKey":    box.HostPublicKey,
			"user":       pulumi.String(user),
			"ports":      host.Ports,
			"spki":       host.SPKI,
		})
	}
	return hosts, nil
}
