package program

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"

	"github.com/relayfleet/relayfleet/infra/provider"
)

// ErrNoStack is returned when a stack to read does not exist in the
// backend.
var ErrNoStack = errors.New("no such stack")

// StackOutputs is one stack's outputs as the backend holds them.
type StackOutputs struct {
	Stack   string
	Outputs map[string]any
}

// Hosts reads the stack's "hosts" output, as HostsFromOutputs does (none:
// nil).
func (o StackOutputs) Hosts() ([]HostEntry, error) {
	return HostsFromOutputs(auto.OutputMap{"hosts": {Value: o.Outputs["hosts"]}})
}

// ReadOutputs reads the outputs of the stack and of every other stack of
// the project in its backend whose name also accepts (nil: none), read
// only: no stack is created, no program runs, no secret is decrypted
// (outputs marked secret read as "[secret]"). The stack comes first, the
// others in name order. A stack that does not exist is ErrNoStack.
func (s *Stack) ReadOutputs(ctx context.Context, also func(name string) bool) ([]StackOutputs, error) {
	if s.Fleet == nil {
		return nil, errors.New("stack: no fleet")
	}
	if s.Name == "" {
		s.Name = s.Fleet.Name
	}
	if s.StateDir == "" {
		d, err := DefaultStateDir()
		if err != nil {
			return nil, err
		}
		s.StateDir = d
	}
	// A state dir that holds no file backend holds no stack: it is not
	// made here (nor its passphrase).
	configured, err := s.Configured()
	if err != nil {
		return nil, err
	}
	if configured == "" {
		if _, err := os.Stat(filepath.Join(s.StateDir, "backend")); errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("stack %s: %w (state dir %s has no backend)", s.Name, ErrNoStack, s.StateDir)
		}
	}
	ro := s.readOnly()
	st, err := ro.openStack(ctx, false)
	if err != nil {
		if auto.IsSelectStack404Error(err) || strings.Contains(err.Error(), "no stack named") {
			return nil, fmt.Errorf("stack %s: %w", s.Name, ErrNoStack)
		}
		return nil, err
	}
	ws := st.Workspace()
	names := []string{s.Name}
	if also != nil {
		list, err := ws.ListStacks(ctx)
		if err != nil {
			return nil, fmt.Errorf("list stacks: %s", lastLines(err.Error()))
		}
		var more []string
		for _, l := range list {
			if l.Name != s.Name && also(l.Name) {
				more = append(more, l.Name)
			}
		}
		sort.Strings(more)
		names = append(names, more...)
	}
	out := make([]StackOutputs, len(names))
	errs := make([]error, len(names))
	sem := make(chan struct{}, 4)
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			o, err := stackOutputs(ctx, ws, name)
			out[i], errs[i] = StackOutputs{Stack: name, Outputs: o}, err
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

// readOnly is the stack without the configuration and secrets that
// opening it would write.
func (s *Stack) readOnly() *Stack {
	ro := *s
	ro.Config, ro.Secrets = nil, nil
	return &ro
}

// stackOutputs runs pulumi stack output --json without --show-secrets.
func stackOutputs(ctx context.Context, ws auto.Workspace, name string) (map[string]any, error) {
	var env []string
	if h := ws.PulumiHome(); h != "" {
		env = append(env, "PULUMI_HOME="+h)
	}
	for k, v := range ws.GetEnvVars() {
		env = append(env, k+"="+v)
	}
	stdout, stderr, _, err := ws.PulumiCommand().Run(ctx, ws.WorkDir(), nil, nil, nil, env,
		"stack", "output", "--json", "--stack", name)
	if err != nil {
		return nil, fmt.Errorf("stack %s: outputs: %s", name, lastLines(err.Error()+"\n"+stderr))
	}
	out := map[string]any{}
	if err := json.Unmarshal([]byte(stdout), &out); err != nil {
		return nil, fmt.Errorf("stack %s: outputs: %w", name, err)
	}
	return out, nil
}

// ReadConfig returns the stack's plain provider configuration value for
// key (relayfleet:KEY, such as labDir), "" when it has none. Secrets are
// not read.
func (s *Stack) ReadConfig(ctx context.Context, key string) (string, error) {
	st, err := s.readOnly().openStack(ctx, false)
	if err != nil {
		return "", err
	}
	v, err := st.GetConfig(ctx, provider.Name+":"+key)
	if err != nil {
		if strings.Contains(err.Error(), "not found") {
			return "", nil
		}
		return "", fmt.Errorf("stack %s config %s: %s", s.Name, key, lastLines(err.Error()))
	}
	if v.Secret {
		return "", fmt.Errorf("stack %s config %s: a secret", s.Name, key)
	}
	return v.Value, nil
}
