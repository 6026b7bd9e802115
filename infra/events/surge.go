package events

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/inventories"
	"github.com/relayfleet/relayfleet/inventories/capacity"
)

// SurgeState is what the reconciler keeps of the fleet's surge between
// runs, in the surge's record.
type SurgeState struct {
	// BelowSince is when the headroom went under the threshold (zero
	// while it is not); BackSince when the steady fleet alone had the
	// threshold's headroom for every listener again (zero while it has
	// not).
	BelowSince time.Time `json:"below_since,omitzero"`
	BackSince  time.Time `json:"back_since,omitzero"`
	// Since and Until are the surge as an event: up from Since, until
	// Until, which each run moves an hour ahead while the surge is needed,
	// and sets to now once it is not (its end: the boxes shed into room,
	// then go). A reconciler that stops running ends the surge an hour
	// later by itself.
	Since time.Time `json:"since,omitzero"`
	Until time.Time `json:"until,omitzero"`
	// Peak is the listeners the surge is sized for (with the steady
	// fleet's calibrated capacity).
	Peak int `json:"peak"`
	// The last look: listeners and room on the relays the router routes
	// to (steady and surge), and on the steady ones alone.
	Listeners       int64     `json:"listeners"`
	Room            int64     `json:"room"`
	SteadyListeners int64     `json:"steady_listeners"`
	SteadyRoom      int64     `json:"steady_room"`
	LookedAt        time.Time `json:"looked_at,omitzero"`
}

// surgeRoll is how far ahead of now a needed surge's end is kept.
const surgeRoll = time.Hour

// active reports whether a surge is on (up, coming up or ending).
func (s *SurgeState) active() bool { return !s.Since.IsZero() }

// headroom is the share of the capacity the look found free.
func headroom(listeners, room int64) float64 {
	if listeners+room <= 0 {
		return 1
	}
	return float64(room) / float64(listeners+room)
}

// lookSurge reads the listeners and the room (each relay's headroom, as
// the router polls it) of the steady relays the router's list does not
// mark draining, and of the surge's routed boxes.
func (r *Reconciler) lookSurge(ctx context.Context, rec *Record, st *SurgeState) error {
	sh, err := program.ReadStackHosts(r.StateDir, r.Fleet.Name)
	if err != nil {
		return fmt.Errorf("steady fleet's hosts: %w", err)
	}
	var steady []program.HostEntry
	if !sh.Draining {
		for _, h := range sh.Hosts {
			if !slices.Contains(sh.DrainingHosts, h.Name) {
				steady = append(steady, h)
			}
		}
	}
	if st.SteadyListeners, err = r.Probe.Listeners(ctx, steady); err != nil {
		return fmt.Errorf("steady fleet's listeners: %w", err)
	}
	if st.SteadyRoom, err = r.Probe.Room(ctx, steady); err != nil {
		return fmt.Errorf("steady fleet's room: %w", err)
	}
	st.Listeners, st.Room = st.SteadyListeners, st.SteadyRoom
	var surge []program.HostEntry
	if rec.Route != nil && !rec.Route.Draining {
		for _, h := range rec.Route.Hosts {
			if !slices.Contains(rec.Route.DrainingHosts, h.Name) {
				surge = append(surge, h)
			}
		}
	}
	if len(surge) > 0 {
		n, err := r.Probe.Listeners(ctx, surge)
		if err != nil {
			return fmt.Errorf("surge boxes' listeners: %w", err)
		}
		room, err := r.Probe.Room(ctx, surge)
		if err != nil {
			return fmt.Errorf("surge boxes' room: %w", err)
		}
		st.Listeners, st.Room = st.Listeners+n, st.Room+room
	}
	return nil
}

// surge moves the fleet's surge one pass: it looks at the fleet's
// headroom, starts a surge once it has been under the threshold for the
// surge's for, grows it when it stays under for as long again, ends it
// once the steady fleet alone has had the threshold's headroom for every
// listener for back_for, and otherwise reconciles it as the event it is.
func (r *Reconciler) surge(ctx context.Context, now time.Time, rec *Record) Result {
	cfg := r.Fleet.Surge
	if rec == nil {
		rec = &Record{Event: inventories.SurgeEvent, Stack: StackName(r.Fleet.Name, inventories.SurgeEvent),
			Backend: cfg.Burst.Provider, Pool: cfg.Burst, Phase: Scheduled}
	}
	if rec.Surge == nil {
		rec.Surge = &SurgeState{}
	}
	st := rec.Surge
	if err := r.lookSurge(ctx, rec, st); err != nil {
		// Blind: nothing starts or ends; a surge that is on stays as it is.
		r.log().Warn("surge: the fleet's headroom cannot be read: "+err.Error(), "event", rec.Event, "action", "surge-blind")
		if !st.active() {
			return Result{Event: rec.Event, Phase: rec.Phase, Err: fmt.Errorf("surge: %w", err)}
		}
		ev := cfg.SurgeEventAt(st.Since, st.Until, st.Peak)
		res := r.one(ctx, now, &ev, rec)
		res.Err = errors.Join(res.Err, fmt.Errorf("surge: %w", err))
		return res
	}
	st.LookedAt = now.UTC()
	thr := float64(cfg.WhenHeadroomBelow)
	share := headroom(st.Listeners, st.Room)
	below := share < thr
	// The steady fleet alone would carry every listener with the
	// threshold's headroom: the surge can go without bringing it back.
	back := float64(st.Listeners) <= (1-thr)*float64(st.SteadyListeners+st.SteadyRoom)
	wasBelow := st.BelowSince
	switch {
	case !below:
		st.BelowSince = time.Time{}
	case st.BelowSince.IsZero():
		st.BelowSince = now.UTC()
	}
	look := fmt.Sprintf("headroom %.0f%% (%s free of %s), the surge's threshold %s; the steady fleet alone: %s listeners, room %s",
		share*100, capacity.Count(int(st.Room)), capacity.Count(int(st.Listeners+st.Room)), cfg.WhenHeadroomBelow,
		capacity.Count(int(st.SteadyListeners)), capacity.Count(int(st.SteadyRoom)))
	if !st.active() {
		if !below || now.Sub(st.BelowSince) < cfg.For.D() {
			r.log().Info("surge: "+look, "event", rec.Event, "action", "surge-look")
			if rec.Phase == "" {
				rec.Phase = Scheduled
			}
			// The record is written when the state changes only (under
			// the threshold from now, or no longer): a quiet fleet costs no
			// write a minute.
			if !st.BelowSince.Equal(wasBelow) {
				return Result{Event: rec.Event, Phase: rec.Phase, Err: r.save(ctx, rec)}
			}
			return Result{Event: rec.Event, Phase: rec.Phase}
		}
		peak, err := r.surgePeak(rec, st, thr)
		if err != nil {
			return Result{Event: rec.Event, Phase: rec.Phase, Err: r.fail(ctx, rec, now, "surge", err)}
		}
		st.Since, st.Until, st.Peak, st.BackSince, st.BelowSince = now.UTC(), now.Add(surgeRoll).UTC(), peak, time.Time{}, now.UTC()
		r.note(rec, now, "surge", fmt.Sprintf("SURGE: %s for %s; bringing surge boxes up for a peak of %s listeners", look, cfg.For.D(), capacity.Count(peak)))
	} else if now.Before(st.Until) {
		switch {
		case back && st.BackSince.IsZero():
			st.BackSince = now.UTC()
		case !back:
			st.BackSince = time.Time{}
		}
		switch {
		case back && now.Sub(st.BackSince) >= cfg.BackFor.D():
			st.Until = now.UTC()
			r.note(rec, now, "surge-end", fmt.Sprintf("the steady fleet alone has had the headroom for every listener for %s (%s): the surge's boxes shed into its room and go", cfg.BackFor.D(), look))
		case below && now.Sub(st.BelowSince) >= cfg.For.D() && rec.Phase == Up:
			peak, err := r.surgePeak(rec, st, thr)
			if err != nil {
				return Result{Event: rec.Event, Phase: rec.Phase, Err: r.fail(ctx, rec, now, "surge", err)}
			}
			if peak > st.Peak {
				r.note(rec, now, "surge-grow", fmt.Sprintf("%s with the surge's boxes for %s more: growing it for a peak of %s listeners", look, cfg.For.D(), capacity.Count(peak)))
				st.Peak = peak
			}
			st.BelowSince, st.Until = now.UTC(), now.Add(surgeRoll).UTC()
		default:
			st.Until = now.Add(surgeRoll).UTC()
			r.log().Info("surge: "+look, "event", rec.Event, "action", "surge-look")
		}
	}
	ev := cfg.SurgeEventAt(st.Since, st.Until, st.Peak)
	res := r.one(ctx, now, &ev, rec)
	if rec.Phase == Gone || rec.Phase == Missed {
		// Over, proven gone: the next surge starts from nothing (fleet
		// burst down --event surge ends this surge, not the next).
		rec.Surge = &SurgeState{LookedAt: st.LookedAt, Listeners: st.Listeners, Room: st.Room, SteadyListeners: st.SteadyListeners, SteadyRoom: st.SteadyRoom}
		rec.Manual = ""
		res.Err = errors.Join(res.Err, r.save(ctx, rec))
	}
	return res
}

// surgePeak is the peak a surge is sized for so that, with every listener
// the look found, the fleet has the threshold's headroom again: the
// steady fleet's calibrated capacity, what the surge already plans, and
// the capacity still missing (at least one listener's).
func (r *Reconciler) surgePeak(rec *Record, st *SurgeState, thr float64) (int, error) {
	probe := r.Fleet.Surge.SurgeEventAt(time.Unix(0, 0), time.Unix(3600, 0), 1)
	sz, err := Size(&probe, r.Fleet, r.Catalogue, r.Calibration)
	if err != nil {
		return 0, err
	}
	planned := 0
	if st.active() && rec.Plan != nil {
		planned = rec.Plan.Boxes * rec.Plan.PerBox
	}
	need := int(math.Ceil(float64(st.Listeners)/(1-thr))) - int(st.Listeners+st.Room)
	return sz.SteadyCapacity + planned + max(need, 1), nil
}
