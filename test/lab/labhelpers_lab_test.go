//go:build lab

package labtest

import (
	"context"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/relayfleet/relayfleet/infra/fleethosts"
	"github.com/relayfleet/relayfleet/infra/lab"
	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/inventories"
	"github.com/relayfleet/relayfleet/provision"
	"github.com/relayfleet/relayfleet/test/systest"
)

// TestMain runs the tests (systest.Main): no passphrase or ssh-agent from
// the environment, the shared build of fleet and relay removed at the end.
func TestMain(m *testing.M) {
	os.Exit(systest.Main(m))
}

func mustPrefix(t *testing.T, s string) netip.Prefix {
	t.Helper()
	return netip.MustParsePrefix(s)
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

func sshPublic(s ssh.Signer) []byte { return ssh.MarshalAuthorizedKey(s.PublicKey()) }

// testKey is a fresh Ed25519 key (testutil.SSHKey).
func testKey(t *testing.T) ssh.Signer {
	s, _ := testutil.SSHKey(t)
	return s
}

// labImages is the lab image cache the tests share (systest.LabImages).
func labImages() string { return systest.LabImages() }

// tail is the last n lines of s.
func tail(s string, n int) string { return systest.Tail(s, n) }

// fleet runs the fleet binary (systest.Build) with args, and returns its
// stdout, its stderr and its exit code.
func fleet(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	bin, _ := systest.Build(t)
	return systest.Output(t, exec.Command(bin, args...))
}

// labFleetSpec is a fleet a lab test brings up with fleet up, on a lab of
// its own (its own directory, bridge and subnet; the image cache shared).
type labFleetSpec struct {
	LabDir, Bridge, Subnet string
	// Inventory is the fleet file's text; Static, when set instead, makes
	// the lab's boxes for a fleet of static servers and returns its text
	// (they are reached with the lab's admin key as --ssh-key).
	Inventory string
	Static    func(t *testing.T, l *lab.Lab) string
	// Relay is the relay build the boxes run; "" is this checkout's
	// (systest.Build).
	Relay string
}

// labFleet is a fleet up on lab boxes: its stack lists them, and every
// fleet command reaches them through it (args).
type labFleet struct {
	Lab                    *lab.Lab
	LabDir, Bridge, Subnet string
	Dir, Inv, State, Relay string
	// SSHKey is --ssh-key for a fleet of static servers.
	SSHKey string
	pulumi string
}

// upLabFleet brings spec's fleet up with fleet up (provider lab, the real
// Pulumi CLI), each box converged with the relay build; the boxes are
// deleted when the test ends. Boxes a killed run left in the lab go first.
func upLabFleet(t *testing.T, spec labFleetSpec) *labFleet {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("lab: root is needed for lab boxes")
	}
	cli, err := program.FindPulumi("")
	if err != nil {
		t.Fatalf("%v (make pulumi)", err)
	}
	l, err := lab.New(lab.Config{Dir: spec.LabDir, ImageDir: labImages(), Bridge: spec.Bridge, Subnet: mustPrefix(t, spec.Subnet), Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	clear := func() {
		bs, err := l.List(ctx, nil)
		if err != nil {
			t.Errorf("lab list: %v", err)
		}
		for _, b := range bs {
			if err := l.Delete(ctx, b.Name); err != nil {
				t.Errorf("delete %s: %v", b.Name, err)
			}
		}
		if err := l.Cleanup(ctx); err != nil {
			t.Errorf("lab cleanup: %v", err)
		}
	}
	clear()
	t.Cleanup(clear)
	f := &labFleet{Lab: l, LabDir: spec.LabDir, Bridge: spec.Bridge, Subnet: spec.Subnet, Dir: t.TempDir(), Relay: spec.Relay}
	f.Inv, f.State = filepath.Join(f.Dir, "fleet.yaml"), filepath.Join(f.Dir, "state")
	if spec.Static != nil {
		spec.Inventory, f.SSHKey = spec.Static(t, l), l.AdminKeyPath()
	}
	testutil.WriteFile(t, f.Inv, []byte(spec.Inventory), 0o644)
	if f.Relay == "" {
		_, f.Relay = systest.Build(t)
	}
	f.pulumi = cli
	if out, errOut, code := f.up(t); code != 0 {
		t.Fatalf("fleet up: exit %d\n%s%s", code, out, errOut)
	}
	return f
}

// up runs fleet up on the fleet as it stands (its fleet file may have
// changed).
func (f *labFleet) up(t *testing.T) (stdout, stderr string, code int) {
	t.Helper()
	start := time.Now()
	args := []string{"up", "--pulumi", f.pulumi, "--relay-binary", f.Relay, "--yes",
		"--lab-images", labImages(), "--lab-bridge", f.Bridge, "--lab-subnet", f.Subnet}
	stdout, stderr, code = fleet(t, append(args, f.args()...)...)
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	t.Logf("fleet up: exit %d after %.1fs: %s", code, time.Since(start).Seconds(), lines[len(lines)-1])
	return stdout, stderr, code
}

// args are the flags every fleet command takes to reach the fleet: its
// fleet file, its state dir (the stack), its lab, and for static servers
// the key.
func (f *labFleet) args(more ...string) []string {
	a := []string{"--inventory", f.Inv, "--state-dir", f.State, "--lab-dir", f.LabDir}
	if f.SSHKey != "" {
		a = append(a, "--ssh-key", f.SSHKey)
	}
	return append(a, more...)
}

// stack is the fleet's steady stack, as fleet loads it: the fleet file
// with the provider catalogue beside it.
func (f *labFleet) stack(t *testing.T) *program.Stack {
	t.Helper()
	cat, err := inventories.LoadCatalogue(inventories.Beside(f.Inv, inventories.ProvidersFile))
	if err != nil {
		t.Fatal(err)
	}
	fl, err := inventories.LoadFleet(f.Inv, cat)
	if err != nil {
		t.Fatal(err)
	}
	return &program.Stack{Fleet: fl, StateDir: f.State}
}

// hosts are the fleet's hosts as its stacks list them.
func (f *labFleet) hosts(t *testing.T) []fleethosts.Host {
	t.Helper()
	set, err := fleethosts.Read(context.Background(), f.stack(t))
	if err != nil {
		t.Fatal(err)
	}
	return set.Hosts
}

// targets are the steady boxes, reached as fleet converge reaches them.
func (f *labFleet) targets(t *testing.T) ([]provision.Target, func()) {
	t.Helper()
	ctx, st := context.Background(), f.stack(t)
	set, err := fleethosts.Read(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	ts, done, err := fleethosts.StackTargets(ctx, st, set.SteadyHosts(), fleethosts.Access{LabDir: f.LabDir})
	if err != nil {
		t.Fatal(err)
	}
	return ts, done
}
