package localcloud

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"time"
)

// MemoryMachines is Machines in memory, for the API packages' tests: Create
// parses the user data (ParseCloudInit) and hands out addresses from
// 192.0.2.0/24 without booting anything.
type MemoryMachines struct {
	// CreateErr, when set, is called by Create; an error it returns fails
	// the Create, which then makes nothing.
	CreateErr func(MachineSpec) error

	mu       sync.Mutex
	machines map[string]Machine
	specs    map[string]MachineSpec
	next     int
}

// Create records the machine; a name in use is an error.
func (mm *MemoryMachines) Create(ctx context.Context, s MachineSpec) (Machine, error) {
	if err := ctx.Err(); err != nil {
		return Machine{}, err
	}
	if _, err := ParseCloudInit(s.UserData); err != nil {
		return Machine{}, fmt.Errorf("machine %s: %w", s.Name, err)
	}
	if mm.CreateErr != nil {
		if err := mm.CreateErr(s); err != nil {
			return Machine{}, err
		}
	}
	mm.mu.Lock()
	defer mm.mu.Unlock()
	if mm.machines == nil {
		mm.machines, mm.specs = map[string]Machine{}, map[string]MachineSpec{}
	}
	if _, ok := mm.machines[s.Name]; ok {
		return Machine{}, fmt.Errorf("machine %s exists", s.Name)
	}
	mm.next++
	m := Machine{
		Name: s.Name, IPv4: netip.AddrFrom4([4]byte{192, 0, 2, byte(10 + mm.next%240)}),
		Cores: s.Cores, RAM: s.RAM, Created: time.Now().UTC(),
	}
	mm.machines[s.Name] = m
	s.Labels = maps.Clone(s.Labels)
	mm.specs[s.Name] = s
	return m, nil
}

// Delete forgets the machine.
func (mm *MemoryMachines) Delete(_ context.Context, name string) error {
	mm.mu.Lock()
	defer mm.mu.Unlock()
	delete(mm.machines, name)
	delete(mm.specs, name)
	return nil
}

// Names are the machines' names, sorted.
func (mm *MemoryMachines) Names() []string {
	mm.mu.Lock()
	defer mm.mu.Unlock()
	return slices.Sorted(maps.Keys(mm.machines))
}

// Spec is the spec a machine was created with.
func (mm *MemoryMachines) Spec(name string) (MachineSpec, bool) {
	mm.mu.Lock()
	defer mm.mu.Unlock()
	s, ok := mm.specs[name]
	return s, ok
}
