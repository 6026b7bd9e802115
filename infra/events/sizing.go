package events

import (
	"errors"
	"fmt"
	"github.com/relayfleet/relayfleet/internal/text"

	"github.com/relayfleet/relayfleet/inventories"
	"github.com/relayfleet/relayfleet/inventories/capacity"
)

// Sizing is how many burst boxes an event gets and what the plan expects
// them to cost.
type Sizing struct {
	Peak int `json:"peak_listeners"`
	// SteadyCapacity is what the steady fleet carries.
	SteadyCapacity int    `json:"steady_capacity"`
	Shape          string `json:"shape"`
	PerBox         int    `json:"per_box"`
	LimitedBy      string `json:"limited_by"`
	Boxes          int    `json:"boxes"`
	// Needed is the boxes the peak needs; more than Boxes when the event's
	// max capped it.
	Needed int `json:"needed"`
	// WindowHours is how long the plan expects the boxes to live: from
	// start less lead time to end plus drain time.
	WindowHours float64 `json:"window_hours"`
	Currency    string  `json:"currency"`
	// Cost is the boxes' price for the window plus planned egress overage.
	Cost        float64 `json:"cost"`
	EgressBytes int64   `json:"egress_bytes"`
	Overage     float64 `json:"overage"`
}

// Size plans an event's burst boxes: the steady fleet's groups carry what
// they can of the peak, boxes of the event's shape the rest, up to its
// max.
func Size(ev *inventories.Event, f *inventories.Fleet, cat *inventories.Catalogue, cal *inventories.Calibration) (*Sizing, error) {
	var cands []capacity.Candidate
	steady := 0
	for _, g := range f.Steady {
		c, err := capacity.BoxCandidate(cat, capacity.Steady, g.Name, &g.Box)
		if err != nil {
			return nil, fmt.Errorf("steady group %s: %w", g.Name, err)
		}
		c.Count = g.BoxCount()
		steady += capacity.PerBox(c.Box, cal).Capacity * c.Count
		cands = append(cands, c)
	}
	burst, err := capacity.BoxCandidate(cat, capacity.Burst, ev.Name, &ev.Burst.Box)
	if err != nil {
		return nil, fmt.Errorf("event %s: %w", ev.Name, err)
	}
	hours := ev.GoneBy().Sub(ev.UpAt()).Hours()
	req := capacity.Request{Listeners: ev.PeakListeners, EventHours: hours, Catalogue: cat, Calibration: cal}
	per := capacity.PerBox(burst.Box, cal)
	s := &Sizing{
		Peak: ev.PeakListeners, SteadyCapacity: steady, Shape: burst.Ref(),
		PerBox: per.Capacity, LimitedBy: string(per.LimitedBy), WindowHours: hours, Currency: cat.Currency,
	}
	if per.Capacity <= 0 {
		return nil, fmt.Errorf("event %s: a %s box carries no listeners", ev.Name, s.Shape)
	}
	capped := burst
	capped.Max = ev.Burst.Max
	plan, err := capacity.Make(req, append(cands, capped))
	if errors.Is(err, capacity.ErrShortfall) {
		// Plan without the cap to say how far short the max falls; the
		// event still gets its max.
		if plan, err = capacity.Make(req, append(cands, burst)); err != nil {
			return nil, fmt.Errorf("event %s: %w", ev.Name, err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("event %s: %w", ev.Name, err)
	}
	for _, g := range plan.Groups {
		if g.Role != capacity.Burst {
			continue
		}
		s.Needed = g.Boxes
		if g.Egress != nil {
			s.EgressBytes = int64(float64(g.Egress.PerBoxHourBytes*int64(g.Boxes)) * hours)
			s.Overage = g.Egress.OverageCost
		}
	}
	s.Boxes = s.Needed
	if ev.Burst.Max > 0 && s.Boxes > ev.Burst.Max {
		s.Boxes = ev.Burst.Max
	}
	if burst.Shape != nil {
		s.Cost = float64(s.Boxes)*capacity.EventPrice(cat, burst.Provider, burst.Shape, hours) + s.Overage
	}
	return s, nil
}

// Short says what the cap left uncovered; "" when nothing.
func (s *Sizing) Short() string {
	if s.Needed <= s.Boxes {
		return ""
	}
	return fmt.Sprintf("the peak needs %s but the event's max is %d: about %s listeners will find no room",
		text.Plural(s.Needed, "box", "boxes"), s.Boxes, capacity.Count((s.Needed-s.Boxes)*s.PerBox))
}
