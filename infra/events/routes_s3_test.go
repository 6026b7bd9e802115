package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"
	"github.com/pulumi/pulumi/sdk/v3/go/common/workspace"

	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/inventories"
)

// TestS3SharedRelays: on a real object store (SeaweedFS) named by the
// fleet file's state.backend, a second operator's empty state dir gets
// the relays file from the backend alone (the steady stack's hosts and an
// event's draining entry from its record), no passphrase generated into
// it; a watcher's relays file follows a box the first operator replaced
// within a poll; without a passphrase every read is refused in one line.
func TestS3SharedRelays(t *testing.T) {
	testutil.Short(t, "make test-s3")
	pulumi, err := program.FindPulumi("")
	if err != nil {
		testutil.Skipf(t, "%v (make pulumi)", err)
	}
	s3 := testutil.StartSeaweedFS(t)
	s3.MakeBucket(t, "relayfleet")
	s3.SetEnv(t)
	t.Setenv(program.BackendEnv, "")
	t.Setenv(program.PassphraseFileEnv, "")
	t.Setenv(program.PassphraseEnv, "the team's passphrase")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	backend := s3.Backend("relayfleet", "team")
	fleet := &inventories.Fleet{Name: "team", State: inventories.State{Backend: backend}}

	// Operator A: the steady stack with two hosts, and an event whose
	// record lists its box draining.
	host := func(name, addr string) map[string]any {
		return map[string]any{"name": name, "group": "steady", "backend": "lab", "address": addr,
			"sshAddress": addr + ":22", "hostKey": "ssh-ed25519 AAAA", "user": "root", "ports": []int{4443}}
	}
	setSteady := importOutputs(t, ctx, pulumi, backend, filepath.Join(t.TempDir(), "a-home"), "team")
	setSteady(map[string]any{"fleet": "team", "hosts": []any{host("team-steady-1", "10.0.0.1"), host("team-steady-2", "10.0.0.2")}})
	a := &program.Stack{Fleet: fleet, StateDir: t.TempDir()}
	ws, err := a.ProjectWorkspace(ctx, StoreProject)
	if err != nil {
		t.Fatal(err)
	}
	store := &PulumiStore{WS: ws, Fleet: "team"}
	route := &program.StackHosts{Stack: StackName("team", "show"), Draining: true,
		Hosts: []program.HostEntry{{Name: "team-show-1", Address: "10.0.1.1", Ports: []int{4443}}}}
	if err := store.Save(ctx, &Record{Event: "show", Stack: StackName("team", "show"), Backend: "lab", Phase: Draining, Route: route}); err != nil {
		t.Fatal(err)
	}

	// Operator B: an empty state dir, the fleet file, the passphrase.
	bDir := filepath.Join(t.TempDir(), "b")
	b := &program.Stack{Fleet: fleet, StateDir: bDir}
	path, err := SyncRelays(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	if got := relayURLs(t, path); got != "http://10.0.0.1:4443/ http://10.0.0.2:4443/ http://10.0.1.1:4443/(draining)" {
		t.Fatalf("B's relays file %s lists %q: want both steady boxes and the event's, draining", path, got)
	}
	if _, err := os.Stat(filepath.Join(bDir, "passphrase")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a passphrase was generated into B's state dir")
	}
	if _, err := os.Stat(filepath.Join(bDir, "backend")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("B's state dir got a file backend beside the fleet file's")
	}

	// A router's file, kept current by a watcher.
	routerFile := filepath.Join(t.TempDir(), "relays.json")
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	var log testutil.SyncBuffer
	go func() {
		done <- RelaysWatch{Stack: &program.Stack{Fleet: fleet, StateDir: t.TempDir()}, Out: routerFile, Every: time.Second, Log: &log}.Run(wctx)
	}()
	testutil.WaitFor(t, time.Minute, "the watcher's first relays file", func() bool { return strings.Count(readFile(routerFile), "http://") >= 3 })
	// A replaces steady-2.
	setSteady(map[string]any{"fleet": "team", "hosts": []any{host("team-steady-1", "10.0.0.1"), host("team-steady-2", "10.0.0.9")}})
	replaced := time.Now()
	testutil.WaitFor(t, time.Minute, "the watcher's relays file to list the replacement", func() bool {
		s := readFile(routerFile)
		return strings.Contains(s, "10.0.0.9") && !strings.Contains(s, "10.0.0.2")
	})
	t.Logf("the watcher's file followed in %v (poll 1s; each poll runs the Pulumi CLI)", time.Since(replaced).Round(100*time.Millisecond))
	stop()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("the watcher stopped with %v, want context.Canceled", err)
	}
	if !strings.Contains(log.String(), "now lists 3 relays") {
		t.Errorf("watcher log %q: want a line per change", log.String())
	}

	// No passphrase: refused in one line, nothing read.
	t.Setenv(program.PassphraseEnv, "")
	_, err = SyncRelays(ctx, &program.Stack{Fleet: fleet, StateDir: filepath.Join(t.TempDir(), "c")})
	if !errors.Is(err, program.ErrNoSharedPassphrase) || strings.Contains(err.Error(), "\n") {
		t.Errorf("without a passphrase: %v, want ErrNoSharedPassphrase in one line", err)
	}
}

// importOutputs makes stack name of the fleet's project in backend, and
// returns a func that sets its outputs (pulumi stack import), as a fleet
// up would leave them.
func importOutputs(t *testing.T, ctx context.Context, pulumi, backend, home, name string) func(map[string]any) {
	t.Helper()
	cliRoot := filepath.Join(home, "cli")
	if err := os.MkdirAll(filepath.Join(cliRoot, "bin"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(pulumi, filepath.Join(cliRoot, "bin", "pulumi")); err != nil {
		t.Fatal(err)
	}
	cmd, err := auto.NewPulumiCommand(&auto.PulumiCommandOptions{Root: cliRoot})
	if err != nil {
		t.Fatal(err)
	}
	work := filepath.Join(home, "work")
	if err := os.MkdirAll(work, 0o700); err != nil {
		t.Fatal(err)
	}
	proj := workspace.Project{Name: program.Project, Runtime: workspace.NewProjectRuntimeInfo("go", nil), Backend: &workspace.ProjectBackend{URL: backend}}
	ws, err := auto.NewLocalWorkspace(ctx, auto.Project(proj), auto.Pulumi(cmd), auto.WorkDir(work), auto.PulumiHome(home),
		auto.SecretsProvider("passphrase"), auto.EnvVars(map[string]string{program.BackendEnv: backend, "PULUMI_SKIP_UPDATE_CHECK": "true"}))
	if err != nil {
		t.Fatal(err)
	}
	if err := ws.CreateStack(ctx, name); err != nil {
		t.Fatal(err)
	}
	return func(outputs map[string]any) {
		t.Helper()
		dep, _ := json.Marshal(map[string]any{
			"manifest": map[string]any{"time": "2026-12-01T00:00:00Z", "magic": "", "version": ""},
			"resources": []any{map[string]any{
				"urn":     fmt.Sprintf("urn:pulumi:%s::%s::pulumi:pulumi:Stack::%s-%s", name, program.Project, program.Project, name),
				"custom":  false,
				"type":    "pulumi:pulumi:Stack",
				"outputs": outputs,
			}},
		})
		if err := ws.ImportStack(ctx, name, apitype.UntypedDeployment{Version: 3, Deployment: dep}); err != nil {
			t.Fatal(err)
		}
	}
}

// relayURLs lists a relays file's relays, "(draining)" after those that are.
func relayURLs(t *testing.T, path string) string {
	t.Helper()
	var f struct{ Relays []program.Relay }
	if err := json.Unmarshal([]byte(readFile(path)), &f); err != nil {
		t.Fatalf("relays file %s: %v", path, err)
	}
	var out []string
	for _, r := range f.Relays {
		s := r.URL
		if r.Draining {
			s += "(draining)"
		}
		out = append(out, s)
	}
	return strings.Join(out, " ")
}

func readFile(path string) string {
	data, _ := os.ReadFile(path)
	return string(data)
}
