package program

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/auto/events"
	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"

	"github.com/relayfleet/relayfleet/infra/provider"
)

func outputs(op apitype.OpType, typ, urn string, out map[string]any) events.EngineEvent {
	return events.EngineEvent{EngineEvent: apitype.EngineEvent{ResOutputsEvent: &apitype.ResOutputsEvent{Metadata: apitype.StepEventMetadata{
		Op: op, URN: urn, Type: typ, New: &apitype.StepEventStateMetadata{Outputs: out},
	}}}}
}

// TestFollowReplacement: while a box is replaced, the relays file gets the
// new box as soon as the engine reports its Host converged, with the old
// box beside it, draining, and the fleet's other box untouched; not
// before (the Box alone is not converged yet).
func TestFollowReplacement(t *testing.T) {
	s := &Stack{StateDir: t.TempDir(), Name: "lab"}
	if _, err := SetStackHosts(s.StateDir, s.Name, []HostEntry{
		{Name: "lab-1", Group: "g", Backend: "lab", Address: "10.0.0.11", SSHAddress: "10.0.0.11:22", User: "root", Ports: []int{4443}},
		{Name: "lab-2", Group: "g", Backend: "lab", Address: "10.0.0.12", SSHAddress: "10.0.0.12:22", User: "root", Ports: []int{4443}},
	}); err != nil {
		t.Fatal(err)
	}
	const boxURN = "urn:pulumi:lab::relayfleet-infra::" + provider.BoxType + "::lab-1"
	const hostURN = "urn:pulumi:lab::relayfleet-infra::" + provider.HostType + "::lab-1"
	pins := map[string]string{}
	relays := func() map[string]bool {
		t.Helper()
		data, err := os.ReadFile(filepath.Join(s.StateDir, RelaysFile))
		if err != nil {
			t.Fatal(err)
		}
		var doc struct{ Relays []Relay }
		if err := json.Unmarshal(data, &doc); err != nil {
			t.Fatal(err)
		}
		m := map[string]bool{}
		for _, r := range doc.Relays {
			m[r.URL] = r.Draining
			pins[r.URL] = r.SPKI
		}
		return m
	}
	ch := make(chan events.EngineEvent)
	done := make(chan error)
	go func() { done <- s.followReplacement(ch, Doomed{Name: "lab-1", URN: boxURN, Op: OpReplace}) }()
	// A refresh reports the old box and its Host first: not a replacement.
	ch <- outputs(apitype.OpRefresh, provider.BoxType, boxURN, map[string]any{
		"name": "lab-1", "backend": "lab", "addresses": []any{"10.0.0.11"}, "sshAddress": "10.0.0.11:22", "hostPublicKey": "ssh-ed25519 AAAA"})
	ch <- outputs(apitype.OpRefresh, provider.HostType, hostURN, map[string]any{"box": "lab-1", "user": "root", "ports": []any{4443.0}})
	ch <- outputs(apitype.OpCreateReplacement, provider.BoxType, boxURN, map[string]any{
		"name": "lab-1", "backend": "lab", "addresses": []any{"10.0.0.13"}, "sshAddress": "10.0.0.13:22", "hostPublicKey": "ssh-ed25519 AAAA"})
	// (An unbuffered send returns once the event before it was handled.)
	ch <- outputs(apitype.OpReplace, provider.BoxType, boxURN, map[string]any{
		"name": "lab-1", "backend": "lab", "addresses": []any{"10.0.0.13"}, "sshAddress": "10.0.0.13:22", "hostPublicKey": "ssh-ed25519 AAAA"})
	if r := relays(); len(r) != 2 {
		t.Fatalf("relays %v before the Host converged, want the two old boxes only", r)
	}
	ch <- outputs(apitype.OpUpdate, provider.HostType, hostURN, map[string]any{"box": "lab-1", "user": "root", "ports": []any{4443.0, 4444.0}, "spki": "abababababababababababababababababababababababababababababababab"})
	// Reported again: the same file.
	ch <- outputs(apitype.OpUpdate, provider.HostType, hostURN, map[string]any{"box": "lab-1", "user": "root", "ports": []any{4443.0, 4444.0}, "spki": "abababababababababababababababababababababababababababababababab"})
	close(ch)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{
		"http://10.0.0.11:4443/": true, // the old lab-1, draining
		"http://10.0.0.12:4443/": false,
		"http://10.0.0.13:4443/": false, "http://10.0.0.13:4444/": false, // its replacement
	}
	if got := relays(); !reflect.DeepEqual(got, want) {
		t.Errorf("relays %v, want %v", got, want)
	}
	// The replacement is pinned to its key from its first entry on.
	for _, u := range []string{"http://10.0.0.13:4443/", "http://10.0.0.13:4444/"} {
		if pins[u] != strings.Repeat("ab", 32) {
			t.Errorf("relay %s: spki_sha256 %q, want its Host's spki", u, pins[u])
		}
	}
	sh, err := ReadStackHosts(s.StateDir, s.Name)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, h := range sh.Hosts {
		names = append(names, h.Name+"@"+h.Address+"/"+h.Group)
	}
	if want := []string{"lab-1~replaced@10.0.0.11/g", "lab-2@10.0.0.12/g", "lab-1@10.0.0.13/g"}; !reflect.DeepEqual(names, want) {
		t.Errorf("hosts %v, want %v", names, want)
	}
}
