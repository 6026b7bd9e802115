package provider

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	p "github.com/pulumi/pulumi-go-provider"
	"github.com/pulumi/pulumi-go-provider/infer"

	"github.com/relayfleet/relayfleet/infra/backend"
)

// Firewall is the Firewall resource's controller: a cloud firewall that
// lets in only the given rules. Lab and static boxes have none.
type Firewall struct{}

// FirewallRule is one inbound rule.
type FirewallRule struct {
	Protocol string   `pulumi:"protocol"`
	Ports    string   `pulumi:"ports"`
	Sources  []string `pulumi:"sources"`
	What     string   `pulumi:"what,optional"`
}

// FirewallArgs are a Firewall's inputs, and the program's. Every change
// updates the firewall in place (EnsureFirewall): infer's own Diff, which
// Firewall keeps, replaces only on replaceOnChanges (schema.go).
type FirewallArgs struct {
	Backend string            `pulumi:"backend" diff:"inPlace"`
	Name    string            `pulumi:"name" diff:"inPlace"`
	Labels  map[string]string `pulumi:"labels,optional" diff:"inPlace"`
	Rules   []FirewallRule    `pulumi:"rules" diff:"inPlace"`
}

// FirewallState is a Firewall's outputs.
type FirewallState struct {
	FirewallArgs
	BackendID string `pulumi:"backendId"`
}

// Annotate describes the resource.
func (f *Firewall) Annotate(a infer.Annotator) {
	a.SetToken("index", "Firewall")
	a.Describe(&f, "A cloud firewall: only the relay ports, and SSH from the admin ranges, are let in.")
}

// validate refuses rules that open SSH to the whole internet.
func (a FirewallArgs) validate() []p.CheckFailure {
	var fs []p.CheckFailure
	if a.Backend != BackendHcloud && a.Backend != BackendDigitalOcean {
		fs = append(fs, p.CheckFailure{Property: "backend", Reason: fmt.Sprintf("firewalls exist on hcloud and digitalocean, not %q", a.Backend)})
	}
	for i, r := range a.Rules {
		for _, s := range r.Sources {
			pfx, err := netip.ParsePrefix(s)
			if err != nil {
				fs = append(fs, p.CheckFailure{Property: fmt.Sprintf("rules[%d].sources", i), Reason: fmt.Sprintf("want a CIDR, got %q", s)})
				continue
			}
			if r.Ports == "22" && pfx.Bits() == 0 {
				fs = append(fs, p.CheckFailure{Property: fmt.Sprintf("rules[%d].sources", i), Reason: "SSH open to the whole internet: name the admin ranges"})
			}
		}
	}
	return fs
}

// Check validates the inputs.
func (*Firewall) Check(ctx context.Context, req infer.CheckRequest) (infer.CheckResponse[FirewallArgs], error) {
	args, fails, err := infer.DefaultCheck[FirewallArgs](ctx, req.NewInputs)
	if err != nil || len(fails) > 0 {
		return infer.CheckResponse[FirewallArgs]{Inputs: args, Failures: fails}, err
	}
	return infer.CheckResponse[FirewallArgs]{Inputs: args, Failures: args.validate()}, nil
}

// Create makes the firewall at the cloud and applies it to the servers
// carrying its labels.
func (*Firewall) Create(ctx context.Context, req infer.CreateRequest[FirewallArgs]) (infer.CreateResponse[FirewallState], error) {
	a := req.Inputs
	ports, admin, err := firewallParams(a.Rules)
	if err != nil {
		return infer.CreateResponse[FirewallState]{}, fmt.Errorf("firewall %s: %w", a.Name, err)
	}
	if req.DryRun {
		return infer.CreateResponse[FirewallState]{ID: a.Name, Output: FirewallState{FirewallArgs: a}}, nil
	}
	api, err := newCloud(a.Backend, config(ctx))
	if err != nil {
		return infer.CreateResponse[FirewallState]{}, fmt.Errorf("firewall %s: %w", a.Name, err)
	}
	id, err := api.EnsureFirewall(ctx, a.Name, a.Labels, ports, admin)
	if err != nil {
		return infer.CreateResponse[FirewallState]{}, err
	}
	return infer.CreateResponse[FirewallState]{ID: id, Output: FirewallState{FirewallArgs: a, BackendID: id}}, nil
}

// Update makes the firewall match its inputs again (EnsureFirewall changes
// only what differs).
func (*Firewall) Update(ctx context.Context, req infer.UpdateRequest[FirewallArgs, FirewallState]) (infer.UpdateResponse[FirewallState], error) {
	a := req.Inputs
	ports, admin, err := firewallParams(a.Rules)
	if err != nil {
		return infer.UpdateResponse[FirewallState]{}, fmt.Errorf("firewall %s: %w", a.Name, err)
	}
	if req.DryRun {
		return infer.UpdateResponse[FirewallState]{Output: FirewallState{FirewallArgs: a, BackendID: req.State.BackendID}}, nil
	}
	api, err := newCloud(a.Backend, config(ctx))
	if err != nil {
		return infer.UpdateResponse[FirewallState]{}, fmt.Errorf("firewall %s: %w", a.Name, err)
	}
	id, err := api.EnsureFirewall(ctx, a.Name, a.Labels, ports, admin)
	if err != nil {
		return infer.UpdateResponse[FirewallState]{}, err
	}
	return infer.UpdateResponse[FirewallState]{Output: FirewallState{FirewallArgs: a, BackendID: id}}, nil
}

// Delete removes the firewall; one that is gone is not an error.
func (*Firewall) Delete(ctx context.Context, req infer.DeleteRequest[FirewallState]) (infer.DeleteResponse, error) {
	if req.State.BackendID == "" {
		return infer.DeleteResponse{}, nil
	}
	api, err := newCloud(req.State.Backend, config(ctx))
	if err != nil {
		return infer.DeleteResponse{}, fmt.Errorf("firewall %s: %w", req.State.Name, err)
	}
	if err := api.DeleteFirewall(ctx, req.State.BackendID); err != nil && !errors.Is(err, backend.ErrNotFound) {
		return infer.DeleteResponse{}, err
	}
	return infer.DeleteResponse{}, nil
}
