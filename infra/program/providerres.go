package program

import (
	"reflect"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/relayfleet/relayfleet/infra/provider"
)

// SecretNamespace is where the stack keeps the provider's secret
// configuration (the cloud tokens): the project's namespace, not the
// provider's. The Pulumi engine hands a provider plugin its own namespace's
// configuration, decrypted, in the plugin's environment (PULUMI_CONFIG),
// where it shows in /proc/PID/environ; so the program reads the secrets and
// gives them to an explicit provider as secret inputs, which reach the
// plugin over its gRPC Configure call instead.
const SecretNamespace = Project

// providerConfigKey is one key of the provider's configuration.
type providerConfigKey struct {
	name   string
	secret bool
}

// providerConfigKeys lists provider.Config's keys, read off its tags so
// that a new configuration field cannot be forgotten here.
func providerConfigKeys() []providerConfigKey {
	var keys []providerConfigKey
	t := reflect.TypeFor[provider.Config]()
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("pulumi"), ",")
		if name == "" {
			continue
		}
		keys = append(keys, providerConfigKey{name: name, secret: f.Tag.Get("provider") == "secret"})
	}
	return keys
}

// registerProvider registers the explicit relayfleet provider every
// resource of the program uses, configured from the stack: plain keys
// from the provider's namespace (relayfleet:KEY), secret ones from
// SecretNamespace (falling back to relayfleet:KEY, where stacks made
// before kept them), as secrets.
func registerProvider(ctx *pulumi.Context) (pulumi.ProviderResource, error) {
	in := pulumi.Map{}
	for _, k := range providerConfigKeys() {
		if k.secret {
			v, ok := ctx.GetConfig(SecretNamespace + ":" + k.name)
			if !ok {
				v, ok = ctx.GetConfig(provider.Name + ":" + k.name)
			}
			if ok && v != "" {
				in[k.name] = pulumi.ToSecret(pulumi.String(v))
			}
			continue
		}
		if v, ok := ctx.GetConfig(provider.Name + ":" + k.name); ok && v != "" {
			in[k.name] = pulumi.String(v)
		}
	}
	p := &pulumi.ProviderResourceState{}
	if err := ctx.RegisterResource("pulumi:providers:"+provider.Name, provider.Name, in, p); err != nil {
		return nil, err
	}
	return p, nil
}
