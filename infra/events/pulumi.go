package events

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/relayfleet/relayfleet/infra/backend"
	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/infra/provider"
	"github.com/relayfleet/relayfleet/provision"
)

// PulumiStacks runs event stacks through the Pulumi CLI: each is
// Template with the event's name and burst.
type PulumiStacks struct {
	Template program.Stack
}

// stack is the event's stack. The API requests its provider plugin
// sends are appended to ctx's request log (backend.WithRequestLog), when
// it has one.
func (p *PulumiStacks) stack(ctx context.Context, name string, b program.Burst) *program.Stack {
	s := p.Template
	s.Name, s.Burst, s.Refresh = name, &b, false
	if log := backend.RequestLog(ctx); log != "" {
		s.Env = maps.Clone(s.Env)
		if s.Env == nil {
			s.Env = map[string]string{}
		}
		s.Env[backend.RequestLogEnv] = log
	}
	return &s
}

// Up implements Stacks.
func (p *PulumiStacks) Up(ctx context.Context, stack string, b program.Burst) ([]program.HostEntry, error) {
	res, err := p.stack(ctx, stack, b).Up(ctx)
	if err != nil {
		return nil, err
	}
	return res.Hosts, nil
}

// Destroy implements Stacks: destroy, then remove the stack.
func (p *PulumiStacks) Destroy(ctx context.Context, stack string, b program.Burst) error {
	s := p.stack(ctx, stack, b)
	if _, err := s.Destroy(ctx); err != nil {
		return err
	}
	return s.Remove(ctx)
}

// Repair implements Stacks.
func (p *PulumiStacks) Repair(ctx context.Context, stack string, b program.Burst) error {
	return p.stack(ctx, stack, b).Repair(ctx)
}

// SSHProbe asks relays over SSH, checking each box's host key from the
// stack outputs. Lab boxes are reached with the lab's admin key, others
// with KeyFile or the ssh-agent.
//
// Each host is checked against its own stack's key only: a host's
// connection and known_hosts file belong to its address and pinned key
// together, never shared with another stack's host at the same address
// (a cloud hands a destroyed box's address to the next one, and a box's
// host key was in its user data), as fleethosts keeps one line per address.
type SSHProbe struct {
	Lab     provider.Config
	KeyFile string
	// RouterWait is the wait between the drain and the shed
	// (DefaultRouterWait); ShedRate the sessions a second each process
	// sends away (provision.DefaultShedRate).
	RouterWait time.Duration
	ShedRate   int

	once   sync.Once
	auth   []ssh.AuthMethod
	closer io.Closer
	dir    string
	err    error

	mu    sync.Mutex
	pools map[string]*provision.Pool // by known_hosts line: address and key
}

func (s *SSHProbe) init(hosts []program.HostEntry) error {
	s.once.Do(func() {
		auth, closer, err := provider.Auth(hosts[0].Backend, s.Lab, s.KeyFile)
		if err != nil {
			s.err = err
			return
		}
		s.auth, s.closer = auth, closer
		dir, err := os.MkdirTemp("", "relayfleet-events-")
		if err != nil {
			s.err = err
			return
		}
		s.dir = dir
		s.pools = map[string]*provision.Pool{}
	})
	return s.err
}

// pool is the pool that reaches addr with key pinned, and nothing else:
// made, with its own known_hosts file, on first use.
func (s *SSHProbe) pool(addr string, key ssh.PublicKey) (*provision.Pool, error) {
	line := knownhosts.Line([]string{knownhosts.Normalize(addr)}, key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.pools[line]; p != nil {
		return p, nil
	}
	if s.pools == nil { // closed
		return nil, errors.New("ssh probe closed")
	}
	p := &provision.Pool{Auth: s.auth, Keys: &provision.HostKeys{File: filepath.Join(s.dir, fmt.Sprintf("known_hosts.%d", len(s.pools)))}}
	if err := provision.PinKey(p.Keys.File, addr, key); err != nil {
		return nil, err
	}
	s.pools[line] = p
	return p, nil
}

// Close ends the SSH connections.
func (s *SSHProbe) Close() error {
	s.mu.Lock()
	for _, p := range s.pools {
		p.Close()
	}
	s.pools = nil
	s.mu.Unlock()
	if s.closer != nil {
		s.closer.Close()
	}
	if s.dir != "" {
		os.RemoveAll(s.dir)
	}
	return nil
}

func (s *SSHProbe) each(ctx context.Context, hosts []program.HostEntry, f func(provision.Runner) error) error {
	if len(hosts) == 0 {
		return nil
	}
	if err := s.init(hosts); err != nil {
		return err
	}
	for _, h := range hosts {
		key, _, _, _, err := ssh.ParseAuthorizedKey([]byte(h.HostKey))
		if err != nil {
			return fmt.Errorf("%s: host key: %w", h.Name, err)
		}
		host, port, err := net.SplitHostPort(h.SSHAddress)
		if err != nil {
			return fmt.Errorf("%s: ssh address %q: %w", h.Name, h.SSHAddress, err)
		}
		ph := provision.Host{Name: h.Name, Address: net.JoinHostPort(host, port), User: h.User}
		pool, err := s.pool(ph.Addr(), key)
		if err != nil {
			return err
		}
		if err := f(pool.Runner(ph)); err != nil {
			return fmt.Errorf("%s: %w", h.Name, err)
		}
	}
	return nil
}

// Listeners implements Prober.
func (s *SSHProbe) Listeners(ctx context.Context, hosts []program.HostEntry) (int64, error) {
	var total int64
	err := s.each(ctx, hosts, func(run provision.Runner) error {
		insts, err := provision.ActiveInstances(ctx, run)
		if err != nil {
			return err
		}
		n, err := provision.BoxListeners(ctx, run, insts)
		total += n
		return err
	})
	return total, err
}

// Drain implements Prober: every relay process on the hosts is marked
// draining, then, once the router has had two polls to stop routing there,
// told to send its listeners away (provision.BurstDrain), so they move to
// the boxes that stay while these still serve.
func (s *SSHProbe) Drain(ctx context.Context, hosts []program.HostEntry) error {
	boxes, err := s.boxes(ctx, hosts)
	if err != nil {
		return err
	}
	wait, rate := s.RouterWait, s.ShedRate
	if wait <= 0 {
		wait = DefaultRouterWait
	}
	if rate <= 0 {
		rate = provision.DefaultShedRate
	}
	return provision.BurstDrain(ctx, boxes, wait, rate)
}

// DefaultRouterWait is how long a burst drain waits between marking the
// relays draining and telling their listeners to move: two polls of a
// router at its default one-second poll.
const DefaultRouterWait = 2 * time.Second

// Room implements Prober: the headroom every relay process on the hosts
// reports in its /stats (provision.BoxHeadroom).
func (s *SSHProbe) Room(ctx context.Context, hosts []program.HostEntry) (int64, error) {
	var total int64
	err := s.each(ctx, hosts, func(run provision.Runner) error {
		n, err := provision.BoxHeadroom(ctx, run)
		total += n
		return err
	})
	return total, err
}

// Shed implements Prober: at most n listeners on the hosts told to move,
// at the shed rate (provision.ShedListeners); the relays stay admitting.
func (s *SSHProbe) Shed(ctx context.Context, hosts []program.HostEntry, n int64) (int64, error) {
	boxes, err := s.boxes(ctx, hosts)
	if err != nil {
		return 0, err
	}
	rate := s.ShedRate
	if rate <= 0 {
		rate = provision.DefaultShedRate
	}
	return provision.ShedListeners(ctx, boxes, n, rate)
}

// boxes are the hosts as provision.Boxes, each with its SSH runner.
func (s *SSHProbe) boxes(ctx context.Context, hosts []program.HostEntry) ([]provision.Box, error) {
	var boxes []provision.Box
	i := 0
	err := s.each(ctx, hosts, func(run provision.Runner) error {
		boxes = append(boxes, provision.Box{Name: hosts[i].Name, Run: run})
		i++
		return nil
	})
	return boxes, err
}
