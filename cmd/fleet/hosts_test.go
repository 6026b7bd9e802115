package main

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/relayfleet/relayfleet/infra/fleethosts"
	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/infra/program/programtest"
	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/inventories"
	"github.com/relayfleet/relayfleet/provision"
)

// putStack makes stack name in the state dir's file backend with outputs
// as its outputs, through the real Pulumi CLI (stack import: no program
// runs, nothing is created), and keeps the fleet's relay auth key in it.
func putStack(t *testing.T, state string, f *inventories.Fleet, name string, outputs map[string]any) {
	t.Helper()
	if _, err := program.FindPulumi(""); err != nil {
		testutil.Skipf(t, "%v (make pulumi)", err)
	}
	programtest.ImportStack(t, &program.Stack{Fleet: f, Name: name, StateDir: state}, signingState, outputs)
}

// loopbackSSHD runs a real OpenSSH server on 127.0.0.1 (and 127.0.0.2,
// the same port) that lets key in
// as root, and returns its address and host key line.
func loopbackSSHD(t *testing.T, key ssh.PublicKey) (addr, hostKey string) {
	t.Helper()
	if _, err := os.Stat("/usr/sbin/sshd"); err != nil || os.Getuid() != 0 {
		testutil.Skipf(t, "needs root and openssh-server (make test installs it as root)")
	}
	host, hostPEM := testutil.SSHKey(t)
	addr = testutil.StartSSHD(t, hostPEM, ssh.MarshalAuthorizedKey(key), "127.0.0.2")
	return addr, strings.TrimSpace(string(ssh.MarshalAuthorizedKey(host.PublicKey())))
}

// cloudFleetFiles writes cloudFleet to an inventory file in a temporary
// directory and loads it; state is the state dir beside it (not made).
func cloudFleetFiles(t *testing.T) (f *inventories.Fleet, inv, state string) {
	t.Helper()
	dir := t.TempDir()
	inv = filepath.Join(dir, "fleet.yaml")
	testutil.WriteFile(t, inv, []byte(cloudFleet), 0o644)
	f, err := loadFleet(inv)
	if err != nil {
		t.Fatal(err)
	}
	return f, inv, filepath.Join(dir, "state")
}

const cloudFleet = `version: 1
name: cloud
steady:
  - name: fsn
    provider: hcloud
    shape: ccx33
    location: fsn1
    count: 1
    processes: 2
burst:
  - name: final
    provider: digitalocean
    shape: c-8
    location: ams3
`

// TestHostsStatusConvergeOnCloudStack: a fleet of Hetzner Cloud boxes
// (and a DigitalOcean event box) as its stacks list them, the boxes a
// real sshd: fleet hosts lists them from the stacks, and fleet status and
// converge --check reach them with the stack's pinned host key where
// converge used to refuse cloud groups ("boxes are converged by fleet up").
func TestHostsStatusConvergeOnCloudStack(t *testing.T) {
	testutil.Short(t, "make test-long (runs the Pulumi CLI and sshd)")
	withKeys(t, signingState, testNow)
	signer, pemKey := testutil.SSHKey(t)
	keyFile := filepath.Join(t.TempDir(), "id")
	testutil.WriteFile(t, keyFile, pemKey, 0o600)
	addr, hostKey := loopbackSSHD(t, signer.PublicKey())
	_, otherPEM := testutil.SSHKey(t)
	other, _ := ssh.ParsePrivateKey(otherPEM)
	otherKey := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(other.PublicKey())))

	f, inv, state := cloudFleetFiles(t)
	host := func(name, group, backend, key string, ports ...int) map[string]any {
		return map[string]any{"name": name, "group": group, "backend": backend, "address": "127.0.0.1",
			"sshAddress": addr, "hostKey": key, "user": "root", "ports": ports}
	}
	_, port, _ := net.SplitHostPort(addr)
	putStack(t, state, f, "cloud", map[string]any{"fleet": "cloud", "hosts": []any{host("cloud-s-fsn-1", "fsn", "hcloud", hostKey, 4443, 4444)}})
	putStack(t, state, f, "cloud-event-final", map[string]any{"fleet": "cloud", "event": "final",
		"hosts": []any{host("cloud-e-final-1", "final", "digitalocean", hostKey, 4443)}})

	base := []string{"--inventory", inv, "--state-dir", state}
	out, errOut, code := fleet(t, append([]string{"hosts"}, base...)...)
	if code != 0 {
		t.Fatalf("fleet hosts: exit %d: %s", code, errOut)
	}
	fp := func(key string) string {
		k, _, _, _, _ := ssh.ParseAuthorizedKey([]byte(key))
		return ssh.FingerprintSHA256(k)
	}
	for _, want := range []string{
		"cloud              cloud-s-fsn-1    fsn    steady  -      hcloud        127.0.0.1  " + fp(hostKey) + "  2 (4443,4444)",
		"cloud-event-final  cloud-e-final-1  final  burst   final  digitalocean  127.0.0.1  " + fp(hostKey) + "  1 (4443)",
		"1 steady host in stack cloud, 1 in event stacks",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("fleet hosts lacks %q:\n%s", want, out)
		}
	}
	out, errOut, code = fleet(t, append([]string{"hosts", "--json"}, base...)...)
	var hj struct {
		Hosts []fleethosts.Row `json:"hosts"`
	}
	if err := json.Unmarshal([]byte(out), &hj); err != nil || code != 0 {
		t.Fatalf("fleet hosts --json: exit %d, %v: %s%s", code, err, out, errOut)
	}
	if len(hj.Hosts) != 2 || hj.Hosts[0].Tier != "steady" || hj.Hosts[1].Event != "final" || hj.Hosts[1].SSHAddress != addr || hj.Hosts[0].Fingerprint != fp(hostKey) {
		t.Errorf("fleet hosts --json: %+v", hj.Hosts)
	}

	// status reads every host of the stacks, over SSH, with --ssh-key.
	out, errOut, code = fleet(t, append([]string{"status", "--json", "--ssh-key", keyFile}, base...)...)
	var sj struct {
		Boxes []provision.BoxReport `json:"boxes"`
	}
	if err := json.Unmarshal([]byte(out), &sj); err != nil || code != 0 {
		t.Fatalf("fleet status: exit %d, %v: %s%s", code, err, out, errOut)
	}
	if len(sj.Boxes) != 2 || sj.Boxes[0].Host != "cloud-s-fsn-1" || sj.Boxes[1].Host != "cloud-e-final-1" {
		t.Errorf("fleet status boxes: %+v", sj.Boxes)
	}
	// converge --check reaches the steady box (and would change it: it is
	// this machine, no relay box) instead of refusing the hcloud group.
	exe, _ := os.Executable()
	out, errOut, code = fleet(t, append([]string{"converge", "--check", "--json", "--relay-binary", exe, "--ssh-key", keyFile}, base...)...)
	if code != provision.ExitChanges || !strings.Contains(out, `"host":"cloud-s-fsn-1"`) || strings.Contains(out, "cloud-e-final-1") || strings.Contains(out, `"error"`) {
		t.Errorf("fleet converge --check: exit %d, want %d (changes to make on the steady box only):\n%s%s", code, provision.ExitChanges, out, errOut)
	}

	// An event stack pins another key than its box's: nothing is trusted.
	wrong := host("cloud-e-wrong-1", "final", "digitalocean", otherKey, 4443)
	wrong["sshAddress"] = "127.0.0.2:" + port
	putStack(t, state, f, "cloud-event-wrong", map[string]any{"fleet": "cloud", "event": "wrong", "hosts": []any{wrong}})
	out, errOut, code = fleet(t, append([]string{"status", "--ssh-key", keyFile}, base...)...)
	if code != provision.ExitHostsFailed || !strings.Contains(errOut, "1 of 3 boxes could not be read") || !strings.Contains(out, "cloud-e-wrong-1: FAILED") {
		t.Errorf("status with a host key that is not the stack's: exit %d, stderr %q; want %d, one box unread:\n%s", code, errOut, provision.ExitHostsFailed, out)
	}
	// fleet hosts --release reads each box over SSH, the same way.
	out, errOut, code = fleet(t, append([]string{"hosts", "--release", "--ssh-key", keyFile}, base...)...)
	if code != provision.ExitHostsFailed || !strings.Contains(errOut, "1 of 3 hosts could not be read") || !strings.Contains(out, "cloud-e-wrong-1: FAILED") ||
		strings.Contains(out, "cloud-s-fsn-1: FAILED") {
		t.Errorf("hosts --release with a host key that is not the stack's: exit %d, stderr %q; want %d, that host alone failed:\n%s", code, errOut, provision.ExitHostsFailed, out)
	}
}

// TestHostsNeedsAStack: no stack, no hosts, and the error says what to do.
func TestHostsNeedsAStack(t *testing.T) {
	dir := t.TempDir()
	inv := filepath.Join(dir, "fleet.yaml")
	testutil.WriteFile(t, inv, []byte(cloudFleet), 0o644)
	for _, cmd := range []string{"hosts", "status", "rollout", "converge", "rollback", "releases"} {
		args := []string{cmd, "--inventory", inv, "--state-dir", filepath.Join(dir, "state")}
		exe, _ := os.Executable()
		if cmd == "rollout" || cmd == "converge" {
			args = append(args, "--relay-binary", exe)
		}
		withKeys(t, signingState, testNow)
		_, errOut, code := fleet(t, args...)
		want := "stack cloud: no such stack (state dir " + filepath.Join(dir, "state") + " has no backend): run fleet up first"
		if code != 1 || !strings.Contains(errOut, want) {
			t.Errorf("fleet %s without a stack: exit %d, stderr %q; want 1, %q", cmd, code, errOut, want)
		}
	}
}
