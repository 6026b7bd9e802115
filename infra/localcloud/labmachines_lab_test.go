//go:build lab || e2e

package localcloud

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/relayfleet/relayfleet/infra/backend"
	"github.com/relayfleet/relayfleet/infra/lab"

	"github.com/relayfleet/relayfleet/internal/testutil"
)

// This helper's lab: its own dir, bridge and subnet.
const (
	testLabDir    = "/var/lib/relayfleet/lab-lchc"
	testLabBridge = "rflc0"
)

var testLabSubnet = netip.MustParsePrefix("10.231.109.0/24")

func testLab(t *testing.T) *lab.Lab {
	t.Helper()
	if os.Geteuid() != 0 {
		testutil.Skipf(t, "lab boxes need root")
	}
	images := os.Getenv("RELAYFLEET_LAB_IMAGES")
	if images == "" {
		images = "/var/lib/relayfleet/lab/images"
	}
	l, err := lab.New(lab.Config{Dir: testLabDir, ImageDir: images, Bridge: testLabBridge, Subnet: testLabSubnet, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestLabMachines boots a box from what our backend sends, then checks
// inside it what cloud-init would have done: the user data's host key
// (the lab's gone), root's keys (the lab's admin key gone), hostname,
// sshd's drop-in, modes; Delete removes the box. A Create whose
// cloud-init fails leaves no box.
func TestLabMachines(t *testing.T) {
	l := testLab(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	l.Cleanup(ctx)
	lm := &LabMachines{Lab: l, RAMScale: 0.125, Logf: t.Logf}

	_, adminPriv, _ := ed25519.GenerateKey(rand.Reader)
	admin, _ := ssh.NewSignerFromKey(adminPriv)
	adminLine := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(admin.PublicKey())))
	hostKey := backendFile(t, "hostkey_ed25519")
	ud, err := backend.CloudInit(backend.Spec{Name: "x", HostKey: hostKey, AuthorizedKeys: []string{adminLine}})
	if err != nil {
		t.Fatal(err)
	}
	ci, _ := ParseCloudInit(ud)
	want, _ := ci.HostPublicKey()
	name := "lchc-server-with-a-long-name-1"
	defer lm.Delete(context.Background(), name)
	m, err := lm.Create(ctx, MachineSpec{Name: name, Cores: 2, RAM: 4 << 30, Labels: map[string]string{"fleet": "lchc"}, UserData: ud})
	if err != nil {
		t.Fatal(err)
	}
	if !testLabSubnet.Contains(m.IPv4) || m.RAM != 512<<20 || m.Name != name {
		t.Errorf("machine %+v", m)
	}
	box, err := l.Get(ctx, BoxName(name))
	if err != nil || box.Labels[ServerLabel] != name || box.Labels["fleet"] != "lchc" {
		t.Fatalf("box %+v %v", box, err)
	}
	addr := box.SSHAddr()
	// Logged in with the user data's admin key, checking the user data's
	// host key.
	c, err := lab.Dial(ctx, addr, admin, want)
	if err != nil {
		t.Fatalf("ssh with the user data's keys: %v", err)
	}
	var out, errOut bytes.Buffer
	if err := lab.Run(ctx, c, `hostname; stat -c '%a %U:%G %n' /etc/ssh/ssh_host_ed25519_key /etc/ssh/ssh_host_ed25519_key.pub /root/.ssh/authorized_keys /etc/ssh/sshd_config.d/10-relayfleet.conf; ls /etc/ssh/ | grep -c ssh_host_; cat /root/.ssh/authorized_keys`, nil, &out, &errOut); err != nil {
		t.Fatalf("%v: %s %s", err, out.String(), errOut.String())
	}
	t.Logf("stdout %q stderr %q", out.String(), errOut.String())
	c.Close()
	got := out.String()
	for _, w := range []string{
		"lchc-server-with-a-long-name-1\n",
		"600 root:root /etc/ssh/ssh_host_ed25519_key\n",
		"644 root:root /etc/ssh/ssh_host_ed25519_key.pub\n",
		"600 root:root /root/.ssh/authorized_keys\n",
		"644 root:root /etc/ssh/sshd_config.d/10-relayfleet.conf\n",
		"\n2\n" + adminLine + "\n",
	} {
		if !strings.Contains(got, w) {
			t.Errorf("box lacks %q:\n%s", w, got)
		}
	}
	// The lab's admin key no longer logs in, and the lab's host key is gone.
	labSigner, _ := l.Signer()
	if _, err := lab.Dial(ctx, addr, labSigner, want); err == nil {
		t.Error("the lab's admin key still logs in")
	}
	labKey, _ := lab.ParseHostKey(box.HostKey)
	if err := WaitHostKey(ctx, addr, labKey, 2*time.Second); err == nil {
		t.Error("the box still answers with the lab's host key")
	}
	if err := lm.Delete(ctx, name); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Get(ctx, BoxName(name)); !errors.Is(err, lab.ErrNotFound) {
		t.Errorf("after Delete: %v", err)
	}

	// A cloud-init that fails inside the box (an owner the image lacks)
	// fails Create and leaves no box.
	bad := append(bytes.Clone(ud), []byte("  - path: /etc/x\n    content: x\n    owner: nosuchuser:root\n")...)
	if _, err := ParseCloudInit(bad); err != nil {
		t.Fatal(err)
	}
	if _, err := lm.Create(ctx, MachineSpec{Name: "lchc-bad", Cores: 1, RAM: 1 << 30, UserData: bad}); err == nil || !strings.Contains(err.Error(), "cloud-init") {
		t.Errorf("bad cloud-init: %v", err)
	}
	if boxes, _ := l.List(ctx, nil); len(boxes) != 0 {
		t.Errorf("boxes left: %+v", boxes)
	}
}
