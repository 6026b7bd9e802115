package localcloud

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestMemMachines(t *testing.T) {
	ctx := context.Background()
	m := NewMemMachines()
	a, err := m.Create(ctx, MachineSpec{Name: "a", Cores: 2, RAM: 4 << 30, Labels: map[string]string{"fleet": "f"}, UserData: []byte("#cloud-config\n")})
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.Create(ctx, MachineSpec{Name: "b", Cores: 1, RAM: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	if a.IPv4.String() != "192.0.2.1" || b.IPv4.String() != "192.0.2.2" || a.Cores != 2 || a.RAM != 4<<30 || a.Created.IsZero() {
		t.Fatalf("machines %+v %+v", a, b)
	}
	if _, err := m.Create(ctx, MachineSpec{Name: "a", Cores: 1, RAM: 1}); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Fatalf("a second a: %v", err)
	}
	for _, bad := range []MachineSpec{{Name: "", Cores: 1, RAM: 1}, {Name: "x y", Cores: 1, RAM: 1}, {Name: "c", RAM: 1}, {Name: "c", Cores: 1}} {
		if _, err := m.Create(ctx, bad); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
	if s, ok := m.Spec("a"); !ok || s.Labels["fleet"] != "f" || string(s.UserData) != "#cloud-config\n" {
		t.Fatalf("spec of a: %+v %v", s, ok)
	}
	if err := m.Delete(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if err := m.Delete(ctx, "gone"); err != nil {
		t.Fatalf("missing machine: %v", err)
	}
	if got := m.Machines(); len(got) != 1 || got[0].Name != "b" {
		t.Fatalf("after delete: %+v", got)
	}
	if d := m.Deleted(); len(d) != 2 || d[0] != "a" || d[1] != "gone" {
		t.Fatalf("deleted %v", d)
	}
	// A new machine gets a new address, never a deleted one's.
	c, err := m.Create(ctx, MachineSpec{Name: "a", Cores: 1, RAM: 1})
	if err != nil || c.IPv4.String() != "192.0.2.3" {
		t.Fatalf("recreated a: %+v %v", c, err)
	}
	if n := m.Names(); len(n) != 2 || n[0] != "a" || n[1] != "b" {
		t.Fatalf("names %v", n)
	}
	boom := errors.New("boom")
	m.OnCreate = func(context.Context, MachineSpec) error { return boom }
	if _, err := m.Create(ctx, MachineSpec{Name: "d", Cores: 1, RAM: 1}); !errors.Is(err, boom) {
		t.Fatalf("OnCreate's error: %v", err)
	}
	if _, ok := m.Spec("d"); ok {
		t.Fatal("a failed create was recorded")
	}
}

func TestMemMachinesZeroValue(t *testing.T) {
	var m MemoryMachines
	boom := errors.New("boom")
	m.CreateErr = func(s MachineSpec) error {
		if s.Name == "bad" {
			return boom
		}
		return nil
	}
	if _, err := m.Create(context.Background(), MachineSpec{Name: "bad", Cores: 1, RAM: 1}); !errors.Is(err, boom) {
		t.Fatalf("CreateErr's error: %v", err)
	}
	if _, err := m.Create(context.Background(), MachineSpec{Name: "good", Cores: 1, RAM: 1}); err != nil {
		t.Fatal(err)
	}
	if n := m.Names(); len(n) != 1 || n[0] != "good" {
		t.Fatalf("names %v", n)
	}
}
