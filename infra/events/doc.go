// Package events brings burst capacity up before an event and back to
// zero after it, and proves it is gone.
//
// Reconcile is idempotent and driven by the clock (a systemd timer runs it
// every minute; tests pass a simulated one). For each event of an events
// file it decides what should exist now and moves the event one or more
// steps toward it, saving a record before and after each step:
//
//	before start - lead   nothing
//	from start - lead     its own Pulumi stack of burst boxes, sized by the
//	                      planner from the peak less the steady fleet's
//	                      capacity, converged and in the router's list
//	from end              its relays marked draining (router and relay);
//	                      two router polls later each relay tells its
//	                      listeners to reconnect elsewhere (going-away
//	                      close), so they move to the steady fleet
//	once no listener is   the stack destroyed and removed, then the
//	left, or end + drain  backend listed by label: a box of the event found
//	                      there is an orphan, destroyed and reported
//
// An event whose start the file moves later while it runs keeps its
// boxes and listeners until its old end (the record keeps the old
// window, the new one in Record.MovedLater, action=moved-later once per
// change), ends there as any event does (the shed into room, the drain),
// and comes up afresh at its new start less lead time, the record then
// with the new window (action=rescheduled). An event not yet started
// simply moves; an end moved later keeps it up until the new end.
//
// Records keep each event's times, pool, stack and hosts as last read,
// so an events file (or fleet file) that no longer parses holds up no
// teardown: a reconcile then logs action=events-file-invalid, drains and
// destroys from their records the events whose recorded end has passed
// (or that fleet burst down brought down), leaves the others exactly as
// they are, and exits non-zero with the parse error.
//
// Each event's record and cost report count the cloud API requests its
// runs sent (Record.Requests): every Pulumi run of its stack is given a
// request log (backend.RequestLogEnv) that the provider plugin's
// transport appends each request to, and the reconciler's sweep writes
// there too.
//
// A running event is never shrunk by itself: a smaller sizing from the
// files (a new calibration or peak) is noted and the event keeps its
// boxes; growing happens at once. Reconciler.Resize (fleet burst resize)
// applies a smaller sizing: the boxes that go are marked draining in the
// router's list and on their relays, their listeners told to move, and
// each is taken out of the router's list and then removed from the stack
// once it, and every box numbered above it, holds no listener.
//
// A reconcile killed at any step is resumed by the next one: the record
// says where it stopped, a stack lock left by a killed Pulumi run is
// cleared and the stack refreshed. The records, and what each event put in
// the router's list, live in the Pulumi backend beside the stacks (Store,
// PulumiStore), and so does the lease that stops two reconciles of a
// fleet from running at once: the next reconcile may run on another
// machine, or from an empty state dir, pointed at the same backend URL
// and passphrase. The state dir only caches the records and holds the
// relays file written from them. The steady fleet's stack is never opened. Each event
// gets a cost report: box-hours, estimated egress from the listener counts
// sampled on every run, and both against the plan.
//
// Open builds a Reconciler from Options (what fleet events reconcile and
// fleet burst take on their command line); Outcomes and ReadRecords are
// what those commands and fleet events status and report print.
// InstallTimer puts the reconciler's systemd service and timer, rendered
// by units.RenderReconciler, on the ops host and enables the timer, with
// the events exporter's service beside them.
//
// Every reconcile ends with a heartbeat (Heart: the last run, and the last
// run without an error) in the Pulumi backend. The events exporter
// (package exporter, fleet events exporter) reads it there, with the
// lease and the records (OpenWatch), and lists the backends by label, so
// that a reconciler that stopped, and a box that bills while it answers
// nothing, are seen from outside the reconciler.
package events
