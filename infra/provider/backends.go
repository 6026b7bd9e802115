package provider

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/relayfleet/relayfleet/infra/lab"
	"github.com/relayfleet/relayfleet/provision"
)

// labShape maps a lab shape name to its size.
func labShape(name string) (lab.Shape, error) {
	switch name {
	case "", "small":
		return lab.Small, nil
	case "medium":
		return lab.Medium, nil
	}
	return lab.Shape{}, fmt.Errorf("lab shape %q: want small or medium", name)
}

// labBackend makes boxes on this machine (package infra/lab).
type labBackend struct{ l *lab.Lab }

func labMachine(b lab.Box) machine {
	return machine{
		ID:            b.Name,
		Addresses:     []string{b.Address.String()},
		SSHAddress:    b.SSHAddr(),
		Cores:         b.Cores,
		RAM:           b.RAM,
		HostPublicKey: b.HostKey,
	}
}

func (be labBackend) create(ctx context.Context, a BoxArgs) (machine, error) {
	shape, err := labShape(a.Shape)
	if err != nil {
		return machine{}, err
	}
	b, err := be.l.Create(ctx, lab.Spec{Name: a.ServerName(), Shape: shape, Labels: a.AllLabels(), AuthorizedKeys: a.AuthorizedKeys})
	if err != nil {
		return machine{}, err
	}
	return labMachine(b), nil
}

// labName is the lab box's name: its id, which is its name, else the
// name the inputs give it.
func labName(a BoxArgs, id string) string {
	if id != "" {
		return id
	}
	return a.ServerName()
}

func (be labBackend) get(ctx context.Context, a BoxArgs, id string) (machine, error) {
	b, err := be.l.Get(ctx, labName(a, id))
	if errors.Is(err, lab.ErrNotFound) {
		return machine{}, errGone
	}
	if err != nil {
		return machine{}, err
	}
	if b.State != lab.StateRunning {
		return machine{}, errGone // a stopped box has no address to serve on; create starts it again
	}
	return labMachine(b), nil
}

func (be labBackend) delete(ctx context.Context, a BoxArgs, id string) error {
	return be.l.Delete(ctx, labName(a, id))
}

// staticBackend adopts existing servers: it creates and destroys nothing
// and reads the server's cores and RAM over SSH, checking its host key.
type staticBackend struct{ keyFile string }

func (be staticBackend) create(ctx context.Context, a BoxArgs) (machine, error) {
	return be.get(ctx, a, "")
}

func (be staticBackend) get(ctx context.Context, a BoxArgs, _ string) (machine, error) {
	h := provision.Host{Name: a.Name, Address: a.Address, User: userOr(a.User)}
	var facts provision.Facts
	err := withRunner(ctx, BackendStatic, be.keyFile, h, a.HostKey, func(run provision.Runner) error {
		var err error
		facts, err = provision.ReadFacts(ctx, run)
		return err
	})
	if err != nil {
		return machine{}, err
	}
	host, _, err := net.SplitHostPort(h.Addr())
	if err != nil {
		return machine{}, err
	}
	return machine{
		ID:            h.Addr(),
		Addresses:     []string{host},
		SSHAddress:    h.Addr(),
		Cores:         facts.Cores,
		RAM:           facts.RAM,
		HostPublicKey: a.HostKey,
	}, nil
}

func (staticBackend) delete(context.Context, BoxArgs, string) error { return nil }

func userOr(u string) string {
	if u == "" {
		return "root"
	}
	return u
}

func parseKey(s string) (ssh.PublicKey, error) {
	if s == "" {
		return nil, errors.New("missing: want \"TYPE BASE64\" as in known_hosts")
	}
	k, _, _, _, err := ssh.ParseAuthorizedKey([]byte(s))
	if err != nil {
		return nil, fmt.Errorf("host key: %v", err)
	}
	return k, nil
}

// withRunner connects to h, accepting only hostKey, and calls f with a
// Runner on that connection. Lab boxes are reached with the lab's admin
// key; other boxes with keyFile or the ssh-agent.
func withRunner(ctx context.Context, backend, keyFile string, h provision.Host, hostKey string, f func(provision.Runner) error) error {
	return withRunnerRetry(ctx, backend, keyFile, h, hostKey, 0, f)
}

// withRunnerRetry is withRunner that keeps dialing a box that does not
// answer yet (booting) for up to retryFor (0: the pool's default).
func withRunnerRetry(ctx context.Context, backend, keyFile string, h provision.Host, hostKey string, retryFor time.Duration, f func(provision.Runner) error) error {
	key, err := parseKey(hostKey)
	if err != nil {
		return err
	}
	auth, closer, err := Auth(backend, config(ctx), keyFile)
	if err != nil {
		return err
	}
	defer closer.Close()
	dir, err := os.MkdirTemp("", "relayfleet-provider-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	known := filepath.Join(dir, "known_hosts")
	if err := provision.PinKey(known, h.Addr(), key); err != nil {
		return err
	}
	pool := &provision.Pool{Auth: auth, Keys: &provision.HostKeys{File: known}, RetryFor: retryFor}
	defer pool.Close()
	return f(pool.Runner(h))
}

// Auth is how relayfleet logs in to a box of backend: lab boxes with the
// lab's admin key (c names the lab), others with keyFile or the ssh-agent.
// Close the closer when done.
func Auth(backend string, c Config, keyFile string) ([]ssh.AuthMethod, io.Closer, error) {
	if backend != BackendLab {
		return provision.Auth(keyFile)
	}
	l, err := openLab(c)
	if err != nil {
		return nil, nil, err
	}
	signer, err := l.Signer()
	if err != nil {
		return nil, nil, err
	}
	return []ssh.AuthMethod{ssh.PublicKeys(signer)}, io.NopCloser(nil), nil
}
