package program_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/infra/program/programtest"
	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/inventories"
)

// recordingProber serves 5 listeners for every host it is asked about
// and records them.
type recordingProber struct{ asked []program.HostEntry }

func (p *recordingProber) Listeners(_ context.Context, hosts []program.HostEntry) (int64, error) {
	p.asked = append(p.asked, hosts...)
	return 5, nil
}

// TestDoomedListenersReadTheStack: the boxes an up or destroy would take
// down are found in the stack's hosts output, so a state dir that holds
// only the backend (a second machine, a lost cache) still probes them
// instead of calling every box "not among the stack's recorded hosts".
func TestDoomedListenersReadTheStack(t *testing.T) {
	testutil.Short(t, "make test-long (runs the Pulumi CLI)")
	if _, err := program.FindPulumi(""); err != nil {
		testutil.Skipf(t, "%v (make pulumi)", err)
	}
	t.Setenv(program.PassphraseEnv, "")
	t.Setenv(program.BackendEnv, "")
	st := &program.Stack{Fleet: &inventories.Fleet{Name: "cloud"}, Name: "cloud", StateDir: filepath.Join(t.TempDir(), "state")}
	programtest.ImportStack(t, st, "key\n", map[string]any{"fleet": "cloud", "hosts": []any{map[string]any{
		"name": "cloud-s-fsn-1", "group": "fsn", "backend": "hcloud", "address": "192.0.2.1",
		"sshAddress": "192.0.2.1:22", "hostKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl", "user": "root", "ports": []int{4443}}}})
	probers := map[string]*recordingProber{}
	boxes := st.DoomedListeners(context.Background(), []program.Doomed{
		{Name: "cloud-s-fsn-1", Op: program.OpDelete, Backend: "hcloud"},
		{Name: "cloud-s-fsn-9", Op: program.OpDelete, Backend: "hcloud"},
	}, func(backend string) program.ListenerProber {
		if probers[backend] == nil {
			probers[backend] = &recordingProber{}
		}
		return probers[backend]
	})
	if len(boxes) != 2 {
		t.Fatalf("%d boxes, want 2", len(boxes))
	}
	if boxes[0].Err != nil || boxes[0].Listeners != 5 {
		t.Errorf("the stack's box: %d listeners, err %v; want 5 read through the prober", boxes[0].Listeners, boxes[0].Err)
	}
	if p := probers["hcloud"]; p == nil || len(p.asked) != 1 || p.asked[0].Address != "192.0.2.1" || p.asked[0].SSHAddress != "192.0.2.1:22" {
		t.Errorf("probed %+v, want the stack's record of cloud-s-fsn-1", probers["hcloud"])
	}
	if !errors.Is(boxes[1].Err, program.ErrNotRecorded) {
		t.Errorf("a box the stack does not list: %v, want ErrNotRecorded", boxes[1].Err)
	}
}
