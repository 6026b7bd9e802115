package fleethosts

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/inventories"
)

// originsFleet is demoFleet with an origin group of two instead of a
// static origin.
func originsFleet() *inventories.Fleet {
	f := demoFleet()
	f.Origin = nil
	f.Origins = &inventories.Origins{Provider: "lab", Shape: "small", Count: 2, BasePort: 4443}
	return f
}

// originEntry is an origin box as the steady stack's hosts output has it.
func originEntry(n int, spki string) map[string]any {
	addr := "10.231.87.2" + string(rune('0'+n))
	return map[string]any{"name": "origin-" + string(rune('0'+n)), "group": "origin", "tier": "origin", "backend": "lab",
		"address": addr, "sshAddress": addr + ":22", "user": "root", "ports": []any{4443.0}, "spki": spki,
		"hostKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"}
}

// TestFromOutputsOrigins: the steady stack's origin boxes are hosts of
// tier origin, among the steady stack's (converge, rollout and status
// reach them), kept out of the router's relays when written back; a fleet
// with an origin group whose stack holds none is refused, one with fewer
// than it wants warned about.
func TestFromOutputsOrigins(t *testing.T) {
	pin1, pin2 := strings.Repeat("ab", 32), strings.Repeat("cd", 32)
	steady := outputs(t, "demo", "demo-steady.json")
	hosts := append(slices.Clone(steady.Outputs["hosts"].([]any)), originEntry(1, pin1), originEntry(2, pin2))
	so := program.StackOutputs{Stack: "demo", Outputs: map[string]any{"fleet": "demo", "hosts": hosts}}
	set, err := FromOutputs(originsFleet(), "demo", []program.StackOutputs{so})
	if err != nil {
		t.Fatal(err)
	}
	if len(set.Warnings) > 0 {
		t.Errorf("warnings: %q", set.Warnings)
	}
	var tiers []string
	for _, h := range set.Hosts {
		tiers = append(tiers, h.Name+":"+h.Tier)
	}
	if want := []string{"origin-1:origin", "origin-2:origin", "steady-1:steady", "steady-2:steady"}; !slices.Equal(tiers, want) {
		t.Fatalf("hosts %v, want %v", tiers, want)
	}
	if n := len(set.SteadyHosts()); n != 4 {
		t.Errorf("%d steady stack hosts, want 4 (origins among them)", n)
	}
	if rs := program.Relays(set.Entries()["demo"]); len(rs) != 4 {
		t.Errorf("relays %+v: want the 2 steady boxes' 4 processes, no origin", rs)
	}
	want := []string{"http://10.231.87.21:4443/#spki=" + pin1, "http://10.231.87.22:4443/#spki=" + pin2}
	if got := OriginURLs(set.Hosts); !slices.Equal(got, want) {
		t.Errorf("origin URLs %v, want %v", got, want)
	}

	// One origin left in the stack: a warning; none: refused.
	so.Outputs["hosts"] = append(slices.Clone(steady.Outputs["hosts"].([]any)), originEntry(1, pin1))
	if set, err := FromOutputs(originsFleet(), "demo", []program.StackOutputs{so}); err != nil || len(set.Warnings) != 1 || !strings.Contains(set.Warnings[0], "origins: 1 in stack demo, the inventory wants 2") {
		t.Errorf("one origin: %v, warnings %q", err, set.Warnings)
	}
	so.Outputs["hosts"] = steady.Outputs["hosts"]
	if _, err := FromOutputs(originsFleet(), "demo", []program.StackOutputs{so}); err == nil || !strings.Contains(err.Error(), "no origin boxes in stack demo") {
		t.Errorf("no origin: %v", err)
	}
}

// TestTargetsOrigins: converge and rollout bring each origin host to one
// relay process with no upstream, and every edge host, steady or burst,
// to pulling from both origins with their pins.
func TestTargetsOrigins(t *testing.T) {
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	block, _ := ssh.MarshalPrivateKey(priv, "")
	keyFile := filepath.Join(t.TempDir(), "id")
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	key := "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"
	pin1, pin2 := strings.Repeat("ab", 32), strings.Repeat("cd", 32)
	hosts := []Host{
		{Stack: "demo", Name: "origin-1", Group: "origin", Tier: TierOrigin, Backend: "static", Address: "10.0.0.1", SSHAddress: "10.0.0.1:22", HostKey: key, User: "root", Ports: []int{4443}, SPKI: pin1},
		{Stack: "demo", Name: "origin-2", Group: "origin", Tier: TierOrigin, Backend: "static", Address: "10.0.0.2", SSHAddress: "10.0.0.2:22", HostKey: key, User: "root", Ports: []int{4443}, SPKI: pin2},
		{Stack: "demo", Name: "steady-1", Group: "steady", Tier: TierSteady, Backend: "static", Address: "10.0.0.3", SSHAddress: "10.0.0.3:22", HostKey: key, User: "root", Ports: []int{4443, 4444}},
		{Stack: "demo-event-final", Name: "demo-e-final-1", Group: "final", Tier: TierBurst, Event: "final", Backend: "static", Address: "10.0.0.4", SSHAddress: "10.0.0.4:22", HostKey: key, User: "root", Ports: []int{4450}},
	}
	targets, closer, err := Targets(originsFleet(), hosts, Access{SSHKey: keyFile})
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	want := []string{"http://10.0.0.1:4443/#spki=" + pin1, "http://10.0.0.2:4443/#spki=" + pin2}
	for _, tg := range targets {
		if strings.HasPrefix(tg.Host.Name, "origin-") {
			if len(tg.Upstream) != 0 || tg.Processes != 1 || tg.BasePort != 4443 || !slices.Contains(want, tg.Origin) || !tg.AcceptLinkTokens {
				t.Errorf("%s: upstream %v, %d processes from %d, link tokens %v; want none, 1 from 4443, taken", tg.Host.Name, tg.Upstream, tg.Processes, tg.BasePort, tg.AcceptLinkTokens)
			}
			continue
		}
		if tg.Origin != "" || tg.AcceptLinkTokens {
			t.Errorf("%s: an edge marked origin %q, taking link tokens %v", tg.Host.Name, tg.Origin, tg.AcceptLinkTokens)
		}
		if !slices.Equal(tg.Upstream, want) {
			t.Errorf("%s: upstream %v, want %v", tg.Host.Name, tg.Upstream, want)
		}
	}
	// Edges with no origin host to pull from: refused, not converged to
	// an empty upstream.
	if _, _, err := Targets(originsFleet(), hosts[2:], Access{SSHKey: keyFile}); err == nil || !strings.Contains(err.Error(), "no origin host") {
		t.Errorf("no origin host: %v", err)
	}
}

// TestPublisherOrigins: fleet hosts --origins lists the origin boxes'
// pinned URLs from the stack, or the fleet file's static origin: list;
// an origin group with no box yet, or a fleet with no origin, is an
// error naming the fleet.
func TestPublisherOrigins(t *testing.T) {
	pin1, pin2 := strings.Repeat("ab", 32), strings.Repeat("cd", 32)
	steady := outputs(t, "demo", "demo-steady.json")
	hosts := append(slices.Clone(steady.Outputs["hosts"].([]any)), originEntry(1, pin1), originEntry(2, pin2))
	so := program.StackOutputs{Stack: "demo", Outputs: map[string]any{"fleet": "demo", "hosts": hosts}}
	set, err := FromOutputs(originsFleet(), "demo", []program.StackOutputs{so})
	if err != nil {
		t.Fatal(err)
	}
	got, err := PublisherOrigins(originsFleet(), set)
	want := []string{"http://10.231.87.21:4443/#spki=" + pin1, "http://10.231.87.22:4443/#spki=" + pin2}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("origin boxes: %v, %v; want %v", got, err, want)
	}

	static := demoFleet()
	static.Origin = []string{"http://198.51.100.1:4443/#spki=" + pin1, "http://198.51.100.2:4443/#spki=" + pin2}
	plain, err := FromOutputs(static, "demo", []program.StackOutputs{steady})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := PublisherOrigins(static, plain); err != nil || !slices.Equal(got, static.Origin) {
		t.Errorf("static origins: %v, %v; want %v", got, err, static.Origin)
	}

	if _, err := PublisherOrigins(originsFleet(), plain); err == nil || !strings.Contains(err.Error(), "no origin box in its stacks yet") {
		t.Errorf("origin group without boxes: %v", err)
	}
	none := demoFleet()
	none.Origin = nil
	if _, err := PublisherOrigins(none, plain); err == nil || !strings.Contains(err.Error(), "has no origins") {
		t.Errorf("no origins at all: %v", err)
	}
}
