// Package outputstack keeps JSON values in a Pulumi backend as the
// outputs of stacks that run no program (Stack): the event records and
// the fleets' release histories live there, beside the fleets' stacks.
package outputstack

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"

	"github.com/relayfleet/relayfleet/infra/lease"
)

// LastLines keeps a Pulumi CLI error short: its last three non-empty
// lines say why.
func LastLines(s string) string {
	var keep []string
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			keep = append(keep, l)
		}
	}
	if len(keep) > 3 {
		keep = keep[len(keep)-3:]
	}
	return strings.Join(keep, "; ")
}

// Stack keeps JSON values as the outputs of a stack that runs no
// program: a Pulumi stack in the backend whose one resource is its root
// stack resource. Load reads them (pulumi stack export), Save writes them
// whole (pulumi stack import, under the backend's own stack lock), so any
// machine pointed at the backend (same URL and passphrase) reads the same
// values. The event records and the fleet's release history live in such
// stacks; the values hold no secret.
type Stack struct {
	WS      auto.Workspace
	Project string
	Stack   string

	loaded, exists bool
	header         map[string]json.RawMessage // the deployment, less its resources
	outputs        map[string]json.RawMessage
}

// RootStackType is the type of a stack's root resource.
const RootStackType = "pulumi:pulumi:Stack"

func (s *Stack) name() string { return s.Project + "/" + s.Stack }

// IsNoStack says a CLI error is about a stack that does not exist.
func IsNoStack(err error) bool {
	return err != nil && strings.Contains(err.Error(), "no stack named")
}

// Load reads the stack's outputs; a stack that does not exist has none
// (exists false).
func (s *Stack) Load(ctx context.Context) (outputs map[string]json.RawMessage, exists bool, err error) {
	dep, err := s.WS.ExportStack(ctx, s.Stack)
	if IsNoStack(err) {
		s.loaded, s.exists, s.header, s.outputs = true, false, nil, map[string]json.RawMessage{}
		return s.outputs, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("stack %s: %s", s.name(), LastLines(err.Error()))
	}
	header, outputs, err := SplitDeployment(dep)
	if err != nil {
		return nil, false, fmt.Errorf("stack %s: %w", s.name(), err)
	}
	s.loaded, s.exists, s.header, s.outputs = true, true, header, outputs
	return outputs, true, nil
}

// SplitDeployment splits an exported deployment into its header (what an
// import keeps) and its root stack resource's outputs.
func SplitDeployment(dep apitype.UntypedDeployment) (header, outputs map[string]json.RawMessage, err error) {
	header, outputs = map[string]json.RawMessage{}, map[string]json.RawMessage{}
	if len(dep.Deployment) == 0 {
		return header, outputs, nil
	}
	if err := json.Unmarshal(dep.Deployment, &header); err != nil {
		return nil, nil, fmt.Errorf("deployment: %w", err)
	}
	var res []struct {
		Type    string                     `json:"type"`
		Outputs map[string]json.RawMessage `json:"outputs"`
	}
	if raw, ok := header["resources"]; ok {
		if err := json.Unmarshal(raw, &res); err != nil {
			return nil, nil, fmt.Errorf("deployment resources: %w", err)
		}
	}
	delete(header, "resources")
	delete(header, "pending_operations")
	for _, r := range res {
		if r.Type == RootStackType {
			for k, v := range r.Outputs {
				outputs[k] = v
			}
		}
	}
	return header, outputs, nil
}

// Save writes outputs as the stack's outputs, creating the stack when it
// does not exist. A stack lock left by a save killed mid-way is cleared
// when unlocked says no other writer can hold it (the caller's own
// lease); otherwise the error stands.
func (s *Stack) Save(ctx context.Context, outputs map[string]any, unlocked bool) error {
	if !s.loaded {
		if _, _, err := s.Load(ctx); err != nil {
			return err
		}
	}
	if !s.exists {
		if err := s.WS.CreateStack(ctx, s.Stack); err != nil && !strings.Contains(err.Error(), "already exists") {
			return fmt.Errorf("stack %s: %s", s.name(), LastLines(err.Error()))
		}
		dep, err := s.WS.ExportStack(ctx, s.Stack)
		if err != nil {
			return fmt.Errorf("stack %s: %s", s.name(), LastLines(err.Error()))
		}
		if s.header, _, err = SplitDeployment(dep); err != nil {
			return err
		}
		s.exists = true
	}
	dep, err := s.deployment(outputs)
	if err != nil {
		return err
	}
	err = s.WS.ImportStack(ctx, s.Stack, dep)
	if err != nil && unlocked && strings.Contains(err.Error(), "currently locked") {
		// Only a dead run's lock: never pulumi cancel, which deletes a
		// live run's lock too.
		if _, cerr := lease.ClearDeadStackLocks(ctx, s.WS.GetEnvVars()["PULUMI_BACKEND_URL"], s.Project, s.Stack, lease.DefaultTTL); cerr != nil {
			return fmt.Errorf("stack %s: %w", s.name(), cerr)
		}
		err = s.WS.ImportStack(ctx, s.Stack, dep)
	}
	if err != nil {
		return fmt.Errorf("stack %s: %s", s.name(), LastLines(err.Error()))
	}
	return nil
}

// deployment is the stack's header and one root stack resource with
// outputs.
func (s *Stack) deployment(outputs map[string]any) (apitype.UntypedDeployment, error) {
	root := map[string]any{
		"urn":     fmt.Sprintf("urn:pulumi:%s::%s::%s::%s-%s", s.Stack, s.Project, RootStackType, s.Project, s.Stack),
		"custom":  false,
		"type":    RootStackType,
		"outputs": outputs,
	}
	d := map[string]any{}
	for k, v := range s.header {
		d[k] = v
	}
	d["resources"] = []any{root}
	data, err := json.Marshal(d)
	if err != nil {
		return apitype.UntypedDeployment{}, err
	}
	return apitype.UntypedDeployment{Version: 3, Deployment: data}, nil
}
