package events

import (
	"fmt"
	"math"
	"time"

	"github.com/relayfleet/relayfleet/infra/backend"
	"github.com/relayfleet/relayfleet/inventories"
	"github.com/relayfleet/relayfleet/inventories/capacity"
)

// Report is an event's cost once its boxes are gone, against its plan.
type Report struct {
	Event    string `json:"event"`
	Shape    string `json:"shape"`
	Currency string `json:"currency"`
	// Boxes is the most boxes the event held.
	Boxes int `json:"boxes"`
	// BoxHours is the boxes' summed lives; BilledHours rounds each box's
	// life up to whole hours, as hourly clouds bill.
	BoxHours        float64 `json:"box_hours"`
	BilledHours     float64 `json:"billed_hours"`
	PlannedBoxHours float64 `json:"planned_box_hours"`
	// Cost is the boxes' price for their billed hours (without egress
	// overage); PlannedCost the plan's, with its overage.
	Cost        float64 `json:"cost"`
	PlannedCost float64 `json:"planned_cost"`
	// PeakListeners and ListenerHours come from the listener counts
	// sampled on every reconcile; EgressBytes is ListenerHours times the
	// calibration's egress per listener-hour.
	PeakListeners         int64   `json:"peak_listeners"`
	PlannedPeak           int     `json:"planned_peak"`
	ListenerHours         float64 `json:"listener_hours"`
	EgressBytes           int64   `json:"egress_bytes"`
	PlannedEgressBytes    int64   `json:"planned_egress_bytes"`
	PlannedOverage        float64 `json:"planned_overage"`
	OverBoxHours          float64 `json:"over_plan_box_hours"`
	OverCost              float64 `json:"over_plan_cost"`
	OverEgressBytes       int64   `json:"over_plan_egress_bytes"`
	Orphans               int     `json:"orphans"`
	UpAt                  string  `json:"up_at,omitempty"`
	DestroyedAt           string  `json:"destroyed_at,omitempty"`
	EgressPerListenerHour int64   `json:"egress_per_listener_hour_bytes"`
	// Candidates, when the event's burst lists more than one, say what
	// each carried: the most boxes it held, the listeners they carry
	// (the calibration) and the most they served at once (sampled), and
	// their cost, each box billed for the event's mean box life.
	Candidates []CandidateReport `json:"candidates,omitempty"`
	// Requests are the cloud API requests the event's runs sent, its
	// teardown's sweep included (Record.Requests).
	Requests backend.Requests `json:"requests"`
}

// CandidateReport is one candidate's share of an event.
type CandidateReport struct {
	Ref           string  `json:"ref"`
	Boxes         int     `json:"boxes"`
	Capacity      int     `json:"capacity"`
	PeakListeners int64   `json:"peak_listeners"`
	Cost          float64 `json:"cost"`
	Refused       string  `json:"refused,omitempty"`
}

func (r *Reconciler) report(rec *Record) *Report {
	rep := &Report{Event: rec.Event, Orphans: len(rec.Orphans)}
	// Without a catalogue or a calibration (an events file that does not
	// parse, beside providers and calibration files that do not either),
	// the report has no price or egress.
	if r.Catalogue != nil {
		rep.Currency = r.Catalogue.Currency
	}
	if rec.Plan != nil {
		rep.Shape, rep.Boxes, rep.PlannedPeak = rec.Plan.Shape, rec.Plan.Boxes, rec.Plan.Peak
		rep.PlannedBoxHours = round2(float64(rec.Plan.Boxes) * rec.Plan.WindowHours)
		rep.PlannedCost = rec.Plan.Cost
		rep.PlannedEgressBytes = rec.Plan.EgressBytes
		rep.PlannedOverage = rec.Plan.Overage
	}
	rep.BoxHours = round2(rec.BoxSeconds / 3600)
	if rec.multi() {
		r.reportCandidates(rec, rep)
	} else if rep.Boxes > 0 {
		perBox := rec.BoxSeconds / 3600 / float64(rep.Boxes)
		rep.BilledHours = float64(rep.Boxes) * math.Ceil(perBox-1e-9)
		if r.Catalogue != nil {
			if p, s, err := rec.Pool.ShapeRef(r.Catalogue); err == nil {
				rep.Cost = round2(float64(rep.Boxes) * capacity.EventPrice(r.Catalogue, p, s, perBox))
			}
		}
	}
	if r.Calibration != nil {
		rep.EgressPerListenerHour = int64(capacity.EgressPerListenerHour(r.Calibration))
	}
	for i, s := range rec.Samples {
		rep.PeakListeners = max(rep.PeakListeners, s.Listeners)
		if i > 0 {
			prev := rec.Samples[i-1]
			rep.ListenerHours += float64(prev.Listeners+s.Listeners) / 2 * s.At.Sub(prev.At).Hours()
		}
	}
	rep.ListenerHours = round2(rep.ListenerHours)
	rep.EgressBytes = int64(rep.ListenerHours * float64(rep.EgressPerListenerHour))
	rep.Requests = rec.Requests.Clone()
	rep.OverBoxHours = round2(rep.BoxHours - rep.PlannedBoxHours)
	rep.OverCost = round2(rep.Cost - rep.PlannedCost)
	rep.OverEgressBytes = rep.EgressBytes - rep.PlannedEgressBytes
	if !rec.CreatingSince.IsZero() {
		rep.UpAt = rec.CreatingSince.UTC().Format(time.RFC3339)
	}
	if !rec.DestroyedAt.IsZero() {
		rep.DestroyedAt = rec.DestroyedAt.UTC().Format(time.RFC3339)
	}
	return rep
}

// Summary is the report in one line.
func (rep *Report) Summary() string {
	return fmt.Sprintf("%.2f box-hours (plan %.2f), %.2f %s (plan %.2f), peak %d listeners, egress about %s (plan %s), %d API requests",
		rep.BoxHours, rep.PlannedBoxHours, rep.Cost, rep.Currency, rep.PlannedCost, rep.PeakListeners,
		inventories.Bytes(rep.EgressBytes), inventories.Bytes(rep.PlannedEgressBytes), rep.Requests.Total)
}

// reportCandidates fills the report's boxes, billed hours and cost from
// what each candidate held, and its Candidates.
func (r *Reconciler) reportCandidates(rec *Record, rep *Report) {
	rep.Boxes = 0
	for _, c := range rec.Candidates {
		rep.Boxes += c.Held
	}
	perBox := 0.0
	if rep.Boxes > 0 {
		perBox = rec.BoxSeconds / 3600 / float64(rep.Boxes)
		rep.BilledHours = float64(rep.Boxes) * math.Ceil(perBox-1e-9)
	}
	rep.Cost = 0
	for k, c := range rec.Candidates {
		cr := CandidateReport{Ref: c.Ref, Boxes: c.Held, Capacity: c.Held * c.PerBox, Refused: c.Refused}
		for _, s := range rec.Samples {
			if k < len(s.Candidates) {
				cr.PeakListeners = max(cr.PeakListeners, s.Candidates[k])
			}
		}
		box := rec.Pool.CandidateBox(k)
		if r.Catalogue == nil || c.Held == 0 {
			rep.Candidates = append(rep.Candidates, cr)
			continue
		}
		if p, sh, err := box.ShapeRef(r.Catalogue); err == nil {
			cr.Cost = round2(float64(c.Held) * capacity.EventPrice(r.Catalogue, p, sh, perBox))
		}
		rep.Cost += cr.Cost
		rep.Candidates = append(rep.Candidates, cr)
	}
	rep.Cost = round2(rep.Cost)
}
