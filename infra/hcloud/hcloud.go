package hcloud

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"github.com/relayfleet/relayfleet/internal/text"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hetznercloud/hcloud-go/v2/hcloud"

	"github.com/relayfleet/relayfleet/infra/backend"
	"github.com/relayfleet/relayfleet/internal/ctxtime"
)

// DefaultImage is the image of a Spec without one.
const DefaultImage = "debian-12"

// Config configures a Backend; only Token is required.
type Config struct {
	Token    string       // API token; sent only in the Authorization header
	Endpoint string       // API base URL; "" means hcloud.Endpoint
	HTTP     *http.Client // nil means a plain client; backend.Retry wraps its transport
	Retry    backend.Retry
	// PollInterval is how often actions and server status are polled;
	// default 1s.
	PollInterval time.Duration
}

// Backend is the Hetzner Cloud box backend.
type Backend struct {
	c     *hcloud.Client
	retry backend.Retry
	poll  time.Duration
}

var (
	_ backend.Backend    = (*Backend)(nil)
	_ backend.Firewaller = (*Backend)(nil)
	_ backend.Labeler    = (*Backend)(nil)
)

// New returns a Backend. It makes no API call.
func New(cfg Config) (*Backend, error) {
	if cfg.Token == "" {
		return nil, errors.New("hcloud: no API token")
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = time.Second
	}
	hc := &http.Client{}
	if cfg.HTTP != nil {
		c := *cfg.HTTP
		hc = &c
	}
	hc.Transport = cfg.Retry.Transport(hc.Transport)
	opts := []hcloud.ClientOption{
		hcloud.WithToken(cfg.Token),
		hcloud.WithApplication("relayfleet", ""),
		hcloud.WithHTTPClient(hc),
		// backend.Retry's transport is the one retry layer.
		hcloud.WithRetryOpts(hcloud.RetryOpts{MaxRetries: 0}),
		hcloud.WithPollOpts(hcloud.PollOpts{BackoffFunc: hcloud.ConstantBackoff(cfg.PollInterval)}),
	}
	if cfg.Endpoint != "" {
		opts = append(opts, hcloud.WithEndpoint(cfg.Endpoint))
	}
	return &Backend{c: hcloud.NewClient(opts...), retry: cfg.Retry, poll: cfg.PollInterval}, nil
}

// apiError turns an hcloud-go error into one line: the HTTP status, the
// API's error code and message, and the fields of an invalid_input error.
func apiError(err error) error {
	var he hcloud.Error
	if !errors.As(err, &he) {
		return err
	}
	var b strings.Builder
	if r := he.Response(); r != nil && r.Response != nil {
		fmt.Fprintf(&b, "%d ", r.StatusCode)
	}
	fmt.Fprintf(&b, "%s: %s", he.Code, text.Squash(he.Message))
	if d, ok := he.Details.(hcloud.ErrorDetailsInvalidInput); ok {
		for _, f := range d.Fields {
			fmt.Fprintf(&b, "; %s: %s", f.Name, text.Squash(strings.Join(f.Messages, ", ")))
		}
	}
	return &Error{Code: string(he.Code), msg: b.String(), err: err}
}

// Error is an error the API returned, as one line. It matches
// backend.ErrCapacity (errors.Is) when its code is resource_unavailable:
// the API's answer (412) when the server type cannot be placed in the
// location now.
type Error struct {
	Code string // the API's error code, e.g. "invalid_input", "not_found"
	msg  string
	err  error
}

func (e *Error) Error() string { return e.msg }
func (e *Error) Unwrap() error { return e.err }

// Is reports whether e is a capacity refusal when target is
// backend.ErrCapacity.
func (e *Error) Is(target error) bool {
	return target == backend.ErrCapacity && e.Code == string(hcloud.ErrorCodeResourceUnavailable)
}

// Create makes the server and returns it once its create actions have
// succeeded and it runs. A server called spec.Name with spec's fleet, tier
// and event labels is returned as it is; one with other labels is an
// error (another box's server is never adopted).
func (b *Backend) Create(ctx context.Context, spec backend.Spec) (backend.Box, error) {
	if err := backend.CheckSpec(spec); err != nil {
		return backend.Box{}, fmt.Errorf("hcloud create server %s: %w", spec.Name, err)
	}
	userData, err := backend.CloudInit(spec)
	if err != nil {
		return backend.Box{}, fmt.Errorf("hcloud create server %s: %w", spec.Name, err)
	}
	image := cmp.Or(spec.Image, DefaultImage)
	opts := hcloud.ServerCreateOpts{
		Name:             spec.Name,
		ServerType:       &hcloud.ServerType{Name: spec.Shape},
		Image:            &hcloud.Image{Name: image},
		Location:         &hcloud.Location{Name: spec.Location},
		UserData:         string(userData),
		StartAfterCreate: hcloud.Ptr(true),
		Labels:           spec.Labels,
		PublicNet:        &hcloud.ServerCreatePublicNet{EnableIPv4: true, EnableIPv6: true},
	}
	for try := 0; ; try++ {
		srv, err := b.existing(ctx, spec)
		if err != nil {
			return backend.Box{}, fmt.Errorf("hcloud create server %s: %w", spec.Name, err)
		}
		if srv != nil {
			return b.waitRunning(ctx, srv)
		}
		res, resp, err := b.c.Server.Create(ctx, opts)
		if err == nil {
			actions := append([]*hcloud.Action{res.Action}, res.NextActions...)
			if err := b.c.Action.WaitFor(ctx, actions...); err != nil {
				return backend.Box{}, fmt.Errorf("hcloud create server %s: %w", spec.Name, apiError(err))
			}
			return b.waitRunning(ctx, res.Server)
		}
		// Another Create of the same name got there first: look again.
		if hcloud.IsError(err, hcloud.ErrorCodeUniquenessError) && try == 0 {
			continue
		}
		// A POST that failed with a 5xx or on the network may have made
		// the server: look again before posting again.
		if !postMayRetry(resp, err) || try+1 >= b.retry.MaxAttempts() || ctx.Err() != nil {
			return backend.Box{}, fmt.Errorf("hcloud create server %s: %w", spec.Name, apiError(err))
		}
		if err := ctxtime.Sleep(ctx, b.retry.Backoff(try)); err != nil {
			return backend.Box{}, fmt.Errorf("hcloud create server %s: %w", spec.Name, err)
		}
	}
}

// postMayRetry reports whether a failed POST is worth trying again after a
// look for what it may have made.
func postMayRetry(resp *hcloud.Response, err error) bool {
	if resp != nil && resp.Response != nil {
		return backend.RetryStatus(resp.StatusCode)
	}
	var ne net.Error
	return errors.As(err, &ne)
}

// Named implements backend.Namer: one GET by name.
func (b *Backend) Named(ctx context.Context, name, fleet string) (backend.Box, bool, error) {
	srv, _, err := b.c.Server.GetByName(ctx, name)
	if err != nil {
		return backend.Box{}, false, fmt.Errorf("hcloud server named %s: %w", name, apiError(err))
	}
	if srv == nil || srv.Labels[backend.LabelFleet] != fleet {
		return backend.Box{}, false, nil
	}
	return toBox(srv), true, nil
}

// existing is the server called spec.Name, if there is one; one whose
// fleet, tier or event label differs from spec's is an error
// (backend.CheckAdopt): it is another box, never to be adopted.
func (b *Backend) existing(ctx context.Context, spec backend.Spec) (*hcloud.Server, error) {
	srv, _, err := b.c.Server.GetByName(ctx, spec.Name)
	if err != nil {
		return nil, apiError(err)
	}
	if srv == nil {
		return nil, nil
	}
	if err := backend.CheckAdopt("server", srv.Name, fmt.Sprint(srv.ID), srv.Labels, spec.Labels); err != nil {
		return nil, err
	}
	return srv, nil
}

// waitRunning polls the server until it runs.
func (b *Backend) waitRunning(ctx context.Context, srv *hcloud.Server) (backend.Box, error) {
	for {
		switch srv.Status {
		case hcloud.ServerStatusRunning:
			return toBox(srv), nil
		case hcloud.ServerStatusOff:
			// A server made with start_after_create is never off by itself.
			return backend.Box{}, fmt.Errorf("hcloud server %s (%d): off; power it on or delete it", srv.Name, srv.ID)
		case hcloud.ServerStatusDeleting:
			return backend.Box{}, fmt.Errorf("hcloud server %s (%d): being deleted", srv.Name, srv.ID)
		}
		if err := ctxtime.Sleep(ctx, b.poll); err != nil {
			return backend.Box{}, fmt.Errorf("hcloud server %s (%d): waiting for running (now %s): %w", srv.Name, srv.ID, srv.Status, err)
		}
		next, _, err := b.c.Server.GetByID(ctx, srv.ID)
		if err != nil {
			return backend.Box{}, fmt.Errorf("hcloud get server %d: %w", srv.ID, apiError(err))
		}
		if next == nil {
			return backend.Box{}, fmt.Errorf("hcloud server %s (%d): %w while waiting for it to run", srv.Name, srv.ID, backend.ErrNotFound)
		}
		srv = next
	}
}

func parseID(id string) (int64, error) {
	n, err := strconv.ParseInt(id, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("server id %q: want a positive integer", id)
	}
	return n, nil
}

// Get returns the server with the id, or an error wrapping
// backend.ErrNotFound.
func (b *Backend) Get(ctx context.Context, id string) (backend.Box, error) {
	n, err := parseID(id)
	if err != nil {
		return backend.Box{}, fmt.Errorf("hcloud get server: %w", err)
	}
	srv, _, err := b.c.Server.GetByID(ctx, n)
	if err != nil {
		return backend.Box{}, fmt.Errorf("hcloud get server %d: %w", n, apiError(err))
	}
	if srv == nil {
		return backend.Box{}, fmt.Errorf("hcloud get server %d: %w", n, backend.ErrNotFound)
	}
	return toBox(srv), nil
}

// List returns the servers carrying every label given (all servers for
// none), sorted by name, through a label selector.
func (b *Backend) List(ctx context.Context, labels map[string]string) ([]backend.Box, error) {
	if err := backend.ValidLabels(labels); err != nil {
		return nil, fmt.Errorf("hcloud list servers: %w", err)
	}
	sel := backend.Selector(labels)
	srvs, err := b.c.Server.AllWithOpts(ctx, hcloud.ServerListOpts{ListOpts: hcloud.ListOpts{LabelSelector: sel}})
	if err != nil {
		return nil, fmt.Errorf("hcloud list servers %q: %w", sel, apiError(err))
	}
	boxes := make([]backend.Box, 0, len(srvs))
	for _, s := range srvs {
		if backend.MatchLabels(s.Labels, labels) { // the selector's work, checked
			boxes = append(boxes, toBox(s))
		}
	}
	slices.SortFunc(boxes, func(a, b backend.Box) int {
		return cmp.Or(strings.Compare(a.Name, b.Name), strings.Compare(a.ID, b.ID))
	})
	return boxes, nil
}

// Delete deletes the server and waits for the delete action; a server that
// is gone already is not an error.
func (b *Backend) Delete(ctx context.Context, id string) error {
	n, err := parseID(id)
	if err != nil {
		return fmt.Errorf("hcloud delete server: %w", err)
	}
	res, _, err := b.c.Server.DeleteWithResult(ctx, &hcloud.Server{ID: n})
	if hcloud.IsError(err, hcloud.ErrorCodeNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("hcloud delete server %d: %w", n, apiError(err))
	}
	if res != nil && res.Action != nil {
		if err := b.c.Action.WaitFor(ctx, res.Action); err != nil {
			return fmt.Errorf("hcloud delete server %d: %w", n, apiError(err))
		}
	}
	return nil
}

// SetLabels replaces the server's labels (one PUT: the API sets the
// whole map).
func (b *Backend) SetLabels(ctx context.Context, id string, labels map[string]string) error {
	n, err := parseID(id)
	if err != nil {
		return fmt.Errorf("hcloud label server: %w", err)
	}
	if err := backend.ValidLabels(labels); err != nil {
		return fmt.Errorf("hcloud label server %d: %w", n, err)
	}
	if labels == nil {
		labels = map[string]string{}
	}
	_, _, err = b.c.Server.Update(ctx, &hcloud.Server{ID: n}, hcloud.ServerUpdateOpts{Labels: labels})
	if hcloud.IsError(err, hcloud.ErrorCodeNotFound) {
		return fmt.Errorf("hcloud label server %d: %w", n, backend.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("hcloud label server %d: %w", n, apiError(err))
	}
	return nil
}

func toBox(s *hcloud.Server) backend.Box {
	box := backend.Box{
		ID:     strconv.FormatInt(s.ID, 10),
		Name:   s.Name,
		Labels: s.Labels,
		Status: string(s.Status),
	}
	if a, ok := netip.AddrFromSlice(s.PublicNet.IPv4.IP); ok && !s.PublicNet.IPv4.IsUnspecified() {
		box.IPv4 = a.Unmap()
	}
	// Hetzner gives a server a /64 and configures its ::1 (public_net.ipv6.ip
	// is the network, "2001:db8:1:2::/64").
	if a, ok := netip.AddrFromSlice(s.PublicNet.IPv6.IP); ok && !s.PublicNet.IPv6.IsUnspecified() {
		if n := s.PublicNet.IPv6.Network; n != nil && a.Is6() && n.IP.Equal(s.PublicNet.IPv6.IP) {
			a = a.Next()
		}
		box.IPv6 = a
	}
	if s.ServerType != nil {
		box.Shape = s.ServerType.Name
	}
	if s.Location != nil {
		box.Location = s.Location.Name
	}
	return box
}
