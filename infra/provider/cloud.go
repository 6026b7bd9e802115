package provider

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	p "github.com/pulumi/pulumi-go-provider"
	"golang.org/x/crypto/ssh"

	"github.com/relayfleet/relayfleet/infra/backend"
	"github.com/relayfleet/relayfleet/infra/digitalocean"
	"github.com/relayfleet/relayfleet/infra/hcloud"
	"github.com/relayfleet/relayfleet/infra/lab"
	"github.com/relayfleet/relayfleet/provision"
)

// Environment variables of the cloud backends (the provider plugin
// inherits them from fleet or the Pulumi CLI). Tokens never pass through
// Pulumi config or state.
const (
	HcloudTokenEnv    = "HCLOUD_TOKEN"
	HcloudEndpointEnv = "HCLOUD_ENDPOINT"
	DOTokenEnv        = "DIGITALOCEAN_TOKEN"
	DOEndpointEnv     = "DIGITALOCEAN_API_URL"
)

// cloudBootTimeout bounds Create's wait for a new cloud box's SSH.
var cloudBootTimeout = 5 * time.Minute

// CreateTimeoutEnv names the variable whose Go duration bounds a cloud create's wait for its
// server to run (the create's actions), DefaultCreateTimeout when unset: a
// create whose action never finishes fails instead of hanging the run, and
// its server is deleted, so that an event plans the box on its next
// candidate.
const CreateTimeoutEnv = "RELAYFLEET_CLOUD_CREATE_TIMEOUT"

// DefaultCreateTimeout is ten times the minute or so a Hetzner or
// DigitalOcean server takes to run.
const DefaultCreateTimeout = 10 * time.Minute

// createTimeout is CreateTimeoutEnv's duration, or DefaultCreateTimeout.
func createTimeout() (time.Duration, error) {
	v := os.Getenv(CreateTimeoutEnv)
	if v == "" {
		return DefaultCreateTimeout, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%s=%q: want a positive Go duration such as 10m", CreateTimeoutEnv, v)
	}
	return d, nil
}

// cloudAPI is a cloud's box backend, with its firewalls.
type cloudAPI interface {
	backend.Backend
	backend.Namer
	backend.Firewaller
}

// newCloud returns the named cloud's API client, with the token from the
// provider configuration (a stack secret), else from the environment.
var newCloud = func(name string, c Config) (cloudAPI, error) {
	switch name {
	case BackendHcloud:
		tok, err := cloudToken(name, c.HcloudToken, "hcloud-token", HcloudTokenEnv)
		if err != nil {
			return nil, err
		}
		return hcloud.New(hcloud.Config{Token: tok, Endpoint: os.Getenv(HcloudEndpointEnv)})
	case BackendDigitalOcean:
		tok, err := cloudToken(name, c.DigitalOceanToken, "digitalocean-token", DOTokenEnv)
		if err != nil {
			return nil, err
		}
		return digitalocean.New(digitalocean.Config{Token: tok, Endpoint: os.Getenv(DOEndpointEnv)})
	}
	return nil, fmt.Errorf("backend %q: %w", name, ErrBackendMissing)
}

// cloudToken is backend's API token: the stack secret's, else the
// environment variable env's.
func cloudToken(backend, secret, secretName, env string) (string, error) {
	if secret != "" {
		return secret, nil
	}
	if tok := os.Getenv(env); tok != "" {
		return tok, nil
	}
	return "", fmt.Errorf("backend %s: no token: fleet secret set %s, or set %s", backend, secretName, env)
}

// cloudBackend makes boxes at a cloud: it generates the box's host key,
// hands it and the admin's keys to cloud-init, and waits until SSH answers
// with that key.
type cloudBackend struct {
	api     cloudAPI
	keyFile string
}

func cloudMachine(b backend.Box) (machine, error) {
	if !b.IPv4.IsValid() {
		return machine{}, fmt.Errorf("server %s has no public IPv4 address", b.Name)
	}
	m := machine{ID: b.ID, Addresses: []string{b.IPv4.String()}, SSHAddress: net.JoinHostPort(b.IPv4.String(), "22")}
	if b.IPv6.IsValid() {
		m.Addresses = append(m.Addresses, b.IPv6.String())
	}
	return m, nil
}

func (c cloudBackend) create(ctx context.Context, a BoxArgs) (machine, error) {
	if len(a.AuthorizedKeys) == 0 {
		return machine{}, errors.New("no authorized keys: list the admin's keys in the inventory (admin.ssh_keys)")
	}
	if err := c.clearInterrupted(ctx, a); err != nil {
		return machine{}, err
	}
	priv, pub, err := lab.NewKey("root@" + a.ServerName())
	if err != nil {
		return machine{}, fmt.Errorf("host key: %w", err)
	}
	b, err := c.createWithin(ctx, a, backend.Spec{
		Name: a.ServerName(), Shape: a.Shape, Location: a.Location, Image: a.Image,
		Labels: a.AllLabels(), HostKey: priv, AuthorizedKeys: a.AuthorizedKeys,
	})
	if err != nil {
		return machine{}, err
	}
	m, err := cloudMachine(b)
	if err == nil {
		m.HostPublicKey, m.HostPrivate = pub, string(priv)
		err = readCloudFacts(ctx, c, a, &m, cloudBootTimeout)
	}
	if err == nil {
		err = rotateCloudHostKey(ctx, c, a, &m)
	}
	if err != nil {
		// Leave nothing behind that the state does not know about.
		if derr := c.api.Delete(context.WithoutCancel(ctx), b.ID); derr != nil {
			return machine{}, fmt.Errorf("%w; deleting server %s failed too: %v", err, b.ID, derr)
		}
		return machine{}, err
	}
	return m, nil
}

// createWithin asks the cloud for the server and waits at most
// createTimeout for it to run. A create that did not finish by then (an
// action that never finishes) fails, and the server it made, found by
// name and its labels this box's, is deleted: nothing bills that the state
// does not hold.
func (c cloudBackend) createWithin(ctx context.Context, a BoxArgs, spec backend.Spec) (backend.Box, error) {
	limit, err := createTimeout()
	if err != nil {
		return backend.Box{}, err
	}
	cctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	b, err := c.api.Create(cctx, spec)
	if err == nil || ctx.Err() != nil || cctx.Err() == nil {
		return b, err
	}
	err = fmt.Errorf("server %s not running after %s (%s): %w", spec.Name, limit, CreateTimeoutEnv, err)
	dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer dcancel()
	left, found, ferr := c.api.Named(dctx, spec.Name, a.Fleet)
	switch {
	case ferr != nil:
		return backend.Box{}, fmt.Errorf("%w; looking for it to delete it failed: %v", err, ferr)
	case !found:
		return backend.Box{}, err
	}
	if aerr := backend.CheckAdopt("server", spec.Name, left.ID, left.Labels, spec.Labels); aerr != nil {
		return backend.Box{}, fmt.Errorf("%w; not deleted: %v", err, aerr)
	}
	if derr := c.api.Delete(dctx, left.ID); derr != nil && !errors.Is(derr, backend.ErrNotFound) {
		return backend.Box{}, fmt.Errorf("%w; deleting server %s failed too: %v", err, left.ID, derr)
	}
	return backend.Box{}, fmt.Errorf("%w; server %s deleted", err, left.ID)
}

// clearInterrupted deals with a server of the box's name that exists
// already in the fleet: one that no state holds, since Create is asked
// only for a box the state does not have. Its host key is the one its own
// cloud-init was given, which no state holds either: a fresh key would be
// pinned that the server does not have. One lookup by name, whatever the
// fleet's size.
//
// An event's box (its fleet, tier and event labels all this box's) was
// left by a reconcile cut off after the create request, as a reboot or
// the unit's timeout cuts one: nothing routes to it (the router's list
// comes from the stack) and one reconciler holds the event's lease, so it
// is deleted and made again, and the event still comes up. A steady box's
// server may be another operator's (a state on another disk): it is
// refused in one line naming it, and nothing is made or deleted; so is a
// server whose labels say it is another box.
func (c cloudBackend) clearInterrupted(ctx context.Context, a BoxArgs) error {
	name := a.ServerName()
	b, found, err := c.api.Named(ctx, name, a.Fleet)
	if err != nil {
		return fmt.Errorf("looking for a server named %s already: %w", name, err)
	}
	if !found {
		return nil
	}
	want := a.AllLabels()
	if err := backend.CheckAdopt("server", name, b.ID, b.Labels, want); err != nil {
		return err
	}
	if a.Event == "" || a.Event == NoEvent {
		return fmt.Errorf("server %s (id %s) exists already and its host key is in no state, so it cannot be pinned: delete the server (it may be left by an interrupted fleet up) and run again", name, b.ID)
	}
	p.GetLogger(ctx).Warningf("server %s (id %s) of event %s was left by a cut-off create (its labels are this box's, no state holds its host key): deleting it and making it again", name, b.ID, a.Event)
	if err := c.api.Delete(ctx, b.ID); err != nil && !errors.Is(err, backend.ErrNotFound) {
		return fmt.Errorf("server %s (id %s), left by a cut-off create: delete: %w", name, b.ID, err)
	}
	return nil
}

// readCloudFacts is cloudBackend.readFacts; tests replace it.
var readCloudFacts = func(ctx context.Context, c cloudBackend, a BoxArgs, m *machine, wait time.Duration) error {
	return c.readFacts(ctx, a, m, wait)
}

// rotateCloudHostKey is cloudBackend.rotateHostKey; tests replace it.
var rotateCloudHostKey = func(ctx context.Context, c cloudBackend, a BoxArgs, m *machine) error {
	return c.rotateHostKey(ctx, a, m)
}

// rotateHostKey replaces the host key cloud-init installed, which the
// cloud's metadata service serves to any process on the box for the box's
// life (and the cloud's API to whoever holds the token), with one made on
// the box (provision.HostKeyRotation): over a session pinned to the first
// key it makes the new one and reads its public half, then checks that a
// new connection pinned to that alone gets in. m then holds the new
// public key and no private key: the box's never leaves it.
func (c cloudBackend) rotateHostKey(ctx context.Context, a BoxArgs, m *machine) error {
	h := provision.Host{Name: a.ServerName(), Address: m.SSHAddress, User: "root"}
	var made ssh.PublicKey
	err := withRunner(ctx, a.Backend, c.keyFile, h, m.HostPublicKey, func(run provision.Runner) error {
		var err error
		made, err = provision.HostKeyRotation{}.Rotate(ctx, run, "root@"+a.ServerName())
		return err
	})
	if err != nil {
		return fmt.Errorf("rotate host key: %w", err)
	}
	key := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(made)))
	// sshd serves the new key once it has re-executed itself after the
	// reload: a connection that came in before may still see the first.
	deadline := time.Now().Add(hostKeyRotationWait)
	for {
		err = withRunnerRetry(ctx, a.Backend, c.keyFile, h, key, hostKeyRotationWait, func(run provision.Runner) error {
			_, err := run.Run(ctx, "true", nil)
			return err
		})
		if err == nil || !errors.Is(err, provision.ErrHostKey) || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	if err != nil {
		return fmt.Errorf("rotate host key: sshd does not serve the new key %s: %w", ssh.FingerprintSHA256(made), err)
	}
	m.HostPublicKey, m.HostPrivate = key, ""
	return nil
}

// hostKeyRotationWait bounds the wait for sshd to serve a rotated key.
const hostKeyRotationWait = 30 * time.Second

// readFacts waits until SSH answers with the box's host key, then reads
// its cores and RAM.
func (c cloudBackend) readFacts(ctx context.Context, a BoxArgs, m *machine, wait time.Duration) error {
	h := provision.Host{Name: a.ServerName(), Address: m.SSHAddress, User: "root"}
	return withRunnerRetry(ctx, a.Backend, c.keyFile, h, m.HostPublicKey, wait, func(run provision.Runner) error {
		f, err := provision.ReadFacts(ctx, run)
		if err != nil {
			return err
		}
		m.Cores, m.RAM = f.Cores, f.RAM
		return nil
	})
}

func (c cloudBackend) get(ctx context.Context, a BoxArgs, id string) (machine, error) {
	b, err := c.api.Get(ctx, id)
	if errors.Is(err, backend.ErrNotFound) {
		return machine{}, errGone
	}
	if err != nil {
		return machine{}, err
	}
	return cloudMachine(b)
}

func (c cloudBackend) delete(ctx context.Context, _ BoxArgs, id string) error {
	if id == "" {
		return nil
	}
	err := c.api.Delete(ctx, id)
	if errors.Is(err, backend.ErrNotFound) {
		return nil
	}
	return err
}

// firewallParams turns rules into what backend.Firewaller takes: the relay
// port range and the SSH admin ranges.
func firewallParams(rules []FirewallRule) ([2]uint16, []netip.Prefix, error) {
	var ports [2]uint16
	var admin []netip.Prefix
	for _, r := range rules {
		if r.Ports == "22" {
			for _, s := range r.Sources {
				pfx, err := netip.ParsePrefix(s)
				if err != nil {
					return ports, nil, fmt.Errorf("ssh source %q: %v", s, err)
				}
				if pfx.Bits() == 0 {
					return ports, nil, errors.New("ssh open to the whole internet: name the admin ranges")
				}
				admin = append(admin, pfx)
			}
			continue
		}
		lo, hi, isRange := strings.Cut(r.Ports, "-")
		if !isRange {
			hi = lo
		}
		a, err1 := strconv.ParseUint(lo, 10, 16)
		b, err2 := strconv.ParseUint(hi, 10, 16)
		if err1 != nil || err2 != nil || a == 0 || b < a {
			return ports, nil, fmt.Errorf("ports %q: want PORT or FIRST-LAST", r.Ports)
		}
		if ports[0] != 0 && (ports[0] != uint16(a) || ports[1] != uint16(b)) {
			return ports, nil, fmt.Errorf("relay ports %s differ from %d-%d: one range per firewall", r.Ports, ports[0], ports[1])
		}
		ports = [2]uint16{uint16(a), uint16(b)}
	}
	if ports[0] == 0 {
		return ports, nil, errors.New("no relay ports")
	}
	return ports, admin, nil
}
