package capacity

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/relayfleet/relayfleet/inventories"
)

// HoursPerMonth converts hourly figures to monthly ones (365 x 24 / 12).
const HoursPerMonth = 730

// Role says whether a group of boxes is steady (always on, paid by the
// month) or burst (created for the load, billed by the hour).
type Role string

// Roles.
const (
	Steady Role = "steady"
	Burst  Role = "burst"
	// Custom is a box given by its size only (fleet plan --box): any
	// count, like a burst shape, but neither bought nor billed.
	Custom Role = "custom"
)

// Candidate is a kind of box the planner may use: a steady group of the
// fleet (its count fixed), or a burst shape (any count up to Max).
type Candidate struct {
	Role Role
	// Name is the inventory group or pool name, or the shape's reference.
	Name string
	// Provider and Shape are nil for a box given by size only (--box):
	// such a plan has no prices or egress terms.
	Provider *inventories.Provider
	Shape    *inventories.Shape
	Box      Box
	// Count is a steady group's number of boxes.
	Count int
	// Max caps a burst candidate's boxes; 0 means no cap.
	Max int
	// Calibration sizes this candidate's boxes, named CalibrationName in
	// the plan; nil means the request's.
	Calibration     *inventories.Calibration
	CalibrationName string
}

// Ref is the candidate's shape reference, or "custom" for a --box.
func (c *Candidate) Ref() string {
	if c.Shape == nil {
		return "custom"
	}
	return c.Shape.Ref(c.Provider)
}

// Request is what to plan for.
type Request struct {
	Listeners int
	// EventHours is the length of the event; 0 plans a month of steady
	// load instead.
	EventHours  float64
	Catalogue   *inventories.Catalogue
	Calibration *inventories.Calibration
	// CalibrationName names Calibration in the plan's groups.
	CalibrationName string
}

// cal is the calibration that sizes c's boxes.
func (r *Request) cal(c *Candidate) *inventories.Calibration {
	if c.Calibration != nil {
		return c.Calibration
	}
	return r.Calibration
}

func (r *Request) calName(c *Candidate) string {
	if c.Calibration != nil {
		return c.CalibrationName
	}
	return r.CalibrationName
}

// hours is the window egress is counted over: the event, or a month.
func (r *Request) hours() float64 {
	if r.EventHours > 0 {
		return r.EventHours
	}
	return HoursPerMonth
}

// Group is one kind of box in a plan and what it carries.
type Group struct {
	Name      string `json:"name"`
	Role      Role   `json:"role"`
	Shape     string `json:"shape"`
	Boxes     int    `json:"boxes"`
	Listeners int    `json:"listeners"`
	// Calibration names the coefficients that sized this group's boxes.
	Calibration string      `json:"calibration"`
	PerBox      PerBoxPlan  `json:"per_box"`
	Cost        *Cost       `json:"cost,omitempty"`
	Egress      *EgressPlan `json:"egress,omitempty"`

	cand *Candidate
}

// PerBoxPlan is one box's size and capacity.
type PerBoxPlan struct {
	Shape     string `json:"shape"`
	Cores     int    `json:"cores"`
	RAMBytes  int64  `json:"ram_bytes"`
	Processes int    `json:"processes"`
	UplinkBPS int64  `json:"uplink_bps"`
	BoxCapacity
}

// Cost is what a plan or a group costs, in the catalogue's currency.
type Cost struct {
	Currency string  `json:"currency"`
	PerHour  float64 `json:"per_hour"`
	PerMonth float64 `json:"per_month"`
	// PerEvent is what an event of EventHours adds: burst boxes billed by
	// the started hour (never above their monthly price; monthly-only
	// shapes cost a month and their setup fee) plus egress overage.
	// Steady boxes are paid by the month anyway. Zero without an event.
	PerEvent float64 `json:"per_event"`
	// Overage is the egress overage charge within the window (the event,
	// or a month).
	Overage float64 `json:"overage"`
}

func (c *Cost) add(o *Cost) {
	c.PerHour += o.PerHour
	c.PerMonth += o.PerMonth
	c.PerEvent += o.PerEvent
	c.Overage += o.Overage
}

// EgressPlan is one group's egress against its provider's terms.
type EgressPlan struct {
	Provider string `json:"provider"`
	// PerBoxHourBytes is the egress of one box at its planned load.
	PerBoxHourBytes int64 `json:"per_box_hour_bytes"`
	// IncludedBytes is one box's allowance per accrual period.
	IncludedBytes int64  `json:"included_bytes"`
	Accrues       string `json:"accrues"`
	Past          string `json:"past"`
	// ExhaustedAfterHours is how long one box runs at its load before
	// the included egress is used up: within a day for daily caps, from
	// its start for monthly ones. nil means never; 0 means from the first
	// hour (a pooled allowance accruing slower than the box spends).
	ExhaustedAfterHours *float64 `json:"exhausted_after_hours"`
	// WindowHours is the window overage is counted over.
	WindowHours float64 `json:"window_hours"`
	// OverageBytes is the egress past the allowance over the window, all
	// boxes of the group together.
	OverageBytes int64   `json:"overage_bytes"`
	OverageCost  float64 `json:"overage_cost"`
	// ThrottledListeners is what one box still carries once throttled.
	ThrottledListeners int `json:"throttled_listeners,omitempty"`
}

// Plan is the answer: which boxes carry the target, and what that costs.
type Plan struct {
	Listeners  int     `json:"listeners"`
	EventHours float64 `json:"event_hours"`
	Boxes      int     `json:"boxes"`
	Capacity   int     `json:"capacity"`
	// PerBox is the plan's box when it uses one shape; for a mix it is the
	// group with the most boxes (every group has its own in Groups).
	PerBox PerBoxPlan `json:"per_box"`
	Groups []Group    `json:"groups"`
	// Cost is nil when a box has no price (a --box plan).
	Cost                     *Cost    `json:"cost"`
	EgressPerListenerHour    int64    `json:"egress_per_listener_hour_bytes"`
	EgressPerHourAtListeners int64    `json:"egress_per_hour_bytes"`
	Warnings                 []string `json:"warnings"`
}

// ErrShortfall is wrapped when the candidates cannot reach the target.
var ErrShortfall = errors.New("not enough capacity")

// Make plans req over the candidates: steady groups carry what they can,
// then the cheapest mix of burst candidates carries the rest. With one
// burst candidate and no steady group this is "boxes of a chosen shape".
func Make(req Request, cands []Candidate) (*Plan, error) {
	if req.Listeners < 0 || req.Listeners > inventories.MaxListeners {
		return nil, fmt.Errorf("listeners: want 0 to %s, got %s", Count(inventories.MaxListeners), Count(req.Listeners))
	}
	cal := req.Calibration
	p := &Plan{
		Listeners:             req.Listeners,
		EventHours:            req.EventHours,
		EgressPerListenerHour: int64(EgressPerListenerHour(cal)),
		Warnings:              []string{},
	}
	p.EgressPerHourAtListeners = p.EgressPerListenerHour * int64(req.Listeners)

	remaining := req.Listeners
	var burst []*Candidate
	for i := range cands {
		c := &cands[i]
		bc := PerBox(c.Box, req.cal(c))
		if c.Role == Steady {
			g := newGroup(&req, c, c.Count, bc)
			take := min(remaining, bc.Capacity*c.Count)
			g.Listeners = take
			remaining -= take
			p.Groups = append(p.Groups, g)
			continue
		}
		if bc.Capacity <= 0 {
			p.Warnings = append(p.Warnings, fmt.Sprintf("%s: carries no listeners (limited by %s); skipped", c.Name, bc.LimitedBy))
			continue
		}
		burst = append(burst, c)
	}
	if remaining > 0 {
		counts, err := cheapest(req, burst, remaining)
		if err != nil {
			return nil, err
		}
		for i, c := range burst {
			if counts[i] == 0 {
				continue
			}
			bc := PerBox(c.Box, req.cal(c))
			g := newGroup(&req, c, counts[i], bc)
			g.Listeners = min(remaining, bc.Capacity*counts[i])
			remaining -= g.Listeners
			p.Groups = append(p.Groups, g)
		}
	}

	for _, g := range p.Groups {
		p.Boxes += g.Boxes
	}
	if p.Boxes > inventories.MaxBoxes {
		return nil, fmt.Errorf("%w: %s listeners need %s boxes, more than the %s a plan may have; plan bigger boxes", ErrShortfall, Count(req.Listeners), Count(p.Boxes), Count(inventories.MaxBoxes))
	}
	priced := true
	total := &Cost{Currency: req.Catalogue.Currency}
	for i := range p.Groups {
		g := &p.Groups[i]
		p.Capacity += g.Boxes * g.PerBox.Capacity
		if g.cand.Shape == nil {
			priced = false
			continue
		}
		if g.cand.Shape.SharedCPU && g.Boxes > 0 {
			p.Warnings = append(p.Warnings, fmt.Sprintf("%s: shared vCPUs; %g listeners per core was measured on dedicated cores: measure this shape with fleet loadtest before trusting %s listeners per box",
				g.Shape, req.cal(g.cand).ListenersPerCore, Count(g.PerBox.Capacity)))
		}
		g.Egress, p.Warnings = egressPlan(req, g, p.Warnings)
		g.Cost = groupCost(req, g)
		total.add(g.Cost)
	}
	if priced && len(p.Groups) > 0 {
		p.Cost = total
	}
	if len(p.Groups) > 0 {
		main := slices.MaxFunc(p.Groups, func(a, b Group) int { return cmp.Compare(a.Boxes, b.Boxes) })
		p.PerBox = main.PerBox
	}
	return p, nil
}

func newGroup(req *Request, c *Candidate, boxes int, bc BoxCapacity) Group {
	return Group{
		Name:        c.Name,
		Role:        c.Role,
		Shape:       c.Ref(),
		Boxes:       boxes,
		Calibration: req.calName(c),
		PerBox: PerBoxPlan{
			Shape:       c.Ref(),
			Cores:       c.Box.Cores,
			RAMBytes:    int64(c.Box.RAM),
			Processes:   c.Box.Processes,
			UplinkBPS:   int64(c.Box.Uplink),
			BoxCapacity: bc,
		},
		cand: c,
	}
}

// boxPrice is one box's hourly, monthly and per-event price in the
// catalogue's currency, without egress.
func boxPrice(req *Request, c *Candidate) (hour, month, event float64) {
	s, cat := c.Shape, req.Catalogue
	monthly := cat.ToCurrency(s.Monthly, s.Currency)
	hourly := cat.ToCurrency(s.Hourly, s.Currency)
	month = monthly
	if monthly == 0 {
		month = hourly * HoursPerMonth
	}
	hour = hourly
	if hourly == 0 {
		hour = monthly / HoursPerMonth
	}
	if req.EventHours > 0 && c.Role == Burst {
		if hourly > 0 {
			event = hourly * math.Ceil(req.EventHours)
			if monthly > 0 && event > monthly {
				event = monthly
			}
		} else {
			// Rented by the month only: an event costs a month and setup.
			event = monthly
		}
		event += cat.ToCurrency(s.Setup, s.Currency)
	}
	return hour, month, event
}

func groupCost(req Request, g *Group) *Cost {
	hour, month, event := boxPrice(&req, g.cand)
	n := float64(g.Boxes)
	c := &Cost{
		Currency: req.Catalogue.Currency,
		PerHour:  roundMoney(hour * n),
		PerMonth: roundMoney(month * n),
		PerEvent: event * n,
		Overage:  roundMoney(g.Egress.OverageCost),
	}
	if req.EventHours > 0 {
		c.PerEvent += c.Overage
	}
	c.PerEvent = roundMoney(c.PerEvent)
	return c
}

// egressPlan works out one group's egress against its shape's terms and
// appends warnings where a cap, throttle or ban bites.
func egressPlan(req Request, g *Group, warnings []string) (*EgressPlan, []string) {
	s, cat := g.cand.Shape, req.Catalogue
	e := s.Egress
	perBox := 0
	if g.Boxes > 0 {
		perBox = (g.Listeners + g.Boxes - 1) / g.Boxes
	}
	cal := req.cal(g.cand)
	rate := float64(EgressPerListenerHour(cal)) * float64(perBox) // bytes per box-hour
	H := req.hours()
	ep := &EgressPlan{
		Provider:        g.cand.Provider.Name,
		PerBoxHourBytes: int64(rate),
		IncludedBytes:   int64(e.Included),
		Accrues:         e.Accrues,
		Past:            e.Past,
		WindowHours:     H,
	}
	inc := float64(e.Included)
	var over float64 // per box, within the window
	switch e.Accrues {
	case inventories.AccrueMonth:
		if rate > 0 {
			h := inc / rate
			ep.ExhaustedAfterHours = &h
		}
		over = math.Max(0, rate*H-inc)
	case inventories.AccruePooledHour:
		accrual := inc / inventories.PooledHoursPerMonth
		if rate > accrual {
			zero := 0.0
			ep.ExhaustedAfterHours = &zero
			over = (rate - accrual) * H
		}
	case inventories.AccrueDay:
		if rate > 0 {
			h := inc / rate
			if h < 24 {
				ep.ExhaustedAfterHours = &h
			}
		}
		days := math.Floor(H / 24)
		over = days*math.Max(0, rate*24-inc) + math.Max(0, rate*(H-days*24)-inc)
	}
	ep.OverageBytes = int64(over * float64(g.Boxes))
	ref := g.Shape
	if over > 0 {
		switch e.Past {
		case inventories.PastBilled:
			ep.OverageCost = roundMoney(float64(ep.OverageBytes) / float64(e.PerBytes()) * cat.ToCurrency(e.Price, s.Currency))
			if ep.ExhaustedAfterHours != nil {
				warnings = append(warnings, fmt.Sprintf("%s: %s included egress is used up after %.1f h at %s listeners per box; past it %s is billed over %s h",
					ref, inventories.Bytes(inc), *ep.ExhaustedAfterHours, Count(perBox), inventories.Bytes(ep.OverageBytes), strconv.FormatFloat(H, 'f', -1, 64)))
			}
		case inventories.PastThrottled:
			ep.ThrottledListeners = floor(float64(e.Throttle) * cal.UplinkHeadroom / float64(cal.BitratePerListener))
			warnings = append(warnings, fmt.Sprintf("%s: %s included egress is used up after %.1f h at %s listeners per box; then throttled to %s, which carries %s listeners",
				ref, inventories.Bytes(inc), *ep.ExhaustedAfterHours, Count(perBox), e.Throttle, Count(ep.ThrottledListeners)))
		case inventories.PastBarred:
			warnings = append(warnings, fmt.Sprintf("%s: traffic past the %s allowance is barred by the terms; the boxes would be cut off after %.1f h", ref, inventories.Bytes(inc), *ep.ExhaustedAfterHours))
		}
	}
	return ep, warnings
}

// cheapest picks how many boxes of each burst candidate carry need
// listeners at the lowest cost (per event with an event, per month
// without), honouring each candidate's Max. It is a bounded covering
// knapsack over listener units, then trimmed of boxes the rounding made
// unnecessary.
func cheapest(req Request, cands []*Candidate, need int) ([]int, error) {
	if len(cands) == 0 {
		return nil, fmt.Errorf("%w: %d listeners are left and there is no burst shape to carry them", ErrShortfall, need)
	}
	caps := make([]int, len(cands))
	costs := make([]float64, len(cands))
	limits := make([]int, len(cands))
	reach := 0
	for i, c := range cands {
		caps[i] = PerBox(c.Box, req.cal(c)).Capacity
		costs[i] = unitCost(req, c, caps[i])
		limits[i] = (need + caps[i] - 1) / caps[i]
		if limits[i]*caps[i] < need+caps[i] {
			limits[i]++ // room for the table's rounding
		}
		if c.Max > 0 {
			limits[i] = min(limits[i], c.Max)
		}
		reach += limits[i] * caps[i]
	}
	if reach < need {
		return nil, fmt.Errorf("%w: %d listeners are left and the burst pools at their max carry %d", ErrShortfall, need, reach)
	}
	// Listener units: fine enough for accuracy, coarse enough to be quick.
	unit := max(1, need/4000)
	units := (need + unit - 1) / unit
	inf := math.Inf(1)
	type cell struct {
		cost  float64
		boxes int
	}
	better := func(a, b cell) bool {
		if a.cost != b.cost {
			return a.cost < b.cost-1e-9
		}
		return a.boxes < b.boxes
	}
	dp := make([]cell, units+1)
	choice := make([][]int, units+1) // counts per candidate for each state
	for i := range dp {
		dp[i] = cell{inf, 0}
	}
	dp[0] = cell{0, 0}
	choice[0] = make([]int, len(cands))
	for i := range cands {
		u := max(1, caps[i]/unit)
		// Binary splitting turns the bounded item into 0/1 items.
		for k, left := 1, limits[i]; left > 0; k *= 2 {
			take := min(k, left)
			left -= take
			for x := units; x >= 0; x-- {
				if math.IsInf(dp[x].cost, 1) {
					continue
				}
				y := min(units, x+take*u)
				c := cell{dp[x].cost + float64(take)*costs[i], dp[x].boxes + take}
				if better(c, dp[y]) {
					dp[y] = c
					ch := slices.Clone(choice[x])
					ch[i] += take
					choice[y] = ch
				}
			}
		}
	}
	// Rounding capacities down to units can leave the target unreached
	// in the table while real capacities reach it: start from the best
	// state reached and add the cheapest boxes per listener that are left.
	best := units
	for best > 0 && choice[best] == nil {
		best--
	}
	counts := slices.Clone(choice[best])
	for {
		total := 0
		for i, n := range counts {
			total += n * caps[i]
		}
		if total >= need {
			break
		}
		add := -1
		for i, n := range counts {
			if n < limits[i] && (add < 0 || costs[i]/float64(caps[i]) < costs[add]/float64(caps[add])) {
				add = i
			}
		}
		if add < 0 {
			return nil, fmt.Errorf("%w: no mix of burst shapes carries %d listeners", ErrShortfall, need)
		}
		// All the boxes the rest needs at once: the table's units can be
		// far larger than a box, and one box a turn would take as long
		// as the plan is big.
		counts[add] += min(limits[add]-counts[add], (need-total+caps[add]-1)/caps[add])
	}
	// Trim: drop the dearest box while the rest still carry need.
	for {
		total := 0
		for i, n := range counts {
			total += n * caps[i]
		}
		drop := -1
		for i, n := range counts {
			if n > 0 && total-caps[i] >= need && (drop < 0 || costs[i] > costs[drop]) {
				drop = i
			}
		}
		if drop < 0 {
			return counts, nil
		}
		counts[drop]--
	}
}

// unitCost is what one box of c costs when it runs full: per event with an
// event, per month without, egress overage included.
func unitCost(req Request, c *Candidate, capacity int) float64 {
	if c.Shape == nil {
		return 1 // unpriced (--box): minimise boxes
	}
	_, month, event := boxPrice(&req, c)
	g := &Group{Boxes: 1, Listeners: capacity, cand: c, Shape: c.Ref()}
	ep, _ := egressPlan(req, g, nil)
	cost := month
	if req.EventHours > 0 {
		cost = event
	}
	cost += ep.OverageCost
	if ep.Past == inventories.PastBarred && ep.OverageBytes > 0 || ep.ThrottledListeners > 0 {
		// A box that is cut off or throttled mid-window cannot carry its
		// share: never prefer it over one that can.
		cost += 1e9
	}
	return cost
}

// BoxCandidate is a fleet's steady group or burst pool as a candidate.
func BoxCandidate(cat *inventories.Catalogue, role Role, name string, b *inventories.Box) (Candidate, error) {
	p, s, err := b.ShapeRef(cat)
	if err != nil {
		return Candidate{}, err // validated on load; kept for safety
	}
	return ShapeCandidate(p, s, name, b.Processes, role), nil
}

// ShapeCandidate is a catalogue shape as a candidate, procs processes per
// box (0: one per core).
func ShapeCandidate(p *inventories.Provider, s *inventories.Shape, name string, procs inventories.Processes, role Role) Candidate {
	return Candidate{
		Role:     role,
		Name:     name,
		Provider: p,
		Shape:    s,
		Box: Box{
			Cores:     s.Cores,
			RAM:       s.RAM,
			Processes: procs.For(s.Cores),
			Uplink:    s.Uplink,
		},
	}
}

// EventPrice is what one burst box of shape costs for an event of hours:
// billed by the started hour, never above its monthly price, plus any
// setup fee; a monthly-only shape costs a month. Egress is not included.
func EventPrice(cat *inventories.Catalogue, p *inventories.Provider, s *inventories.Shape, hours float64) float64 {
	req := Request{EventHours: hours, Catalogue: cat}
	_, _, event := boxPrice(&req, &Candidate{Role: Burst, Provider: p, Shape: s})
	return roundMoney(event)
}
