package testutil

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// StartSSHD runs a real OpenSSH server (/usr/sbin/sshd) until the test
// ends, on a free port of 127.0.0.1 and the same port of each address in
// also, with hostKey (an OpenSSH PEM private key) and authorizedKeys
// (authorized_keys lines), root let in with a key. It returns its
// address on 127.0.0.1. Without sshd the test is skipped (Skipf).
func StartSSHD(t testing.TB, hostKey, authorizedKeys []byte, also ...string) (addr string) {
	t.Helper()
	const sshd = "/usr/sbin/sshd"
	if _, err := os.Stat(sshd); err != nil {
		Skipf(t, "needs openssh-server (%s; make test installs it as root)", sshd)
	}
	dir := t.TempDir()
	file := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		WriteFile(t, p, data, 0o600)
		return p
	}
	addr = "127.0.0.1:" + FreePort(t)
	_, port, _ := net.SplitHostPort(addr)
	listen := "ListenAddress 127.0.0.1\n"
	for _, a := range also {
		listen += "ListenAddress " + a + "\n"
	}
	conf := file("sshd_config", fmt.Appendf(nil, "Port %s\n%sHostKey %s\nAuthorizedKeysFile %s\nPidFile %s\nStrictModes no\nUsePAM no\n"+
		"PasswordAuthentication no\nKbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\nLogLevel ERROR\n",
		port, listen, file("host_key", hostKey), file("authorized_keys", authorizedKeys), filepath.Join(dir, "sshd.pid")))
	_ = os.MkdirAll("/run/sshd", 0o755)
	Start(t, "sshd", exec.Command(sshd, "-D", "-e", "-f", conf))
	WaitFor(t, 20*time.Second, "sshd to listen on "+addr, func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return addr
}
