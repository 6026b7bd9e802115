package localcloud

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"net"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/relayfleet/relayfleet/infra/lab"
)

func TestBoxName(t *testing.T) {
	if got := BoxName("relay-1"); got != "relay-1" {
		t.Errorf("short name: %q", got)
	}
	long := BoxName("example-fsn-steady-1-r3")
	if lab.ValidName(long) != nil || !strings.HasPrefix(long, "lc-") || long != BoxName("example-fsn-steady-1-r3") || long == BoxName("example-fsn-steady-2-r3") {
		t.Errorf("long name: %q", long)
	}
}

func TestShape(t *testing.T) {
	lm := &LabMachines{RAMScale: 0.25, MaxCores: 2}
	if s := lm.Shape(MachineSpec{Cores: 16, RAM: 32 << 30}); s.Cores != 2 || s.RAM != 8<<30 {
		t.Errorf("ccx53-like: %+v", s)
	}
	if s := lm.Shape(MachineSpec{Cores: 2, RAM: 512 << 20}); s.RAM != MinRAM {
		t.Errorf("small: %+v, want at least MinRAM", s)
	}
	if s := (&LabMachines{MaxCores: 4}).Shape(MachineSpec{Cores: 2, RAM: 4 << 30}); s.Cores != 2 || s.RAM != 4<<30 {
		t.Errorf("unscaled: %+v", s)
	}
}

// TestCloudInitScript renders what the backend sends and checks the
// script says it in shell: it parses (sh -n), and writes each part.
func TestCloudInitScript(t *testing.T) {
	ci, err := ParseCloudInit(backendFile(t, "cloud-init.golden.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	s := decoded(CloudInitScript(ci, "demo-fsn-1"))
	for _, want := range []string{
		"rm -f /etc/ssh/ssh_host_*key*\n",
		"chmod 0600 '/etc/ssh/ssh_host_ed25519_key'\n",
		"chmod 0644 '/etc/ssh/ssh_host_ed25519_key.pub'\n",
		"chmod 0600 '/root/.ssh/authorized_keys'\n",
		"chmod 0644 '/etc/ssh/sshd_config.d/10-relayfleet.conf'\n",
		"hostname 'demo-fsn-1'\n",
		"systemctl restart ssh.service\n",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("script lacks %q", want)
		}
	}
	if strings.Contains(s, "ssh-keygen") || strings.Contains(s, "Please login") {
		t.Error("the script generates keys or refuses root, though the user data says not to")
	}
	// The keys were written after the deletion.
	if strings.Index(s, "rm -f /etc/ssh/ssh_host_") > strings.Index(s, "ssh_host_ed25519_key'") {
		t.Error("host keys deleted after they were written")
	}
	if out, err := exec.Command("sh", "-n", "-c", CloudInitScript(ci, "demo-fsn-1")).CombinedOutput(); err != nil {
		t.Errorf("sh -n: %v %s", err, out)
	}
	// cloud-init's defaults: generate keys, refuse root logins.
	def, _ := ParseCloudInit([]byte("#cloud-config\nssh_authorized_keys: [" + strings.TrimSpace(string(backendFile(t, "admin_ed25519.pub"))) + "]\n"))
	s = decoded(CloudInitScript(def, "x"))
	if !strings.Contains(s, "ssh-keygen -q -t ed25519") || !strings.Contains(s, "Please login as the user") {
		t.Errorf("defaults not applied:\n%s", s)
	}
}

var b64Arg = regexp.MustCompile(`printf '%s' '([A-Za-z0-9+/=]*)' \| base64 -d`)

// decoded is a script with its base64 payloads decoded, to read.
func decoded(s string) string {
	return b64Arg.ReplaceAllStringFunc(s, func(m string) string {
		b, _ := base64.StdEncoding.DecodeString(b64Arg.FindStringSubmatch(m)[1])
		return "<<" + string(b) + ">>"
	})
}

// TestWaitHostKey runs an SSH server in process: the wanted key is seen,
// another is reported with both fingerprints.
func TestWaitHostKey(t *testing.T) {
	_, hostPriv, _ := ed25519.GenerateKey(rand.Reader)
	signer, err := ssh.NewSignerFromKey(hostPriv)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cfg := &ssh.ServerConfig{PublicKeyCallback: func(ssh.ConnMetadata, ssh.PublicKey) (*ssh.Permissions, error) {
		return nil, errors.New("no logins here")
	}}
	cfg.AddHostKey(signer)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { ssh.NewServerConn(c, cfg); c.Close() }()
		}
	}()
	ctx := context.Background()
	if err := WaitHostKey(ctx, ln.Addr().String(), signer.PublicKey(), 10*time.Second); err != nil {
		t.Errorf("the right key: %v", err)
	}
	other, _, _ := ed25519.GenerateKey(rand.Reader)
	otherPub, _ := ssh.NewPublicKey(other)
	err = WaitHostKey(ctx, ln.Addr().String(), otherPub, time.Second)
	if err == nil || !strings.Contains(err.Error(), ssh.FingerprintSHA256(signer.PublicKey())) || !strings.Contains(err.Error(), ssh.FingerprintSHA256(otherPub)) {
		t.Errorf("another key: %v", err)
	}
}
