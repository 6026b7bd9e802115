package lab

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/relayfleet/relayfleet/internal/ctxtime"
)

// ErrHostKeyMismatch is returned when a box answers with a host key other
// than the pinned one. Waiting does not help: it is never retried.
var ErrHostKeyMismatch = errors.New("host key mismatch")

// NewKey generates an ed25519 key pair and returns the private key in
// OpenSSH PEM form, carrying comment, and the public key in authorized_keys
// form without a comment (no newline).
func NewKey(comment string) (private []byte, public string, err error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, "", err
	}
	block, err := ssh.MarshalPrivateKey(priv, comment)
	if err != nil {
		return nil, "", err
	}
	sshPub, err := ssh.NewPublicKey(pub)
	if err != nil {
		return nil, "", err
	}
	return pem.EncodeToMemory(block), strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sshPub))), nil
}

// newKey is NewKey with the comment on the public key too.
func newKey(comment string) (private []byte, public string, err error) {
	private, public, err = NewKey(comment)
	if err == nil && comment != "" {
		public += " " + comment
	}
	return private, public, err
}

// loadOrCreateKey reads the private key at path, generating it (mode 0600,
// with path.pub beside it) the first time.
func loadOrCreateKey(path, comment string) (ssh.Signer, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		priv, pub, err := newKey(comment)
		if err != nil {
			return nil, fmt.Errorf("admin key: %w", err)
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return nil, fmt.Errorf("admin key: %w", err)
		}
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, priv, 0o600); err != nil {
			return nil, fmt.Errorf("admin key: %w", err)
		}
		if err := os.WriteFile(path+".pub", []byte(pub+"\n"), 0o644); err != nil {
			return nil, fmt.Errorf("admin key: %w", err)
		}
		if err := os.Rename(tmp, path); err != nil {
			return nil, fmt.Errorf("admin key: %w", err)
		}
		b = priv
	} else if err != nil {
		return nil, fmt.Errorf("admin key: %w", err)
	}
	s, err := ssh.ParsePrivateKey(b)
	if err != nil {
		return nil, fmt.Errorf("admin key %s: %w", path, err)
	}
	return s, nil
}

// ParseHostKey parses a host key in authorized_keys form.
func ParseHostKey(s string) (ssh.PublicKey, error) {
	k, _, _, _, err := ssh.ParseAuthorizedKey([]byte(s))
	if err != nil {
		return nil, fmt.Errorf("host key: %w", err)
	}
	return k, nil
}

// Dial connects to addr (host:port) as root with signer, accepting only
// hostKey. The handshake is raced against ctx.
func Dial(ctx context.Context, addr string, signer ssh.Signer, hostKey ssh.PublicKey) (*ssh.Client, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("ssh %s: %w", addr, err)
	}
	mismatch := false
	cfg := &ssh.ClientConfig{
		User: "root",
		Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)},
		HostKeyCallback: func(_ string, _ net.Addr, key ssh.PublicKey) error {
			if !bytes.Equal(key.Marshal(), hostKey.Marshal()) {
				mismatch = true
				return fmt.Errorf("%w: got %s %s", ErrHostKeyMismatch, key.Type(), ssh.FingerprintSHA256(key))
			}
			return nil
		},
		HostKeyAlgorithms: []string{hostKey.Type()},
		Timeout:           10 * time.Second,
	}
	type result struct {
		c     ssh.Conn
		chans <-chan ssh.NewChannel
		reqs  <-chan *ssh.Request
		err   error
	}
	done := make(chan result, 1) // buffered: the goroutine never blocks
	go func() {
		c, chans, reqs, err := ssh.NewClientConn(conn, addr, cfg)
		done <- result{c, chans, reqs, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			conn.Close()
			if mismatch && !errors.Is(r.err, ErrHostKeyMismatch) {
				return nil, fmt.Errorf("ssh %s: %w: %v", addr, ErrHostKeyMismatch, r.err)
			}
			return nil, fmt.Errorf("ssh %s: %w", addr, r.err)
		}
		return ssh.NewClient(r.c, r.chans, r.reqs), nil
	case <-ctx.Done():
		conn.Close()
		return nil, fmt.Errorf("ssh %s: %w", addr, ctx.Err())
	}
}

// WaitSSH dials addr until it answers with hostKey and accepts signer, or
// until timeout. A wrong host key fails at once.
func WaitSSH(ctx context.Context, addr string, signer ssh.Signer, hostKey ssh.PublicKey, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	backoff := 50 * time.Millisecond
	for {
		actx, acancel := context.WithTimeout(ctx, 5*time.Second)
		c, err := Dial(actx, addr, signer, hostKey)
		acancel()
		if err == nil {
			return c.Close()
		}
		if errors.Is(err, ErrHostKeyMismatch) {
			return err
		}
		if serr := ctxtime.Sleep(ctx, backoff); serr != nil {
			return fmt.Errorf("wait for ssh: no answer in %s: %w", timeout, err)
		}
		backoff = min(backoff*2, 500*time.Millisecond)
	}
}

// Run runs cmd on the client's host, copying stdin (may be nil), stdout and
// stderr, and closes the session when ctx ends.
func Run(ctx context.Context, c *ssh.Client, cmd string, stdin io.Reader, stdout, stderr io.Writer) error {
	s, err := c.NewSession()
	if err != nil {
		return fmt.Errorf("ssh session: %w", err)
	}
	defer s.Close()
	s.Stdin, s.Stdout, s.Stderr = stdin, stdout, stderr
	done := make(chan error, 1)
	go func() { done <- s.Run(cmd) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		s.Signal(ssh.SIGKILL)
		s.Close()
		return ctx.Err()
	}
}
