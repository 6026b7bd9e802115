package provider

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sync"

	p "github.com/pulumi/pulumi-go-provider"
	"github.com/pulumi/pulumi-go-provider/infer"

	"github.com/relayfleet/relayfleet/infra/lab"
)

// Name is the provider's package name; PluginName is the executable name
// the Pulumi engine looks for.
const (
	Name       = "relayfleet"
	PluginName = "pulumi-resource-" + Name
	// Version is the provider's version as the engine sees it.
	Version = "0.1.0"
)

// Resource type tokens, as programs register them.
const (
	BoxType  = Name + ":index:Box"
	HostType = Name + ":index:Host"
	// FirewallType is a cloud firewall.
	FirewallType = Name + ":index:Firewall"
)

// Config is the provider's configuration (relayfleet:KEY in stack config).
type Config struct {
	// LabDir is the lab's state directory; default $RELAYFLEET_LAB_DIR,
	// else lab.DefaultDir.
	LabDir string `pulumi:"labDir,optional"`
	// LabImages is the lab's image cache; default LabDir/images.
	LabImages string `pulumi:"labImages,optional"`
	// LabBridge and LabSubnet name the lab's bridge and subnet.
	LabBridge string `pulumi:"labBridge,optional"`
	LabSubnet string `pulumi:"labSubnet,optional"`
	// SSHKeyFile is the private key for static servers; without it the
	// ssh-agent at SSH_AUTH_SOCK is used.
	SSHKeyFile string `pulumi:"sshKeyFile,optional"`
	// HcloudToken and DigitalOceanToken are the cloud API tokens, kept as
	// stack secrets (fleet secret set); without them the provider reads
	// HCLOUD_TOKEN / DIGITALOCEAN_TOKEN from its environment.
	HcloudToken       string `pulumi:"hcloudToken,optional" provider:"secret"`
	DigitalOceanToken string `pulumi:"digitaloceanToken,optional" provider:"secret"`
}

// Annotate describes the configuration.
func (c *Config) Annotate(a infer.Annotator) {
	a.Describe(&c.LabDir, "The lab's state directory (default $RELAYFLEET_LAB_DIR, else /var/lib/relayfleet/lab).")
	a.Describe(&c.LabImages, "The lab's image cache (default labDir/images).")
	a.Describe(&c.LabBridge, "The lab's bridge (default rflab0).")
	a.Describe(&c.LabSubnet, "The lab's subnet (default 10.231.77.0/24).")
	a.Describe(&c.SSHKeyFile, "Private key file for static servers (default: the ssh-agent at SSH_AUTH_SOCK).")
	a.Describe(&c.HcloudToken, "Hetzner Cloud API token (default $HCLOUD_TOKEN).")
	a.Describe(&c.DigitalOceanToken, "DigitalOcean API token (default $DIGITALOCEAN_TOKEN).")
}

// New returns the relayfleet provider.
func New() (p.Provider, error) {
	prov, err := infer.NewProviderBuilder().
		WithDisplayName("relayfleet").
		WithDescription("relayfleet boxes (lab, static, clouds) and relay hosts converged over SSH.").
		WithNamespace("relayfleet").
		WithConfig(infer.Config(&Config{})).
		WithResources(
			infer.Resource(&Box{}),
			infer.Resource(&Host{}),
			infer.Resource(&Firewall{}),
		).
		Build()
	if err != nil {
		return prov, err
	}
	prov.DiffConfig = configChangesInPlace(prov.DiffConfig)
	return prov, nil
}

// configChangesInPlace wraps a provider's DiffConfig so that no change of
// its configuration replaces the provider. infer replaces the provider on
// any change (pulumi-go-provider#409), and the engine then replaces every
// resource the provider manages: a rotated cloud token, or a stack moved
// from the default provider to an explicit one, would delete and recreate
// every box of the fleet under its listeners. None of the configuration
// names a resource: a token or a lab path changes how boxes are reached,
// not which boxes exist.
func configChangesInPlace(diff func(context.Context, p.DiffRequest) (p.DiffResponse, error)) func(context.Context, p.DiffRequest) (p.DiffResponse, error) {
	return func(ctx context.Context, req p.DiffRequest) (p.DiffResponse, error) {
		r, err := diff(ctx, req)
		if err != nil {
			return r, err
		}
		r.DeleteBeforeReplace = false
		for k, d := range r.DetailedDiff {
			switch d.Kind {
			case p.AddReplace:
				d.Kind = p.Add
			case p.DeleteReplace:
				d.Kind = p.Delete
			case p.UpdateReplace:
				d.Kind = p.Update
			}
			r.DetailedDiff[k] = d
		}
		return r, nil
	}
}

// Serve runs the provider as a Pulumi plugin on stdin/stdout's gRPC
// handshake, until the engine stops it.
func Serve(ctx context.Context) error {
	prov, err := New()
	if err != nil {
		return fmt.Errorf("provider: %w", err)
	}
	return p.RunProvider(ctx, Name, Version, prov)
}

// Main is what the fleet binary runs when it is started as PluginName.
func Main(ctx context.Context) int {
	if err := Serve(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", PluginName, err)
		return 1
	}
	return 0
}

// IsPlugin reports whether argv0 names the provider plugin.
func IsPlugin(argv0 string) bool { return filepath.Base(argv0) == PluginName }

// labs caches one *lab.Lab per configuration: a Lab holds a lock and the
// admin key, so the resources of one run share it.
var labs sync.Map // labConfig -> *lab.Lab

type labConfig struct{ dir, images, bridge, subnet string }

// openLab returns the lab the configuration names.
func openLab(c Config) (*lab.Lab, error) {
	key := labConfig{c.LabDir, c.LabImages, c.LabBridge, c.LabSubnet}
	if l, ok := labs.Load(key); ok {
		return l.(*lab.Lab), nil
	}
	cfg := lab.Config{Dir: c.LabDir, ImageDir: c.LabImages, Bridge: c.LabBridge}
	if c.LabSubnet != "" {
		pfx, err := netip.ParsePrefix(c.LabSubnet)
		if err != nil {
			return nil, fmt.Errorf("config labSubnet: want a CIDR, got %q", c.LabSubnet)
		}
		cfg.Subnet = pfx
	}
	l, err := lab.New(cfg)
	if err != nil {
		return nil, err
	}
	actual, _ := labs.LoadOrStore(key, l)
	return actual.(*lab.Lab), nil
}

// config is the provider configuration, or the zero Config when none was
// given (tests calling resource methods directly).
func config(ctx context.Context) (c Config) {
	defer func() {
		if recover() != nil {
			c = Config{}
		}
	}()
	return infer.GetConfig[Config](ctx)
}
