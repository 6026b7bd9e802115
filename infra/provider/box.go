package provider

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"

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
	// TierOrigin marks the fleet's origin boxes: made with the steady
	// boxes, in the steady stack; the edges pull from them.
	TierOrigin = "origin"
)

// NoEvent is the event label of boxes that belong to no event (steady).
const NoEvent = "none"

// Box is the Box resource's controller.
type Box struct{}

// BoxArgs are a Box's inputs, and the program's: it registers these
// structs (package infra/program). Who makes a box, what it is called and
// what it is made of replace it when they change (replaceOnChanges); its
// labels and admin keys change in place (schema.go).
type BoxArgs struct {
	Backend  string            `pulumi:"backend" provider:"replaceOnChanges"`
	Name     string            `pulumi:"name" provider:"replaceOnChanges"`
	Fleet    string            `pulumi:"fleet" provider:"replaceOnChanges"`
	Tier     string            `pulumi:"tier" provider:"replaceOnChanges"`
	Event    string            `pulumi:"event,optional" provider:"replaceOnChanges"`
	Shape    string            `pulumi:"shape,optional" provider:"replaceOnChanges"`
	Location string            `pulumi:"location,optional" provider:"replaceOnChanges"`
	Image    string            `pulumi:"image,optional" provider:"replaceOnChanges"`
	Labels   map[string]string `pulumi:"labels,optional" diff:"inPlace"`
	// AuthorizedKeys are the admin's keys, put on the box for root.
	AuthorizedKeys []string `pulumi:"authorizedKeys,optional" diff:"inPlace"`
	// Address, User and HostKey adopt a static server.
	Address string `pulumi:"address,optional" provider:"replaceOnChanges"`
	User    string `pulumi:"user,optional" provider:"replaceOnChanges"`
	HostKey string `pulumi:"hostKey,optional" provider:"replaceOnChanges"`
	// Generation counts the box's replacements. Check sets it (the
	// program does not): it goes up by one when a change replaces the
	// box, so that the new box has a name of its own (ServerName) and is
	// made, and converged, before the old one is deleted.
	Generation int `pulumi:"generation,optional" provider:"replaceOnChanges"`
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
	// ServerName is the box's name at its backend (ServerName()).
	ServerName string `pulumi:"serverName,optional"`
}

// Annotate describes the resource.
func (b *Box) Annotate(a infer.Annotator) {
	a.SetToken("index", "Box")
	a.Describe(&b, "A relay box: a lab box, a cloud server, or an existing (static) server adopted by address and host key.")
}

// WireDependencies marks the generated host private key secret in every
// output and in the state (the provider:"secret" tag alone only marks the
// schema).
//
// It also says which outputs an in-place change leaves known in a
// preview: what the backend reports about the box (address, host key,
// cores, id) depends on the inputs that make the box, those whose change
// replaces it (replaceOnChanges), not on its labels or admin keys, so a
// key rotation's preview shows the hosts on their boxes unchanged.
func (*Box) WireDependencies(f infer.FieldSelector, args *BoxArgs, state *BoxState) {
	f.OutputField(&state.HostPrivateKey).AlwaysSecret()
	// An input classified neither way (Diff refuses it) counts as
	// making the box.
	ins, _ := inputsOf(reflect.TypeFor[BoxArgs]())
	var made []infer.InputField
	av := reflect.ValueOf(args).Elem()
	for _, in := range ins {
		if !in.inPlace {
			made = append(made, f.InputField(av.Field(in.index).Addr().Interface()).Computed())
		}
	}
	for _, out := range []any{&state.Addresses, &state.SSHAddress, &state.Cores, &state.RAM, &state.HostPublicKey,
		&state.HostPrivateKey, &state.BackendID, &state.ServerName} {
		f.OutputField(out).DependsOn(made...)
	}
	f.OutputField(&state.AllLabels).DependsOn(f.InputField(&args.Labels).Computed(), f.InputField(&args.Fleet).Computed(),
		f.InputField(&args.Tier).Computed(), f.InputField(&args.Event).Computed())
}

// Annotate describes the inputs.
func (a *BoxArgs) Annotate(an infer.Annotator) {
	an.Describe(&a.Backend, "Who makes the box: lab, static, hcloud or digitalocean.")
	an.Describe(&a.Name, "The box's name at its backend.")
	an.Describe(&a.Tier, "steady, burst or origin.")
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
	if a.Tier != TierSteady && a.Tier != TierBurst && a.Tier != TierOrigin {
		fail("tier", "want steady, burst or origin, got %q", a.Tier)
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
	args.Generation = 0
	if req.OldInputs.Len() > 0 {
		if old, _, err := infer.DefaultCheck[BoxArgs](ctx, req.OldInputs); err == nil {
			if args.Generation, err = nextGeneration(old, args); err != nil {
				return infer.CheckResponse[BoxArgs]{Inputs: args}, err
			}
			if args.Generation > old.Generation {
				replacing.Store(req.Name, args.Generation)
			} else {
				replacing.Delete(req.Name)
			}
		}
	} else if g, ok := replacing.Load(req.Name); ok {
		// The engine checks a replacement again without its old inputs
		// (to renew defaults): it keeps the generation found above, not
		// 0, whose name is the old box's. Create would hand back the old
		// box by that name, and the engine then delete it.
		args.Generation = g.(int)
	}
	return infer.CheckResponse[BoxArgs]{Inputs: args, Failures: args.validate()}, nil
}

// replacing holds, for the run of one deployment (one provider process),
// the generation Check gave each box a change replaces, by the box's
// resource name.
var replacing sync.Map

// nextGeneration is the generation of new, the inputs that follow old: one
// more than old's when the change replaces the box (a static server is
// adopted, never made: it stays at 0).
func nextGeneration(old, new BoxArgs) (int, error) {
	if new.Backend == BackendStatic {
		return 0, nil
	}
	new.Generation = old.Generation
	d, err := boxDiff(old, new)
	if err != nil {
		return 0, err
	}
	if replaces(d) {
		return old.Generation + 1, nil
	}
	return old.Generation, nil
}

// replaces reports whether a diff replaces the box.
func replaces(d p.DiffResponse) bool {
	for _, pd := range d.DetailedDiff {
		if pd.Kind == p.UpdateReplace || pd.Kind == p.AddReplace || pd.Kind == p.DeleteReplace {
			return true
		}
	}
	return false
}

// ServerName is the box's name at its backend: Name for the first box,
// and for a replacement (Generation N > 0) Name-rN, within the backend's
// length (the lab's 11 characters: the name is cut and two hex digits of
// its hash keep apart names cut alike). The replacement never takes the
// old box's name, so both can run until the old one is drained.
func (a BoxArgs) ServerName() string {
	if a.Generation <= 0 || a.Backend == BackendStatic {
		return a.Name
	}
	max := 63
	if a.Backend == BackendLab {
		max = 11
	}
	suffix := fmt.Sprintf("-r%d", a.Generation)
	if len(a.Name)+len(suffix) <= max {
		return a.Name + suffix
	}
	sum := sha256.Sum256([]byte(a.Name))
	keep := max - len(suffix) - 2
	if keep < 1 {
		keep = 1
	}
	return a.Name[:min(keep, len(a.Name))] + hex.EncodeToString(sum[:1]) + suffix
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
	// update applies a's labels and admin keys to the box old describes,
	// which runs on.
	update(ctx context.Context, old BoxState, a BoxArgs, ch boxChange) error
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
		ServerName:     a.ServerName(),
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
		return infer.CreateResponse[BoxState]{ID: a.Backend + "/" + a.ServerName(), Output: BoxState{BoxArgs: a, AllLabels: a.AllLabels(), ServerName: a.ServerName()}}, nil
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
	// A cloud cannot tell the host key (cloud-init got it) nor the
	// cores and RAM (read over SSH at create): keep what the state had.
	if st.HostPrivateKey == "" {
		st.HostPrivateKey = req.State.HostPrivateKey
	}
	if st.HostPublicKey == "" {
		st.HostPublicKey = req.State.HostPublicKey
	}
	if st.Cores == 0 && st.RAM == 0 {
		st.Cores, st.RAM = req.State.Cores, req.State.RAM
	}
	return infer.ReadResponse[BoxArgs, BoxState]{ID: req.ID, Inputs: req.Inputs, State: st}, nil
}

// Delete removes the box; a box that is gone already is not an error, and
// a static server is left as it is. A relay box is drained first: its
// listeners are told to move (drainBox) and given time to, so a replaced
// box's listeners go to the boxes that stay, its replacement among them
// once the router lists it.
func (*Box) Delete(ctx context.Context, req infer.DeleteRequest[BoxState]) (infer.DeleteResponse, error) {
	a := req.State.BoxArgs
	be, err := backendFor(ctx, a.Backend)
	if err != nil {
		return infer.DeleteResponse{}, fmt.Errorf("box %s: %w", a.Name, err)
	}
	if st := req.State; a.Backend != BackendStatic && st.SSHAddress != "" && st.HostPublicKey != "" {
		if st.ServerName == "" {
			st.ServerName = a.ServerName()
		}
		log := p.GetLogger(ctx)
		switch left, err := drainBox(ctx, config(ctx).SSHKeyFile, st); {
		case err != nil:
			// A box that cannot be reached serves nobody through it.
			log.Warningf("box %s: not drained before the delete: %v", st.ServerName, err)
		case left > 0:
			log.Warningf("box %s: %d listeners still there after the drain; deleting it", st.ServerName, left)
		}
	}
	if err := be.delete(ctx, a, req.State.BackendID); err != nil {
		return infer.DeleteResponse{}, fmt.Errorf("box %s: %w", a.Name, err)
	}
	return infer.DeleteResponse{}, nil
}

// Diff replaces the box on a change of what it is made of (shape, place,
// image, name, tier) and updates it in place for its labels and admin
// keys. A replacement is made before the old box is deleted: it has a
// name of its own (Generation, ServerName).
func (*Box) Diff(_ context.Context, req infer.DiffRequest[BoxArgs, BoxState]) (infer.DiffResponse, error) {
	return boxDiff(req.State.BoxArgs, req.Inputs)
}

// boxDiff classifies each changed input by its tag (BoxArgs). A host key
// that differs in surrounding space only is the same key.
func boxDiff(old, new BoxArgs) (p.DiffResponse, error) {
	old.HostKey, new.HostKey = strings.TrimSpace(old.HostKey), strings.TrimSpace(new.HostKey)
	return diffInputs(old, new)
}

// Update applies new labels and admin keys to the box in place: labels
// through the backend (cloud API, the lab's metadata), the admin keys over
// SSH, where authorized_keys is rewritten atomically and a fresh login
// must work before the old file is let go. The box keeps its name, address
// and host key. Anything else changed is a replace (Diff), never here.
func (*Box) Update(ctx context.Context, req infer.UpdateRequest[BoxArgs, BoxState]) (infer.UpdateResponse[BoxState], error) {
	old, a := req.State, req.Inputs
	st := old
	st.BoxArgs, st.AllLabels = a, a.AllLabels()
	d, err := boxDiff(old.BoxArgs, a)
	if err != nil {
		return infer.UpdateResponse[BoxState]{}, fmt.Errorf("box %s: %w", a.Name, err)
	}
	if replaces(d) {
		return infer.UpdateResponse[BoxState]{}, fmt.Errorf("box %s: %v change only by replacing the box", a.Name, slices.Sorted(maps.Keys(d.DetailedDiff)))
	}
	if req.DryRun {
		return infer.UpdateResponse[BoxState]{Output: st}, nil
	}
	be, err := backendFor(ctx, a.Backend)
	if err != nil {
		return infer.UpdateResponse[BoxState]{}, fmt.Errorf("box %s: %w", a.Name, err)
	}
	ch := boxChange{
		labels: !maps.Equal(old.AllLabels, st.AllLabels) || !maps.Equal(old.Labels, a.Labels),
		keys:   !slices.Equal(old.AuthorizedKeys, a.AuthorizedKeys),
	}
	if err := be.update(ctx, old, a, ch); err != nil {
		return infer.UpdateResponse[BoxState]{}, fmt.Errorf("box %s: %w", a.Name, err)
	}
	return infer.UpdateResponse[BoxState]{Output: st}, nil
}

// boxChange says what Update changes on a box.
type boxChange struct{ labels, keys bool }
