package events

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"net"
	"path/filepath"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/infra/provider"
	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/provision"
)

// sshBox is an SSH server on loopback that lets any key in and answers
// every command with exit status 0, presenting the host key it is given.
func sshBox(t *testing.T, hostKey ssh.Signer) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	cfg := &ssh.ServerConfig{PublicKeyCallback: func(ssh.ConnMetadata, ssh.PublicKey) (*ssh.Permissions, error) { return nil, nil }}
	cfg.AddHostKey(hostKey)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go serveSSH(c, cfg)
		}
	}()
	return ln.Addr().String()
}

func serveSSH(c net.Conn, cfg *ssh.ServerConfig) {
	defer c.Close()
	sc, chans, reqs, err := ssh.NewServerConn(c, cfg)
	if err != nil {
		return
	}
	defer sc.Close()
	go ssh.DiscardRequests(reqs)
	for nc := range chans {
		if nc.ChannelType() != "session" {
			nc.Reject(ssh.UnknownChannelType, "sessions only")
			continue
		}
		ch, creqs, err := nc.Accept()
		if err != nil {
			continue
		}
		go func() {
			for r := range creqs {
				r.Reply(r.Type == "exec", nil)
				if r.Type == "exec" {
					ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{0}))
					ch.Close()
				}
			}
		}()
	}
}

func newSigner(t *testing.T) (ssh.Signer, ed25519.PrivateKey) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return s, priv
}

// TestSSHProbeKeysPerStack: each host is checked against its own stack's
// key only. Event a's box at an address, then event b's box at the same
// address (a cloud reuses addresses) presenting a's key (a's host key
// left its box in a's user data): the probe of b's hosts refuses it,
// though a's hosts were probed first in the same run.
func TestSSHProbeKeysPerStack(t *testing.T) {
	t.Setenv("SSH_AUTH_SOCK", "")
	aKey, _ := newSigner(t)
	bKey, _ := newSigner(t)
	_, client := newSigner(t)
	block, err := ssh.MarshalPrivateKey(client, "")
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(t.TempDir(), "id_ed25519")
	testutil.WriteFile(t, keyFile, pem.EncodeToMemory(block), 0o600)

	addr := sshBox(t, aKey) // a's box, then whoever holds a's key
	entry := func(name string, key ssh.Signer) program.HostEntry {
		return program.HostEntry{Name: name, Backend: provider.BackendStatic, SSHAddress: addr, User: "root",
			HostKey: string(ssh.MarshalAuthorizedKey(key.PublicKey()))}
	}
	s := &SSHProbe{KeyFile: keyFile}
	defer s.Close()
	ctx := context.Background()
	run := func(r provision.Runner) error { _, err := r.Run(ctx, "true", nil); return err }

	if err := s.each(ctx, []program.HostEntry{entry("a-1", aKey)}, run); err != nil {
		t.Fatalf("event a's box, with a's key: %v", err)
	}
	err = s.each(ctx, []program.HostEntry{entry("b-1", bKey)}, run)
	if !errors.Is(err, provision.ErrHostKey) {
		t.Fatalf("event b's box presenting a's key: %v, want it refused (%v)", err, provision.ErrHostKey)
	}
	// a's box again: its own key still passes.
	if err := s.each(ctx, []program.HostEntry{entry("a-1", aKey)}, run); err != nil {
		t.Fatalf("event a's box again: %v", err)
	}
}
