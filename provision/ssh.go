package provision

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
	"golang.org/x/crypto/ssh/knownhosts"
)

// Runner runs a shell command on a host, feeding stdin (may be nil), and
// returns its stdout. A command that exits non-zero returns an *ExitError
// carrying its stderr.
type Runner interface {
	Run(ctx context.Context, cmd string, stdin io.Reader) ([]byte, error)
}

// Host is where to connect.
type Host struct {
	// Name is how the host is reported (box name).
	Name string
	// Address is host:port (port 22 when absent).
	Address string
	User    string
	// Jump, when set, is a host the connection is tunnelled through.
	Jump *Host
}

// Addr is host:port, port 22 when Address has none.
func (h Host) Addr() string { return h.addr() }

func (h Host) addr() string {
	if _, _, err := net.SplitHostPort(h.Address); err == nil {
		return h.Address
	}
	return net.JoinHostPort(h.Address, "22")
}

func (h Host) String() string {
	if h.Name != "" {
		return h.Name
	}
	return h.Address
}

// HostKeys checks host keys against a known_hosts file.
type HostKeys struct {
	// File is the known_hosts file holding the pinned keys.
	File string
	// AcceptNew adds the key of a host that has none in File (adopting
	// an existing server); a host whose key differs is still refused.
	// Off by default: relayfleet knows its boxes' keys before it connects.
	AcceptNew bool

	mu sync.Mutex
}

// ErrHostKey is wrapped by every host key refusal.
var ErrHostKey = errors.New("host key refused")

func (k *HostKeys) callback() ssh.HostKeyCallback {
	return func(hostname string, remote net.Addr, key ssh.PublicKey) error {
		k.mu.Lock()
		defer k.mu.Unlock()
		check, err := knownhosts.New(k.File)
		if err != nil {
			return fmt.Errorf("%w: known hosts %s: %v", ErrHostKey, k.File, err)
		}
		err = check(hostname, remote, key)
		var ke *knownhosts.KeyError
		switch {
		case err == nil:
			return nil
		case errors.As(err, &ke) && len(ke.Want) > 0:
			return fmt.Errorf("%w: %s presented %s %s, which is not the key pinned in %s (line %d)",
				ErrHostKey, hostname, key.Type(), ssh.FingerprintSHA256(key), k.File, ke.Want[0].Line)
		case errors.As(err, &ke) && k.AcceptNew:
			line := knownhosts.Line([]string{knownhosts.Normalize(hostname)}, key)
			f, err := os.OpenFile(k.File, os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o600)
			if err != nil {
				return fmt.Errorf("%w: accept new key: %v", ErrHostKey, err)
			}
			_, werr := fmt.Fprintln(f, line)
			if cerr := f.Close(); werr == nil {
				werr = cerr
			}
			if werr != nil {
				return fmt.Errorf("%w: accept new key: %v", ErrHostKey, werr)
			}
			return nil
		case errors.As(err, &ke):
			return fmt.Errorf("%w: %s has no pinned key in %s (it presented %s %s)", ErrHostKey, hostname, k.File, key.Type(), ssh.FingerprintSHA256(key))
		}
		return fmt.Errorf("%w: %v", ErrHostKey, err)
	}
}

// probeKey is a key pinned for no host: checking it against known_hosts
// makes the check list the keys that are pinned for a host.
var probeKey = func() ssh.PublicKey {
	k, err := ssh.NewPublicKey(ed25519.PublicKey(make([]byte, ed25519.PublicKeySize)))
	if err != nil {
		panic(err)
	}
	return k
}()

// algorithms lists the host key algorithms to ask addr for: those of the
// keys pinned for it, so that a server holding several host keys (a stock
// sshd has RSA, ECDSA and Ed25519) presents the pinned one. It returns nil
// (the client's defaults) when nothing is pinned for addr.
func (k *HostKeys) algorithms(addr string) []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	check, err := knownhosts.New(k.File)
	if err != nil {
		return nil
	}
	var ke *knownhosts.KeyError
	if err := check(addr, &net.TCPAddr{}, probeKey); !errors.As(err, &ke) {
		return nil
	}
	var algos []string
	for _, want := range ke.Want {
		for _, a := range keyAlgorithms(want.Key.Type()) {
			if !slices.Contains(algos, a) {
				algos = append(algos, a)
			}
		}
	}
	return algos
}

// keyAlgorithms are the signature algorithms a host key of keyType signs
// with: an RSA key with SHA-2 (OpenSSH refuses ssh-rsa's SHA-1 since 8.8),
// other keys with their own type.
func keyAlgorithms(keyType string) []string {
	switch keyType {
	case ssh.KeyAlgoRSA:
		return []string{ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256}
	case ssh.CertAlgoRSAv01:
		return []string{ssh.CertAlgoRSASHA512v01, ssh.CertAlgoRSASHA256v01}
	}
	return []string{keyType}
}

// PinKey writes a known_hosts line for addr and key to file, replacing
// nothing: it is how relayfleet pins the keys it generated for its boxes.
func PinKey(file, addr string, key ssh.PublicKey) error {
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(file, os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(f, knownhosts.Line([]string{knownhosts.Normalize(addr)}, key))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Auth returns SSH auth methods: the ssh-agent at SSH_AUTH_SOCK when it
// is set and answers, then the private key file when given.
func Auth(keyFile string) ([]ssh.AuthMethod, io.Closer, error) {
	var methods []ssh.AuthMethod
	var closer io.Closer = nopCloser{}
	if sock := os.Getenv("SSH_AUTH_SOCK"); sock != "" {
		if c, err := net.Dial("unix", sock); err == nil {
			methods = append(methods, ssh.PublicKeysCallback(agent.NewClient(c).Signers))
			closer = c
		}
	}
	if keyFile != "" {
		data, err := os.ReadFile(keyFile)
		if err != nil {
			closer.Close()
			return nil, nil, fmt.Errorf("ssh key: %w", err)
		}
		signer, err := ssh.ParsePrivateKey(data)
		var pp *ssh.PassphraseMissingError
		if errors.As(err, &pp) {
			closer.Close()
			return nil, nil, fmt.Errorf("ssh key %s is protected by a passphrase: load it into ssh-agent instead", keyFile)
		}
		if err != nil {
			closer.Close()
			return nil, nil, fmt.Errorf("ssh key %s: %w", keyFile, err)
		}
		methods = append(methods, ssh.PublicKeys(signer))
	}
	if len(methods) == 0 {
		return nil, nil, errors.New("ssh: no key: set SSH_AUTH_SOCK to an agent or give a key file")
	}
	return methods, closer, nil
}

type nopCloser struct{}

func (nopCloser) Close() error { return nil }

// Defaults for a Pool.
const (
	DefaultSessionsPerConn = 8
	DefaultMaxDials        = 16
	DefaultDialTimeout     = 10 * time.Second
	DefaultRetryFor        = 90 * time.Second
	// DefaultKeepAlive is how often an idle or busy connection asks the box
	// for a keepalive@openssh.com reply; a box that leaves
	// DefaultKeepAliveMissed of them unanswered is given up: its commands
	// fail, within about DefaultKeepAlive * (DefaultKeepAliveMissed+1).
	DefaultKeepAlive       = 10 * time.Second
	DefaultKeepAliveMissed = 3
	// DefaultCommandTimeout bounds one command on a box that still
	// answers (the slowest is a release upload on a slow link).
	DefaultCommandTimeout = 10 * time.Minute
)

// ErrNoAnswer is wrapped by the error of a command whose box stopped
// answering: keepalives unanswered, or the command past its timeout.
var ErrNoAnswer = errors.New("the box stopped answering")

// Pool holds one SSH connection per host, reused for all the host's work.
// Its zero value is not usable; set Auth and Keys.
type Pool struct {
	Auth []ssh.AuthMethod
	Keys *HostKeys
	// SessionsPerConn caps concurrent sessions on one connection (sshd's
	// MaxSessions is 10).
	SessionsPerConn int
	// MaxDials caps connection attempts in flight across the fleet.
	MaxDials int
	// DialTimeout bounds one attempt; RetryFor bounds the retries of a
	// host that does not answer yet (a box still booting).
	DialTimeout time.Duration
	RetryFor    time.Duration
	// KeepAlive is the interval of keepalive requests on each connection
	// (default DefaultKeepAlive); KeepAliveMissed how many may go
	// unanswered before the connection is closed and its commands fail
	// with ErrNoAnswer (default DefaultKeepAliveMissed).
	KeepAlive       time.Duration
	KeepAliveMissed int
	// CommandTimeout bounds each command (default DefaultCommandTimeout).
	CommandTimeout time.Duration

	once  sync.Once
	dials chan struct{}
	// life bounds dials shared by several callers: Close cancels it.
	life  context.Context
	stop  context.CancelFunc
	mu    sync.Mutex
	conns map[string]*conn
}

func (p *Pool) init() {
	p.once.Do(func() {
		n := p.MaxDials
		if n <= 0 {
			n = DefaultMaxDials
		}
		p.dials = make(chan struct{}, n)
		p.conns = map[string]*conn{}
		p.life, p.stop = context.WithCancel(context.Background())
	})
}

func (p *Pool) sessions() int {
	if p.SessionsPerConn > 0 {
		return p.SessionsPerConn
	}
	return DefaultSessionsPerConn
}

func key(h Host) string {
	k := h.User + "@" + h.addr()
	if h.Jump != nil {
		k += " via " + key(*h.Jump)
	}
	return k
}

// conn is one host's connection. ready is closed once dialing finished;
// then client or err is set.
type conn struct {
	ready  chan struct{}
	client *ssh.Client
	jump   *ssh.Client
	err    error
	slots  chan struct{}
	// dead is set (to why) when keepalives went unanswered and the
	// connection was closed.
	dead atomic.Pointer[error]
}

// keepAlive asks the box for a reply every interval until the connection
// closes; when missed requests in a row go unanswered, it marks the
// connection dead and closes it, which fails the commands running on it.
func (p *Pool) keepAlive(h Host, c *conn) {
	interval, missed := p.KeepAlive, p.KeepAliveMissed
	if interval <= 0 {
		interval = DefaultKeepAlive
	}
	if missed <= 0 {
		missed = DefaultKeepAliveMissed
	}
	closed := make(chan struct{})
	go func() { c.client.Wait(); close(closed) }()
	replies := make(chan error, 1)
	pending := false
	unanswered := 0
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-closed:
			return
		case err := <-replies:
			pending = false
			if err != nil {
				return // the connection is closed
			}
			unanswered = 0
			continue
		case <-tick.C:
		}
		if pending {
			// The last request is still unanswered.
			if unanswered++; unanswered >= missed {
				err := fmt.Errorf("ssh %s: %w: %d keepalives in a row unanswered (every %v)", h, ErrNoAnswer, unanswered, interval)
				c.dead.Store(&err)
				p.forget(h, c)
				return
			}
			continue
		}
		pending = true
		go func() {
			_, _, err := c.client.SendRequest("keepalive@openssh.com", true, nil)
			replies <- err
		}()
	}
}

// deadErr is why the connection was given up, nil while it lives.
func (c *conn) deadErr() error {
	if e := c.dead.Load(); e != nil {
		return *e
	}
	return nil
}

// Runner returns a Runner for host that shares the pool's connection to it.
func (p *Pool) Runner(h Host) Runner { return &hostRunner{p: p, h: h} }

type hostRunner struct {
	p *Pool
	h Host
}

func (r *hostRunner) Run(ctx context.Context, cmd string, stdin io.Reader) ([]byte, error) {
	return r.p.Run(ctx, r.h, cmd, stdin)
}

// Connect returns the host's connection, dialing it once; concurrent
// callers wait for the same dial. A failed dial is forgotten so that a
// later call tries again.
func (p *Pool) Connect(ctx context.Context, h Host) (*ssh.Client, error) {
	c, err := p.get(ctx, h)
	if err != nil {
		return nil, err
	}
	return c.client, nil
}

func (p *Pool) get(ctx context.Context, h Host) (*conn, error) {
	p.init()
	k := key(h)
	p.mu.Lock()
	c, ok := p.conns[k]
	if !ok {
		c = &conn{ready: make(chan struct{}), slots: make(chan struct{}, p.sessions())}
		p.conns[k] = c
		go func() {
			// Several callers may wait for this dial, so it is bound by the
			// pool's life and retry window, not by the first caller's ctx;
			// each caller stops waiting when its own ctx ends.
			dctx, cancel := context.WithTimeout(p.life, p.retryFor()+p.timeout())
			defer cancel()
			c.client, c.jump, c.err = p.dialRetry(dctx, h)
			if c.err != nil {
				p.mu.Lock()
				delete(p.conns, k)
				p.mu.Unlock()
			} else {
				go p.keepAlive(h, c)
			}
			close(c.ready)
		}()
	}
	p.mu.Unlock()
	select {
	case <-c.ready:
		if c.err != nil {
			return nil, c.err
		}
		return c, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("ssh %s: %w", h, ctx.Err())
	}
}

func (p *Pool) retryFor() time.Duration {
	if p.RetryFor > 0 {
		return p.RetryFor
	}
	return DefaultRetryFor
}

func (p *Pool) timeout() time.Duration {
	if p.DialTimeout > 0 {
		return p.DialTimeout
	}
	return DefaultDialTimeout
}

// dialRetry dials until it succeeds, the host key is refused (never
// retried), or the retry window closes; waits grow from 200 ms to 5 s
// with full jitter.
func (p *Pool) dialRetry(ctx context.Context, h Host) (*ssh.Client, *ssh.Client, error) {
	deadline := time.Now().Add(p.retryFor())
	wait := 200 * time.Millisecond
	for attempt := 1; ; attempt++ {
		client, jump, err := p.dial(ctx, h)
		if err == nil {
			return client, jump, nil
		}
		if errors.Is(err, ErrHostKey) || isAuthError(err) || ctx.Err() != nil || time.Now().Add(wait).After(deadline) {
			return nil, nil, fmt.Errorf("ssh %s: %w (after %d attempts)", h, err, attempt)
		}
		t := time.NewTimer(rand.N(wait) + wait/2)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, nil, fmt.Errorf("ssh %s: %w (after %d attempts)", h, ctx.Err(), attempt)
		case <-t.C:
		}
		wait = min(2*wait, 5*time.Second)
	}
}

func isAuthError(err error) bool {
	return err != nil && strings.Contains(err.Error(), "unable to authenticate")
}

func (p *Pool) config(h Host) *ssh.ClientConfig {
	return &ssh.ClientConfig{
		User:              h.User,
		Auth:              p.Auth,
		HostKeyCallback:   p.Keys.callback(),
		HostKeyAlgorithms: p.Keys.algorithms(h.addr()),
		Timeout:           p.timeout(),
	}
}

// dial makes one attempt, through the jump host when there is one. At
// most MaxDials attempts are in flight across the pool.
func (p *Pool) dial(ctx context.Context, h Host) (*ssh.Client, *ssh.Client, error) {
	var jump *ssh.Client
	var raw net.Conn
	if h.Jump != nil {
		jc, err := p.get(ctx, *h.Jump)
		if err != nil {
			return nil, nil, fmt.Errorf("jump host: %w", err)
		}
		jump = jc.client
		if raw, err = jump.DialContext(ctx, "tcp", h.addr()); err != nil {
			return nil, nil, fmt.Errorf("via %s: %w", *h.Jump, err)
		}
	}
	select {
	case p.dials <- struct{}{}:
	case <-ctx.Done():
		if raw != nil {
			raw.Close()
		}
		return nil, nil, ctx.Err()
	}
	defer func() { <-p.dials }()
	if raw == nil {
		d := net.Dialer{Timeout: p.timeout()}
		var err error
		if raw, err = d.DialContext(ctx, "tcp", h.addr()); err != nil {
			return nil, nil, err
		}
	}
	// ssh.NewClientConn takes no ctx: race it, and close the connection
	// on cancel or timeout so that the handshake goroutine ends.
	type result struct {
		c     ssh.Conn
		chans <-chan ssh.NewChannel
		reqs  <-chan *ssh.Request
		err   error
	}
	done := make(chan result, 1)
	raw.SetDeadline(time.Now().Add(p.timeout()))
	go func() {
		c, chans, reqs, err := ssh.NewClientConn(raw, h.addr(), p.config(h))
		done <- result{c, chans, reqs, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			raw.Close()
			return nil, nil, r.err
		}
		raw.SetDeadline(time.Time{})
		return ssh.NewClient(r.c, r.chans, r.reqs), jump, nil
	case <-ctx.Done():
		raw.Close()
		<-done
		return nil, nil, ctx.Err()
	}
}

// ExitError is a command that ran and exited non-zero.
type ExitError struct {
	Host   string
	Cmd    string
	Status int
	Stderr string
}

func (e *ExitError) Error() string {
	// The last line of stderr is usually the one that says why.
	msg := strings.TrimSpace(e.Stderr)
	if i := strings.LastIndexByte(msg, '\n'); i >= 0 {
		msg = "... " + msg[i+1:]
	}
	return fmt.Sprintf("%s: %q exited %d: %s", e.Host, e.Cmd, e.Status, msg)
}

// Run runs cmd on host over its shared connection, at most
// SessionsPerConn at a time. Cancelling ctx closes the session (the remote
// command gets SIGHUP from sshd) and returns at once.
//
// A command fails with ErrNoAnswer when the box stops answering
// keepalives (about KeepAlive * (KeepAliveMissed+1)) or when it runs past
// CommandTimeout, instead of waiting forever.
func (p *Pool) Run(ctx context.Context, h Host, cmd string, stdin io.Reader) ([]byte, error) {
	limit := p.CommandTimeout
	if limit <= 0 {
		limit = DefaultCommandTimeout
	}
	s, c, release, err := p.session(ctx, h)
	if err != nil {
		return nil, err
	}
	defer release()
	defer s.Close()
	var stdout, stderr bytes.Buffer
	s.Stdout, s.Stderr, s.Stdin = &stdout, &stderr, stdin
	if err := s.Start(cmd); err != nil {
		if dead := c.deadErr(); dead != nil {
			return nil, dead
		}
		return nil, fmt.Errorf("ssh %s: start: %w", h, err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Wait() }()
	timeout := time.NewTimer(limit)
	defer timeout.Stop()
	select {
	case err = <-done:
	case <-ctx.Done():
		s.Signal(ssh.SIGKILL)
		s.Close()
		return nil, fmt.Errorf("ssh %s: %q: %w", h, cmd, ctx.Err())
	case <-timeout.C:
		s.Signal(ssh.SIGKILL)
		s.Close()
		return nil, fmt.Errorf("ssh %s: %q: %w: no end after %v", h, cmd, ErrNoAnswer, limit)
	}
	if dead := c.deadErr(); dead != nil && err != nil {
		return stdout.Bytes(), fmt.Errorf("%w (running %q)", dead, cmd)
	}
	var ee *ssh.ExitError
	if errors.As(err, &ee) {
		return stdout.Bytes(), &ExitError{Host: h.String(), Cmd: cmd, Status: ee.ExitStatus(), Stderr: stderr.String()}
	}
	if err != nil {
		return stdout.Bytes(), fmt.Errorf("ssh %s: %q: %w", h, cmd, err)
	}
	return stdout.Bytes(), nil
}

// session opens a session on the host's connection once one of its slots
// is free. The caller calls release after closing the session.
func (p *Pool) session(ctx context.Context, h Host) (*ssh.Session, *conn, func(), error) {
	for attempt := 0; ; attempt++ {
		c, err := p.get(ctx, h)
		if err != nil {
			return nil, nil, nil, err
		}
		select {
		case c.slots <- struct{}{}:
		case <-ctx.Done():
			return nil, nil, nil, fmt.Errorf("ssh %s: %w", h, ctx.Err())
		}
		release := func() { <-c.slots }
		s, err := c.client.NewSession()
		if err == nil {
			return s, c, release, nil
		}
		release()
		if dead := c.deadErr(); dead != nil {
			return nil, nil, nil, dead // not redialled at once: it did not answer
		}
		if attempt > 0 {
			return nil, nil, nil, fmt.Errorf("ssh %s: session: %w", h, err)
		}
		// The connection died (the box rebooted, the network dropped):
		// forget it and dial afresh, once.
		p.forget(h, c)
	}
}

func (p *Pool) forget(h Host, c *conn) {
	k := key(h)
	p.mu.Lock()
	if p.conns[k] == c {
		delete(p.conns, k)
	}
	p.mu.Unlock()
	c.client.Close()
}

// Close cancels dials in flight and closes every connection.
func (p *Pool) Close() error {
	p.init()
	p.stop()
	p.mu.Lock()
	defer p.mu.Unlock()
	var errs []error
	for k, c := range p.conns {
		select {
		case <-c.ready:
			if c.client != nil {
				errs = append(errs, c.client.Close())
			}
		default:
		}
		delete(p.conns, k)
	}
	return errors.Join(errs...)
}
