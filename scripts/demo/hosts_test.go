package main

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/infra/program/programtest"
	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/inventories"
)

// TestDemoReadsHostsJSON: the demo finds the fleet's relay processes in
// what the real fleet hosts --json prints (steady and event stacks, as
// fleet up and reconcile leave them), not in the state directory's
// files; before any fleet up, fleet hosts fails and cleanup has nothing
// to destroy.
func TestDemoReadsHostsJSON(t *testing.T) {
	pulumiCLI, err := program.FindPulumi("")
	if err != nil {
		testutil.Skipf(t, "%v (make pulumi)", err)
	}
	t.Setenv(program.PassphraseEnv, "")
	dir := t.TempDir()
	if out, err := exec.Command("go", "build", "-o", filepath.Join(dir, "fleet"), "../../cmd/fleet").CombinedOutput(); err != nil {
		t.Fatalf("build fleet: %v\n%s", err, out)
	}
	d := &demo{out: io.Discard, work: dir, bin: dir, pulumi: pulumiCLI}
	os.MkdirAll(d.path("logs"), 0o700)
	testutil.WriteFile(t, d.path("demo.yaml"), []byte(demoFleet()), 0o644)
	ctx := context.Background()
	if h, err := d.hosts(ctx); err == nil {
		t.Fatalf("fleet hosts before fleet up: %+v, no error", h)
	}
	cat, err := inventories.LoadCatalogue(inventories.Embedded(inventories.ProvidersFile))
	if err != nil {
		t.Fatal(err)
	}
	f, err := inventories.LoadFleet(d.path("demo.yaml"), cat)
	if err != nil {
		t.Fatal(err)
	}
	host := func(name, group, addr string, ports ...int) map[string]any {
		return map[string]any{"name": name, "group": group, "backend": "lab", "address": addr, "sshAddress": addr + ":22",
			"hostKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl", "user": "root", "ports": ports}
	}
	importStack := func(name string, outputs map[string]any) {
		programtest.ImportStack(t, &program.Stack{Fleet: f, Name: name, StateDir: d.path("state"), Pulumi: pulumiCLI}, "unused\n", outputs)
	}
	origin := func(name, addr, spki string) map[string]any {
		h := host(name, "origin", addr, 4443)
		h["tier"], h["spki"] = "origin", spki
		return h
	}
	pin1, pin2 := strings.Repeat("ab", 32), strings.Repeat("cd", 32)
	importStack("demo", map[string]any{"fleet": "demo", "hosts": []any{
		host("demo-s-steady-1", "steady", "10.231.87.11", 4443, 4444), host("demo-s-steady-2", "steady", "10.231.87.12", 4443, 4444),
		origin("origin-1", "10.231.87.21", pin1), origin("origin-2", "10.231.87.22", pin2)}})
	importStack("demo-event-demo-show", map[string]any{"fleet": "demo", "event": "demo-show", "hosts": []any{
		host("demo-e-demo-show-1", "burst", "10.231.87.13", 4443)}})
	if err := d.refreshRelays(ctx); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range d.relays() {
		got = append(got, r.URL+" "+r.Stats)
	}
	var want []string
	for _, hp := range []string{"10.231.87.11:4443", "10.231.87.11:4444", "10.231.87.12:4443", "10.231.87.12:4444", "10.231.87.13:4443"} {
		want = append(want, "http://"+hp+"/ http://"+hp+"/stats")
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("relays\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// The publisher's origins: the origin boxes, pinned from the stack.
	if got, want := d.origins(), []string{"http://10.231.87.21:4443/#spki=" + pin1, "http://10.231.87.22:4443/#spki=" + pin2}; !reflect.DeepEqual(got, want) {
		t.Errorf("origins %v, want %v", got, want)
	}
}
