package program

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optdestroy"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optpreview"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optrefresh"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optup"
	"github.com/pulumi/pulumi/sdk/v3/go/common/workspace"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/relayfleet/relayfleet/infra/lease"
	"github.com/relayfleet/relayfleet/infra/provider"
	"github.com/relayfleet/relayfleet/internal/atomicfile"
	"github.com/relayfleet/relayfleet/internal/bucketurl"
	"github.com/relayfleet/relayfleet/internal/cli"
	"github.com/relayfleet/relayfleet/inventories"
	"github.com/relayfleet/relayfleet/relay/wire"
)

// Project is the Pulumi project name of the fleet program.
const Project = "relayfleet-infra"

// Environment variables the driver reads.
const (
	BackendEnv    = "PULUMI_BACKEND_URL"       // any Pulumi backend; default file:// under the state dir
	PassphraseEnv = "PULUMI_CONFIG_PASSPHRASE" // secrets passphrase; default a generated one in the state dir
	StateDirEnv   = "RELAYFLEET_STATE_DIR"     // default state directory
	PulumiEnv     = "RELAYFLEET_PULUMI"        // the Pulumi CLI; default the cached build, then $PATH
)

// PulumiVersion is the Pulumi CLI version relayfleet builds and expects.
const PulumiVersion = "v3.274.1"

// RelaysFile is the router's relay list that Up writes in the state dir.
const RelaysFile = "relays.json"

// Stack says where a fleet's stack lives and how to run it.
type Stack struct {
	Fleet     *inventories.Fleet
	Catalogue *inventories.Catalogue
	Program   Options
	// Name is the stack's name; default the fleet's name.
	Name string
	// StateDir holds the file backend, the passphrase, the plugin link and
	// the workspace; default DefaultStateDir().
	StateDir string
	// WorkDir is the Pulumi workspace (Pulumi.yaml, the stack's
	// configuration file), rewritten each time the stack is opened;
	// default STATEDIR/work. A command that runs beside others on the
	// same state dir for long (fleet relays --watch) gives one of its own
	// (PrivateWork): opening a stack in another's workspace while it runs
	// left it an empty Pulumi.yaml.
	WorkDir string
	// BackendURL is any Pulumi backend; default $PULUMI_BACKEND_URL, else
	// file://STATEDIR/backend.
	BackendURL string
	// Pulumi is the Pulumi CLI; default FindPulumi("").
	Pulumi string
	// Plugin is the executable that serves the relayfleet provider (the
	// fleet binary); it is linked as pulumi-resource-relayfleet.
	Plugin string
	// Config is the provider configuration (relayfleet:KEY).
	Config map[string]string
	// Progress receives the engine's progress lines; nil discards.
	Progress io.Writer
	// Refresh reads every resource's real state before the operation, so
	// that drift (a hand-edited unit or sysctl file) shows and is repaired.
	Refresh bool
	// Burst, when set, makes this an event's stack: its burst boxes only.
	Burst *Burst
	// Secrets are provider configuration kept encrypted in the stack
	// (SecretNamespace:KEY): the cloud tokens. They reach the Pulumi CLI
	// on its stdin and the provider as secret inputs, never a command
	// line or an environment.
	Secrets map[string]string
	// Env is more environment for the Pulumi CLI, which passes it on to
	// the provider plugin it starts (the event reconciler names its
	// request log there: backend.RequestLogEnv). Never a secret.
	Env map[string]string
	// Fence, when set, is checked before every write this stack makes to
	// the fleet's shared state (the release record, the relays file, the
	// fleet's keys): the fleet's lease (LockFleet) is still this
	// command's. Pulumi's own runs are held off by the lease itself.
	Fence func(ctx context.Context) error

	// existing are the names the state gives the stack's boxes and
	// firewalls (Options.Existing), read before each run.
	existing map[string]string
	// doomed are the boxes the last PreviewDoomed found an up would
	// delete or replace; previewed says it ran. Up replaces these boxes
	// one at a time (phases.go).
	doomed    []Doomed
	previewed bool
}

// Secret configuration keys: the cloud API tokens, and the fleet's relay
// auth key file (every relay verifies tokens with it; fleet token signs
// with its first key).
const (
	HcloudTokenKey       = "hcloudToken"
	DigitalOceanTokenKey = "digitaloceanToken"
	RelayAuthKeysKey     = "relayAuthKeys"
	// RelayTLSSeedKey is the fleet's relay TLS seed: each box's relay
	// TLS key derives from it (provision.BoxTLSKey).
	RelayTLSSeedKey = "relayTLSSeed"
)

// runFunc is the stack's inline program.
func (s *Stack) runFunc() pulumi.RunFunc {
	return func(ctx *pulumi.Context) error {
		o := s.Program
		if o.Existing == nil {
			o.Existing = s.existing
		}
		if s.Burst != nil {
			_, err := DeployBurst(ctx, s.Fleet, s.Catalogue, *s.Burst, o)
			return err
		}
		_, err := Deploy(ctx, s.Fleet, s.Catalogue, o)
		return err
	}
}

// readExisting reads the names the stack's state gives its boxes and
// firewalls, so that the program keeps the ones made before names carried
// their tier.
func (s *Stack) readExisting(ctx context.Context, st auto.Stack) error {
	dep, err := st.Export(ctx)
	if err != nil {
		return fmt.Errorf("stack %s: export: %s", s.Name, lastLines(err.Error()))
	}
	names, err := ExistingNames(dep.Deployment)
	if err != nil {
		return fmt.Errorf("stack %s: %w", s.Name, err)
	}
	s.existing = names
	return nil
}

// ExistingNames reads a stack's exported deployment (pulumi stack export)
// and returns each Box's and Firewall's name input by Pulumi resource
// name.
func ExistingNames(deployment json.RawMessage) (map[string]string, error) {
	names := map[string]string{}
	res, err := deployedResources(deployment)
	if err != nil {
		return nil, err
	}
	for _, r := range res {
		if r.Type != provider.BoxType && r.Type != provider.FirewallType {
			continue
		}
		var in struct {
			Name *string `json:"name"`
		}
		if json.Unmarshal(r.Inputs, &in) != nil || in.Name == nil || r.logical == "" {
			continue
		}
		names[r.logical] = *in.Name
	}
	return names, nil
}

// deployedResource is one resource of an exported deployment, its
// logical name (the URN's last part) beside it.
type deployedResource struct {
	URN     string          `json:"urn"`
	Type    string          `json:"type"`
	Delete  bool            `json:"delete"`
	Inputs  json.RawMessage `json:"inputs"`
	Outputs json.RawMessage `json:"outputs"`
	logical string
}

// deployedResources reads an exported deployment's resources (none when
// it is empty).
func deployedResources(deployment json.RawMessage) ([]deployedResource, error) {
	if len(deployment) == 0 {
		return nil, nil
	}
	var d struct {
		Resources []deployedResource `json:"resources"`
	}
	if err := json.Unmarshal(deployment, &d); err != nil {
		return nil, fmt.Errorf("deployment: %w", err)
	}
	for i := range d.Resources {
		if j := strings.LastIndex(d.Resources[i].URN, "::"); j >= 0 {
			d.Resources[i].logical = d.Resources[i].URN[j+2:]
		}
	}
	return d.Resources, nil
}

// Backend is the stack's Pulumi backend URL (Configured), else
// file://STATEDIR/backend (made). It fills StateDir with DefaultStateDir
// when empty, and makes it.
func (s *Stack) Backend() (string, error) {
	backend, err := s.Configured()
	if err != nil {
		return "", err
	}
	if s.StateDir == "" {
		d, err := DefaultStateDir()
		if err != nil {
			return "", err
		}
		s.StateDir = d
	}
	if err := os.MkdirAll(s.StateDir, 0o700); err != nil {
		return "", fmt.Errorf("state dir: %w", err)
	}
	if err := privateDir(s.StateDir); err != nil {
		return "", err
	}
	if backend == "" {
		dir := filepath.Join(s.StateDir, "backend")
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return "", fmt.Errorf("state dir: %w", err)
		}
		backend = "file://" + dir
	}
	return backend, nil
}

// Configured is the backend URL the operator named, "" for the state
// dir's file backend: the fleet file's state.backend, else BackendURL
// (--backend), else $PULUMI_BACKEND_URL. The fleet file's is every
// operator's and the timer's, so a flag or an environment that names
// another backend is an error, never silently preferred (one of the two
// would be a second fleet's state); naming the same one is fine.
func (s *Stack) Configured() (string, error) {
	env := os.Getenv(BackendEnv)
	if s.Fleet != nil && s.Fleet.State.Backend != "" {
		file := s.Fleet.State.Backend
		switch {
		case s.BackendURL != "" && s.BackendURL != file:
			return "", cli.Usagef("flag --backend %s differs from the fleet file's state.backend %s: drop the flag (the fleet file names the backend every operator and the timer use)", RedactURL(s.BackendURL), RedactURL(file))
		case s.BackendURL == "" && env != "" && env != file:
			return "", cli.Usagef("$%s %s differs from the fleet file's state.backend %s: unset it (the fleet file names the backend every operator and the timer use)", BackendEnv, RedactURL(env), RedactURL(file))
		}
		return file, nil
	}
	if s.BackendURL != "" {
		return s.BackendURL, nil
	}
	return env, nil
}

// Remote says whether the stack's backend is one other machines share
// (not the state dir's file backend, nor another file:// one).
func (s *Stack) Remote() (bool, error) {
	u, err := s.Configured()
	return inventories.IsRemoteBackend(u), err
}

// RedactURL is a backend URL as an error may show it: without its
// query (which may name an endpoint, a profile, or by mistake a key) or
// a user and password.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(a URL that does not parse)"
	}
	hidden := u.User != nil || u.RawQuery != "" || u.Fragment != ""
	u.User, u.RawQuery, u.Fragment = nil, "", ""
	if hidden {
		return u.String() + "?..."
	}
	return u.String()
}

// DefaultStateDir is $RELAYFLEET_STATE_DIR, else $XDG_STATE_HOME/relayfleet,
// else ~/.local/state/relayfleet.
func DefaultStateDir() (string, error) {
	if d := os.Getenv(StateDirEnv); d != "" {
		return filepath.Abs(d)
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "relayfleet"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("state dir: %w", err)
	}
	return filepath.Join(home, ".local", "state", "relayfleet"), nil
}

// CachedPulumi is where `make pulumi` puts the CLI:
// ~/.cache/relayfleet/pulumi-VERSION/bin/pulumi.
func CachedPulumi() string {
	dir, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return CachedPulumiIn(dir)
}

// CachedPulumiIn is where `make pulumi` puts the CLI for a user whose
// cache directory is cacheDir (~/.cache).
func CachedPulumiIn(cacheDir string) string {
	return filepath.Join(cacheDir, "relayfleet", "pulumi-"+PulumiVersion, "bin", "pulumi")
}

// ErrNoPulumi is returned when no Pulumi CLI can be found.
var ErrNoPulumi = errors.New("no Pulumi CLI: build it with make pulumi, or give its path")

// FindPulumi returns the Pulumi CLI to use: path when given, else
// $RELAYFLEET_PULUMI, else the cached build, else pulumi on $PATH.
func FindPulumi(path string) (string, error) {
	for _, p := range []string{path, os.Getenv(PulumiEnv), CachedPulumi()} {
		if p == "" {
			continue
		}
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return filepath.Abs(p)
		}
		if p == path || p == os.Getenv(PulumiEnv) {
			return "", fmt.Errorf("%w (%s is not an executable)", ErrNoPulumi, p)
		}
	}
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		p := filepath.Join(dir, "pulumi")
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", ErrNoPulumi
}

// PassphraseFileEnv names the file the Pulumi CLI reads the passphrase
// from: the generated passphrase reaches the CLI this way, never through
// its environment.
const PassphraseFileEnv = "PULUMI_CONFIG_PASSPHRASE_FILE"

// passphrase returns $PULUMI_CONFIG_PASSPHRASE, else the one in the file
// $PULUMI_CONFIG_PASSPHRASE_FILE names, else the passphrase kept in the
// state dir (mode 0600), generated on first use, with its file's path
// (empty for the environment's). It is never printed or logged.
func passphrase(stateDir string) (pass, file string, err error) {
	if pass, file, ok, err := givenPassphrase(); ok || err != nil {
		return pass, file, err
	}
	path := filepath.Join(stateDir, "passphrase")
	data, err := readPrivate(path)
	var open *openError
	if errors.As(err, &open) {
		return "", "", fmt.Errorf("passphrase file %w", err)
	}
	if err == nil {
		if p := strings.TrimSpace(string(data)); p != "" {
			return p, path, nil
		}
		return "", "", fmt.Errorf("passphrase file %s is empty", path)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", "", fmt.Errorf("passphrase: %w", err)
	}
	buf := make([]byte, 32)
	if _, err := rand.Read(buf); err != nil {
		return "", "", err
	}
	p := base64.RawURLEncoding.EncodeToString(buf)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", "", fmt.Errorf("passphrase: %w", err)
	}
	_, werr := f.WriteString(p + "\n")
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return "", "", fmt.Errorf("passphrase: %w", werr)
	}
	return p, path, nil
}

// givenPassphrase returns $PULUMI_CONFIG_PASSPHRASE, else the one in the
// file $PULUMI_CONFIG_PASSPHRASE_FILE names (with its path); ok is false
// when neither is set.
func givenPassphrase() (pass, file string, ok bool, err error) {
	if p := os.Getenv(PassphraseEnv); p != "" {
		return p, "", true, nil
	}
	// The operator's passphrase file (another machine's state dir starts
	// empty: the backend's passphrase comes from here or the environment).
	if f := os.Getenv(PassphraseFileEnv); f != "" {
		data, err := readPrivate(f)
		if err != nil {
			return "", "", false, fmt.Errorf("passphrase: $%s: %w", PassphraseFileEnv, err)
		}
		p := strings.TrimSpace(string(data))
		if p == "" {
			return "", "", false, fmt.Errorf("passphrase: $%s: %s is empty", PassphraseFileEnv, f)
		}
		return p, f, true, nil
	}
	return "", "", false, nil
}

// ErrNoSharedPassphrase is a remote backend's stack opened without a
// passphrase given: one generated into this state dir would lock the
// team's state to this disk.
var ErrNoSharedPassphrase = errors.New("no passphrase for a shared backend")

// secretsPassphrase is passphrase for the stack's backend: on a remote
// one (not file://) only the passphrase the operator gives, never one
// generated into the state dir (ErrNoSharedPassphrase, saying how a team
// shares it).
func (s *Stack) secretsPassphrase(backend string) (pass, file string, err error) {
	if !inventories.IsRemoteBackend(backend) {
		return passphrase(s.StateDir)
	}
	pass, file, ok, err := givenPassphrase()
	if ok || err != nil {
		return pass, file, err
	}
	hint := ""
	if old := filepath.Join(s.StateDir, "passphrase"); fileExists(old) {
		hint = fmt.Sprintf(" (stacks made with this state dir's generated passphrase: point $%s at %s)", PassphraseFileEnv, old)
	}
	return "", "", fmt.Errorf("%w %s: set $%s to a file (mode 0600) holding the team's passphrase, shared out of band (a password manager), or $%s; one is generated only for the state dir's own file backend%s",
		ErrNoSharedPassphrase, RedactURL(backend), PassphraseFileEnv, PassphraseEnv, hint)
}

func fileExists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// openError is a file or directory that others than its owner may
// read, write or enter: Fix is the chmod that closes it.
type openError struct {
	Path string
	Mode fs.FileMode
	What string // what it holds, or ""
	Fix  string
}

func (e *openError) Error() string {
	s := fmt.Sprintf("%s is mode %#o, open to others", e.Path, e.Mode.Perm())
	if e.What != "" {
		s += "; it holds " + e.What
	}
	return s + ": " + e.Fix
}

// privateDir refuses a state dir that anyone but its owner may list or
// enter: it holds the passphrase beside the state it decrypts (and, with
// the default backend, that state). One that holds neither yet (made by
// mkdir under the usual umask; what else is kept there, the caches and
// the relays file, is no secret) is made private instead: no secret has
// been open to others.
func privateDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	if fi.Mode().Perm()&0o077 == 0 {
		return nil
	}
	fresh := true
	for _, name := range []string{"passphrase", "backend"} {
		if _, err := os.Lstat(filepath.Join(dir, name)); !errors.Is(err, fs.ErrNotExist) {
			fresh = false
		}
	}
	if fresh && os.Chmod(dir, 0o700) == nil {
		return nil
	}
	return fmt.Errorf("state dir %w", &openError{Path: dir, Mode: fi.Mode(), What: "the stack's passphrase", Fix: "chmod 700 " + dir})
}

// readPrivate reads a passphrase file, refusing a regular file that
// anyone but its owner may read or write (*openError). Other kinds of
// file (a pipe, /dev/stdin) are read as they are.
func readPrivate(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.Mode().IsRegular() && fi.Mode().Perm()&0o077 != 0 {
		return nil, &openError{Path: path, Mode: fi.Mode(), Fix: "chmod 600 " + path}
	}
	return io.ReadAll(f)
}

// RelinkedPaths are the symlinks in stateDir that every run of the stack
// makes again, to the Pulumi CLI and to the provider plugin it runs with,
// before it uses them: what they point to when no run is going names
// nothing that will run.
func RelinkedPaths(stateDir string) []string {
	return []string{filepath.Join(stateDir, "cli", "bin", "pulumi"), filepath.Join(stateDir, "plugins", provider.PluginName)}
}

// link makes dir/name a symlink to target, replacing what was there.
func link(dir, name, target string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp := filepath.Join(dir, "."+name+".tmp")
	os.Remove(tmp)
	if err := os.Symlink(target, tmp); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, name))
}

// open prepares the state dir and returns the stack, upserted.
func (s *Stack) open(ctx context.Context) (auto.Stack, error) { return s.openStack(ctx, true) }

// openStack prepares the state dir and returns the stack; create false
// fails for a stack that does not exist.
func (s *Stack) openStack(ctx context.Context, create bool) (auto.Stack, error) {
	if s.Fleet == nil {
		return auto.Stack{}, errors.New("stack: no fleet")
	}
	if s.Name == "" {
		s.Name = s.Fleet.Name
	}
	backend, err := s.Backend()
	if err != nil {
		return auto.Stack{}, err
	}
	pass, passFile, err := s.secretsPassphrase(backend)
	if err != nil {
		return auto.Stack{}, err
	}
	cli, err := FindPulumi(s.Pulumi)
	if err != nil {
		return auto.Stack{}, err
	}
	// NewPulumiCommand wants ROOT/bin/pulumi.
	cliRoot := filepath.Join(s.StateDir, "cli")
	if err := link(filepath.Join(cliRoot, "bin"), "pulumi", cli); err != nil {
		return auto.Stack{}, fmt.Errorf("pulumi cli: %w", err)
	}
	cmd, err := auto.NewPulumiCommand(&auto.PulumiCommandOptions{Root: cliRoot})
	if err != nil {
		return auto.Stack{}, fmt.Errorf("pulumi cli %s: %w", cli, err)
	}
	plugin := s.Plugin
	if plugin == "" {
		if plugin, err = os.Executable(); err != nil {
			return auto.Stack{}, err
		}
	}
	pluginDir := filepath.Join(s.StateDir, "plugins")
	if err := link(pluginDir, provider.PluginName, plugin); err != nil {
		return auto.Stack{}, fmt.Errorf("provider plugin: %w", err)
	}
	work := s.WorkDir
	if work == "" {
		work = filepath.Join(s.StateDir, "work")
	}
	home := filepath.Join(s.StateDir, "pulumi-home")
	for _, d := range []string{work, home} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return auto.Stack{}, err
		}
	}
	proj := workspace.Project{
		Name:    Project,
		Runtime: workspace.NewProjectRuntimeInfo("go", nil),
		Backend: &workspace.ProjectBackend{URL: backend},
		Plugins: &workspace.Plugins{Providers: []workspace.PluginOptions{{Name: provider.Name, Path: pluginDir}}},
	}
	env := map[string]string{
		BackendEnv:                 backend,
		"PULUMI_SKIP_UPDATE_CHECK": "true",
		"PULUMI_HOME":              home,
		"PATH":                     pluginDir + string(os.PathListSeparator) + os.Getenv("PATH"),
	}
	for k, v := range s.Env {
		if _, set := env[k]; !set {
			env[k] = v
		}
	}
	for k, v := range bucketurl.CLIEnv(backend) {
		if _, set := env[k]; !set {
			env[k] = v
		}
	}
	// The passphrase reaches the CLI as a file, not in its environment,
	// unless the operator gave it in ours (then the CLI inherits it). The
	// CLI takes a set but empty PULUMI_CONFIG_PASSPHRASE as the passphrase
	// and inherits our environment: an empty one goes.
	if passFile != "" {
		env[PassphraseFileEnv] = passFile
		os.Unsetenv(PassphraseEnv)
	}
	opts := []auto.LocalWorkspaceOption{auto.Project(proj), auto.Pulumi(cmd), auto.WorkDir(work), auto.PulumiHome(home),
		auto.SecretsProvider("passphrase"), auto.EnvVars(env)}
	open := auto.UpsertStackInlineSource
	if !create {
		open = auto.SelectStackInlineSource
	}
	st, err := open(ctx, s.Name, Project, s.runFunc(), opts...)
	if err != nil {
		return auto.Stack{}, fmt.Errorf("stack %s: %s", s.Name, redact(err.Error(), pass))
	}
	if err := refreshConfig(ctx, st, work, s.Name); err != nil {
		return auto.Stack{}, errors.New(redact(err.Error(), pass))
	}
	cfg := auto.ConfigMap{}
	for k, v := range s.Config {
		cfg[provider.Name+":"+k] = auto.ConfigValue{Value: v}
	}
	if len(cfg) > 0 {
		if err := st.SetAllConfig(ctx, cfg); err != nil {
			return auto.Stack{}, fmt.Errorf("stack %s: config: %s", s.Name, redact(err.Error(), pass))
		}
	}
	keys := make([]string, 0, len(s.Secrets))
	for k := range s.Secrets {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if err := setSecretConfig(ctx, st, s.Name, k, s.Secrets[k]); err != nil {
			return auto.Stack{}, fmt.Errorf("stack %s: %s", s.Name, redact(redact(err.Error(), pass), s.Secrets[k]))
		}
	}
	return st, nil
}

// setSecretConfig keeps value encrypted in the stack's configuration under
// SecretNamespace:KEY. The value goes to the Pulumi CLI on its stdin: the
// Automation API's SetConfig and SetAllConfig put it on the CLI's command
// line, where every local user can read it in /proc/PID/cmdline.
func setSecretConfig(ctx context.Context, st auto.Stack, stack, key, value string) error {
	ws := st.Workspace()
	var env []string
	if h := ws.PulumiHome(); h != "" {
		env = append(env, "PULUMI_HOME="+h)
	}
	for k, v := range ws.GetEnvVars() {
		env = append(env, k+"="+v)
	}
	_, stderr, _, err := ws.PulumiCommand().Run(ctx, ws.WorkDir(), strings.NewReader(value), nil, nil, env,
		"config", "set", "--stack", stack, "--secret", SecretNamespace+":"+key)
	if err != nil {
		return fmt.Errorf("secret %s: %s", key, lastLines(err.Error()+"\n"+stderr))
	}
	// Stacks made before kept it in the provider's namespace, which the
	// engine hands the plugin in its environment: it goes.
	old := provider.Name + ":" + key
	if _, err := st.GetConfig(ctx, old); err == nil {
		if err := st.RemoveConfig(ctx, old); err != nil {
			return fmt.Errorf("secret %s: remove %s: %s", key, old, lastLines(err.Error()))
		}
	}
	return nil
}

// redact removes the passphrase from text that may end up in a log.
func redact(s, pass string) string {
	if pass == "" {
		return s
	}
	return strings.ReplaceAll(s, pass, "[passphrase]")
}

func (s *Stack) progress() io.Writer {
	if s.Progress == nil {
		return io.Discard
	}
	return s.Progress
}

// UpResult is what Up made.
type UpResult struct {
	Hosts []HostEntry
	// Changes counts resources by operation (create, update, delete, same).
	Changes map[string]int
	// RelaysFile is the router's relay list written for the hosts.
	RelaysFile string
}

// Up brings the fleet to the inventory and writes the router's relay
// list from the stack outputs.
func (s *Stack) Up(ctx context.Context) (*UpResult, error) {
	st, err := s.open(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.readExisting(ctx, st); err != nil {
		return nil, err
	}
	// Boxes to replace go one at a time first, the router told of each
	// new box before its old one goes (phases.go).
	if !s.previewed {
		if _, _, err := s.PreviewDoomed(ctx); err != nil {
			return nil, err
		}
	}
	replaced := map[string]int{}
	if err := s.replaceOneByOne(ctx, st, s.doomed, replaced); err != nil {
		return nil, err
	}
	s.previewed, s.doomed = false, nil
	opts := []optup.Option{optup.ProgressStreams(s.progress()), optup.ErrorProgressStreams(s.progress())}
	if s.Refresh {
		opts = append(opts, optup.Refresh())
	}
	if s.Burst != nil {
		// An event's boxes are independent: one refused (capacity, a
		// quota) must not stop the others, which serve as soon as they
		// converged.
		opts = append(opts, optup.ContinueOnError())
	}
	res, err := st.Up(ctx, opts...)
	if err != nil {
		err = fmt.Errorf("up: %s", lastLines(err.Error()))
		if s.Burst == nil {
			return nil, err
		}
		return nil, s.partial(ctx, st, err)
	}
	hosts, err := HostsFromOutputs(res.Outputs)
	if err != nil {
		return nil, err
	}
	if err := s.fence(ctx); err != nil {
		return nil, err
	}
	var regions []wire.Region
	if s.Burst == nil && s.Fleet != nil {
		regions = RouterRegions(s.Fleet)
	}
	path, err := SetStackHostsRegions(s.StateDir, s.Name, hosts, regions)
	if err != nil {
		return nil, err
	}
	out := &UpResult{Hosts: hosts, Changes: replaced, RelaysFile: path}
	if res.Summary.ResourceChanges != nil {
		for k, v := range *res.Summary.ResourceChanges {
			out.Changes[k] += v
		}
	}
	return out, nil
}

// PartialError is an event stack's Up that failed with some of its boxes
// made and converged: Hosts are those the state holds converged (each a
// Host over its Box), Boxes the Boxes it holds, made or not converged.
// The hosts may be routed; the rest is tried again by the next Up.
type PartialError struct {
	Hosts []HostEntry
	// Boxes is how many Boxes the state holds; Made lists their numbers
	// (the N of the resource GROUP-N) by their group label, sorted (an
	// event's first candidate's group is the event's name, a later
	// candidate's SpillGroup).
	Boxes int
	Made  map[string][]int
	Err   error
}

func (e *PartialError) Error() string { return e.Err.Error() }

func (e *PartialError) Unwrap() error { return e.Err }

// partial is the PartialError of an event stack's failed up (err): what
// its state holds now, read back from the backend. When that cannot be
// read, err is returned with why.
func (s *Stack) partial(ctx context.Context, st auto.Stack, err error) error {
	dep, xerr := st.Export(ctx)
	if xerr != nil {
		return fmt.Errorf("%w (and reading what it made: %s)", err, lastLines(xerr.Error()))
	}
	hosts, made, herr := HostsFromDeployment(dep.Deployment)
	if herr != nil {
		return fmt.Errorf("%w (and reading what it made: %v)", err, herr)
	}
	boxes := 0
	for _, n := range made {
		boxes += len(n)
	}
	return &PartialError{Hosts: hosts, Boxes: boxes, Made: made, Err: err}
}

// HostsFromDeployment reads a stack's exported deployment and returns the
// hosts it holds converged, as the "hosts" output would list them (by
// name), and the numbers of the Boxes it holds (resource GROUP-N) by their
// group label, sorted. Resources pending deletion are left out; a Host
// whose Box is not in the state is too.
func HostsFromDeployment(deployment json.RawMessage) ([]HostEntry, map[string][]int, error) {
	res, err := deployedResources(deployment)
	if err != nil {
		return nil, nil, err
	}
	type box struct {
		Name          string            `json:"name"`
		Backend       string            `json:"backend"`
		Addresses     []string          `json:"addresses"`
		SSHAddress    string            `json:"sshAddress"`
		HostPublicKey string            `json:"hostPublicKey"`
		Labels        map[string]string `json:"labels"`
	}
	type host struct {
		User  string `json:"user"`
		Ports []int  `json:"ports"`
		SPKI  string `json:"spki"`
	}
	boxes := map[string]box{}
	hosts := map[string]host{}
	for _, r := range res {
		if r.Delete || r.logical == "" || (r.Type != provider.BoxType && r.Type != provider.HostType) {
			continue
		}
		if r.Type == provider.BoxType {
			var b box
			if err := json.Unmarshal(r.Outputs, &b); err != nil {
				return nil, nil, fmt.Errorf("deployment: box %s: %w", r.logical, err)
			}
			boxes[r.logical] = b
			continue
		}
		var h host
		if err := json.Unmarshal(r.Outputs, &h); err != nil {
			return nil, nil, fmt.Errorf("deployment: host %s: %w", r.logical, err)
		}
		hosts[r.logical] = h
	}
	var out []HostEntry
	for logical, h := range hosts {
		b, ok := boxes[logical]
		if !ok || len(b.Addresses) == 0 || len(h.Ports) == 0 {
			continue
		}
		user := h.User
		if user == "" {
			user = "root"
		}
		out = append(out, HostEntry{
			Name: b.Name, Group: b.Labels["group"], Backend: b.Backend, Address: b.Addresses[0],
			SSHAddress: b.SSHAddress, HostKey: b.HostPublicKey, User: user, Ports: h.Ports, SPKI: h.SPKI,
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	made := map[string][]int{}
	for logical, b := range boxes {
		g := b.Labels["group"]
		n, err := strconv.Atoi(strings.TrimPrefix(logical, g+"-"))
		if err != nil || !strings.HasPrefix(logical, g+"-") {
			return nil, nil, fmt.Errorf("deployment: box %s: not named GROUP-N after its group label %q", logical, g)
		}
		made[g] = append(made[g], n)
	}
	for _, ns := range made {
		slices.Sort(ns)
	}
	return out, made, nil
}

// Preview reports what Up would change, by operation.
func (s *Stack) Preview(ctx context.Context) (map[string]int, error) {
	st, err := s.open(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.readExisting(ctx, st); err != nil {
		return nil, err
	}
	opts := []optpreview.Option{optpreview.ProgressStreams(s.progress()), optpreview.ErrorProgressStreams(s.progress()), optpreview.Diff()}
	if s.Refresh {
		opts = append(opts, optpreview.Refresh())
	}
	res, err := st.Preview(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("preview: %s", lastLines(err.Error()))
	}
	changes := map[string]int{}
	for k, v := range res.ChangeSummary {
		changes[string(k)] = v
	}
	return changes, nil
}

// Destroy removes every box the stack made (static servers are left as
// they are) and takes its relays out of the router's relay list.
func (s *Stack) Destroy(ctx context.Context) (map[string]int, error) {
	st, err := s.open(ctx)
	if err != nil {
		return nil, err
	}
	opts := []optdestroy.Option{optdestroy.ProgressStreams(s.progress()), optdestroy.ErrorProgressStreams(s.progress())}
	if s.Refresh {
		opts = append(opts, optdestroy.Refresh())
	}
	res, err := st.Destroy(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("destroy: %s", lastLines(err.Error()))
	}
	if err := s.fence(ctx); err != nil {
		return nil, err
	}
	if _, err := SetStackHosts(s.StateDir, s.Name, nil); err != nil {
		return nil, err
	}
	changes := map[string]int{}
	if res.Summary.ResourceChanges != nil {
		for k, v := range *res.Summary.ResourceChanges {
			changes[k] = v
		}
	}
	return changes, nil
}

// Remove deletes the stack itself (its history and config) once Destroy
// has emptied it. A stack that still holds resources is not removed.
func (s *Stack) Remove(ctx context.Context) error {
	st, err := s.open(ctx)
	if err != nil {
		return err
	}
	if err := st.Workspace().RemoveStack(ctx, s.Name); err != nil {
		return fmt.Errorf("remove stack %s: %s", s.Name, lastLines(err.Error()))
	}
	return nil
}

// SetSecret keeps value encrypted in the stack's configuration under
// SecretNamespace:KEY; the program hands it to the provider as a secret
// input.
func (s *Stack) SetSecret(ctx context.Context, key, value string) error {
	st, err := s.open(ctx)
	if err != nil {
		return err
	}
	if err := setSecretConfig(ctx, st, s.Name, key, value); err != nil {
		return fmt.Errorf("stack %s: %s", s.Name, redact(err.Error(), value))
	}
	return nil
}

// ReadSecrets returns the cloud tokens, the relay auth key file and the
// relay TLS seed kept in the stack, decrypted; a stack that does not exist has none.
func (s *Stack) ReadSecrets(ctx context.Context) (map[string]string, error) {
	st, err := s.openStack(ctx, false)
	if err != nil {
		if auto.IsSelectStack404Error(err) || strings.Contains(err.Error(), "no stack named") {
			return map[string]string{}, nil
		}
		return nil, err
	}
	all, err := st.GetAllConfig(ctx)
	if err != nil {
		return nil, fmt.Errorf("stack %s config: %s", s.Name, lastLines(err.Error()))
	}
	out := map[string]string{}
	for _, k := range []string{HcloudTokenKey, DigitalOceanTokenKey, RelayAuthKeysKey, RelayTLSSeedKey} {
		for _, ns := range []string{SecretNamespace, provider.Name} {
			if v, ok := all[ns+":"+k]; ok && v.Value != "" {
				out[k] = v.Value
				break
			}
		}
	}
	return out, nil
}

// Repair makes a stack usable after a Pulumi run was killed: it clears
// the lock the run left when that run is dead (lease.ClearDeadStackLocks:
// never pulumi cancel, which deletes a live run's lock too; call it under
// the fleet's lease), then refreshes the state from the boxes, dropping
// operations the killed run left pending.
// A box whose create was cut off is thereby forgotten: the next up adopts
// it by name, and the event reconciler's sweep by label deletes it if no
// up comes.
func (s *Stack) Repair(ctx context.Context) error {
	st, err := s.open(ctx)
	if err != nil {
		return err
	}
	backend, err := s.Backend()
	if err != nil {
		return err
	}
	if _, err := lease.ClearDeadStackLocks(ctx, backend, Project, s.Name, lease.DefaultTTL); err != nil {
		return fmt.Errorf("repair stack %s: %w", s.Name, err)
	}
	return s.refresh(ctx, st)
}

// RefreshState reads every resource's real state into the stack (pulumi
// refresh): after a fleet rollout, the Hosts learn the release their
// boxes run.
func (s *Stack) RefreshState(ctx context.Context) error {
	st, err := s.open(ctx)
	if err != nil {
		return err
	}
	return s.refresh(ctx, st)
}

func (s *Stack) refresh(ctx context.Context, st auto.Stack) error {
	_, err := st.Refresh(ctx, optrefresh.ClearPendingCreates(),
		optrefresh.ProgressStreams(s.progress()), optrefresh.ErrorProgressStreams(s.progress()))
	if err != nil {
		return fmt.Errorf("refresh stack %s: %s", s.Name, lastLines(err.Error()))
	}
	return nil
}

// lastLines keeps the engine's error short: its last few lines say why.
func lastLines(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	var keep, errs []string
	for _, l := range lines {
		l = strings.TrimSpace(l)
		// The AWS SDK's warnings (SDK DATE TIME WARN ...: a store that
		// sends no checksums) and the CLI's progress dots say nothing of
		// why a run failed.
		if f := strings.Fields(l); len(f) > 3 && f[0] == "SDK" && f[3] == "WARN" || strings.HasPrefix(l, "stderr: SDK ") || strings.HasPrefix(l, "@ ") {
			continue
		}
		if l != "" {
			keep = append(keep, l)
		}
		// The resources' own errors (Pulumi's diagnostics) say why, where
		// the last lines may hold only the summary.
		if e, ok := strings.CutPrefix(l, "error: "); ok && !slices.Contains(errs, e) && !strings.HasPrefix(e, "update failed") {
			errs = append(errs, e)
		}
	}
	if len(errs) > 0 {
		return strings.Join(errs[:min(len(errs), 4)], "; ")
	}
	if len(keep) > 6 {
		keep = keep[len(keep)-6:]
	}
	return strings.Join(keep, "; ")
}

// HostsFromOutputs reads the "hosts" stack output.
func HostsFromOutputs(out auto.OutputMap) ([]HostEntry, error) {
	v, ok := out["hosts"]
	if !ok || v.Value == nil {
		return nil, nil
	}
	data, err := json.Marshal(v.Value)
	if err != nil {
		return nil, fmt.Errorf("stack output hosts: %w", err)
	}
	var hosts []HostEntry
	if err := json.Unmarshal(data, &hosts); err != nil {
		return nil, fmt.Errorf("stack output hosts: %w", err)
	}
	sort.Slice(hosts, func(i, j int) bool { return hosts[i].Name < hosts[j].Name })
	return hosts, nil
}

// Relay is one relay process in the router's relay list (the relays file
// of package relay/router, defined in relay/wire).
type Relay = wire.Relay

// Relays is the router's relay list: a host with an SPKI (its relay TLS
// key's) has its relays pinned to it and polled over https://. Origin
// hosts are left out: listeners go to the edges.
func Relays(hosts []HostEntry) []Relay {
	rs := []Relay{}
	for _, h := range hosts {
		if h.IsOrigin() {
			continue
		}
		host := h.Address
		if strings.Contains(host, ":") {
			host = "[" + host + "]" // IPv6
		}
		for _, p := range h.Ports {
			base := fmt.Sprintf("http://%s:%d/", host, p)
			r := Relay{URL: base, Stats: base + "stats", Region: h.Region}
			if h.SPKI != "" {
				// The relay's TCP port answers TLS too: the router polls
				// /stats there and checks the box's key (its pin).
				r.Stats, r.SPKI = fmt.Sprintf("https://%s:%d/stats", host, p), h.SPKI
			}
			rs = append(rs, r)
		}
	}
	return rs
}

// writeRelayList writes the router's relay list to path.
func writeRelayList(path string, rs []Relay) error {
	return writeRelaysFile(path, wire.RelaysFile{Relays: rs})
}

// writeRelaysFile writes the router's relays file to path.
func writeRelaysFile(path string, f wire.RelaysFile) error {
	data, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.Write(path, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("relays file: %w", err)
	}
	return nil
}
