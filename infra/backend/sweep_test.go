package backend

import (
	"cmp"
	"context"
	"errors"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// memBackend is an in-memory Backend. Deletes of ids in stuck answer nil
// and do nothing; those in fail answer an error.
type memBackend struct {
	boxes       map[string]Box
	stuck, fail map[string]bool
	listErr     error
	calls       []string
}

func newMemBackend(boxes ...Box) *memBackend {
	m := &memBackend{boxes: map[string]Box{}, stuck: map[string]bool{}, fail: map[string]bool{}}
	for _, b := range boxes {
		m.boxes[b.ID] = b
	}
	return m
}

func (m *memBackend) Create(_ context.Context, s Spec) (Box, error) {
	b := Box{ID: s.Name, Name: s.Name, Labels: s.Labels, Status: StatusRunning}
	m.boxes[b.ID] = b
	return b, nil
}

func (m *memBackend) Get(_ context.Context, id string) (Box, error) {
	b, ok := m.boxes[id]
	if !ok {
		return Box{}, ErrNotFound
	}
	return b, nil
}

func (m *memBackend) List(_ context.Context, labels map[string]string) ([]Box, error) {
	m.calls = append(m.calls, "list "+Selector(labels))
	if m.listErr != nil {
		return nil, m.listErr
	}
	var out []Box
	for _, b := range m.boxes {
		if MatchLabels(b.Labels, labels) {
			out = append(out, b)
		}
	}
	slices.SortFunc(out, func(a, b Box) int { return cmp.Compare(a.Name, b.Name) })
	return out, nil
}

func (m *memBackend) Delete(_ context.Context, id string) error {
	m.calls = append(m.calls, "delete "+id)
	if m.fail[id] {
		return errors.New("mem delete " + id + ": refused")
	}
	if !m.stuck[id] {
		delete(m.boxes, id)
	}
	return nil
}

func memBox(id, name, fleet, tier, event string) Box {
	return Box{ID: id, Name: name, Labels: map[string]string{"fleet": fleet, "tier": tier, "event": event}}
}

func sweepFleet() *memBackend {
	return newMemBackend(
		memBox("1", "demo-b1", "demo", "burst", "finals"),
		memBox("2", "demo-b2", "demo", "burst", "finals"),
		memBox("3", "demo-b3", "demo", "burst", "other"),
		memBox("4", "demo-s1", "demo", "steady", "none"),
		memBox("5", "else-b1", "elsewhere", "burst", "finals"),
	)
}

var sweepFinals = map[string]string{"fleet": "demo", "tier": "burst", "event": "finals"}

func sweptNames(boxes []Box) []string {
	var out []string
	for _, b := range boxes {
		out = append(out, b.Name)
	}
	return out
}

func TestSweep(t *testing.T) {
	m := sweepFleet()
	found, err := Sweep(t.Context(), m, sweepFinals)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := sweptNames(found), []string{"demo-b1", "demo-b2"}; !reflect.DeepEqual(got, want) {
		t.Errorf("found %v, want %v", got, want)
	}
	if got, want := slices.Sorted(maps.Keys(m.boxes)), []string{"3", "4", "5"}; !reflect.DeepEqual(got, want) {
		t.Errorf("left %v, want %v", got, want)
	}
	// Listed, deleted, listed again.
	want := []string{"list event=finals,fleet=demo,tier=burst", "delete 1", "delete 2", "list event=finals,fleet=demo,tier=burst"}
	if !reflect.DeepEqual(m.calls, want) {
		t.Errorf("calls %v, want %v", m.calls, want)
	}

	found, err = Sweep(t.Context(), m, sweepFinals)
	if err != nil || len(found) != 0 {
		t.Errorf("second Sweep = %v, %v; want none", sweptNames(found), err)
	}
}

func TestSweepRemain(t *testing.T) {
	t.Run("delete that does not delete", func(t *testing.T) {
		m := sweepFleet()
		m.stuck["2"] = true
		found, err := Sweep(t.Context(), m, sweepFinals)
		if !errors.Is(err, ErrRemain) {
			t.Fatalf("error %v, want ErrRemain", err)
		}
		if want := "sweep: boxes remain after delete: demo-b2 (2)"; err.Error() != want {
			t.Errorf("error\n got %q\nwant %q", err, want)
		}
		if len(found) != 2 {
			t.Errorf("found %v, want both", sweptNames(found))
		}
		if _, ok := m.boxes["1"]; ok {
			t.Error("demo-b1 not deleted")
		}
	})
	t.Run("delete that fails", func(t *testing.T) {
		m := sweepFleet()
		m.fail["1"] = true
		_, err := Sweep(t.Context(), m, sweepFinals)
		if !errors.Is(err, ErrRemain) {
			t.Fatalf("error %v, want ErrRemain", err)
		}
		if want := "sweep: boxes remain: demo-b1 (1); mem delete 1: refused"; err.Error() != want {
			t.Errorf("error\n got %q\nwant %q", err, want)
		}
		// One box that will not go does not shield the next.
		if _, ok := m.boxes["2"]; ok {
			t.Error("demo-b2 not deleted after demo-b1 failed")
		}
	})
	t.Run("list fails", func(t *testing.T) {
		m := sweepFleet()
		m.listErr = errors.New("mem list: down")
		found, err := Sweep(t.Context(), m, sweepFinals)
		if err == nil || errors.Is(err, ErrRemain) || !strings.Contains(err.Error(), "mem list: down") || found != nil {
			t.Errorf("Sweep = %v, %v; want the list error", found, err)
		}
		if len(m.boxes) != 5 {
			t.Errorf("%d boxes, want 5 untouched", len(m.boxes))
		}
	})
}

func TestSweepRefuses(t *testing.T) {
	for _, labels := range []map[string]string{
		nil,
		{"fleet": "demo"},
		{"tier": "burst", "event": "finals"},
		{"fleet": "", "tier": "burst"},
		{"fleet": "demo", "tier": "burst", "event": "bad value"},
	} {
		m := sweepFleet()
		found, err := Sweep(t.Context(), m, labels)
		if err == nil || !strings.HasPrefix(err.Error(), "sweep: ") || found != nil {
			t.Errorf("Sweep(%v) = %v, %v; want refused", labels, sweptNames(found), err)
		}
		if len(m.calls) != 0 || len(m.boxes) != 5 {
			t.Errorf("Sweep(%v) called %v", labels, m.calls)
		}
	}
}
