package events

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/internal/ctxtime"
	"github.com/relayfleet/relayfleet/internal/text"
	"github.com/relayfleet/relayfleet/inventories"
)

// Overrun is an ended event whose listeners move to the steady fleet only
// as fast as it has room for them. Its relays are last resort in the
// router's list (new listeners go there only when no steady relay has
// headroom, so the router refuses no one); each reconcile reads the
// steady relays' headroom (the room), tells at most the room less a
// margin of the burst boxes' listeners to move, and destroys the boxes
// once none is left and the steady fleet has room (or lists no steady
// relay: empty boxes stay while it is full, the router's last resort). A
// reconcile that first runs late (the timer was down) does the same,
// with at least the drain time from then. At Until (the event's
// end plus its max_overrun) the old drain takes over, loudly: every relay
// draining, every listener told to move, the boxes destroyed at the drain
// deadline.
type Overrun struct {
	// Since is the first run after the end; Until is when the max overrun
	// is reached.
	Since time.Time `json:"since"`
	Until time.Time `json:"until"`
	// Shed counts the listeners told to move so far; Listeners and Room
	// are the burst boxes' listeners and the steady fleet's room as the
	// last run saw them (-1: unknown).
	Shed      int64 `json:"shed"`
	Listeners int64 `json:"listeners"`
	Room      int64 `json:"room"`
	// AtEndListeners and AtEndRoom are the same as the first run that
	// read them saw them, before it shed any (-1: not read yet).
	AtEndListeners int64 `json:"at_end_listeners"`
	AtEndRoom      int64 `json:"at_end_room"`
	// Forced is set once Until passed (or fleet burst down asked) and the
	// old drain took over.
	Forced bool `json:"forced,omitempty"`
}

// Bounds of one reconcile's overrun loop: it sheds, waits up to
// overrunSettle (polling every overrunPoll) for the listeners told to
// move to leave, reads the room again and sheds again, for at most
// overrunFor (less than the timer's minute).
var (
	overrunFor    = 40 * time.Second
	overrunSettle = 15 * time.Second
	overrunPoll   = time.Second
)

// shedMargin is the room a run leaves unused, from the room its first
// look saw: a tenth, at least one listener. New listeners the router
// sends to the steady fleet between the look and the shed need it; a
// listener told to move that finds no room is refused by the router (it
// avoids the relay that sent it away).
func shedMargin(room int64) int64 { return max(1, room/10) }

// overruns reports whether an ending event sheds into the steady fleet's
// room: not for fleet burst down (the operator asked for it now) nor for
// an event whose max_overrun is 0.
func overruns(ev *inventories.Event, rec *Record) bool {
	if rec.Manual == ManualDown {
		return false
	}
	return maxOverrun(ev) > 0
}

func maxOverrun(ev *inventories.Event) time.Duration {
	if ev == nil {
		return inventories.DefaultMaxOverrun
	}
	return ev.Overrun()
}

func drainTime(ev *inventories.Event) time.Duration {
	if ev == nil {
		return inventories.DefaultDrainTime
	}
	return ev.DrainTime.D()
}

// startOverrun begins the shed into room: the event's relays last resort
// in the router's list, Until its end plus max_overrun (for a reconcile
// that runs after that, a timer back from an outage, its drain time from
// now: the listeners still move at the pace the steady fleet takes).
func (r *Reconciler) startOverrun(ctx context.Context, now time.Time, ev *inventories.Event, rec *Record) error {
	end := now
	why := "the event left the events file"
	if ev != nil {
		end, why = ev.End.Time, "the event ended"
		if rec.MovedLater != nil {
			why = "the event's old window ended (the events file moved it later)"
		}
	}
	until := end.Add(maxOverrun(ev))
	if late := now.Add(drainTime(ev)); until.Before(late) {
		until = late
	}
	rec.Phase, rec.DrainingSince = Draining, now
	rec.DrainDeadline = until.Add(drainTime(ev))
	rec.Overrun = &Overrun{Since: now, Until: until, Listeners: -1, Room: -1, AtEndListeners: -1, AtEndRoom: -1}
	if err := r.setLastResort(ctx, rec); err != nil {
		return r.fail(ctx, rec, now, "drain", err)
	}
	r.note(rec, now, "overrun-start", fmt.Sprintf("%s: its relays take new listeners only when the steady fleet has no room; its listeners move as the steady fleet has room, every one by %s (max overrun)",
		why, until.UTC().Format(time.RFC3339)))
	if err := r.save(ctx, rec); err != nil {
		return err
	}
	return r.overrun(ctx, now, ev, rec)
}

// overrun is one reconcile's shed into room: see Overrun.
func (r *Reconciler) overrun(ctx context.Context, now time.Time, ev *inventories.Event, rec *Record) error {
	ov := rec.Overrun
	if !now.Before(ov.Until) {
		return r.forceDrain(ctx, now, ev, rec)
	}
	var told int64
	n, room, steady, err := r.overrunLook(ctx, rec)
	if err == nil && ov.AtEndListeners < 0 {
		ov.AtEndListeners, ov.AtEndRoom = n, room
	}
	margin := shedMargin(room)
	for stop := time.Now().Add(overrunFor); err == nil && n > 0 && time.Now().Before(stop); {
		k := min(n, room-margin)
		if k <= 0 {
			break
		}
		shed, serr := r.Probe.Shed(ctx, rec.Hosts, k)
		told += shed
		ov.Shed += shed
		if serr != nil {
			r.note(rec, now, "overrun-warning", fmt.Sprintf("told %d of %d listeners to move: %v", shed, k, serr))
			break
		}
		if shed == 0 {
			break
		}
		// Wait for them to land before the room is read again.
		want := n - shed
		settle := time.Now().Add(overrunSettle)
		for {
			if m, lerr := r.Probe.Listeners(ctx, rec.Hosts); lerr == nil && m <= want {
				break
			}
			if !time.Now().Before(settle) || !time.Now().Before(stop) {
				break
			}
			if err := ctxtime.Sleep(ctx, overrunPoll); err != nil {
				return r.save(ctx, rec)
			}
		}
		n, room, steady, err = r.overrunLook(ctx, rec)
	}
	ov.Listeners, ov.Room = -1, -1
	if err == nil {
		ov.Listeners, ov.Room = n, room
		rec.Samples = append(rec.Samples, Sample{At: now.UTC(), Listeners: n})
	}
	// Empty boxes stay while the steady fleet is full: the router sends
	// new listeners there then. With no steady relay listed there is
	// nothing to keep them for.
	if err == nil && n == 0 && (room > 0 || steady == 0) {
		r.note(rec, now, "drained", fmt.Sprintf("no listener left on the burst boxes (%d told to move to the steady fleet as it had room; its room now %d)", ov.Shed, room))
		// The router sends no one there any more; a listener that came in
		// meanwhile is told to move too.
		if err := r.setDraining(ctx, rec, true); err != nil {
			return r.fail(ctx, rec, now, "drain", err)
		}
		if err := r.save(ctx, rec); err != nil {
			return err
		}
		if err := r.Probe.Drain(ctx, rec.Hosts); err != nil {
			r.note(rec, now, "drain-warning", "relays not told to refuse new sessions: "+err.Error())
		}
		return r.destroy(ctx, now, rec)
	}
	left, free := "unknown", "unknown"
	if err == nil {
		left, free = fmt.Sprint(n), fmt.Sprint(room)
	}
	detail := fmt.Sprintf("overrunning: %s listeners left on burst boxes, steady room %s, cost so far %s; %d told to move this run; every one told at %s (max overrun)",
		left, free, r.costSoFar(rec, now), told, ov.Until.UTC().Format(time.RFC3339))
	if err != nil {
		detail += ": " + err.Error()
	}
	r.note(rec, now, "overrun", detail)
	return r.save(ctx, rec)
}

// overrunLook reads the listeners on the event's boxes, the steady
// fleet's room and how many steady hosts the router lists as routable.
func (r *Reconciler) overrunLook(ctx context.Context, rec *Record) (listeners, room int64, steady int, err error) {
	listeners, err = r.Probe.Listeners(ctx, rec.Hosts)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("burst boxes' listeners: %w", err)
	}
	room, steady, err = r.steadyRoom(ctx)
	return listeners, room, steady, err
}

// steadyRoom is the steady fleet's room: the headroom its relays that the
// router's list does not mark draining report in their /stats, the figure
// every router routes by (read over SSH, as the listeners are, since the
// reconciler knows no router's address).
func (r *Reconciler) steadyRoom(ctx context.Context) (int64, int, error) {
	sh, err := program.ReadStackHosts(r.StateDir, r.Fleet.Name)
	if err != nil {
		return 0, 0, fmt.Errorf("steady fleet's hosts: %w", err)
	}
	if sh.Draining {
		return 0, 0, nil
	}
	var hosts []program.HostEntry
	for _, h := range sh.Hosts {
		if !slices.Contains(sh.DrainingHosts, h.Name) {
			hosts = append(hosts, h)
		}
	}
	if len(hosts) == 0 {
		return 0, 0, nil
	}
	room, err := r.Probe.Room(ctx, hosts)
	if err != nil {
		return 0, len(hosts), fmt.Errorf("steady fleet's room: %w", err)
	}
	return room, len(hosts), nil
}

// forceDrain is the end of an overrun: the max overrun is reached, so the
// old drain applies (every relay draining, every listener told to move,
// the boxes destroyed once none is left or at the drain deadline).
func (r *Reconciler) forceDrain(ctx context.Context, now time.Time, ev *inventories.Event, rec *Record) error {
	ov := rec.Overrun
	ov.Forced = true
	rec.DrainDeadline = now.Add(drainTime(ev))
	if err := r.setDraining(ctx, rec, true); err != nil {
		return r.fail(ctx, rec, now, "drain", err)
	}
	left := "an unknown number of"
	if n, err := r.Probe.Listeners(ctx, rec.Hosts); err == nil {
		left = fmt.Sprint(n)
	}
	r.note(rec, now, "overrun-max", fmt.Sprintf("MAX OVERRUN REACHED (%s after the end): %s listeners still on the burst boxes, the steady fleet without room for them; every one told to move now and the boxes destroyed by %s whatever is left (cost so far %s)",
		maxOverrun(ev), left, rec.DrainDeadline.UTC().Format(time.RFC3339), r.costSoFar(rec, now)))
	r.log().Warn("max overrun reached: shedding every listener of the event's boxes", "event", rec.Event, "listeners", left)
	if err := r.save(ctx, rec); err != nil {
		return err
	}
	if err := r.Probe.Drain(ctx, rec.Hosts); err != nil {
		r.note(rec, now, "drain-warning", "relays not told to refuse new sessions: "+err.Error())
	}
	return r.waitDrain(ctx, now, rec)
}

// costSoFar is what the event's boxes have cost up to now, as its report
// would say.
func (r *Reconciler) costSoFar(rec *Record, now time.Time) string {
	c := *rec
	c.account(now, c.Boxes)
	rep := r.report(&c)
	return fmt.Sprintf("%.2f %s (%.2f box-hours, %s)", rep.Cost, rep.Currency, rep.BoxHours, text.Plural(rep.Boxes, "box", "boxes"))
}
