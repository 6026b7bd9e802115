package provider

import (
	"testing"

	p "github.com/pulumi/pulumi-go-provider"
	"github.com/pulumi/pulumi/sdk/v3/go/property"
)

// A changed cloud token (or lab setting) updates the provider in place:
// infer alone answers "replace", and the engine would then replace every
// box the provider manages.
func TestConfigChangeDoesNotReplace(t *testing.T) {
	s := newServer(t)
	cfg := func(tok, dir string) property.Map {
		return property.NewMap(map[string]property.Value{
			"hcloudToken": property.New(tok).WithSecret(true),
			"labDir":      property.New(dir),
		})
	}
	for _, c := range []struct {
		name     string
		old, new property.Map
		changes  bool
	}{
		{"token rotated", cfg("old-token-0123456789", "/var/lib/lab"), cfg("new-token-0123456789", "/var/lib/lab"), true},
		{"lab dir moved", cfg("t-0123456789", "/a"), cfg("t-0123456789", "/b"), true},
		{"token added", property.NewMap(map[string]property.Value{"labDir": property.New("/a")}), cfg("t-0123456789", "/a"), true},
		{"nothing", cfg("t-0123456789", "/a"), cfg("t-0123456789", "/a"), false},
	} {
		r, err := s.DiffConfig(p.DiffRequest{
			Urn:   "urn:pulumi:lab::relayfleet-infra::pulumi:providers:relayfleet::relayfleet",
			State: c.old, OldInputs: c.old, Inputs: c.new,
		})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if r.HasChanges != c.changes {
			t.Errorf("%s: HasChanges = %v, want %v (%v)", c.name, r.HasChanges, c.changes, r.DetailedDiff)
		}
		if r.DeleteBeforeReplace {
			t.Errorf("%s: delete before replace", c.name)
		}
		for k, d := range r.DetailedDiff {
			switch d.Kind {
			case p.AddReplace, p.DeleteReplace, p.UpdateReplace:
				t.Errorf("%s: %s is %s: the engine would replace every resource", c.name, k, d.Kind)
			}
		}
	}
}
