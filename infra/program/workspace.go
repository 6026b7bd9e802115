package program

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/common/tokens"
	"github.com/pulumi/pulumi/sdk/v3/go/common/workspace"
)

// ProjectWorkspace opens a Pulumi workspace for another project in the
// stack's backend: the same backend URL, passphrase, Pulumi CLI and
// PULUMI_HOME as the stack's, but no program and no provider plugin. The
// event reconciler keeps its records and its lease there, beside the
// fleet's stacks, so that any machine pointed at the backend finds them.
// The passphrase reaches the CLI as Stack's does (a file, or the
// operator's environment); nothing goes on a command line.
func (s *Stack) ProjectWorkspace(ctx context.Context, project string) (auto.Workspace, error) {
	if project == "" || project == Project {
		return nil, fmt.Errorf("workspace: want a project other than %s", Project)
	}
	if _, err := s.Backend(); err != nil {
		return nil, err
	}
	work := filepath.Join(s.StateDir, "work-"+project)
	if s.WorkDir != "" {
		work = s.WorkDir + "-" + project
	}
	return s.WorkspaceIn(ctx, project, work)
}

// WorkspaceIn is ProjectWorkspace for any project, the fleet program's
// too (its stacks exported and imported, no program run), working in
// work: fleet backup and restore work in a directory of their own, so
// that no stack configuration they make is left where the fleet's
// commands look for it.
func (s *Stack) WorkspaceIn(ctx context.Context, project, work string) (auto.Workspace, error) {
	backend, err := s.Backend()
	if err != nil {
		return nil, err
	}
	_, passFile, err := s.secretsPassphrase(backend)
	if err != nil {
		return nil, err
	}
	cli, err := FindPulumi(s.Pulumi)
	if err != nil {
		return nil, err
	}
	cliRoot := filepath.Join(s.StateDir, "cli")
	if err := link(filepath.Join(cliRoot, "bin"), "pulumi", cli); err != nil {
		return nil, fmt.Errorf("pulumi cli: %w", err)
	}
	cmd, err := auto.NewPulumiCommand(&auto.PulumiCommandOptions{Root: cliRoot})
	if err != nil {
		return nil, fmt.Errorf("pulumi cli %s: %w", cli, err)
	}
	home := filepath.Join(s.StateDir, "pulumi-home")
	for _, d := range []string{work, home} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	env := map[string]string{
		BackendEnv:                 backend,
		"PULUMI_SKIP_UPDATE_CHECK": "true",
		"PULUMI_HOME":              home,
	}
	if passFile != "" {
		env[PassphraseFileEnv] = passFile
		os.Unsetenv(PassphraseEnv)
	}
	proj := workspace.Project{
		Name:    tokens.PackageName(project),
		Runtime: workspace.NewProjectRuntimeInfo("go", nil),
		Backend: &workspace.ProjectBackend{URL: backend},
	}
	ws, err := auto.NewLocalWorkspace(ctx, auto.Project(proj), auto.Pulumi(cmd), auto.WorkDir(work), auto.PulumiHome(home),
		auto.SecretsProvider("passphrase"), auto.EnvVars(env))
	if err != nil {
		return nil, fmt.Errorf("workspace %s: %s", project, lastLines(err.Error()))
	}
	return ws, nil
}

// refreshConfig restores a stack's configuration from its last update in
// the backend when this state dir has none (a new machine, or a deleted
// state dir): the cloud tokens and the relay auth keys kept there as
// secrets, and the stack's encryption salt. A stack never updated has no
// configuration to restore.
func refreshConfig(ctx context.Context, st auto.Stack, work, name string) error {
	if _, err := os.Stat(filepath.Join(work, "Pulumi."+name+".yaml")); !errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if _, err := st.RefreshConfig(ctx); err != nil {
		msg := err.Error()
		if strings.Contains(msg, "no previous deployment") {
			return nil
		}
		return fmt.Errorf("stack %s: config from the backend: %s", name, lastLines(msg))
	}
	return nil
}

// ReadHostsOutput reads the stack's "hosts" output without running the
// program; ok is false when the stack does not exist. The stack's
// configuration is left as it is.
func (s *Stack) ReadHostsOutput(ctx context.Context) (hosts []HostEntry, ok bool, err error) {
	c := *s
	c.Config, c.Secrets = nil, nil
	st, err := c.openStack(ctx, false)
	if err != nil {
		if auto.IsSelectStack404Error(err) || strings.Contains(err.Error(), "no stack named") {
			return nil, false, nil
		}
		return nil, false, err
	}
	out, err := st.Outputs(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("stack %s outputs: %s", c.Name, lastLines(err.Error()))
	}
	hosts, err = HostsFromOutputs(out)
	return hosts, err == nil, err
}

// PrivateWork is a copy of s whose workspaces (WorkDir, and each
// project's beside it) are a directory of its own in the state dir, for a
// command that runs beside others on it; done removes them.
func (s *Stack) PrivateWork() (c *Stack, done func(), err error) {
	dir := s.StateDir
	if dir == "" {
		if dir, err = DefaultStateDir(); err != nil {
			return nil, nil, err
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("state dir: %w", err)
	}
	work, err := os.MkdirTemp(dir, "work-private-")
	if err != nil {
		return nil, nil, fmt.Errorf("state dir: %w", err)
	}
	cp := *s
	cp.StateDir, cp.WorkDir = dir, work
	return &cp, func() {
		matches, _ := filepath.Glob(work + "-*")
		for _, m := range append(matches, work) {
			os.RemoveAll(m)
		}
	}, nil
}
