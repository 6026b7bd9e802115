package fleethosts

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/relayfleet/relayfleet/infra/lab"
	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/inventories"
)

// outputs reads stack outputs as pulumi stack output --json prints them.
func outputs(t *testing.T, stack, file string) program.StackOutputs {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	o := map[string]any{}
	if err := json.Unmarshal(data, &o); err != nil {
		t.Fatal(err)
	}
	return program.StackOutputs{Stack: stack, Outputs: o}
}

// demoFleet is the fleet of testdata/demo-steady.json (a real stack's
// outputs after fleet up on the lab): group steady, two lab boxes.
func demoFleet() *inventories.Fleet {
	return &inventories.Fleet{Name: "demo", Origin: []string{"https://origin.example/"},
		Steady: []inventories.Group{{Name: "steady", Count: 2, Box: inventories.Box{Provider: "lab", Processes: 2, BasePort: 4443}}}}
}

func TestFromOutputsSteadyAndEvents(t *testing.T) {
	stacks := []program.StackOutputs{
		outputs(t, "demo", "demo-steady.json"),
		outputs(t, "demo-event-final", "demo-event-final.json"),
		// Another fleet's stack and an event stack whose up never finished.
		{Stack: "other", Outputs: map[string]any{"fleet": "other", "hosts": []any{}}},
		{Stack: "demo-event-early", Outputs: map[string]any{}},
	}
	set, err := FromOutputs(demoFleet(), "demo", stacks)
	if err != nil {
		t.Fatal(err)
	}
	if len(set.Warnings) > 0 {
		t.Errorf("warnings: %q", set.Warnings)
	}
	var got []string
	for _, h := range set.Hosts {
		got = append(got, strings.Join([]string{h.Stack, h.Name, h.Group, h.Tier, h.Event, h.Backend, h.Address, h.SSHAddress, h.User, h.Fingerprint}, " "))
	}
	// The fingerprints are ssh-keygen -lf's for the keys in testdata.
	want := []string{
		"demo steady-1 steady steady  lab 10.231.87.11 10.231.87.11:22 root SHA256:o6Hfu+uwhuzOR2YigjVjEH/v8C0V+bJXiXO6M+4c8D8",
		"demo steady-2 steady steady  lab 10.231.87.12 10.231.87.12:22 root SHA256:3ZTm3b8m/mtW00+vTgq28pBEb12OSJqzRqsbcxVmpbY",
		"demo-event-final demo-e-final-1 final burst final hcloud 203.0.113.7 203.0.113.7:22 root SHA256:eGXxSMXpClo/c+jiibUMl+W9MeUkpLFYYxPpbkOvSlA",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("hosts:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if p := set.Hosts[2].Ports; len(p) != 3 || p[0] != 4443 || p[2] != 4445 {
		t.Errorf("event host ports %v, want 4443..4445 in order", p)
	}
	if n := len(set.SteadyHosts()); n != 2 {
		t.Errorf("%d steady hosts, want 2", n)
	}
	if e := set.Entries(); len(e["demo"]) != 2 || len(e["demo-event-final"]) != 1 {
		t.Errorf("entries by stack: %v", e)
	}
}

func TestFromOutputsErrors(t *testing.T) {
	steady := outputs(t, "demo", "demo-steady.json")
	withHosts := func(mut func(h map[string]any)) program.StackOutputs {
		data, _ := json.Marshal(steady.Outputs)
		o := map[string]any{}
		json.Unmarshal(data, &o)
		mut(o["hosts"].([]any)[1].(map[string]any))
		return program.StackOutputs{Stack: "demo", Outputs: o}
	}
	twoGroups := demoFleet()
	twoGroups.Steady = append(twoGroups.Steady, inventories.Group{Name: "fsn", Count: 1, Box: inventories.Box{Provider: "hcloud"}})
	for _, c := range []struct {
		name   string
		fleet  *inventories.Fleet
		stacks []program.StackOutputs
		want   string
	}{
		{"no steady stack", demoFleet(), []program.StackOutputs{outputs(t, "demo-event-final", "demo-event-final.json")},
			"stack demo: no such stack: run fleet up first"},
		{"no hosts output", demoFleet(), []program.StackOutputs{{Stack: "demo", Outputs: map[string]any{}}},
			"stack demo: no hosts output: run fleet up first"},
		{"group without boxes", twoGroups, []program.StackOutputs{steady},
			"steady group fsn: no boxes in stack demo (fleet up)"},
		{"another fleet's stack", demoFleet(), []program.StackOutputs{{Stack: "demo", Outputs: map[string]any{"fleet": "prod", "hosts": []any{}}}},
			"stack demo: holds fleet prod, not demo (the wrong --stack?)"},
		{"no host key", demoFleet(), []program.StackOutputs{withHosts(func(h map[string]any) { delete(h, "hostKey") })},
			"stack demo: hosts[1]: steady-2: no hostKey to pin (fleet up again)"},
		{"bad host key", demoFleet(), []program.StackOutputs{withHosts(func(h map[string]any) { h["hostKey"] = "ssh-ed25519 AAAA" })},
			"stack demo: hosts[1]: steady-2: hostKey: ssh: no key found; last parsing error for ignored line: ssh: short read"},
		{"no ssh address", demoFleet(), []program.StackOutputs{withHosts(func(h map[string]any) { h["sshAddress"] = "10.0.0.1" })},
			`stack demo: hosts[1]: steady-2: sshAddress "10.0.0.1": want HOST:PORT`},
		{"secret hosts", demoFleet(), []program.StackOutputs{{Stack: "demo", Outputs: map[string]any{"hosts": "[secret]"}}},
			"stack demo: the hosts output is secret; fleet up again to rewrite it"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := FromOutputs(c.fleet, "demo", c.stacks)
			if err == nil || err.Error() != c.want {
				t.Fatalf("error %v, want %q", err, c.want)
			}
		})
	}
}

func TestFromOutputsWarnings(t *testing.T) {
	f := demoFleet()
	f.Steady[0].Count = 3
	f.Steady = append(f.Steady, inventories.Group{Name: "fsn", Count: 1, Box: inventories.Box{Provider: "hcloud"}})
	steady := outputs(t, "demo", "demo-steady.json")
	hosts := steady.Outputs["hosts"].([]any)
	moved := map[string]any{}
	for k, v := range hosts[1].(map[string]any) {
		moved[k] = v
	}
	moved["group"], moved["name"] = "old", "old-1"
	fsn := map[string]any{}
	for k, v := range hosts[0].(map[string]any) {
		fsn[k] = v
	}
	fsn["group"], fsn["name"], fsn["backend"] = "fsn", "demo-s-fsn-1", "hcloud"
	steady.Outputs["hosts"] = []any{hosts[0], moved, fsn}
	set, err := FromOutputs(f, "demo", []program.StackOutputs{steady})
	if err != nil {
		t.Fatal(err)
	}
	want := "steady group steady: 1 box in stack demo, the inventory wants 3 (fleet up)\n" +
		"steady group old: in stack demo, not in the inventory (fleet up removes its boxes)"
	if got := strings.Join(set.Warnings, "\n"); got != want {
		t.Errorf("warnings:\n%s\nwant\n%s", got, want)
	}
	if len(set.Hosts) != 3 {
		t.Errorf("%d hosts, want the stack's 3", len(set.Hosts))
	}
}

func TestIsEventStack(t *testing.T) {
	for name, want := range map[string]bool{"demo-event-final": true, "demo": false, "demo2-event-x": false, "other-event-demo": false} {
		if got := IsEventStack("demo", name); got != want {
			t.Errorf("IsEventStack(demo, %s) = %v, want %v", name, got, want)
		}
	}
}

// startSSHD runs a real OpenSSH server on loopback that accepts keys and
// returns its address and host key line.
func startSSHD(t *testing.T, keys ...ssh.PublicKey) (addr, hostKey string) {
	t.Helper()
	hostPEM, hostKey, err := lab.NewKey("")
	if err != nil {
		t.Fatal(err)
	}
	var auth []byte
	for _, k := range keys {
		auth = append(auth, ssh.MarshalAuthorizedKey(k)...)
	}
	return testutil.StartSSHD(t, hostPEM, auth), hostKey
}

// TestTargetsPinStackKeys reaches a real sshd as a lab box (the lab's
// admin key) and as a static server (--ssh-key), each host key pinned
// from the stack; a stack whose key is not the server's is refused.
func TestTargetsPinStackKeys(t *testing.T) {
	if os.Getuid() != 0 {
		testutil.Skipf(t, "sshd needs root")
	}
	labDir := t.TempDir()
	l, err := lab.New(lab.Config{Dir: labDir})
	if err != nil {
		t.Fatal(err)
	}
	labSigner, err := l.Signer()
	if err != nil {
		t.Fatal(err)
	}
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	block, _ := ssh.MarshalPrivateKey(priv, "")
	keyFile := filepath.Join(t.TempDir(), "id")
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	opSigner, _ := ssh.NewSignerFromKey(priv)
	addr, hostKey := startSSHD(t, labSigner.PublicKey(), opSigner.PublicKey())
	user := "root"
	_, other, _ := ed25519.GenerateKey(rand.Reader)
	otherPub, _ := ssh.NewPublicKey(other.Public())
	otherKey := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(otherPub)))

	f := demoFleet()
	hosts := []Host{
		{Stack: "demo", Name: "steady-1", Group: "steady", Tier: TierSteady, Backend: "lab", SSHAddress: addr, HostKey: hostKey, User: user, Ports: []int{5000}},
		{Stack: "demo-event-final", Name: "demo-e-final-1", Group: "final", Tier: TierBurst, Event: "final", Backend: "hcloud", SSHAddress: addr, HostKey: hostKey, User: user, Ports: []int{4450, 4451, 4452}},
	}
	targets, closer, err := Targets(f, hosts, Access{LabDir: labDir, SSHKey: keyFile})
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	ctx := t.Context()
	for _, tg := range targets {
		out, err := tg.Run.Run(ctx, "echo reached", nil)
		if err != nil || strings.TrimSpace(string(out)) != "reached" {
			t.Errorf("%s: %q, %v", tg.Host.Name, out, err)
		}
	}
	// The steady host takes its group's layout, the event's host its
	// stack's ports; both the fleet's origin.
	if tg := targets[0]; tg.Processes != 2 || tg.BasePort != 4443 || len(tg.Upstream) != 1 {
		t.Errorf("steady target: %d processes from %d, upstream %v; want the group's 2 from 4443", tg.Processes, tg.BasePort, tg.Upstream)
	}
	if tg := targets[1]; tg.Processes != 3 || tg.BasePort != 4450 {
		t.Errorf("event target: %d processes from %d; want the stack's 3 from 4450", tg.Processes, tg.BasePort)
	}

	// Two hosts at one address with two keys: refused before any dial.
	clash := hosts[1]
	clash.HostKey = otherKey
	if _, _, err := Targets(f, []Host{hosts[0], clash}, Access{LabDir: labDir, SSHKey: keyFile}); err == nil || !strings.Contains(err.Error(), "one ssh address "+addr+", two host keys") {
		t.Fatalf("two keys at one address: %v", err)
	}

	// The stack says another key: nothing is trusted on first use.
	wrong := hosts[1]
	wrong.HostKey = otherKey
	targets, closer2, err := Targets(f, []Host{wrong}, Access{LabDir: labDir, SSHKey: keyFile})
	if err != nil {
		t.Fatal(err)
	}
	defer closer2.Close()
	if _, err := targets[0].Run.Run(ctx, "echo reached", nil); err == nil || !strings.Contains(err.Error(), "key") {
		t.Fatalf("a host whose key is not the stack's: %v, want refused", err)
	}
}

// TestHostKeepsItsPin: a host read from the stack output keeps its relay
// key's SPKI (fleet hosts --json shows it; fleet monitor's entries keep
// it).
func TestHostKeepsItsPin(t *testing.T) {
	pin := strings.Repeat("ab", 32)
	h, err := fromEntry("lab", program.HostEntry{Name: "b", Address: "10.0.0.2", SSHAddress: "10.0.0.2:22", HostKey: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl", User: "root", Ports: []int{4443}, SPKI: pin})
	if err != nil {
		t.Fatal(err)
	}
	if h.SPKI != pin || h.Entry().SPKI != pin {
		t.Fatalf("host %+v, entry %+v: want the pin kept", h, h.Entry())
	}
}
