package events

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/internal/text"
	"github.com/relayfleet/relayfleet/inventories"
	"github.com/relayfleet/relayfleet/inventories/capacity"
)

// CandidateState is one of the candidates an event's burst lists, as the
// event uses it: what a box of it carries and costs, how many boxes the
// event's stack asks of it and holds, and whether it refused.
type CandidateState struct {
	Ref      string `json:"ref"`
	Provider string `json:"provider"`
	// PerBox is the listeners one of its boxes carries (the calibration);
	// Price one box's for the plan's window, in the catalogue's currency.
	PerBox int     `json:"per_box"`
	Price  float64 `json:"price"`
	Max    int     `json:"max,omitempty"`
	// Boxes is what the event's stack asks of it (boxes numbered 1 to
	// Boxes); Made the numbers its state holds after the last up; Held the
	// most it held at once.
	Boxes int   `json:"boxes"`
	Made  []int `json:"made,omitempty"`
	Held  int   `json:"held"`
	// Refused is why the candidate stopped being asked for more boxes (a
	// create it could not finish: a capacity or quota refusal, an action
	// that never finished, a server without an address); the boxes it made
	// stay, the rest are planned on the next candidate. Cleared when the
	// event is next brought up from nothing.
	Refused   string    `json:"refused,omitempty"`
	RefusedAt time.Time `json:"refused_at,omitzero"`
}

// multi reports whether the event's burst lists more than one candidate:
// only then are its boxes planned across candidates.
func (rec *Record) multi() bool { return len(rec.Candidates) > 1 }

// listens is the listeners the candidate's boxes carry (those it holds,
// when it refused; else those it is asked for).
func (c *CandidateState) listens() int { return c.asked() * c.PerBox }

// asked is the boxes counted against the plan: those it holds once it
// refused, else those the stack asks of it.
func (c *CandidateState) asked() int {
	if c.Refused != "" {
		return len(c.Made)
	}
	return c.Boxes
}

// highest is the highest box number the candidate holds (0: none).
func (c *CandidateState) highest() int {
	if len(c.Made) == 0 {
		return 0
	}
	return slices.Max(c.Made)
}

// planCandidates sets the record's candidates from its pool and plans
// the event's boxes over them: the listeners that size's boxes carry,
// taken by each candidate in order up to its max; a refused candidate
// keeps the boxes it holds and the rest go on. While the event runs a
// candidate is never asked for fewer boxes than it holds (a reconcile
// removes no box under its listeners). An event with one candidate has
// none recorded.
func (r *Reconciler) planCandidates(rec *Record, size *Sizing) error {
	choices := rec.Pool.Choices()
	if len(choices) < 2 {
		rec.Candidates = nil
		return nil
	}
	old := map[string]CandidateState{}
	for _, c := range rec.Candidates {
		old[c.Ref] = c
	}
	cs := make([]CandidateState, len(choices))
	for i, ch := range choices {
		box := rec.Pool.CandidateBox(i)
		cand, err := capacity.BoxCandidate(r.Catalogue, capacity.Burst, rec.Event, &box)
		if err != nil {
			return fmt.Errorf("candidate %s: %w", ch.Ref(), err)
		}
		c := old[ch.Ref()]
		c.Ref, c.Provider, c.Max = ch.Ref(), ch.Provider, ch.Max
		c.PerBox = capacity.PerBox(cand.Box, r.Calibration).Capacity
		c.Price = capacity.EventPrice(r.Catalogue, cand.Provider, cand.Shape, size.WindowHours)
		cs[i] = c
	}
	// Boxes a candidate no longer listed holds stay in the plan's count
	// only through the stack, which removes them: nothing to keep here.
	need := size.Boxes * size.PerBox
	keep := running(rec)
	for i := range cs {
		c := &cs[i]
		if c.Refused != "" {
			c.Boxes = c.highest()
			need -= c.listens()
			continue
		}
		n := 0
		if need > 0 && c.PerBox > 0 {
			n = (need + c.PerBox - 1) / c.PerBox
		}
		if c.Max > 0 {
			n = min(n, c.Max)
		}
		if keep {
			n = max(n, c.highest())
		}
		c.Boxes = n
		need -= n * c.PerBox
	}
	rec.Candidates = cs
	return nil
}

// Wanted is the boxes the event's plan counts on: its sizing's, or with
// candidates, those each is asked for (a refused one's, those it holds).
func (rec *Record) Wanted() int {
	if !rec.multi() {
		if rec.Plan == nil {
			return 0
		}
		return rec.Plan.Boxes
	}
	n := 0
	for i := range rec.Candidates {
		n += rec.Candidates[i].asked()
	}
	return n
}

// burst is the event's boxes for its stack: boxes of its pool, or with
// candidates (and boxes > 0) each candidate's share of the plan.
func (r *Reconciler) burst(rec *Record, boxes int) program.Burst {
	b := program.Burst{Event: rec.Event, Pool: rec.Pool, Boxes: boxes}
	if boxes == 0 || !rec.multi() {
		return b
	}
	b.Boxes = rec.Candidates[0].Boxes
	for k := 1; k < len(rec.Candidates); k++ {
		if n := rec.Candidates[k].Boxes; n > 0 {
			b.Spill = append(b.Spill, program.Spill{Candidate: k, Boxes: n})
		}
	}
	return b
}

// candidateGroup is the group label of the boxes of the event's candidate k.
func candidateGroup(event string, k int) string {
	if k == 0 {
		return event
	}
	return program.SpillGroup(event, k)
}

// noteMade records what each candidate holds after an up: every box it
// was asked for (the up succeeded), or what the failed up's state holds.
func (rec *Record) noteMade(part *program.PartialError) {
	for k := range rec.Candidates {
		c := &rec.Candidates[k]
		if part == nil {
			c.Made = nil
			for n := 1; n <= c.Boxes; n++ {
				c.Made = append(c.Made, n)
			}
		} else {
			c.Made = part.Made[candidateGroup(rec.Event, k)]
		}
		c.Held = max(c.Held, len(c.Made))
	}
}

// fallback marks refused every candidate that made fewer boxes than it was
// asked for in the failed up (err) while a later candidate may still take
// boxes, and plans the rest onto the next. It reports whether anything
// moved: then the up runs again.
func (r *Reconciler) fallback(now time.Time, rec *Record, size *Sizing, err error) (bool, error) {
	var refused []int
	for k := range rec.Candidates {
		c := &rec.Candidates[k]
		if c.Refused != "" || len(c.Made) >= c.Boxes || !rec.openAfter(k) {
			continue
		}
		c.Refused, c.RefusedAt = r.refusal(rec, k, err), now.UTC()
		refused = append(refused, k)
	}
	if len(refused) == 0 {
		return false, nil
	}
	before := map[string]int{}
	for _, c := range rec.Candidates {
		before[c.Ref] = c.Boxes
	}
	if err := r.planCandidates(rec, size); err != nil {
		return false, err
	}
	for _, k := range refused {
		c := rec.Candidates[k]
		r.note(rec, now, "fallback", fmt.Sprintf("candidate %s made %d of %d boxes (%s); the rest of the plan goes on: %s",
			c.Ref, len(c.Made), before[c.Ref], c.Refused, rec.candidatePlan(k+1)))
	}
	return true, nil
}

// openAfter reports whether a candidate after k may still be asked for
// boxes: not refused, not at its max.
func (rec *Record) openAfter(k int) bool {
	for _, c := range rec.Candidates[k+1:] {
		if c.Refused == "" && (c.Max == 0 || c.Boxes < c.Max) {
			return true
		}
	}
	return false
}

// candidatePlan says what candidates from the k-th on are asked for.
func (rec *Record) candidatePlan(from int) string {
	var parts []string
	for _, c := range rec.Candidates[from:] {
		if c.Refused != "" || c.Boxes == 0 {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s on %s (%s listeners)", text.Plural(c.Boxes, "box", "boxes"), c.Ref, capacity.Count(c.Boxes*c.PerBox)))
	}
	if len(parts) == 0 {
		return "no candidate left to ask"
	}
	return strings.Join(parts, ", ")
}

// refusal is why candidate k made fewer boxes than asked: the failed
// run's error lines that name its missing boxes, else the whole error.
func (r *Reconciler) refusal(rec *Record, k int, err error) string {
	c := &rec.Candidates[k]
	var lines []string
	for _, line := range strings.Split(err.Error(), "; ") {
		for n := 1; n <= c.Boxes; n++ {
			if slices.Contains(c.Made, n) {
				continue
			}
			name := program.BurstBoxName(r.Fleet.Name, rec.Event, c.Provider, n)
			if k > 0 {
				name = program.SpillBoxName(r.Fleet.Name, rec.Event, c.Provider, k, n)
			}
			if strings.Contains(line, name+":") || strings.HasSuffix(line, name) {
				lines = append(lines, strings.TrimPrefix(line, "up: "))
				break
			}
		}
	}
	if len(lines) == 0 {
		return err.Error()
	}
	return strings.Join(lines, "; ")
}

// upStack runs the event's stack up to its plan. With candidates, an up
// that left a candidate short while a later one may take boxes plans the
// rest there and runs again, at most once per candidate. It returns the
// hosts to route and the error that left the event short (upErr), or err
// when nothing can be routed (the record already says why).
func (r *Reconciler) upStack(ctx context.Context, now time.Time, ev *inventories.Event, rec *Record, size *Sizing) (hosts []program.HostEntry, upErr, err error) {
	if size.Boxes == 0 && !rec.StackMade {
		return nil, nil, nil
	}
	rec.StackMade = true
	for try := 0; ; try++ {
		if err := r.save(ctx, rec); err != nil {
			return nil, nil, err
		}
		hosts, err = r.Stacks.Up(ctx, rec.Stack, r.burst(rec, size.Boxes))
		rec.Created, rec.Converged = len(hosts), len(hosts)
		var part *program.PartialError
		if err == nil {
			rec.noteMade(nil)
			return hosts, nil, nil
		}
		if !errors.As(err, &part) {
			return nil, nil, r.fail(ctx, rec, now, "up", err)
		}
		rec.Created, rec.Converged = part.Boxes, len(part.Hosts)
		rec.noteMade(part)
		if rec.multi() && try < len(rec.Candidates) {
			moved, ferr := r.fallback(now, rec, size, err)
			if ferr != nil {
				return nil, nil, r.fail(ctx, rec, now, "up", errors.Join(err, ferr))
			}
			if moved {
				continue
			}
		}
		if len(part.Hosts) == 0 {
			return nil, nil, r.failShort(ctx, ev, rec, now, err)
		}
		// Serve what is up: the boxes that converged are routed now; the
		// next run tries the rest again.
		return part.Hosts, err, nil
	}
}

// SweepBackends are the backends the proof of teardown lists: the
// record's, and every candidate's that held a box.
func (rec *Record) SweepBackends() []string {
	out := []string{rec.Backend}
	for _, c := range rec.Candidates {
		if c.Held > 0 && !slices.Contains(out, c.Provider) {
			out = append(out, c.Provider)
		}
	}
	return out
}

// count asks the event's relays for their listeners: in all, and with
// candidates, on each candidate's boxes.
func (r *Reconciler) count(ctx context.Context, rec *Record) (Sample, error) {
	if !rec.multi() {
		n, err := r.Probe.Listeners(ctx, rec.Hosts)
		return Sample{Listeners: n}, err
	}
	s := Sample{Candidates: make([]int64, len(rec.Candidates))}
	for k := range rec.Candidates {
		var hosts []program.HostEntry
		for _, h := range rec.Hosts {
			if h.Group == candidateGroup(rec.Event, k) {
				hosts = append(hosts, h)
			}
		}
		if len(hosts) == 0 {
			continue
		}
		n, err := r.Probe.Listeners(ctx, hosts)
		if err != nil {
			return Sample{}, err
		}
		s.Candidates[k], s.Listeners = n, s.Listeners+n
	}
	return s, nil
}
