package fleethosts

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/infra/program/programtest"
	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/inventories"
	"github.com/relayfleet/relayfleet/provision"
)

// TestReadHostsWarns: where the stacks and the inventory differ (two
// steady boxes where the inventory wants one), the warning goes to the
// Fleet's Warnings (the command's error stream, not the process's), and
// the keys are the stack's at the Fleet's time.
func TestReadHostsWarns(t *testing.T) {
	testutil.Short(t, "make test-long (runs the Pulumi CLI)")
	if _, err := program.FindPulumi(""); err != nil {
		testutil.Skipf(t, "%v (make pulumi)", err)
	}
	t.Setenv(program.PassphraseEnv, "")
	fleet := &inventories.Fleet{Name: "cloud", Steady: []inventories.Group{{Name: "fsn", Count: 1, Box: inventories.Box{Provider: "hcloud", Processes: 2, BasePort: 4443}}}}
	st := &program.Stack{Fleet: fleet, Name: "cloud", StateDir: filepath.Join(t.TempDir(), "state")}
	host := func(name string) map[string]any {
		return map[string]any{"name": name, "group": "fsn", "backend": "hcloud", "address": "127.0.0.1",
			"sshAddress": "127.0.0.1:22", "hostKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl", "user": "root", "ports": []int{4443}}
	}
	const key = "ed25519-private:ERERERERERERERERERERERERERERERERERERERERERE=\ned25519-link-private:EhISEhISEhISEhISEhISEhISEhISEhISEhISEhISEhI=\n"
	programtest.ImportStack(t, st, key, map[string]any{"fleet": "cloud", "hosts": []any{host("cloud-s-fsn-1"), host("cloud-s-fsn-2")}})
	var warnings bytes.Buffer
	f := &Fleet{Stack: st, Warnings: &warnings, Now: func() time.Time { return time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC) }}
	set, err := f.ReadHosts(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := "fleet: warning: steady group fsn: 2 boxes in stack cloud, the inventory wants 1 (fleet up)\n"
	if len(set.Hosts) != 2 || warnings.String() != want {
		t.Errorf("%d hosts, warnings %q; want 2, %q", len(set.Hosts), warnings.String(), want)
	}
	text, keys, err := f.AuthKeys(context.Background(), false)
	if err != nil || len(keys) != 2 || provision.FormatAuthKeys(keys) != key || text != provision.BoxKeyFile(keys, f.Now()) {
		t.Errorf("AuthKeys = %q, %+v, %v; want the stack's keys, their public halves in the relays' file", text, keys, err)
	}
}
