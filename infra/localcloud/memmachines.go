package localcloud

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"
)

// MemMachines is a Machines that boots nothing, for the API packages'
// tests: it records each spec and hands out addresses from 192.0.2.0/24
// (TEST-NET-1, never dialled). It parses no user data. The zero value is
// ready to use.
type MemMachines struct {
	// OnCreate, when set, runs at the start of every Create (outside the
	// lock); an error it returns is Create's, and nothing is recorded. Tests
	// use it to hold a create in progress or make it fail.
	OnCreate func(ctx context.Context, s MachineSpec) error
	// CreateErr, when set, is called by Create after OnCreate; an error it
	// returns fails the Create, which then records nothing.
	CreateErr func(MachineSpec) error

	mu       sync.Mutex
	next     int // the last address's host number
	machines map[string]Machine
	specs    map[string]MachineSpec
	deleted  []string
}

// MemoryMachines is MemMachines by the name the hcloud tests use.
type MemoryMachines = MemMachines

var _ Machines = (*MemMachines)(nil)

// NewMemMachines returns an empty MemMachines.
func NewMemMachines() *MemMachines {
	return &MemMachines{machines: map[string]Machine{}, specs: map[string]MachineSpec{}}
}

// Create records the spec and returns a Machine at the next free address
// 192.0.2.N. A name in use, an empty name or no cores or RAM is an error,
// as it is for lab boxes.
func (m *MemMachines) Create(ctx context.Context, s MachineSpec) (Machine, error) {
	if s.Name == "" || strings.ContainsAny(s.Name, "/ \t\n") {
		return Machine{}, fmt.Errorf("localcloud: machine name %q: want a non-empty name without slashes or spaces", s.Name)
	}
	if s.Cores <= 0 || s.RAM <= 0 {
		return Machine{}, fmt.Errorf("localcloud: machine %s: %d cores, %d bytes of RAM: want both above zero", s.Name, s.Cores, s.RAM)
	}
	if m.OnCreate != nil {
		if err := m.OnCreate(ctx, s); err != nil {
			return Machine{}, err
		}
	}
	if m.CreateErr != nil {
		if err := m.CreateErr(s); err != nil {
			return Machine{}, err
		}
	}
	if err := ctx.Err(); err != nil {
		return Machine{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.machines == nil {
		m.machines, m.specs = map[string]Machine{}, map[string]MachineSpec{}
	}
	if _, ok := m.machines[s.Name]; ok {
		return Machine{}, fmt.Errorf("localcloud: machine %s exists", s.Name)
	}
	if m.next >= 254 {
		return Machine{}, fmt.Errorf("localcloud: machine %s: 192.0.2.0/24 is used up", s.Name)
	}
	m.next++
	mc := Machine{
		Name:    s.Name,
		IPv4:    netip.AddrFrom4([4]byte{192, 0, 2, byte(m.next)}),
		Cores:   s.Cores,
		RAM:     s.RAM,
		Created: time.Now().UTC(),
	}
	s.Labels = maps.Clone(s.Labels)
	s.UserData = slices.Clone(s.UserData)
	m.machines[s.Name], m.specs[s.Name] = mc, s
	return mc, nil
}

// Delete forgets the machine; a missing one is not an error.
func (m *MemMachines) Delete(ctx context.Context, name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.machines, name)
	delete(m.specs, name)
	m.deleted = append(m.deleted, name)
	return nil
}

// Machines returns the live machines, sorted by name.
func (m *MemMachines) Machines() []Machine {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.SortedFunc(maps.Values(m.machines), func(a, b Machine) int { return strings.Compare(a.Name, b.Name) })
}

// Names are the live machines' names, sorted.
func (m *MemMachines) Names() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Sorted(maps.Keys(m.machines))
}

// Spec returns the spec a live machine was created with.
func (m *MemMachines) Spec(name string) (MachineSpec, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.specs[name]
	return s, ok
}

// Deleted returns the names Delete was called with, in order (missing
// machines' too).
func (m *MemMachines) Deleted() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.deleted)
}
