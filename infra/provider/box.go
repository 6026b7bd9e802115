package provider

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	p "github.com/pulumi/pulumi-go-provider"
	"github.com/pulumi/pulumi-go-provider/infer"

	"github.com/relayfleet/relayfleet/infra/lab"
)

// Backends a Box may name.
const (
	BackendLab          = "lab"
	BackendStatic       = "static"
	BackendHcloud       = "hcloud"
	BackendDigitalOcean = "digitalocean"
)

// Tiers.
const (
	TierSteady = "steady"
	TierBurst  = "burst"
)

// NoEvent is the event label of boxes that belong to no event (steady).
const NoEvent = "none"

// Box is the Box resource's controller.
type Box struct{}

// BoxArgs are a Box's inputs.
type BoxArgs struct {
	Backend  string            `pulumi:"backend"`
	Name     string            `pulumi:"name"`
	Fleet    string            `pulumi:"fleet"`
	Tier     string            `pulumi:"tier"`
	Event    string            `pulumi:"event,optional"`
	Shape    string            `pulumi:"shape,optional"`
	Location string            `pulumi:"location,optional"`
	Image    string            `pulumi:"image,optional"`
	Labels   map[string]string `pulumi:"labels,optional"`
	// AuthorizedKeys are the admin's keys, put on the box for root.
	AuthorizedKeys []string `pulumi:"authorizedKeys,optional"`
	// Address, User and HostKey adopt a static server.
	Address string `pulumi:"address,optional"`
	User    string `pulumi:"user,optional"`
	HostKey string `pulumi:"hostKey,optional"`
}

// BoxState is a Box's outputs.
type BoxState struct {
	BoxArgs
	Addresses []string `pulumi:"addresses"`
	// SSHAddress is host:port of the box's sshd.
	SSHAddress    string `pulumi:"sshAddress"`
	Cores         int    `pulumi:"cores"`
	RAM           int    `pulumi:"ram"`
	HostPublicKey string `pulumi:"hostPublicKey"`
	// HostPrivateKey is set where the provider generated the key and the
	// backend does not keep it (clouds, through cloud-init); the lab keeps
	// its boxes' keys on the box alone.
	HostPrivateKey string `pulumi:"hostPrivateKey,optional" provider:"secret"`
	BackendID      string `pulumi:"backendId"`
	// AllLabels are the labels the box carries: fleet, tier, event and
	// the extra labels.
	AllLabels map[string]string `pulumi:"allLabels"`
}

// Annotate describes the resource.
func (b *Box) Annotate(a infer.Annotator) {
	a.SetToken("index", "Box")
	a.Describe(&b, "A relay box: a lab box, a cloud server, or an existing (static) server adopted by address and host key.")
}

// WireDependencies marks the generated host private key secret in every
// output and in the state (the provider:"secret" tag alone only marks the
// schema).
func (*Box) WireDependencies(f infer.FieldSelector, _ *BoxArgs, state *BoxState) {
	f.OutputField(&state.HostPrivateKey).AlwaysSecret()
}

// Annotate describes the inputs.
func (a *BoxArgs) Annotate(an infer.Annotator) {
	an.Describe(&a.Backend, "Who makes the box: lab, static, hcloud or digitalocean.")
	an.Describe(&a.Name, "The box's name at its backend.")
	an.Describe(&a.Tier, "steady or burst.")
	an.Describe(&a.Event, "The event a burst box serves (none for steady boxes).")
	an.Describe(&a.HostKey, "A static server's public host key, authorized_keys form.")
}

// AllLabels returns the labels every box carries: the extra labels, then
// fleet, tier and event, which win.
func (a BoxArgs) AllLabels() map[string]string {
	m := maps.Clone(a.Labels)
	if m == nil {
		m = map[string]string{}
	}
	ev := a.Event
	if ev == "" {
		ev = NoEvent
	}
	m["fleet"], m["tier"], m["event"] = a.Fleet, a.Tier, ev
	return m
}

// validate checks inputs that need no backend.
func (a BoxArgs) validate() []p.CheckFailure {
	var fs []p.CheckFailure
	fail := func(prop, format string, args ...any) {
		fs = append(fs, p.CheckFailure{Property: prop, Reason: fmt.Sprintf(format, args...)})
	}
	switch a.Backend {
	case BackendLab, BackendStatic, BackendHcloud, BackendDigitalOcean:
	default:
		fail("backend", "want lab, static, hcloud or digitalocean, got %q", a.Backend)
	}
	if a.Name == "" {
		fail("name", "missing")
	}
	if a.Fleet == "" {
		fail("fleet", "missing")
	}
	if a.Tier != TierSteady && a.Tier != TierBurst {
		fail("tier", "want steady or burst, got %q", a.Tier)
	}
	switch a.Backend {
	case BackendStatic:
		if a.Address == "" {
			fail("address", "a static box is adopted by address")
		}
		if _, err := parseKey(a.HostKey); err != nil {
			fail("hostKey", "%v", err)
		}
	case BackendLab:
		if err := lab.ValidName(a.Name); err != nil {
			fail("name", "%v", err)
		}
		if _, err := labShape(a.Shape); err != nil {
			fail("shape", "%v", err)
		}
	}
	return fs
}

// Check validates the inputs.
func (*Box) Check(ctx context.Context, req infer.CheckRequest) (infer.CheckResponse[BoxArgs], error) {
	args, fails, err := infer.DefaultCheck[BoxArgs](ctx, req.NewInputs)
	if err != nil || len(fails) > 0 {
		return infer.CheckResponse[BoxArgs]{Inputs: args, Failures: fails}, err
	}
	return infer.CheckResponse[BoxArgs]{Inputs: args, Failures: args.validate()}, nil
}

// machine is what a backend reports about a box.
type machine struct {
	ID            string
	Addresses     []string
	SSHAddress    string
	Cores         int
	RAM           int64
	HostPublicKey string
	HostPrivate   string
}

// errGone is returned by a backend's get for a box that no longer exists.
var errGone = errors.New("box is gone")

// boxBackend makes, finds and removes boxes of one kind.
type boxBackend interface {
	create(ctx context.Context, a BoxArgs) (machine, error)
	get(ctx context.Context, a BoxArgs, id string) (machine, error)
	delete(ctx context.Context, a BoxArgs, id string) error
}

// ErrBackendMissing is wrapped when a box names a cloud this build cannot
// reach yet.
var ErrBackendMissing = errors.New("backend not in this build")

func backendFor(ctx context.Context, name string) (boxBackend, error) {
	c := config(ctx)
	switch name {
	case BackendLab:
		l, err := openLab(c)
		if err != nil {
			return nil, err
		}
		return labBackend{l}, nil
	case BackendStatic:
		return staticBackend{keyFile: c.SSHKeyFile}, nil
	case BackendHcloud, BackendDigitalOcean:
		api, err := newCloud(name, c)
		if err != nil {
			return nil, err
		}
		return cloudBackend{api: api, keyFile: c.SSHKeyFile}, nil
	}
	return nil, fmt.Errorf("backend %q: want lab, static, hcloud or digitalocean", name)
}

func (m machine) state(a BoxArgs) BoxState {
	return BoxState{
		BoxArgs:        a,
		Addresses:      m.Addresses,
		SSHAddress:     m.SSHAddress,
		Cores:          m.Cores,
		RAM:            int(m.RAM),
		HostPublicKey:  m.HostPublicKey,
		HostPrivateKey: m.HostPrivate,
		BackendID:      m.ID,
		AllLabels:      a.AllLabels(),
	}
}

// Create makes the box and returns once SSH answers with its host key.
func (*Box) Create(ctx context.Context, req infer.CreateRequest[BoxArgs]) (infer.CreateResponse[BoxState], error) {
	a := req.Inputs
	if fs := a.validate(); len(fs) > 0 {
		return infer.CreateResponse[BoxState]{}, fmt.Errorf("box %s: %s: %s", a.Name, fs[0].Property, fs[0].Reason)
	}
	be, err := backendFor(ctx, a.Backend)
	if err != nil {
		return infer.CreateResponse[BoxState]{}, fmt.Errorf("box %s: %w", a.Name, err)
	}
	if req.DryRun {
		return infer.CreateResponse[BoxState]{ID: a.Backend + "/" + a.Name, Output: BoxState{BoxArgs: a, AllLabels: a.AllLabels()}}, nil
	}
	m, err := be.create(ctx, a)
	if err != nil {
		return infer.CreateResponse[BoxState]{}, fmt.Errorf("box %s: %w", a.Name, err)
	}
	return infer.CreateResponse[BoxState]{ID: a.Backend + "/" + m.ID, Output: m.state(a)}, nil
}

// Read refreshes what the backend reports; a box that is gone reads as
// deleted.
func (*Box) Read(ctx context.Context, req infer.ReadRequest[BoxArgs, BoxState]) (infer.ReadResponse[BoxArgs, BoxState], error) {
	a := req.State.BoxArgs
	if a.Backend == "" {
		a = req.Inputs
	}
	be, err := backendFor(ctx, a.Backend)
	if err != nil {
		return infer.ReadResponse[BoxArgs, BoxState]{}, fmt.Errorf("box %s: %w", a.Name, err)
	}
	m, err := be.get(ctx, a, req.State.BackendID)
	if errors.Is(err, errGone) {
		return infer.ReadResponse[BoxArgs, BoxState]{}, nil
	}
	if err != nil {
		return infer.ReadResponse[BoxArgs, BoxState]{}, fmt.Errorf("box %s: %w", a.Name, err)
	}
	st := m.state(a)
	if st.HostPrivateKey == "" {
		st.HostPrivateKey = req.State.HostPrivateKey
	}
	return infer.ReadResponse[BoxArgs, BoxState]{ID: req.ID, Inputs: req.Inputs, State: st}, nil
}

// Delete removes the box; a box that is gone already is not an error, and
// a static server is left as it is.
func (*Box) Delete(ctx context.Context, req infer.DeleteRequest[BoxState]) (infer.DeleteResponse, error) {
	a := req.State.BoxArgs
	be, err := backendFor(ctx, a.Backend)
	if err != nil {
		return infer.DeleteResponse{}, fmt.Errorf("box %s: %w", a.Name, err)
	}
	if err := be.delete(ctx, a, req.State.BackendID); err != nil {
		return infer.DeleteResponse{}, fmt.Errorf("box %s: %w", a.Name, err)
	}
	return infer.DeleteResponse{}, nil
}

// replaceKeys are the inputs whose change replaces a box.
var replaceKeys = []string{"backend", "name", "fleet", "tier", "event", "shape", "location", "image", "labels", "authorizedKeys", "address", "user", "hostKey"}

// Diff replaces the box on any change of its inputs: a box's shape, place,
// image and labels are fixed when it is made. The old box goes first,
// since the new one takes its name.
func (*Box) Diff(_ context.Context, req infer.DiffRequest[BoxArgs, BoxState]) (infer.DiffResponse, error) {
	return boxDiff(req.State.BoxArgs, req.Inputs), nil
}

func boxDiff(old, new BoxArgs) p.DiffResponse {
	changed := map[string]bool{
		"backend":        old.Backend != new.Backend,
		"name":           old.Name != new.Name,
		"fleet":          old.Fleet != new.Fleet,
		"tier":           old.Tier != new.Tier,
		"event":          old.Event != new.Event,
		"shape":          old.Shape != new.Shape,
		"location":       old.Location != new.Location,
		"image":          old.Image != new.Image,
		"labels":         !maps.Equal(old.Labels, new.Labels),
		"authorizedKeys": !slices.Equal(old.AuthorizedKeys, new.AuthorizedKeys),
		"address":        old.Address != new.Address,
		"user":           old.User != new.User,
		"hostKey":        strings.TrimSpace(old.HostKey) != strings.TrimSpace(new.HostKey),
	}
	d := p.DiffResponse{DetailedDiff: map[string]p.PropertyDiff{}}
	for _, k := range replaceKeys {
		if changed[k] {
			d.HasChanges = true
			d.DetailedDiff[k] = p.PropertyDiff{Kind: p.UpdateReplace, InputDiff: true}
		}
	}
	d.DeleteBeforeReplace = d.HasChanges
	return d
}
