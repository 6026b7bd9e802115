package events

import (
	"context"
	"fmt"
	"github.com/relayfleet/relayfleet/internal/text"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/relayfleet/relayfleet/infra/program"
)

// save keeps the record in the Store, then in the state dir's cache.
func (r *Reconciler) save(ctx context.Context, rec *Record) error {
	// What happened is kept even when the run was stopped (a signal
	// ended ctx): the record is the clean-up, so that the next reconcile
	// resumes from it.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), saveTimeout)
	defer cancel()
	if err := r.Store.Save(ctx, rec); err != nil {
		return err
	}
	return rec.cache(r.StateDir)
}

// saveTimeout bounds saving a record once the run's context has ended.
const saveTimeout = 30 * time.Second

// route changes what the event puts in the router's list: the record
// first (in the Store), then the state dir's relays file from it.
func (r *Reconciler) route(ctx context.Context, rec *Record, change func(*program.StackHosts)) error {
	if rec.Route == nil {
		rec.Route = &program.StackHosts{Stack: rec.Stack}
	}
	change(rec.Route)
	if len(rec.Route.Hosts) == 0 {
		rec.Route = &program.StackHosts{Stack: rec.Stack}
	}
	if err := r.save(ctx, rec); err != nil {
		return err
	}
	_, err := program.PutStackHosts(r.StateDir, *rec.Route)
	return err
}

// setHosts lists the event's hosts in the router's list (nil: none).
func (r *Reconciler) setHosts(ctx context.Context, rec *Record, hosts []program.HostEntry) error {
	return r.route(ctx, rec, func(sh *program.StackHosts) { sh.Hosts = slices.Clone(hosts) })
}

// setDraining marks every relay of the event draining, or routable.
func (r *Reconciler) setDraining(ctx context.Context, rec *Record, draining bool) error {
	return r.route(ctx, rec, func(sh *program.StackHosts) {
		sh.Draining = draining
		if !draining {
			sh.LastResort = false
		}
	})
}

// setLastResort marks every relay of the event last resort in the
// router's list: new listeners go there only when no other relay has
// headroom.
func (r *Reconciler) setLastResort(ctx context.Context, rec *Record) error {
	return r.route(ctx, rec, func(sh *program.StackHosts) { sh.LastResort = true })
}

// setHostsDraining marks the relays of the named hosts draining (nil:
// none is).
func (r *Reconciler) setHostsDraining(ctx context.Context, rec *Record, names []string) error {
	return r.route(ctx, rec, func(sh *program.StackHosts) { sh.DrainingHosts = slices.Clone(names) })
}

// lockAndLoad takes the store's lease and loads every record under it.
// The caller works with held, which ends when the lease is lost, and
// calls unlock when done; on an error nothing is held.
func (r *Reconciler) lockAndLoad(ctx context.Context) (held context.Context, known map[string]*Record, unlock func(), err error) {
	held, unlock, err = r.Store.Lock(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	if known, err = r.load(held); err != nil {
		unlock()
		return nil, nil, nil, err
	}
	return held, known, unlock, nil
}

// load reads every record from the Store (moving records left in the
// state dir by an older relayfleet into it first) and rewrites the state
// dir from them: the records' cache, each event's entry in the router's
// list, and the steady fleet's entry from its stack (followSteady). So a
// reconcile starting from an empty state dir, or on another machine,
// writes the relays file the last one left, and a teammate's fleet up
// reaches this machine's relays file by the next reconcile.
func (r *Reconciler) load(ctx context.Context) (map[string]*Record, error) {
	recs, err := r.Store.Load(ctx)
	if err != nil {
		return nil, err
	}
	if err := r.migrate(ctx, recs); err != nil {
		return nil, err
	}
	for _, rec := range recs {
		if err := rec.cache(r.StateDir); err != nil {
			return nil, err
		}
		route := program.StackHosts{Stack: rec.Stack}
		if rec.Route != nil {
			route = *rec.Route
			route.Stack = rec.Stack
		}
		if _, err := program.PutStackHosts(r.StateDir, route); err != nil {
			return nil, err
		}
	}
	if r.SteadyHosts != nil && r.Fleet != nil {
		if err := r.followSteady(ctx); err != nil {
			return nil, err
		}
	}
	return recs, nil
}

// followSteady makes the state dir's entry of the steady fleet in the
// router's list the hosts its stack's "hosts" output lists now (before,
// it was taken only when the state dir had none, so a box another
// machine's fleet up replaced stayed listed here). What this machine's
// own fleet up is doing is kept: the old box of a replacement under way
// (NAME~replaced) and which hosts are marked draining. A steady stack
// the backend no longer has (destroyed) takes its entry out.
func (r *Reconciler) followSteady(ctx context.Context) error {
	hosts, ok, err := r.SteadyHosts(ctx)
	if err != nil {
		return fmt.Errorf("steady fleet's hosts: %w", err)
	}
	stack := r.Fleet.Name
	cur, err := program.ReadStackHosts(r.StateDir, stack)
	if err != nil {
		return err
	}
	next := cur
	next.Stack, next.Hosts = stack, slices.Clone(hosts)
	if !ok {
		next.Hosts = nil
	}
	for _, h := range cur.Hosts {
		if strings.HasSuffix(h.Name, program.ReplacedSuffix) {
			next.Hosts = append(next.Hosts, h)
		}
	}
	if sameHosts(cur.Hosts, next.Hosts) {
		return nil
	}
	if _, err := program.PutStackHosts(r.StateDir, next); err != nil {
		return err
	}
	r.log().Info(fmt.Sprintf("the router's list gets the steady fleet's %s from stack %s", text.Plural(len(next.Hosts), "host", "hosts"), stack),
		"action", "steady-hosts")
	return nil
}

// sameHosts says whether two host lists are the same, in order.
func sameHosts(a, b []program.HostEntry) bool {
	return slices.EqualFunc(a, b, func(x, y program.HostEntry) bool {
		return x.Name == y.Name && x.Address == y.Address && x.SPKI == y.SPKI && slices.Equal(x.Ports, y.Ports) &&
			x.Group == y.Group && x.Backend == y.Backend && x.SSHAddress == y.SSHAddress && x.HostKey == y.HostKey && x.User == y.User
	})
}

// MigratedDir is where records that lived in the state dir (STATE/events,
// before the Pulumi backend held them) go once they are in the Store.
const MigratedDir = "events.migrated"

// migrate moves this fleet's records found in the state dir's old records
// directory into the Store, once: each is saved there unless the Store
// already has the event (then the Store's wins), and its file moves to
// STATE/events.migrated. Another fleet's records are left for its own
// reconciler.
func (r *Reconciler) migrate(ctx context.Context, recs map[string]*Record) error {
	dir := filepath.Join(r.StateDir, legacyDir)
	legacy, err := readRecordDir(dir)
	if err != nil || len(legacy) == 0 {
		return err
	}
	prefix := StackName(r.Fleet.Name, "")
	done := filepath.Join(r.StateDir, MigratedDir)
	if err := os.MkdirAll(done, 0o700); err != nil {
		return fmt.Errorf("migrate event records: %w", err)
	}
	for _, rec := range legacy {
		if !strings.HasPrefix(rec.Stack, prefix) {
			continue
		}
		if _, ok := recs[rec.Event]; ok {
			r.log().Warn("the Pulumi backend already has a record of this event; the state dir's older copy is set aside", "event", rec.Event,
				"action", "migrate-skip", "file", filepath.Join(done, rec.Event+".json"))
		} else {
			if rec.Route == nil {
				// What this state dir's relays file lists for the event.
				if sh, err := program.ReadStackHosts(r.StateDir, rec.Stack); err == nil && len(sh.Hosts) > 0 {
					rec.Route = &sh
				}
			}
			if err := r.Store.Save(ctx, rec); err != nil {
				return fmt.Errorf("migrate event record %s: %w", rec.Event, err)
			}
			recs[rec.Event] = rec
			r.log().Info("moved the state dir's record into the Pulumi backend", "event", rec.Event, "action", "migrate", "phase", string(rec.Phase))
		}
		if err := os.Rename(filepath.Join(dir, rec.Event+".json"), filepath.Join(done, rec.Event+".json")); err != nil {
			return fmt.Errorf("migrate event record %s: %w", rec.Event, err)
		}
	}
	os.Remove(dir) // once empty
	return nil
}
