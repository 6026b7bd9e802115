package provision

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/relayfleet/relayfleet/internal/testutil"
)

// sshd is a real OpenSSH server on loopback for the tests.
type sshd struct {
	addr    string
	hostKey ssh.PublicKey
	// hostKeys are all its host keys, by type (ssh-rsa, ecdsa-sha2-nistp256,
	// ssh-ed25519).
	hostKeys map[string]ssh.PublicKey
	cmd      *exec.Cmd
	p        *testutil.Proc // runs cmd
	dir      string         // its files: host_key, sshd.pid
}

type sshdOpts struct {
	maxSessions int
	port        int // 0 picks a free one
	// stock gives it an RSA, an ECDSA and an Ed25519 host key, as a stock
	// OpenSSH server has, in that order; without it, one Ed25519 key.
	stock bool
	// clientAlive, when set, is its ClientAliveInterval.
	clientAlive time.Duration
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func newRSA(t *testing.T) crypto.Signer {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func newECDSA(t *testing.T) crypto.Signer {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

const sshdPath = "/usr/sbin/sshd"

// startSSHD starts sshd accepting clientKey for the current user. It
// needs the openssh-server package (make test installs it as root).
func startSSHD(t *testing.T, clientKey ssh.PublicKey, o sshdOpts) *sshd {
	t.Helper()
	testutil.Require(t, sshdPath, "openssh-server")
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	host, hostPEM := testutil.SSHKey(t)
	hostKey := host.PublicKey()
	hostKeys := map[string]ssh.PublicKey{hostKey.Type(): hostKey}
	hostKeyLines := "HostKey " + write("host_key", hostPEM) + "\n"
	if o.stock {
		hostKeyLines = ""
		_, ed, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		for i, priv := range []crypto.Signer{newRSA(t), newECDSA(t), ed} {
			block, err := ssh.MarshalPrivateKey(priv, "")
			if err != nil {
				t.Fatal(err)
			}
			pub, err := ssh.NewPublicKey(priv.Public())
			if err != nil {
				t.Fatal(err)
			}
			hostKeys[pub.Type()] = pub
			hostKey = pub // the Ed25519 one, last
			hostKeyLines += "HostKey " + write(fmt.Sprintf("host_key_%d", i), pem.EncodeToMemory(block)) + "\n"
		}
	}
	if o.port == 0 {
		o.port = freePort(t)
	}
	if o.maxSessions == 0 {
		o.maxSessions = 10
	}
	alive := ""
	if o.clientAlive > 0 {
		alive = fmt.Sprintf("ClientAliveInterval %d\n", int(o.clientAlive.Seconds()))
	}
	authFile := write("authorized_keys", ssh.MarshalAuthorizedKey(clientKey))
	conf := write("sshd_config", fmt.Appendf(nil, `Port %d
ListenAddress 127.0.0.1
%s%sAuthorizedKeysFile %s
PidFile %s
StrictModes no
UsePAM no
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
MaxSessions %d
MaxStartups 100
AllowTcpForwarding yes
LogLevel ERROR
`, o.port, hostKeyLines, alive, authFile, filepath.Join(dir, "sshd.pid"), o.maxSessions))
	os.MkdirAll("/run/sshd", 0o755) // privilege separation directory
	p := testutil.StartLog(t, filepath.Join(dir, "sshd.log"), exec.Command(sshdPath, "-D", "-e", "-f", conf))
	s := &sshd{hostKey: hostKey, hostKeys: hostKeys, cmd: p.Cmd, p: p, dir: dir}
	t.Cleanup(s.kill)
	addr := fmt.Sprintf("127.0.0.1:%d", o.port)
	testutil.WaitFor(t, 10*time.Second, "sshd to listen on "+addr, func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	s.addr = addr
	return s
}

// kill stops sshd and every connection it serves, as a reboot would.
// Each connection is served by a child in a session of its own, so the
// children are found through /proc and killed first.
func (s *sshd) kill() {
	for _, pid := range descendants(s.cmd.Process.Pid) {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	s.p.Kill()
}

// descendants lists the processes below pid.
func descendants(pid int) []int {
	children := map[int][]int{}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range stats {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so cut at ")".
		i := bytes.LastIndexByte(data, ')')
		f := strings.Fields(string(data[i+1:]))
		child, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		if len(f) > 1 {
			ppid, _ := strconv.Atoi(f[1])
			children[ppid] = append(children[ppid], child)
		}
	}
	var out []int
	var walk func(int)
	walk = func(p int) {
		for _, c := range children[p] {
			out = append(out, c)
			walk(c)
		}
	}
	walk(pid)
	return out
}

func currentUser(t *testing.T) string {
	t.Helper()
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	return u.Username
}

// restartSSHD starts the same sshd again (same config, same host key).
// It may run in a goroutine of the test's: it fails the test with Error.
func restartSSHD(t *testing.T, s *sshd) {
	p, err := testutil.TryStartLog(t, filepath.Join(t.TempDir(), "sshd.log"), exec.Command(s.cmd.Path, s.cmd.Args[1:]...))
	if err != nil {
		t.Error(err)
		return
	}
	s.p, s.cmd = p, p.Cmd
	t.Cleanup(s.kill)
}
