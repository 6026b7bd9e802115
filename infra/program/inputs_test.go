package program

import (
	"reflect"
	"strings"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/relayfleet/relayfleet/infra/provider"
)

// pulumiFields maps the pulumi names of t's fields, embedded structs'
// included, to their types.
func pulumiFields(t reflect.Type) map[string]reflect.Type {
	m := map[string]reflect.Type{}
	for _, f := range reflect.VisibleFields(t) {
		name, _, _ := strings.Cut(f.Tag.Get("pulumi"), ",")
		if f.IsExported() && name != "" && !f.Anonymous {
			m[name] = f.Type
		}
	}
	return m
}

// TestOutputsAreTheProviders: each output the program reads off a
// registered resource is one of the provider's state fields, of its type,
// so a renamed or retyped output fails here rather than read as empty.
func TestOutputsAreTheProviders(t *testing.T) {
	for _, c := range []struct{ program, state reflect.Type }{
		{reflect.TypeFor[Box](), reflect.TypeFor[provider.BoxState]()},
		{reflect.TypeFor[Host](), reflect.TypeFor[provider.HostState]()},
		{reflect.TypeFor[Firewall](), reflect.TypeFor[provider.FirewallState]()},
	} {
		state := pulumiFields(c.state)
		for name, typ := range pulumiFields(c.program) {
			out, ok := reflect.Zero(typ).Interface().(pulumi.Output)
			if !ok {
				t.Errorf("%s.%s: %v is not an output", c.program.Name(), name, typ)
				continue
			}
			want, ok := state[name]
			if !ok {
				t.Errorf("%s: output %q is none of %s's fields", c.program.Name(), name, c.state.Name())
				continue
			}
			if out.ElementType() != want {
				t.Errorf("%s.%s: %v, the provider's is %v", c.program.Name(), name, out.ElementType(), want)
			}
		}
	}
}

// TestArgsInput: fields go under their pulumi names, an empty optional
// scalar stays out, an empty list goes, and outputs given for fields take
// their place; an output of the wrong type, or for no field, is refused.
func TestArgsInput(t *testing.T) {
	a := provider.HostArgs{Backend: "lab", Release: "r", Upstream: nil, PublicListen: []string{"live/"}}
	cores := pulumi.Int(2).ToIntOutput()
	in, err := argsInput(&a, map[any]pulumi.Input{&a.Cores: cores})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"backend", "release", "upstream", "publicListen", "cores", "box", "sshAddress", "relayBinary"} {
		if _, ok := in[k]; !ok {
			t.Errorf("%s missing from %v", k, in)
		}
	}
	for _, k := range []string{"user", "processes", "basePort"} {
		if v, ok := in[k]; ok {
			t.Errorf("%s = %v sent, an empty optional input", k, v)
		}
	}
	if in["cores"] != cores {
		t.Errorf("cores %v, want the output given", in["cores"])
	}
	if _, err := argsInput(&a, map[any]pulumi.Input{&a.Cores: pulumi.String("2")}); err == nil {
		t.Error("a string output for an int field was taken")
	}
	var other int
	if _, err := argsInput(&a, map[any]pulumi.Input{&other: pulumi.Int(1)}); err == nil {
		t.Error("an output for no field of the args was taken")
	}
	fw := provider.FirewallArgs{Rules: []provider.FirewallRule{{Protocol: "udp", Ports: "4443", Sources: Anywhere}}}
	in, err = argsInput(&fw, nil)
	if err != nil {
		t.Fatal(err)
	}
	rule := in["rules"].(pulumi.Array)[0].(pulumi.Map)
	if rule["protocol"] != pulumi.String("udp") || len(rule["sources"].(pulumi.Array)) != 2 {
		t.Errorf("rule %v", rule)
	}
	if _, ok := rule["what"]; ok {
		t.Errorf("rule %v: the empty optional what is sent", rule)
	}
}
