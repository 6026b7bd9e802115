package inventories

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Surge is a fleet's capacity for load nobody scheduled: when the fleet's
// headroom, as its relays report it to the router, stays under
// WhenHeadroomBelow for For, a surge stack comes up as an event's does
// (the planner, the burst's candidates, routing, the end that sheds into
// room, the proof of teardown), and goes back to zero once the steady
// fleet alone has had that headroom again for BackFor.
type Surge struct {
	WhenHeadroomBelow Percent  `yaml:"when_headroom_below"`
	For               Duration `yaml:"for"`
	// BackFor is how long the steady fleet alone must have had the
	// headroom again before the surge boxes go (DefaultSurgeBackFor).
	BackFor Duration `yaml:"back_for"`
	// Max caps the surge boxes.
	Max int `yaml:"max"`
	// Burst is where the surge boxes come from, as an event's burst: a
	// provider, shape and location, or candidates.
	Burst Pool `yaml:"burst"`
}

// SurgeEvent is the name a surge's record, stack (FLEET-event-surge) and
// boxes' event label carry; no event may be called so.
const SurgeEvent = "surge"

// DefaultSurgeBackFor is how long the headroom must be back before a
// surge goes: ten reconciles, so that one quiet minute does not take away
// boxes that the next one needs.
const DefaultSurgeBackFor = 10 * time.Minute

// Percent is a share such as 20%, as a fraction (0.2).
type Percent float64

// UnmarshalYAML reads a share written N% (0 < N < 100).
func (p *Percent) UnmarshalYAML(n *yaml.Node) error {
	s, ok := strings.CutSuffix(strings.TrimSpace(n.Value), "%")
	v, err := strconv.ParseFloat(s, 64)
	if !ok || err != nil || v <= 0 || v >= 100 {
		return fmt.Errorf("want a share such as 20%%, above 0%% and below 100%%, got %q", n.Value)
	}
	*p = Percent(v / 100)
	return nil
}

// String is the share as N%.
func (p Percent) String() string { return strconv.FormatFloat(float64(p)*100, 'f', -1, 64) + "%" }

// validate checks the surge and fills its defaults.
func (s *Surge) validate(cat *Catalogue) error {
	switch {
	case s.WhenHeadroomBelow == 0:
		return fieldErr("surge.when_headroom_below", "missing; want a share such as 20%%")
	case s.For < 0:
		return fieldErr("surge.for", "must not be negative, got %s", s.For.D())
	case s.BackFor < 0:
		return fieldErr("surge.back_for", "must not be negative, got %s", s.BackFor.D())
	case s.Max <= 0 || s.Max > MaxBoxes:
		return fieldErr("surge.max", "want 1 to %d boxes, got %d", MaxBoxes, s.Max)
	}
	if s.BackFor == 0 {
		s.BackFor = Duration(DefaultSurgeBackFor)
	}
	b := &s.Burst
	if b.Name != "" && b.Name != SurgeEvent {
		return fieldErr("surge.burst.name", "leave it out: the surge's boxes are named %s", SurgeEvent)
	}
	b.Name = SurgeEvent
	if err := b.validateCandidates(cat, "surge.burst"); err != nil {
		return err
	}
	if b.Provider == ProviderStatic {
		return fieldErr("surge.burst.provider", "a surge creates boxes on demand; static servers belong in the fleet's steady groups")
	}
	if err := b.Box.validate(cat, "surge.burst"); err != nil {
		return err
	}
	if b.Max != 0 && b.Max != s.Max {
		return fieldErr("surge.burst.max", "leave it out: surge.max caps the surge's boxes")
	}
	b.Max = s.Max
	return nil
}

// SurgeEventAt is the surge as an event, for the reconciler: up from since
// until until, sized for peak listeners, its boxes from the surge's burst;
// no lead time, the default drain time and max overrun.
func (s *Surge) SurgeEventAt(since, until time.Time, peak int) Event {
	overrun := Duration(DefaultMaxOverrun)
	return Event{
		Name: SurgeEvent, Start: Time{Time: since}, End: Time{Time: until}, PeakListeners: peak,
		Broadcast: "*", Burst: s.Burst, LeadTime: 0, DrainTime: Duration(DefaultDrainTime), MaxOverrun: &overrun,
	}
}

// MarshalYAML writes the share as N%, as UnmarshalYAML reads it.
func (p Percent) MarshalYAML() (any, error) { return p.String(), nil }
