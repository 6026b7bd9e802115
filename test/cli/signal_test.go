// Package clitest holds the fleet binary's system tests that need no lab
// boxes: SIGINT and SIGTERM end every long-running command, with cleanup.
// They run the built binary as a process (test/systest).
package clitest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/relayfleet/relayfleet/infra/events"
	"github.com/relayfleet/relayfleet/infra/lease"
	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/infra/program/programtest"
	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/inventories"
	"github.com/relayfleet/relayfleet/test/systest"
)

// blackhole is a loopback TCP server that accepts connections and never
// answers: an SSH server that never sends its banner, an HTTP API (a
// cloud's, a Pulumi Cloud backend) that never replies. A command that
// talks to it waits until its context ends.
type blackhole struct {
	l     net.Listener
	conns atomic.Int64
}

func newBlackhole(t *testing.T) *blackhole {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &blackhole{l: l}
	var mu sync.Mutex
	var held []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
			b.conns.Add(1)
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-done
		mu.Lock()
		for _, c := range held {
			c.Close()
		}
		mu.Unlock()
	})
	return b
}

func (b *blackhole) addr() string { return b.l.Addr().String() }

// reached returns a busy function (interrupt) that reports whether a
// connection has come in since the call.
func (b *blackhole) reached() func(int) bool {
	before := b.conns.Load()
	return func(int) bool { return b.conns.Load() > before }
}

// readingStdin is a busy function (interrupt): whether a thread of
// process pid is in a read(2) of its stdin.
func readingStdin(pid int) bool {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/syscall", pid))
	for _, f := range tasks {
		if b, err := os.ReadFile(f); err == nil && strings.HasPrefix(string(b), "0 0x0 ") {
			return true
		}
	}
	return false
}

// emptyDir fails the test when dir holds anything: a command a signal
// stopped leaves no half-written output.
func emptyDir(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	for _, e := range ents {
		t.Errorf("%s left in %s", e.Name(), dir)
	}
}

// noPulumiLocks fails the test when the file backend under state holds a
// stack lock: a run a signal stopped releases its stacks.
func noPulumiLocks(t *testing.T, state string) {
	t.Helper()
	filepath.WalkDir(filepath.Join(state, "backend", ".pulumi", "locks"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			t.Errorf("stack lock left behind: %s", p)
		}
		return nil
	})
}

// signingKey is the fleet's relay auth keys (its signing key and link
// key) in the stack the test imports.
const signingKey = "ed25519-private:ERERERERERERERERERERERERERERERERERERERERERE=\ned25519-link-private:EhISEhISEhISEhISEhISEhISEhISEhISEhISEhISEhI="

func TestMain(m *testing.M) { os.Exit(systest.Main(m)) }

const signalFleet = `version: 1
name: sig
admin:
  ranges: [198.51.100.0/24]
  ssh_keys: [%q]
access:
  public_listen: [live/]
steady:
  - name: roots
    provider: static
    shape: hetzner-robot/ax42
    processes: 2
    base_port: 4443
    hosts:
      - {address: %q, user: root, host_key: %q}
`

const signalEvents = `version: 1
fleet: fleet.yaml
events:
  - name: final
    start: 2026-12-13T19:00:00Z
    end: 2026-12-13T22:00:00Z
    peak_listeners: 200000
    broadcast: live/final
    burst:
      provider: hcloud
      shape: ccx43
      location: hel1
      max: 10
    lead_time: 45m
    drain_time: 15m
`

// TestSignalsEndCommands: SIGINT or SIGTERM ends every long-running fleet
// command promptly, while it waits on a host or an API that does not
// answer, with cleanup: exit 130 or 143, one line saying so, no process,
// temporary file, half-written output, stack lock or reconcile lease left
// behind. The real binary, the real Pulumi CLI (and the fleet's provider
// plugin under it); the hosts and APIs are loopback servers that accept
// and never answer.
func TestSignalsEndCommands(t *testing.T) {
	testutil.Short(t, "make test-long")
	if _, err := program.FindPulumi(""); err != nil {
		testutil.Skipf(t, "%v (make pulumi)", err)
	}
	bin, _ := systest.Build(t)
	dir := t.TempDir()
	signer, pemKey := testutil.SSHKey(t)
	keyFile := filepath.Join(dir, "id")
	testutil.WriteFile(t, keyFile, pemKey, 0o600)
	hostKey := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(signer.PublicKey())))

	// The steady stack lists one host, whose sshd never answers.
	sshd := newBlackhole(t)
	inv := filepath.Join(dir, "fleet.yaml")
	testutil.WriteFile(t, inv, fmt.Appendf(nil, signalFleet, hostKey, sshd.addr(), hostKey), 0o644)
	f, _, err := inventories.LoadFleetFile(inv)
	if err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "state")
	programtest.ImportStack(t, &program.Stack{Fleet: f, Name: "sig", StateDir: state}, signingKey+"\n", map[string]any{"fleet": "sig", "hosts": []any{map[string]any{
		"name": "sig-s-roots-1", "group": "roots", "backend": "static", "address": "127.0.0.1",
		"sshAddress": sshd.addr(), "hostKey": hostKey, "user": "root", "ports": []int{4443, 4444}}}})
	base := []string{"--inventory", inv, "--state-dir", state, "--ssh-key", keyFile}

	t.Run("converge", func(t *testing.T) {
		systest.Interrupt(t, bin, "fleet converge", append([]string{"converge", "--relay-binary", bin}, base...), nil, sshd.reached(), syscall.SIGTERM)
	})
	t.Run("status", func(t *testing.T) {
		systest.Interrupt(t, bin, "fleet status", append([]string{"status"}, base...), nil, sshd.reached(), syscall.SIGINT)
	})
	t.Run("hosts", func(t *testing.T) {
		// fleet hosts reads each host's release over SSH.
		systest.Interrupt(t, bin, "fleet hosts", append([]string{"hosts", "--release"}, base...), nil, sshd.reached(), syscall.SIGTERM)
	})
	t.Run("rollout", func(t *testing.T) {
		systest.Interrupt(t, bin, "fleet rollout", append([]string{"rollout", "--relay-binary", bin}, base...), nil, sshd.reached(), syscall.SIGINT)
	})
	t.Run("loadtest", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "out")
		if err := os.Mkdir(out, 0o755); err != nil {
			t.Fatal(err)
		}
		systest.Interrupt(t, bin, "fleet loadtest", append([]string{"loadtest", "--target", "sig-s-roots-1", "--relay-binary", bin, "--out", out}, base...), nil, sshd.reached(), syscall.SIGTERM)
		emptyDir(t, out)
	})
	t.Run("monitor", func(t *testing.T) {
		// A Pulumi Cloud backend that never answers holds fleet monitor in
		// the Pulumi CLI, reading the stack's hosts.
		api := newBlackhole(t)
		out := filepath.Join(t.TempDir(), "monitor")
		systest.Interrupt(t, bin, "fleet monitor", []string{"monitor", "--inventory", inv, "--state-dir", state, "--backend", "http://" + api.addr(), "--out", out},
			// A shared backend needs the team's passphrase given.
			[]string{"PULUMI_ACCESS_TOKEN=pul-0000000000000000000000000000000000000000", "PULUMI_CONFIG_PASSPHRASE=signal-test"}, api.reached(), syscall.SIGINT)
		emptyDir(t, out)
	})
	t.Run("up", func(t *testing.T) {
		// fleet up of a fresh stack: Pulumi runs the fleet's provider
		// plugin, which waits on the box's sshd for its cores and RAM.
		upState := filepath.Join(t.TempDir(), "state")
		up := []string{"up", "--yes", "--inventory", inv, "--state-dir", upState, "--ssh-key", keyFile, "--relay-binary", bin}
		systest.Interrupt(t, bin, "fleet up", up, nil, sshd.reached(), syscall.SIGTERM)
		noPulumiLocks(t, upState)
		// The stack is usable: the next up gets as far (no lock, no
		// pending operation refuses it).
		systest.Interrupt(t, bin, "fleet up", up, nil, sshd.reached(), syscall.SIGINT)
		noPulumiLocks(t, upState)
	})
	t.Run("secret set", func(t *testing.T) {
		// Waiting for the token on stdin, which never comes.
		systest.Interrupt(t, bin, "fleet secret set", []string{"secret", "set", "hcloud-token", "--inventory", inv, "--state-dir", state}, nil, readingStdin, syscall.SIGINT)
	})
	t.Run("auth rotate", func(t *testing.T) {
		// The new key goes to the stack and every box, through Pulumi's
		// run of the fleet's provider, over SSH.
		systest.Interrupt(t, bin, "fleet auth rotate", append([]string{"auth", "rotate", "--relay-binary", bin}, base...), nil, sshd.reached(), syscall.SIGTERM)
		noPulumiLocks(t, state)
	})
	t.Run("burst up", func(t *testing.T) {
		api := newBlackhole(t)
		evs := filepath.Join(dir, "events.yaml")
		testutil.WriteFile(t, evs, []byte(signalEvents), 0o644)
		systest.Interrupt(t, bin, "fleet burst up", []string{"burst", "up", "--event", "final", "--events", evs, "--state-dir", state, "--now", "2026-12-13T18:30:00Z", "--relay-binary", bin},
			[]string{"HCLOUD_TOKEN=sig-test-token", "HCLOUD_ENDPOINT=http://" + api.addr()}, api.reached(), syscall.SIGTERM)
		noPulumiLocks(t, state)
	})
	t.Run("events reconcile", func(t *testing.T) {
		// At the event's lead time the reconciler brings burst boxes up
		// through the Hetzner Cloud API, which never answers here.
		api := newBlackhole(t)
		evs := filepath.Join(dir, "events.yaml")
		testutil.WriteFile(t, evs, []byte(signalEvents), 0o644)
		reconcile := []string{"events", "reconcile", "--events", evs, "--state-dir", state, "--now", "2026-12-13T18:30:00Z", "--relay-binary", bin}
		env := []string{"HCLOUD_TOKEN=sig-test-token", "HCLOUD_ENDPOINT=http://" + api.addr()}
		systest.Interrupt(t, bin, "fleet events reconcile", reconcile, env, api.reached(), syscall.SIGTERM)
		// The lease is free: the next reconcile gets as far.
		systest.Interrupt(t, bin, "fleet events reconcile", reconcile, env, api.reached(), syscall.SIGINT)
		noPulumiLocks(t, state)
		if l, err := lease.Open(context.Background(), "file://"+filepath.Join(state, "backend"), "sig"); err != nil {
			t.Fatal(err)
		} else if ls, err := l.Read(context.Background()); err != nil || !ls.Free(time.Now()) {
			t.Errorf("fleet lease left held: %+v, %v", ls, err)
		}
		// What the run did before the signal is kept in the backend, for
		// the next reconcile to resume from.
		st := &program.Stack{StateDir: state}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		ws, err := st.ProjectWorkspace(ctx, events.StoreProject)
		if err != nil {
			t.Fatal(err)
		}
		recs, err := events.StoredRecords(ctx, ws, "sig")
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != 1 || recs[0].Event != "final" {
			t.Fatalf("records in the backend after the signal: %+v, want the event's", recs)
		}
		if !slices.ContainsFunc(recs[0].Log, func(e events.Entry) bool { return e.Action == "up-failed" }) {
			t.Errorf("the event's record lacks the up the signal stopped: %+v", recs[0].Log)
		}
	})
}
