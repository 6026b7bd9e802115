package lab

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
)

// fakeLab is a Starter that keeps boxes in a map; wait, when set, runs
// in Wait (to fail a box or end the context).
type fakeLab struct {
	mu       sync.Mutex
	boxes    map[string]Box
	imageErr error
	startErr map[string]error
	deleteEr map[string]error
	wait     func(name string) error
	deleted  []string
	cleaned  bool
}

func newFakeLab(running ...string) *fakeLab {
	f := &fakeLab{boxes: map[string]Box{}}
	for _, name := range running {
		f.boxes[name] = Box{Name: name, State: StateRunning}
	}
	return f
}

func (f *fakeLab) EnsureImage(context.Context) (string, error) { return "image", f.imageErr }

func (f *fakeLab) Get(_ context.Context, name string) (Box, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.boxes[name]
	if !ok {
		return Box{}, ErrNotFound
	}
	return b, nil
}

func (f *fakeLab) Start(_ context.Context, spec Spec) (Box, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.startErr[spec.Name]; err != nil {
		return Box{}, err
	}
	b := Box{Name: spec.Name, State: StateRunning, Cores: spec.Shape.Cores, Labels: spec.Labels}
	f.boxes[spec.Name] = b
	return b, nil
}

func (f *fakeLab) Wait(_ context.Context, name string) error {
	if f.wait != nil {
		return f.wait(name)
	}
	return nil
}

func (f *fakeLab) Delete(ctx context.Context, name string) error {
	if ctx.Err() != nil {
		return ctx.Err() // Up must delete on a context of its own
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.deleteEr[name]; err != nil {
		return err
	}
	delete(f.boxes, name)
	f.deleted = append(f.deleted, name)
	return nil
}

func (f *fakeLab) List(context.Context, map[string]string) ([]Box, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Box
	for _, name := range slices.Sorted(maps.Keys(f.boxes)) {
		out = append(out, f.boxes[name])
	}
	return out, nil
}

func (f *fakeLab) Cleanup(context.Context) error {
	f.cleaned = true
	return nil
}

func TestUp(t *testing.T) {
	f := newFakeLab("box2")
	got, err := Up(context.Background(), f, 3, Small)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for i, r := range got {
		names = append(names, r.Box.Name)
		if r.Err != nil || r.WasRunning != (i == 1) || r.Box.Labels["fleet"] != "lab" || r.Box.Cores != Small.Cores {
			t.Errorf("box %d: %+v", i, r)
		}
	}
	if !slices.Equal(names, []string{"box1", "box2", "box3"}) {
		t.Errorf("boxes %v", names)
	}
	if want := []string{"box1", "box2", "box3"}; !slices.Equal(slices.Sorted(maps.Keys(f.boxes)), want) {
		t.Errorf("lab has %v, want %v", slices.Sorted(maps.Keys(f.boxes)), want)
	}
}

func TestUpFailures(t *testing.T) {
	boom := errors.New("boom")
	t.Run("bad count", func(t *testing.T) {
		for _, n := range []int{0, MaxUp + 1} {
			if _, err := Up(context.Background(), newFakeLab(), n, Small); err == nil {
				t.Errorf("n=%d: no error", n)
			}
		}
	})
	t.Run("image", func(t *testing.T) {
		f := newFakeLab()
		f.imageErr = boom
		if _, err := Up(context.Background(), f, 1, Small); !errors.Is(err, boom) || len(f.boxes) != 0 {
			t.Errorf("err %v, boxes %v", err, f.boxes)
		}
	})
	t.Run("one box fails, the others stay", func(t *testing.T) {
		f := newFakeLab()
		f.startErr = map[string]error{"box1": boom}
		f.wait = func(name string) error {
			if name == "box3" {
				return errors.New("box3 never answered")
			}
			return nil
		}
		got, err := Up(context.Background(), f, 3, Small)
		if !errors.Is(err, boom) || !strings.Contains(err.Error(), "box3 never answered") {
			t.Errorf("err %v", err)
		}
		if got[0].Err == nil || got[1].Err != nil || got[2].Err == nil || len(f.deleted) != 0 {
			t.Errorf("results %+v, deleted %v", got, f.deleted)
		}
	})
}

// TestUpInterrupted: when the context ends while the boxes boot, the
// boxes Up started are removed, those that ran before stay.
func TestUpInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := newFakeLab("box2")
	f.wait = func(string) error { cancel(); return context.Canceled }
	_, err := Up(ctx, f, 3, Small)
	if err == nil || err.Error() != "removed the boxes it had started (box1, box3)" {
		t.Errorf("err %v", err)
	}
	if !slices.Equal(f.deleted, []string{"box1", "box3"}) || f.boxes["box2"].State != StateRunning {
		t.Errorf("deleted %v, left %v", f.deleted, f.boxes)
	}

	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	f = newFakeLab()
	f.deleteEr = map[string]error{"box1": errors.New("busy")}
	f.wait = func(string) error { cancel(); return context.Canceled }
	_, err = Up(ctx, f, 2, Small)
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "removing box1: busy") {
		t.Errorf("err %v", err)
	}
}

func TestDown(t *testing.T) {
	f := newFakeLab("box1", "box2", "box3")
	got, err := Down(context.Background(), f)
	if err != nil || !slices.Equal(got, []string{"box1", "box2", "box3"}) || len(f.boxes) != 0 || !f.cleaned {
		t.Errorf("deleted %v, %v; left %v, cleaned %v", got, err, f.boxes, f.cleaned)
	}

	// A box that stays keeps the bridge.
	f = newFakeLab("box1", "box2")
	f.deleteEr = map[string]error{"box1": errors.New("busy")}
	got, err = Down(context.Background(), f)
	if err == nil || err.Error() != "busy" || !slices.Equal(got, []string{"box2"}) || f.cleaned {
		t.Errorf("deleted %v, %v; cleaned %v", got, err, f.cleaned)
	}
}
