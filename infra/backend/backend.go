package backend

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"strings"
)

// Spec is the box a backend creates.
type Spec struct {
	Name     string            // unique per fleet; the cloud server name
	Shape    string            // server type / size slug (lab: small|medium)
	Location string            // hcloud location / DigitalOcean region
	Image    string            // "" means the backend's default (debian-12 / debian-12-x64)
	Labels   map[string]string // fleet, tier, event, group: put on every box (DigitalOcean: tags "key:value")
	// HostKey is the box's SSH host private key that relayfleet generated
	// (PEM, ed25519). It is never logged: String, GoString and LogValue
	// leave it out.
	HostKey        []byte
	AuthorizedKeys []string // admin public keys (authorized_keys lines) for root
}

// String describes s without its host key.
func (s Spec) String() string {
	return fmt.Sprintf("{Name:%s Shape:%s Location:%s Image:%s Labels:%v HostKey:[redacted] AuthorizedKeys:%d}",
		s.Name, s.Shape, s.Location, s.Image, s.Labels, len(s.AuthorizedKeys))
}

// GoString is String, so that %#v does not print the host key either.
func (s Spec) GoString() string { return "backend.Spec" + s.String() }

// LogValue implements slog.LogValuer without the host key.
func (s Spec) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("name", s.Name), slog.String("shape", s.Shape),
		slog.String("location", s.Location), slog.String("image", s.Image),
		slog.Any("labels", s.Labels), slog.Int("authorized_keys", len(s.AuthorizedKeys)),
	)
}

// Box is a server as a backend reports it.
type Box struct {
	ID       string            // backend id (hcloud server id, DigitalOcean droplet id, lab name)
	Name     string            // the server's name, Spec.Name
	IPv4     netip.Addr        // public IPv4 address
	IPv6     netip.Addr        // public IPv6 address; may be invalid
	Labels   map[string]string // labels (DigitalOcean: from its "key:value" tags)
	Status   string            // StatusRunning, StatusStarting, StatusOff, or the backend's own word
	Shape    string            // server type / size slug
	Location string            // hcloud location / DigitalOcean region
}

// Box statuses common to the backends. A backend reports other states in
// its own words.
const (
	StatusRunning  = "running"
	StatusStarting = "starting"
	StatusOff      = "off"
)

// Backend is what every box backend implements.
type Backend interface {
	// Create makes the box and returns it once the cloud reports it running.
	// It is idempotent by Name: a server with that name and the same fleet
	// label is returned, not duplicated.
	Create(ctx context.Context, s Spec) (Box, error)
	// Get returns the box with the backend id, or an error wrapping
	// ErrNotFound when it is gone.
	Get(ctx context.Context, id string) (Box, error)
	// List returns all boxes carrying every label given, sorted by name.
	List(ctx context.Context, labels map[string]string) ([]Box, error)
	// Delete deletes the box and returns once it is gone; deleting a
	// missing box is not an error.
	Delete(ctx context.Context, id string) error
}

// Namer is implemented by the cloud backends: the server of a name, in
// one or two API calls whatever the fleet's size (the name is unique per
// fleet).
type Namer interface {
	// Named returns the server called name that carries the fleet label
	// fleet, and false when there is none.
	Named(ctx context.Context, name, fleet string) (Box, bool, error)
}

// Labeler is implemented by the cloud backends: a box's labels change in
// place (a key rotation or a new label does not replace a box).
type Labeler interface {
	// SetLabels makes labels the box's labels: those it carries and
	// labels does not name go, the others are set. A box that is gone is
	// an error wrapping ErrNotFound.
	SetLabels(ctx context.Context, id string, labels map[string]string) error
}

// Firewaller is implemented by the cloud backends: one firewall per fleet,
// applied to the boxes that carry its labels.
type Firewaller interface {
	// EnsureFirewall creates the firewall called name, or brings an existing
	// one to the rules Rules(relayPorts, adminRanges) and to the boxes
	// carrying labels, and returns its id.
	EnsureFirewall(ctx context.Context, name string, labels map[string]string, relayPorts [2]uint16, adminRanges []netip.Prefix) (string, error)
	// DeleteFirewall deletes the firewall; a missing one is not an error.
	DeleteFirewall(ctx context.Context, id string) error
}

// ErrNotFound is wrapped by Get for a box that does not exist.
var ErrNotFound = errors.New("box not found")

// ErrCapacity is matched (errors.Is) by Create's error when the cloud
// refused the box for want of capacity: its shape is not to be had in its
// location now (Hetzner: resource_unavailable; DigitalOcean: 422 "Size is
// not available in this region."). Nothing was made and the create is not
// retried: another location or shape, or a later try, may succeed.
var ErrCapacity = errors.New("no capacity for the shape in the location")

// LabelFleet is the label every box carries; Create's idempotence is by
// name within a fleet.
const LabelFleet = "fleet"

// IdentityLabels are the labels that say which box a server is: its
// fleet, its tier (steady or burst) and its event ("none" for steady
// boxes). A server found by name is adopted only when they all match
// (CheckAdopt): two boxes may share a name, never an identity.
var IdentityLabels = []string{LabelFleet, "tier", "event"}

// CheckAdopt refuses to take the kind ("server", "firewall") called name
// (backend id id, with labels have) as the one whose labels are want,
// unless every identity label that want carries has the same value on
// have. The error is one line naming it and the first label that differs.
func CheckAdopt(kind, name, id string, have, want map[string]string) error {
	for _, k := range IdentityLabels {
		w, ok := want[k]
		if !ok {
			continue
		}
		if h := have[k]; h != w {
			shown := fmt.Sprintf("%q", h)
			if _, ok := have[k]; !ok {
				shown = "missing"
			}
			return fmt.Errorf("the name is taken by %s %s (id %s) whose label %s %s, not %q: refusing to adopt it", kind, name, id, k, shown, w)
		}
	}
	return nil
}

// maxLabel is the longest label key or value: hcloud's limit, and within
// DigitalOcean's 255-character tags as key:value.
const maxLabel = 63

// ValidLabels checks labels against the rules every backend accepts: keys
// and values of 1-63 letters, digits, '-' and '_', starting and ending with
// a letter or digit (hcloud labels allow '.' and '/' too, DigitalOcean tags
// do not; a ':' separates key and value in a tag).
func ValidLabels(labels map[string]string) error {
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		if err := validLabelPart(k); err != nil {
			return fmt.Errorf("label key %q: %w", k, err)
		}
		if err := validLabelPart(labels[k]); err != nil {
			return fmt.Errorf("label %s value %q: %w", k, labels[k], err)
		}
	}
	return nil
}

func validLabelPart(s string) error {
	if s == "" || len(s) > maxLabel {
		return fmt.Errorf("want 1 to %d characters", maxLabel)
	}
	alnum := func(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' }
	for i := 0; i < len(s); i++ {
		if c := s[i]; !alnum(c) && c != '-' && c != '_' {
			return fmt.Errorf("character %q: want letters, digits, '-' and '_'", c)
		}
	}
	if !alnum(s[0]) || !alnum(s[len(s)-1]) {
		return errors.New("want a letter or digit first and last")
	}
	return nil
}

// MatchLabels reports whether have carries every label in want.
func MatchLabels(have, want map[string]string) bool {
	for k, v := range want {
		if hv, ok := have[k]; !ok || hv != v {
			return false
		}
	}
	return true
}

// Selector is labels as an hcloud label selector, "k=v,k2=v2", keys sorted.
func Selector(labels map[string]string) string {
	parts := make([]string, 0, len(labels))
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		parts = append(parts, k+"="+labels[k])
	}
	return strings.Join(parts, ",")
}

// CheckSpec checks what every cloud backend needs in a Spec before it
// calls the API: a name, a shape, a location, valid labels including the
// fleet label. The host key and authorized keys are checked by CloudInit.
func CheckSpec(s Spec) error {
	switch {
	case !validHostname(s.Name):
		return fmt.Errorf("name %q: want a hostname: 1-63 lowercase letters, digits and '-', not starting or ending with '-'", s.Name)
	case s.Shape == "":
		return errors.New("no shape")
	case s.Location == "":
		return errors.New("no location")
	case s.Labels[LabelFleet] == "":
		return fmt.Errorf("no %q label", LabelFleet)
	}
	return ValidLabels(s.Labels)
}

func validHostname(s string) bool {
	if s == "" || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}
