package provision

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"

	"github.com/relayfleet/relayfleet/internal/testutil"
)

// fixture is an sshd, a client key, and a pool pinned to the sshd's key.
type fixture struct {
	srv    *sshd
	signer ssh.Signer
	pem    []byte
	known  string
	pool   *Pool
	host   Host
}

func newFixture(t *testing.T, o sshdOpts) *fixture {
	t.Helper()
	signer, pemKey := testutil.SSHKey(t)
	srv := startSSHD(t, signer.PublicKey(), o)
	known := filepath.Join(t.TempDir(), "known_hosts")
	if err := PinKey(known, srv.addr, srv.hostKey); err != nil {
		t.Fatal(err)
	}
	pool := &Pool{Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)}, Keys: &HostKeys{File: known}, RetryFor: 3 * time.Second, DialTimeout: 2 * time.Second}
	t.Cleanup(func() { pool.Close() })
	return &fixture{srv: srv, signer: signer, pem: pemKey, known: known, pool: pool, host: Host{Name: "box1", Address: srv.addr, User: currentUser(t)}}
}

func TestRunWithPinnedKey(t *testing.T) {
	f := newFixture(t, sshdOpts{})
	ctx := context.Background()
	out, err := f.pool.Run(ctx, f.host, "cat; echo done", strings.NewReader("hello\n"))
	if err != nil || string(out) != "hello\ndone\n" {
		t.Fatalf("Run = %q, %v", out, err)
	}
	_, err = f.pool.Run(ctx, f.host, "echo oops >&2; exit 3", nil)
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Status != 3 || strings.TrimSpace(ee.Stderr) != "oops" {
		t.Errorf("err = %#v, want exit 3 with stderr oops", err)
	}
	// One connection serves every command.
	c1, _ := f.pool.Connect(ctx, f.host)
	c2, _ := f.pool.Connect(ctx, f.host)
	if c1 == nil || c1 != c2 {
		t.Error("the pool dialed twice for one host")
	}
}

func TestWrongPinnedKeyIsRefused(t *testing.T) {
	f := newFixture(t, sshdOpts{})
	other, _ := testutil.SSHKey(t)
	known := filepath.Join(t.TempDir(), "known_hosts")
	if err := PinKey(known, f.srv.addr, other.PublicKey()); err != nil {
		t.Fatal(err)
	}
	pool := &Pool{Auth: []ssh.AuthMethod{ssh.PublicKeys(f.signer)}, Keys: &HostKeys{File: known, AcceptNew: true}, RetryFor: time.Second}
	defer pool.Close()
	start := time.Now()
	_, err := pool.Run(context.Background(), f.host, "true", nil)
	if !errors.Is(err, ErrHostKey) || !strings.Contains(err.Error(), "not the key pinned") {
		t.Fatalf("err = %v, want a host key refusal", err)
	}
	if strings.Contains(err.Error(), "attempts") && !strings.Contains(err.Error(), "after 1 attempts") {
		t.Errorf("a refused host key was retried: %v", err)
	}
	if time.Since(start) > 900*time.Millisecond {
		t.Errorf("refusal took %v; it must not be retried", time.Since(start))
	}
}

func TestUnknownHostStrictAndAcceptNew(t *testing.T) {
	f := newFixture(t, sshdOpts{})
	known := filepath.Join(t.TempDir(), "known_hosts")
	os.WriteFile(known, nil, 0o600)
	strict := &Pool{Auth: []ssh.AuthMethod{ssh.PublicKeys(f.signer)}, Keys: &HostKeys{File: known}, RetryFor: time.Second}
	defer strict.Close()
	if _, err := strict.Run(context.Background(), f.host, "true", nil); !errors.Is(err, ErrHostKey) || !strings.Contains(err.Error(), "no pinned key") {
		t.Fatalf("strict mode: err = %v", err)
	}
	adopt := &Pool{Auth: []ssh.AuthMethod{ssh.PublicKeys(f.signer)}, Keys: &HostKeys{File: known, AcceptNew: true}, RetryFor: time.Second}
	defer adopt.Close()
	if _, err := adopt.Run(context.Background(), f.host, "true", nil); err != nil {
		t.Fatalf("accept-new: %v", err)
	}
	// The key is pinned now: strict mode accepts it.
	strict2 := &Pool{Auth: []ssh.AuthMethod{ssh.PublicKeys(f.signer)}, Keys: &HostKeys{File: known}, RetryFor: time.Second}
	defer strict2.Close()
	if _, err := strict2.Run(context.Background(), f.host, "true", nil); err != nil {
		t.Fatalf("after accept-new, strict: %v", err)
	}
	data, _ := os.ReadFile(known)
	if !strings.Contains(string(data), string(ssh.MarshalAuthorizedKey(f.srv.hostKey))[:40]) {
		t.Errorf("known_hosts = %q", data)
	}
}

func TestSessionsCappedPerConnection(t *testing.T) {
	// sshd refuses an 11th concurrent session (MaxSessions 10, its
	// default); 30 at once must queue in the pool. The pool's 8 leave room
	// for sessions sshd still counts while their close is in flight.
	f := newFixture(t, sshdOpts{maxSessions: 10})
	var wg sync.WaitGroup
	errs := make(chan error, 30)
	for range 30 {
		wg.Go(func() {
			if _, err := f.pool.Run(context.Background(), f.host, "sleep 0.2", nil); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestRetriesUntilTheBoxAnswers(t *testing.T) {
	signer, _ := testutil.SSHKey(t)
	srv := startSSHD(t, signer.PublicKey(), sshdOpts{})
	// The key is pinned before the first connection, as for the lab's
	// boxes; then the box goes down and comes back while we dial.
	known := filepath.Join(t.TempDir(), "known_hosts")
	if err := PinKey(known, srv.addr, srv.hostKey); err != nil {
		t.Fatal(err)
	}
	srv.kill()
	go func() {
		time.Sleep(700 * time.Millisecond) // the fault: the box is down this long, still booting, while we dial
		restartSSHD(t, srv)
	}()
	pool := &Pool{Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)}, Keys: &HostKeys{File: known}, RetryFor: 10 * time.Second}
	defer pool.Close()
	out, err := pool.Run(context.Background(), Host{Address: srv.addr, User: currentUser(t)}, "echo up", nil)
	if err != nil || string(out) != "up\n" {
		t.Fatalf("Run = %q, %v", out, err)
	}
}

func TestRunCancelled(t *testing.T) {
	testutil.NoLeaks(t)
	f := newFixture(t, sshdOpts{})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := f.pool.Run(ctx, f.host, "sleep 30", nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("cancel took %v", d)
	}
	// The connection still works afterwards.
	if _, err := f.pool.Run(context.Background(), f.host, "true", nil); err != nil {
		t.Error(err)
	}
}

// serveConns listens on network and address until the test ends and
// serves each connection with serve, in a goroutine of its own.
func serveConns(t *testing.T, network, address string, serve func(net.Conn)) net.Listener {
	t.Helper()
	l, err := net.Listen(network, address)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go serve(c)
		}
	}()
	return l
}

func TestDialCancelledWhileHostIsSilent(t *testing.T) {
	testutil.NoLeaks(t)
	// A listener that accepts and never speaks: the handshake hangs.
	l := serveConns(t, "tcp", "127.0.0.1:0", func(c net.Conn) {
		io.Copy(io.Discard, c) // until the client hangs up
		c.Close()
	})
	signer, _ := testutil.SSHKey(t)
	pool := &Pool{Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)}, Keys: &HostKeys{File: filepath.Join(t.TempDir(), "k")}, DialTimeout: time.Minute, RetryFor: time.Minute}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := pool.Run(ctx, Host{Address: l.Addr().String(), User: "root"}, "true", nil)
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
		t.Errorf("err = %v after %v", err, time.Since(start))
	}
	pool.Close() // cancels the dial still in flight
}

func TestDialsCappedAcrossTheFleet(t *testing.T) {
	var inFlight, peak atomic.Int32
	l := serveConns(t, "tcp", "127.0.0.1:0", func(c net.Conn) {
		n := inFlight.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		// Hold the handshake (the load under test), then hang up.
		time.Sleep(300 * time.Millisecond)
		inFlight.Add(-1)
		c.Close()
	})
	signer, _ := testutil.SSHKey(t)
	pool := &Pool{Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)}, Keys: &HostKeys{File: filepath.Join(t.TempDir(), "k")}, MaxDials: 3, RetryFor: time.Millisecond}
	defer pool.Close()
	var wg sync.WaitGroup
	for i := range 9 {
		wg.Go(func() {
			// Nine hosts (one listener: users make them distinct).
			pool.Run(context.Background(), Host{Address: l.Addr().String(), User: "u" + string(rune('a'+i))}, "true", nil)
		})
	}
	wg.Wait()
	if p := peak.Load(); p > 3 || p < 2 {
		t.Errorf("peak concurrent dials = %d, want at most 3 (and some parallelism)", p)
	}
}

func TestJumpHost(t *testing.T) {
	f := newFixture(t, sshdOpts{})
	target := startSSHD(t, f.signer.PublicKey(), sshdOpts{})
	if err := PinKey(f.known, target.addr, target.hostKey); err != nil {
		t.Fatal(err)
	}
	h := Host{Name: "inner", Address: target.addr, User: currentUser(t), Jump: &f.host}
	out, err := f.pool.Run(context.Background(), h, "echo $SSH_CONNECTION", nil)
	if err != nil {
		t.Fatal(err)
	}
	// The target sees the connection coming from the jump host's sshd.
	if !strings.Contains(string(out), "127.0.0.1") || !strings.HasSuffix(strings.TrimSpace(string(out)), target.addr[strings.LastIndex(target.addr, ":")+1:]) {
		t.Errorf("SSH_CONNECTION = %q", out)
	}
}

func TestAgentAuth(t *testing.T) {
	f := newFixture(t, sshdOpts{})
	// A real agent protocol server on a unix socket, holding the key.
	keyring := agent.NewKeyring()
	for _, pemKey := range [][]byte{mustNewPEM(t), f.pem} { // an unrelated key first: the agent offers both
		priv, err := ssh.ParseRawPrivateKey(pemKey)
		if err != nil {
			t.Fatal(err)
		}
		keyring.Add(agent.AddedKey{PrivateKey: priv})
	}
	sock := filepath.Join(t.TempDir(), "agent.sock")
	serveConns(t, "unix", sock, func(c net.Conn) { agent.ServeAgent(keyring, c) })
	t.Setenv("SSH_AUTH_SOCK", sock)
	methods, closer, err := Auth("")
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	pool := &Pool{Auth: methods, Keys: &HostKeys{File: f.known}, RetryFor: time.Second}
	defer pool.Close()
	if _, err := pool.Run(context.Background(), f.host, "true", nil); err != nil {
		t.Fatal(err)
	}
}

func TestAuthKeyFile(t *testing.T) {
	t.Setenv("SSH_AUTH_SOCK", "")
	if _, _, err := Auth(""); err == nil {
		t.Error("no agent and no key file: want an error")
	}
	if _, _, err := Auth(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("missing key file accepted")
	}
	_, pemKey := testutil.SSHKey(t)
	p := filepath.Join(t.TempDir(), "id")
	os.WriteFile(p, pemKey, 0o600)
	m, c, err := Auth(p)
	if err != nil || len(m) != 1 {
		t.Fatalf("Auth = %v, %v", m, err)
	}
	c.Close()
}

func mustNewPEM(t *testing.T) []byte {
	_, p := testutil.SSHKey(t)
	return p
}

func TestRedialsAfterTheConnectionDies(t *testing.T) {
	f := newFixture(t, sshdOpts{})
	ctx := context.Background()
	if _, err := f.pool.Run(ctx, f.host, "true", nil); err != nil {
		t.Fatal(err)
	}
	before, _ := f.pool.Connect(ctx, f.host)
	// The box reboots: its sshd and every connection to it go away.
	f.srv.kill()
	restartSSHD(t, f.srv)
	out, err := f.pool.Run(ctx, f.host, "echo back", nil)
	if err != nil || string(out) != "back\n" {
		t.Fatalf("Run after reboot = %q, %v", out, err)
	}
	if after, _ := f.pool.Connect(ctx, f.host); after == before {
		t.Error("the dead connection was reused")
	}
}

// TestStockSSHDPinnedToEachKey: a stock sshd holds an RSA, an ECDSA and an
// Ed25519 host key; pinned to any one of them, the pool connects (it asks
// for the pinned key's algorithm), and a key of a type not pinned is not
// accepted in its place.
func TestStockSSHDPinnedToEachKey(t *testing.T) {
	signer, _ := testutil.SSHKey(t)
	srv := startSSHD(t, signer.PublicKey(), sshdOpts{stock: true})
	h := Host{Name: "stock", Address: srv.addr, User: currentUser(t)}
	if len(srv.hostKeys) != 3 {
		t.Fatalf("sshd has %d host keys, want 3", len(srv.hostKeys))
	}
	for _, typ := range []string{ssh.KeyAlgoRSA, ssh.KeyAlgoECDSA256, ssh.KeyAlgoED25519} {
		t.Run(typ, func(t *testing.T) {
			known := filepath.Join(t.TempDir(), "known_hosts")
			if err := PinKey(known, srv.addr, srv.hostKeys[typ]); err != nil {
				t.Fatal(err)
			}
			keys := &HostKeys{File: known}
			pool := &Pool{Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)}, Keys: keys, RetryFor: time.Second, DialTimeout: 5 * time.Second}
			defer pool.Close()
			out, err := pool.Run(context.Background(), h, "echo ok", nil)
			if err != nil || string(out) != "ok\n" {
				t.Fatalf("pinned to its %s key: %q, %v", typ, out, err)
			}
			if got := keys.algorithms(h.Addr()); len(got) == 0 || (typ == ssh.KeyAlgoRSA && got[0] != ssh.KeyAlgoRSASHA512) {
				t.Errorf("algorithms asked for a pinned %s key: %v", typ, got)
			}
		})
	}
}

// freeze stops (or continues) sshd and every process below it: the box
// stops answering while its TCP connections stay open, as a hung box or
// a dead path does.
func (s *sshd) freeze(sig syscall.Signal) {
	for _, pid := range append(descendants(s.cmd.Process.Pid), s.cmd.Process.Pid) {
		syscall.Kill(pid, sig)
	}
}

// TestFrozenBoxFailsWithinABound: a box that stops answering in the middle
// of a command is reported by the keepalives within a bound, and so is a
// command started after, instead of both waiting forever.
func TestFrozenBoxFailsWithinABound(t *testing.T) {
	f := newFixture(t, sshdOpts{})
	f.pool.KeepAlive, f.pool.KeepAliveMissed = 200*time.Millisecond, 3
	ctx := context.Background()
	if _, err := f.pool.Run(ctx, f.host, "true", nil); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := f.pool.Run(ctx, f.host, "exec sleep 120", nil)
		errc <- err
	}()
	// Freeze once the command runs on the box.
	testutil.WaitFor(t, 20*time.Second, "the command to start on the box", func() bool { return runsSleep(f.srv) })
	f.srv.freeze(syscall.SIGSTOP)
	t.Cleanup(func() { f.srv.freeze(syscall.SIGCONT) })
	start := time.Now()
	const bound = 15 * time.Second // the keepalives give up after about 0.8 s
	select {
	case err := <-errc:
		if !errors.Is(err, ErrNoAnswer) || !strings.Contains(err.Error(), "keepalives") {
			t.Errorf("the command on the frozen box: %v, want ErrNoAnswer from the keepalives", err)
		}
		t.Logf("the frozen box was reported after %v: %v", time.Since(start).Round(time.Millisecond), err)
	case <-time.After(bound):
		t.Fatalf("the command on a frozen box still waits after %v", bound)
	}
	// A command started now dials afresh and gives up within the pool's
	// retry window (3 s here) plus one dial timeout (2 s).
	start = time.Now()
	done := make(chan error, 1)
	go func() { _, err := f.pool.Run(ctx, f.host, "true", nil); done <- err }()
	select {
	case err := <-done:
		if err == nil {
			t.Error("a command on the frozen box succeeded")
		}
		t.Logf("a new command on the frozen box failed after %v: %v", time.Since(start).Round(time.Millisecond), err)
	case <-time.After(bound + 10*time.Second):
		t.Fatal("a new command on the frozen box still waits")
	}
}

// runsSleep reports whether a sleep runs below sshd.
func runsSleep(s *sshd) bool {
	for _, pid := range descendants(s.cmd.Process.Pid) {
		if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); strings.TrimSpace(string(comm)) == "sleep" {
			return true
		}
	}
	return false
}

// TestCommandTimeout: a command that does not end on a box that answers
// is cut off at the pool's CommandTimeout.
func TestCommandTimeout(t *testing.T) {
	testutil.NoLeaks(t)
	f := newFixture(t, sshdOpts{})
	f.pool.CommandTimeout = 500 * time.Millisecond
	start := time.Now()
	_, err := f.pool.Run(context.Background(), f.host, "sleep 60", nil)
	if !errors.Is(err, ErrNoAnswer) || !strings.Contains(err.Error(), "no end after 500ms") {
		t.Errorf("err = %v, want ErrNoAnswer after the command timeout", err)
	}
	if el := time.Since(start); el > 30*time.Second {
		t.Errorf("the command ran %v past a 500ms timeout", el)
	}
	// The connection still serves the next command.
	f.pool.CommandTimeout = 0
	if out, err := f.pool.Run(context.Background(), f.host, "echo ok", nil); err != nil || string(out) != "ok\n" {
		t.Errorf("after a timeout: %q, %v", out, err)
	}
}
