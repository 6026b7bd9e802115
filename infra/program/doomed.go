package program

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/relayfleet/relayfleet/infra/provider"
)

// DoomedBox is a box an up or a destroy would take down, with the
// listeners its relays serve (Err: they could not be read).
type DoomedBox struct {
	Doomed
	Listeners int64
	Err       error
}

// ListenerProber reads the listeners the relays of hosts serve
// (events.SSHProbe reads them over SSH).
type ListenerProber interface {
	Listeners(ctx context.Context, hosts []HostEntry) (int64, error)
}

// DoomedProbeWait bounds reading the listeners of the boxes that would go.
const DoomedProbeWait = time.Minute

// ErrNotRecorded is a DoomedBox's Err when the box is not among the
// hosts the stack's outputs record, so nothing says how to reach it.
var ErrNotRecorded = errors.New("not among the stack's recorded hosts")

// DoomedListeners reads the listeners of each doomed box through the
// prober probe gives for the box's backend, finding the box in the
// stack's hosts output (the backend's record: an empty state dir pointed
// at the backend finds it too). It takes at most DoomedProbeWait; a box
// it could not read has Err set, and counts as serving (Serving).
func (s *Stack) DoomedListeners(ctx context.Context, doomed []Doomed, probe func(backend string) ListenerProber) []DoomedBox {
	ctx, cancel := context.WithTimeout(ctx, DoomedProbeWait)
	defer cancel()
	var hosts []HostEntry
	if outs, err := s.ReadOutputs(ctx, nil); err == nil && len(outs) > 0 {
		hosts, _ = outs[0].Hosts()
	}
	return probeDoomed(ctx, doomed, hosts, probe)
}

// probeDoomed reads the listeners of each doomed box among hosts.
func probeDoomed(ctx context.Context, doomed []Doomed, hosts []HostEntry, probe func(backend string) ListenerProber) []DoomedBox {
	known := map[string]HostEntry{}
	for _, h := range hosts {
		known[h.Name] = h
	}
	out := make([]DoomedBox, len(doomed))
	for i, d := range doomed {
		out[i].Doomed = d
		h, ok := known[d.Name]
		if !ok {
			out[i].Err = ErrNotRecorded
			continue
		}
		out[i].Listeners, out[i].Err = probe(h.Backend).Listeners(ctx, []HostEntry{h})
	}
	return out
}

// Serving are the names of the boxes that serve listeners, or whose
// listeners could not be read (which counts as serving: they are not
// known to serve nobody), and the listeners they serve: what a change
// that takes them down must be confirmed for.
func Serving(boxes []DoomedBox) (names []string, listeners int64) {
	for _, b := range boxes {
		if b.Err != nil || b.Listeners > 0 {
			names = append(names, b.Name)
			listeners += b.Listeners
		}
	}
	return names, listeners
}

// DestroyedBoxes are the boxes of a destroy's preview that it takes
// down: static servers are left as they are (their relays run on).
func DestroyedBoxes(doomed []Doomed) []Doomed {
	return slices.DeleteFunc(slices.Clone(doomed), func(d Doomed) bool { return d.Backend == provider.BackendStatic })
}
