package program

import (
	"context"
	"errors"
	"slices"
	"testing"
)

// fakeProber serves listener counts by host name, and records the hosts
// it was asked about.
type fakeProber struct {
	listeners map[string]int64
	asked     []string
}

func (p *fakeProber) Listeners(_ context.Context, hosts []HostEntry) (int64, error) {
	var n int64
	for _, h := range hosts {
		p.asked = append(p.asked, h.Name)
		l, ok := p.listeners[h.Name]
		if !ok {
			return 0, errors.New("ssh: no route to host")
		}
		n += l
	}
	return n, nil
}

// TestProbeDoomed: each doomed box is probed through its backend's
// prober, as the stack records it; a box the stack does not record, or
// one whose probe fails, has its Err set.
func TestProbeDoomed(t *testing.T) {
	hosts := []HostEntry{
		{Name: "a-1", Backend: "hcloud", Address: "192.0.2.1"},
		{Name: "a-2", Backend: "lab", Address: "10.0.0.2"},
		{Name: "a-3", Backend: "hcloud", Address: "192.0.2.3"},
	}
	probers := map[string]*fakeProber{
		"hcloud": {listeners: map[string]int64{"a-1": 7}},
		"lab":    {listeners: map[string]int64{"a-2": 0}},
	}
	doomed := []Doomed{
		{Name: "a-1", Op: OpReplace, Keys: []string{"shape"}},
		{Name: "a-2", Op: OpDelete},
		{Name: "a-3", Op: OpDelete},
		{Name: "a-9", Op: OpDelete},
	}
	got := probeDoomed(context.Background(), doomed, hosts, func(backend string) ListenerProber { return probers[backend] })
	if len(got) != len(doomed) {
		t.Fatalf("%d boxes, want %d", len(got), len(doomed))
	}
	for i, want := range []struct {
		listeners int64
		err       string
	}{{7, ""}, {0, ""}, {0, "ssh: no route to host"}, {0, ErrNotRecorded.Error()}} {
		b := got[i]
		errText := ""
		if b.Err != nil {
			errText = b.Err.Error()
		}
		if b.Name != doomed[i].Name || b.Op != doomed[i].Op || b.Listeners != want.listeners || errText != want.err {
			t.Errorf("box %d: %s %s, %d listeners, err %q; want %s, %d listeners, err %q", i, b.Name, b.Op, b.Listeners, errText, doomed[i].Name, want.listeners, want.err)
		}
	}
	if !errors.Is(got[3].Err, ErrNotRecorded) {
		t.Errorf("unrecorded box: %v, want ErrNotRecorded", got[3].Err)
	}
	if a := probers["hcloud"].asked; !slices.Equal(a, []string{"a-1", "a-3"}) {
		t.Errorf("hcloud prober asked about %v, want a-1 and a-3", a)
	}
	if a := probers["lab"].asked; !slices.Equal(a, []string{"a-2"}) {
		t.Errorf("lab prober asked about %v, want a-2", a)
	}
}

// TestServing: boxes serving listeners, and those whose listeners could
// not be read, need a confirmation; boxes read as serving nobody don't.
func TestServing(t *testing.T) {
	box := func(name string, listeners int64, err error) DoomedBox {
		return DoomedBox{Doomed: Doomed{Name: name, Op: OpDelete}, Listeners: listeners, Err: err}
	}
	for _, tc := range []struct {
		name      string
		boxes     []DoomedBox
		want      []string
		listeners int64
	}{
		{"none", nil, nil, 0},
		{"serving nobody", []DoomedBox{box("a-1", 0, nil), box("a-2", 0, nil)}, nil, 0},
		{"serving", []DoomedBox{box("a-1", 3, nil), box("a-2", 0, nil), box("a-3", 4, nil)}, []string{"a-1", "a-3"}, 7},
		{"unknown counts as serving", []DoomedBox{box("a-1", 0, ErrNotRecorded), box("a-2", 0, nil)}, []string{"a-1"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			names, n := Serving(tc.boxes)
			if !slices.Equal(names, tc.want) || n != tc.listeners {
				t.Errorf("Serving = %v, %d; want %v, %d", names, n, tc.want, tc.listeners)
			}
		})
	}
}

// TestDestroyedBoxes: a destroy leaves static servers as they are.
func TestDestroyedBoxes(t *testing.T) {
	doomed := []Doomed{{Name: "s-1", Backend: "static"}, {Name: "c-1", Backend: "hcloud"}, {Name: "l-1", Backend: "lab"}, {Name: "u-1"}}
	var names []string
	for _, d := range DestroyedBoxes(doomed) {
		names = append(names, d.Name)
	}
	if want := []string{"c-1", "l-1", "u-1"}; !slices.Equal(names, want) {
		t.Errorf("DestroyedBoxes = %v, want %v", names, want)
	}
	if doomed[0].Name != "s-1" || len(doomed) != 4 {
		t.Errorf("DestroyedBoxes changed its argument: %v", doomed)
	}
}
