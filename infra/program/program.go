package program

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/relayfleet/relayfleet/infra/lab"
	"github.com/relayfleet/relayfleet/infra/provider"
	"github.com/relayfleet/relayfleet/inventories"
)

// Options are what the program needs besides the inventory.
type Options struct {
	// RelayBinary is the relay build every host runs, as a path on the
	// machine that runs the provider; Release is its SHA-256
	// (provision.Digest).
	RelayBinary string
	Release     string
}

// BoxArgs are a Box's inputs as the program registers them.
type BoxArgs struct {
	Backend        pulumi.StringInput
	Name           pulumi.StringInput
	Fleet          pulumi.StringInput
	Tier           pulumi.StringInput
	Event          pulumi.StringInput
	Shape          pulumi.StringInput
	Location       pulumi.StringInput
	Image          pulumi.StringInput
	Labels         pulumi.StringMapInput
	AuthorizedKeys pulumi.StringArrayInput
	Address        pulumi.StringInput
	User           pulumi.StringInput
	HostKey        pulumi.StringInput
}

type boxArgs struct {
	Backend        string            `pulumi:"backend"`
	Name           string            `pulumi:"name"`
	Fleet          string            `pulumi:"fleet"`
	Tier           string            `pulumi:"tier"`
	Event          string            `pulumi:"event"`
	Shape          string            `pulumi:"shape"`
	Location       string            `pulumi:"location"`
	Image          string            `pulumi:"image"`
	Labels         map[string]string `pulumi:"labels"`
	AuthorizedKeys []string          `pulumi:"authorizedKeys"`
	Address        string            `pulumi:"address"`
	User           string            `pulumi:"user"`
	HostKey        string            `pulumi:"hostKey"`
}

// ElementType tells the SDK how to marshal BoxArgs.
func (BoxArgs) ElementType() reflect.Type { return reflect.TypeFor[boxArgs]() }

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

// HostArgs are a Host's inputs as the program registers them.
type HostArgs struct {
	Box         pulumi.StringInput
	Backend     pulumi.StringInput
	SSHAddress  pulumi.StringInput
	HostKey     pulumi.StringInput
	User        pulumi.StringInput
	Cores       pulumi.IntInput
	RAM         pulumi.IntInput
	Processes   pulumi.IntInput
	BasePort    pulumi.IntInput
	Release     pulumi.StringInput
	RelayBinary pulumi.StringInput
}

type hostArgs struct {
	Box         string `pulumi:"box"`
	Backend     string `pulumi:"backend"`
	SSHAddress  string `pulumi:"sshAddress"`
	HostKey     string `pulumi:"hostKey"`
	User        string `pulumi:"user"`
	Cores       int    `pulumi:"cores"`
	RAM         int    `pulumi:"ram"`
	Processes   int    `pulumi:"processes"`
	BasePort    int    `pulumi:"basePort"`
	Release     string `pulumi:"release"`
	RelayBinary string `pulumi:"relayBinary"`
}

// ElementType tells the SDK how to marshal HostArgs.
func (HostArgs) ElementType() reflect.Type { return reflect.TypeFor[hostArgs]() }

// Host is a registered relayfleet Host.
type Host struct {
	pulumi.CustomResourceState

	Ports       pulumi.IntArrayOutput    `pulumi:"ports"`
	Drift       pulumi.StringArrayOutput `pulumi:"drift"`
	DesiredHash pulumi.StringOutput      `pulumi:"desiredHash"`
}

// FirewallArgs are a Firewall's inputs.
type FirewallArgs struct {
	Backend pulumi.StringInput
	Name    pulumi.StringInput
	Labels  pulumi.StringMapInput
	Rules   pulumi.ArrayInput
}

type firewallArgs struct {
	Backend string            `pulumi:"backend"`
	Name    string            `pulumi:"name"`
	Labels  map[string]string `pulumi:"labels"`
	Rules   []any             `pulumi:"rules"`
}

// ElementType tells the SDK how to marshal FirewallArgs.
func (FirewallArgs) ElementType() reflect.Type { return reflect.TypeFor[firewallArgs]() }

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
}

// Deployed is what the program registered.
type Deployed struct {
	Boxes     []*Box
	Hosts     []*Host
	Firewalls []*Firewall
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
	d := &Deployed{}
	var hosts pulumi.Array
	for _, g := range f.Steady {
		backend := g.Provider
		if backend == inventories.ProviderStatic {
			backend = provider.BackendStatic
		}
		cloud := backend == provider.BackendHcloud || backend == provider.BackendDigitalOcean
		labels := map[string]string{"group": g.Name}
		if cloud {
			rules, err := FirewallRules(f, cat, g.Box)
			if err != nil {
				return nil, fmt.Errorf("steady group %s: %w", g.Name, err)
			}
			fw := &Firewall{}
			err = ctx.RegisterResource(provider.FirewallType, g.Name+"-firewall", FirewallArgs{
				Backend: pulumi.String(backend),
				Name:    pulumi.String(f.Name + "-" + g.Name),
				Labels:  pulumi.ToStringMap(map[string]string{"fleet": f.Name, "tier": provider.TierSteady, "event": provider.NoEvent, "group": g.Name}),
				Rules:   ruleArray(rules),
			}, fw)
			if err != nil {
				return nil, err
			}
			d.Firewalls = append(d.Firewalls, fw)
		}
		for i := range g.BoxCount() {
			logical := fmt.Sprintf("%s-%d", g.Name, i+1)
			args := BoxArgs{
				Backend:        pulumi.String(backend),
				Name:           pulumi.String(BoxName(f.Name, g.Name, backend, i+1)),
				Fleet:          pulumi.String(f.Name),
				Tier:           pulumi.String(provider.TierSteady),
				Event:          pulumi.String(provider.NoEvent),
				Shape:          pulumi.String(g.Shape),
				Labels:         pulumi.ToStringMap(labels),
				AuthorizedKeys: pulumi.ToStringArray(append([]string{}, f.Admin.SSHKeys...)),
			}
			if g.Location != "" {
				args.Location = pulumi.String(g.Location)
			}
			if g.Image != "" {
				args.Image = pulumi.String(g.Image)
			}
			user := "root"
			if backend == provider.BackendStatic {
				h := g.Hosts[i]
				args.Address, args.HostKey = pulumi.String(h.Address), pulumi.String(h.HostKey)
				if h.User != "" {
					user = h.User
				}
				args.User = pulumi.String(user)
			}
			box := &Box{}
			// The provider marks hostPrivateKey secret itself.
			if err := ctx.RegisterResource(provider.BoxType, logical, args, box); err != nil {
				return nil, err
			}
			host := &Host{}
			if err := ctx.RegisterResource(provider.HostType, logical, HostArgs{
				Box:         box.Name,
				Backend:     pulumi.String(backend),
				SSHAddress:  box.SSHAddress,
				HostKey:     box.HostPublicKey,
				User:        pulumi.String(user),
				Cores:       box.Cores,
				RAM:         box.RAM,
				Processes:   pulumi.Int(int(g.Processes)),
				BasePort:    pulumi.Int(g.BasePort),
				Release:     pulumi.String(o.Release),
				RelayBinary: pulumi.String(o.RelayBinary),
			}, host, pulumi.DependsOn([]pulumi.Resource{box})); err != nil {
				return nil, err
			}
			d.Boxes = append(d.Boxes, box)
			d.Hosts = append(d.Hosts, host)
			hosts = append(hosts, pulumi.Map{
				"name":       box.Name,
				"group":      pulumi.String(g.Name),
				"backend":    pulumi.String(backend),
				"address":    box.Addresses.Index(pulumi.Int(0)),
				"sshAddress": box.SSHAddress,
				"hostKey":    box.HostPublicKey,
				"user":       pulumi.String(user),
				"ports":      host.Ports,
			})
		}
	}
	ctx.Export("fleet", pulumi.String(f.Name))
	ctx.Export("hosts", hosts)
	return d, nil
}

// BoxName is a box's name at its backend: FLEET-GROUP-N on clouds and
// static servers, and within the lab's 11 characters, GROUP-N cut short.
func BoxName(fleet, group, backend string, n int) string {
	if backend != provider.BackendLab {
		return fmt.Sprintf("%s-%s-%d", fleet, group, n)
	}
	suffix := fmt.Sprintf("-%d", n)
	base := strings.ToLower(group)
	if max := 11 - len(suffix); len(base) > max {
		base = base[:max]
	}
	base = strings.TrimRight(base, "-")
	name := base + suffix
	if lab.ValidName(name) != nil {
		name = "b" + suffix // a group name the lab cannot carry
	}
	return name
}
