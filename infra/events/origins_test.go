package events

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/infra/program/programtest"
	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/inventories"
)

// TestFleetOrigins: an event's edges pull from the origin boxes the
// fleet's stack holds, each pinned to the SPKI its stack reports, in the
// order the steady edges have them; a fleet without an origin group
// gives none.
func TestFleetOrigins(t *testing.T) {
	cli, err := program.FindPulumi("")
	if err != nil {
		testutil.Skipf(t, "%v (make pulumi)", err)
	}
	t.Setenv(program.PassphraseEnv, "")
	f := &inventories.Fleet{Name: "f", Origins: &inventories.Origins{Provider: "lab", Shape: "small", Count: 2, BasePort: 4443}}
	st := &program.Stack{Fleet: f, Name: "f", StateDir: t.TempDir(), Pulumi: cli}
	pin1, pin2 := strings.Repeat("ab", 32), strings.Repeat("cd", 32)
	host := func(name, addr, tier, spki string) map[string]any {
		return map[string]any{"name": name, "group": name[:len(name)-2], "backend": "lab", "address": addr, "sshAddress": addr + ":22",
			"hostKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl", "user": "root",
			"ports": []any{4443}, "tier": tier, "spki": spki}
	}
	programtest.ImportStack(t, st, "unused\n", map[string]any{"fleet": "f", "hosts": []any{
		host("edge-1", "10.0.0.3", "", pin1), host("origin-2", "10.0.0.2", "origin", pin2), host("origin-1", "10.0.0.1", "origin", pin1)}})
	got, err := FleetOrigins(context.Background(), st)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"http://10.0.0.1:4443/#spki=" + pin1, "http://10.0.0.2:4443/#spki=" + pin2}; !slices.Equal(got, want) {
		t.Fatalf("origins %v, want %v", got, want)
	}
	st.Fleet = &inventories.Fleet{Name: "f"}
	if got, err := FleetOrigins(context.Background(), st); err != nil || got != nil {
		t.Fatalf("a fleet without origins: %v, %v; want none", got, err)
	}
}
