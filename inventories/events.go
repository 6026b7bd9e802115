package inventories

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"time"
	"unicode"

	"gopkg.in/yaml.v3"
)

// EventsFile is the shipped example events file.
const EventsFile = "events.yaml"

// Events is an events file: the broadcasts that need burst capacity and
// when, for one fleet.
type Events struct {
	Version int `yaml:"version"`
	// Fleet is the fleet file, relative to the events file. Its steady
	// boxes carry what they can; each event's burst boxes carry the rest.
	Fleet  string  `yaml:"fleet"`
	Events []Event `yaml:"events"`

	// FleetPath is Fleet resolved against the events file's directory.
	FleetPath string `yaml:"-"`
}

// Event is one broadcast that needs burst capacity.
type Event struct {
	// Name names the event's stack and labels its boxes (event=NAME): 1-40
	// lowercase letters, digits and '-'.
	Name  string `yaml:"name"`
	Start Time   `yaml:"start"`
	End   Time   `yaml:"end"`
	// PeakListeners is the expected peak; the planner sizes the burst boxes
	// from it less what the steady fleet carries.
	PeakListeners int `yaml:"peak_listeners"`
	// Broadcast is the broadcast path listeners subscribe to.
	Broadcast string `yaml:"broadcast"`
	// Burst is where the event's boxes come from: provider, shape,
	// location, processes and base port as in a fleet's burst pool, and
	// max, the most boxes the event may hold (0: no cap).
	Burst Pool `yaml:"burst"`
	// LeadTime is how long before Start the boxes are brought up; they
	// must be converged and routed by Start.
	LeadTime Duration `yaml:"lead_time"`
	// DrainTime is how long listeners get to leave after End before the
	// boxes are destroyed whether or not listeners remain.
	DrainTime Duration `yaml:"drain_time"`
	// MaxOverrun is how long after End the burst boxes may stay while the
	// steady fleet has no room for their listeners: until then they move
	// only as fast as the steady fleet takes them; from then on they are
	// all told to move and the boxes go after DrainTime. Left out:
	// DefaultMaxOverrun; 0: no overrun (every listener told to move at
	// End, the boxes gone by End plus DrainTime).
	MaxOverrun *Duration `yaml:"max_overrun"`
}

// Defaults for an event's lead and drain times.
const (
	DefaultLeadTime  = 30 * time.Minute
	DefaultDrainTime = 15 * time.Minute
	// DefaultMaxOverrun is an event's max_overrun when the file leaves it
	// out.
	DefaultMaxOverrun = time.Hour
)

// Time is an RFC 3339 instant such as 2026-12-05T19:00:00Z.
type Time struct{ time.Time }

// UnmarshalYAML reads an RFC 3339 time with its zone.
func (t *Time) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.Parse(time.RFC3339, n.Value)
	if err != nil {
		return fmt.Errorf("want an RFC 3339 time with a zone such as 2026-12-05T19:00:00Z, got %q", n.Value)
	}
	t.Time = v
	return nil
}

// Duration is a Go duration such as 30m or 1h30m.
type Duration time.Duration

// UnmarshalYAML reads a duration such as 30m.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("want a duration such as 30m or 1h30m, got %q", n.Value)
	}
	*d = Duration(v)
	return nil
}

// D is the duration as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// MarshalYAML writes the duration as UnmarshalYAML reads it (1m0s).
func (d Duration) MarshalYAML() (any, error) { return d.D().String(), nil }

var eventNameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$`)

// LoadEvents reads an events file and the fleet it names, and checks the
// events against both. The fleet is returned too.
func LoadEvents(path string, cat *Catalogue) (*Events, *Fleet, error) {
	var e Events
	d, err := load(path, &e)
	if err != nil {
		return nil, nil, err
	}
	if e.Fleet == "" {
		return nil, nil, d.errorAt(fieldErr("fleet", "missing; name the fleet file, relative to this file"))
	}
	if strings.ContainsFunc(e.Fleet, unicode.IsControl) {
		return nil, nil, d.errorAt(fieldErr("fleet", "%q: want a file name without line breaks or control characters", e.Fleet))
	}
	e.FleetPath = e.Fleet
	if _, embedded := cutEmbedded(path); embedded {
		e.FleetPath = Embedded(e.Fleet)
	} else if !filepath.IsAbs(e.Fleet) {
		e.FleetPath = filepath.Join(filepath.Dir(path), e.Fleet)
	}
	f, err := LoadFleet(e.FleetPath, cat)
	if err != nil {
		return nil, nil, err
	}
	if err := e.validate(cat, f); err != nil {
		return nil, nil, d.errorAt(err)
	}
	return &e, f, nil
}

func (e *Events) validate(cat *Catalogue, f *Fleet) error {
	seen := map[string]int{}
	groups := map[string]int{}
	for i, g := range f.Steady {
		groups[g.Name] = i
	}
	for i := range e.Events {
		ev := &e.Events[i]
		p := fmt.Sprintf("events[%d]", i)
		switch {
		case ev.Name == "":
			return fieldErr(p+".name", "missing")
		case !eventNameRE.MatchString(ev.Name):
			return fieldErr(p+".name", "want 1-40 lowercase letters, digits and '-', not starting or ending with '-', got %q", ev.Name)
		}
		if j, ok := seen[ev.Name]; ok {
			return fieldErr(p+".name", "%q is already the name of events[%d]", ev.Name, j)
		}
		// An event's boxes, firewall and labels are named after it: one
		// named like a steady group could be taken for that group's.
		if ev.Name == SurgeEvent {
			return fieldErr(p+".name", "%q is the name of the fleet's surge (its stack and its boxes' event label): rename the event", ev.Name)
		}
		if j, ok := groups[ev.Name]; ok {
			return fieldErr(p+".name", "event %q is named like steady group %q (steady[%d] of fleet file %s): rename the event", ev.Name, ev.Name, j, e.Fleet)
		}
		seen[ev.Name] = i
		switch {
		case ev.Start.IsZero():
			return fieldErr(p+".start", "missing; want an RFC 3339 time such as 2026-12-05T19:00:00Z")
		case ev.End.IsZero():
			return fieldErr(p+".end", "missing; want an RFC 3339 time such as 2026-12-05T22:00:00Z")
		case !ev.End.After(ev.Start.Time):
			return fieldErr(p+".end", "%s is not after start %s", ev.End.Format(time.RFC3339), ev.Start.Format(time.RFC3339))
		case ev.PeakListeners <= 0:
			return fieldErr(p+".peak_listeners", "want a positive number of listeners, got %d", ev.PeakListeners)
		case ev.Broadcast == "":
			return fieldErr(p+".broadcast", "missing; the broadcast path listeners subscribe to")
		case ev.LeadTime < 0:
			return fieldErr(p+".lead_time", "must not be negative")
		case ev.DrainTime < 0:
			return fieldErr(p+".drain_time", "must not be negative")
		case ev.MaxOverrun != nil && *ev.MaxOverrun < 0:
			return fieldErr(p+".max_overrun", "must not be negative, got %s (0: no overrun)", ev.MaxOverrun.D())
		}
		if ev.LeadTime == 0 {
			ev.LeadTime = Duration(DefaultLeadTime)
		}
		if ev.DrainTime == 0 {
			ev.DrainTime = Duration(DefaultDrainTime)
		}
		if ev.MaxOverrun == nil {
			d := Duration(DefaultMaxOverrun)
			ev.MaxOverrun = &d
		}
		b := &ev.Burst
		if b.Name == "" {
			b.Name = ev.Name
		} else if b.Name != ev.Name {
			return fieldErr(p+".burst.name", "leave it out: the event's boxes are named after the event")
		}
		if err := b.validateCandidates(cat, p+".burst"); err != nil {
			return err
		}
		if b.Provider == ProviderStatic {
			return fieldErr(p+".burst.provider", "an event creates boxes on demand; static servers belong in the fleet's steady groups")
		}
		if err := b.Box.validate(cat, p+".burst"); err != nil {
			return err
		}
		if b.Max < 0 {
			return fieldErr(p+".burst.max", "must not be negative, got %d", b.Max)
		}
	}
	return nil
}

// validateCandidates checks an event burst's candidates, each a box of
// the pool's processes and base port, and makes the first the pool's own
// provider, shape, location and image (which the pool then leaves out, or
// gives as the first's).
func (b *Pool) validateCandidates(cat *Catalogue, p string) error {
	if len(b.Candidates) == 0 {
		return nil
	}
	if len(b.Candidates) > MaxCandidates {
		return fieldErr(p+".candidates", "want at most %d candidates, got %d", MaxCandidates, len(b.Candidates))
	}
	first := b.Candidates[0]
	for _, f := range []struct{ name, own, cand string }{
		{"provider", b.Provider, first.Provider}, {"shape", b.Shape, first.Shape},
		{"location", b.Location, first.Location}, {"image", b.Image, first.Image},
	} {
		if f.own != "" && f.own != f.cand {
			return fieldErr(p+"."+f.name, "%q is not candidates[0]'s %q: with candidates, leave it out (the first candidate is the pool's)", f.own, f.cand)
		}
	}
	seen := map[string]int{}
	for i, c := range b.Candidates {
		cp := fmt.Sprintf("%s.candidates[%d]", p, i)
		if c.Provider == ProviderStatic {
			return fieldErr(cp+".provider", "an event creates boxes on demand; static servers belong in the fleet's steady groups")
		}
		box := b.CandidateBox(i)
		if err := box.validate(cat, cp); err != nil {
			return err
		}
		if c.Max < 0 {
			return fieldErr(cp+".max", "must not be negative, got %d", c.Max)
		}
		if j, ok := seen[c.Ref()]; ok {
			return fieldErr(cp, "%s is candidates[%d] already", c.Ref(), j)
		}
		seen[c.Ref()] = i
	}
	b.Provider, b.Shape, b.Location, b.Image = first.Provider, first.Shape, first.Location, first.Image
	return nil
}

// Event returns the event called name; a nil Events has none.
func (e *Events) Event(name string) (*Event, bool) {
	if e == nil {
		return nil, false
	}
	for i := range e.Events {
		if e.Events[i].Name == name {
			return &e.Events[i], true
		}
	}
	return nil, false
}

// UpAt is when the event's boxes are brought up: its start less its lead
// time.
func (ev *Event) UpAt() time.Time { return ev.Start.Add(-ev.LeadTime.D()) }

// GoneBy is when the event's boxes are destroyed at the latest: its end
// plus its drain time.
func (ev *Event) GoneBy() time.Time { return ev.End.Add(ev.DrainTime.D()) }

// Overrun is the event's max_overrun (DefaultMaxOverrun when left out).
func (ev *Event) Overrun() time.Duration {
	if ev.MaxOverrun == nil {
		return DefaultMaxOverrun
	}
	return ev.MaxOverrun.D()
}
