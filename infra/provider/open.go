package provider

import (
	"context"
	"errors"
	"fmt"
	"maps"

	"github.com/relayfleet/relayfleet/infra/backend"
	"github.com/relayfleet/relayfleet/infra/lab"
)

// OpenBackend returns the named backend's box API ("lab", "hcloud",
// "digitalocean") for listing and deleting boxes outside a Pulumi run (the
// event reconciler's orphan sweep). Cloud tokens come from the environment
// as for the provider (HCLOUD_TOKEN, DIGITALOCEAN_TOKEN); lab from c's lab
// settings.
func OpenBackend(name string, c Config) (backend.Backend, error) {
	switch name {
	case BackendLab:
		l, err := openLab(c)
		if err != nil {
			return nil, err
		}
		return labAPI{l}, nil
	case BackendStatic:
		return nil, errors.New("backend static: static servers are not created or listed by relayfleet")
	case BackendHcloud, BackendDigitalOcean:
		api, err := newCloud(name, c)
		if err != nil {
			// Not api: a nil *hcloud.Backend in an interface is not nil.
			return nil, err
		}
		return api, nil
	}
	return nil, fmt.Errorf("backend %q: want lab, hcloud or digitalocean", name)
}

// labAPI is the lab as a backend.Backend; a box's id is its name.
type labAPI struct{ l *lab.Lab }

var _ backend.Backend = labAPI{}

// Create makes and boots the box. The lab makes its own host key, so
// spec.HostKey is not used, nor are Location and Image.
func (a labAPI) Create(ctx context.Context, spec backend.Spec) (backend.Box, error) {
	shape, err := labShape(spec.Shape)
	if err != nil {
		return backend.Box{}, fmt.Errorf("lab create box %s: %w", spec.Name, err)
	}
	fleet := spec.Labels[backend.LabelFleet]
	if fleet == "" {
		return backend.Box{}, fmt.Errorf("lab create box %s: no %q label", spec.Name, backend.LabelFleet)
	}
	if err := backend.ValidLabels(spec.Labels); err != nil {
		return backend.Box{}, fmt.Errorf("lab create box %s: %w", spec.Name, err)
	}
	// The lab returns an existing box as it is; like the clouds, refuse
	// one of another fleet instead of adopting it.
	if old, err := a.l.Get(ctx, spec.Name); err == nil && old.Labels[backend.LabelFleet] != fleet {
		return backend.Box{}, fmt.Errorf("lab create box %s: the name is taken by a box of fleet %q, not %q", spec.Name, old.Labels[backend.LabelFleet], fleet)
	}
	b, err := a.l.Create(ctx, lab.Spec{Name: spec.Name, Shape: shape, Labels: spec.Labels, AuthorizedKeys: spec.AuthorizedKeys})
	if err != nil {
		return backend.Box{}, fmt.Errorf("lab create box %s: %w", spec.Name, err)
	}
	return labBox(b), nil
}

// Get returns the box called id, or an error wrapping backend.ErrNotFound.
func (a labAPI) Get(ctx context.Context, id string) (backend.Box, error) {
	b, err := a.l.Get(ctx, id)
	if errors.Is(err, lab.ErrNotFound) {
		return backend.Box{}, fmt.Errorf("lab get box %s: %w", id, backend.ErrNotFound)
	}
	if err != nil {
		return backend.Box{}, fmt.Errorf("lab get box %s: %w", id, err)
	}
	return labBox(b), nil
}

// List returns the boxes carrying every label given, sorted by name.
func (a labAPI) List(ctx context.Context, labels map[string]string) ([]backend.Box, error) {
	if err := backend.ValidLabels(labels); err != nil {
		return nil, fmt.Errorf("lab list boxes: %w", err)
	}
	bs, err := a.l.List(ctx, labels)
	if err != nil {
		return nil, fmt.Errorf("lab list boxes: %w", err)
	}
	boxes := make([]backend.Box, len(bs))
	for i, b := range bs {
		boxes[i] = labBox(b)
	}
	return boxes, nil
}

// Delete stops and removes the box; a missing box is not an error.
func (a labAPI) Delete(ctx context.Context, id string) error {
	return a.l.Delete(ctx, id)
}

// labBox is a lab box as a backend.Box.
func labBox(b lab.Box) backend.Box {
	box := backend.Box{
		ID:     b.Name,
		Name:   b.Name,
		Labels: maps.Clone(b.Labels),
		Status: b.State,
		Shape:  labShapeName(b),
	}
	switch b.State {
	case lab.StateRunning:
		box.Status = backend.StatusRunning
	case lab.StateStopped:
		box.Status = backend.StatusOff
	}
	if b.Address.Is4() {
		box.IPv4 = b.Address
	}
	return box
}

// labShapeName is the name of the box's shape, or its cores and RAM when
// it has none (a shape changed since the box was made).
func labShapeName(b lab.Box) string {
	switch (lab.Shape{Cores: b.Cores, RAM: b.RAM}) {
	case lab.Small:
		return "small"
	case lab.Medium:
		return "medium"
	}
	return fmt.Sprintf("%dcpu-%dmb", b.Cores, b.RAM>>20)
}
