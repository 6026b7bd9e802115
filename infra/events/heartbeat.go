package events

import (
	"context"
	"fmt"
	"time"
)

// Beat is the reconciler's heartbeat: when a reconcile of the fleet last
// finished (Run) and when one last finished without an error (OK). The
// events exporter reads it, so that a reconciler that stopped (its timer,
// its host) is seen from the Pulumi backend, not from the host that ran
// it. Zero times: never.
type Beat struct {
	Run time.Time
	OK  time.Time
}

// Heart is a Store that keeps the heartbeat. PulumiStore does.
type Heart interface {
	// Beat records a reconcile that finished at, without an error when ok.
	Beat(ctx context.Context, at time.Time, ok bool) error
	// LastBeat reads the heartbeat; zero when no reconcile finished yet.
	LastBeat(ctx context.Context) (Beat, error)
}

// HeartbeatStack is the stack of StoreProject whose tags (RunTag, OKTag)
// hold a fleet's heartbeat: a stack of its own, so that a beat never
// waits on (or rewrites) the records.
func HeartbeatStack(fleet string) string { return fleet + "-heartbeat" }

// Tags of HeartbeatStack, as RFC 3339 times.
const (
	RunTag = "relayfleet-reconcile-run"
	OKTag  = "relayfleet-reconcile-ok"
)

var _ Heart = (*PulumiStore)(nil)

// Beat implements Heart: tags on HeartbeatStack, made when the fleet has
// none yet.
func (s *PulumiStore) Beat(ctx context.Context, at time.Time, ok bool) error {
	stack := HeartbeatStack(s.Fleet)
	v := at.UTC().Format(time.RFC3339)
	tags := [][2]string{{RunTag, v}}
	if ok {
		tags = append(tags, [2]string{OKTag, v})
	}
	for i, t := range tags {
		err := s.WS.SetTag(ctx, stack, t[0], t[1])
		if i == 0 && isNotFound(err) {
			if err := s.WS.CreateStack(ctx, stack); err != nil && !isExists(err) {
				return fmt.Errorf("reconcile heartbeat: stack %s/%s: %s", StoreProject, stack, lastLine(err))
			}
			err = s.WS.SetTag(ctx, stack, t[0], t[1])
		}
		if err != nil {
			return fmt.Errorf("reconcile heartbeat: stack %s/%s: %s", StoreProject, stack, lastLine(err))
		}
	}
	return nil
}

// LastBeat implements Heart.
func (s *PulumiStore) LastBeat(ctx context.Context) (Beat, error) {
	stack := HeartbeatStack(s.Fleet)
	tags, err := s.WS.ListTags(ctx, stack)
	if isNotFound(err) {
		return Beat{}, nil
	}
	if err != nil {
		return Beat{}, fmt.Errorf("reconcile heartbeat: stack %s/%s: %s", StoreProject, stack, lastLine(err))
	}
	var b Beat
	for tag, t := range map[string]*time.Time{RunTag: &b.Run, OKTag: &b.OK} {
		if v := tags[tag]; v != "" {
			if *t, err = time.Parse(time.RFC3339, v); err != nil {
				return Beat{}, fmt.Errorf("reconcile heartbeat: stack %s/%s: tag %s: %w", StoreProject, stack, tag, err)
			}
		}
	}
	return b, nil
}

// LeaseUntil is when the fleet's reconcile lease expires unless its
// holder renews it (a running reconcile renews it every third of its
// TTL); zero when no reconcile holds it.
func (s *PulumiStore) LeaseUntil(ctx context.Context) (time.Time, error) {
	l, err := s.openLease(ctx)
	if err != nil {
		return time.Time{}, err
	}
	defer l.Close()
	st, err := l.Read(ctx)
	if err != nil || st.Token == 0 || st.Released {
		return time.Time{}, err
	}
	return st.Expires, nil
}

// beat records the end of a reconcile in the Store when it keeps a
// heartbeat, on the wall clock (the exporter's alerts compare it with
// Prometheus's), whatever clock the reconcile ran for. A failed beat is
// logged, not returned: the reconcile itself did its work.
func (r *Reconciler) beat(ctx context.Context, ok bool) {
	h, isHeart := r.Store.(Heart)
	if !isHeart {
		return
	}
	now := time.Now
	if r.WallClock != nil {
		now = r.WallClock
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), saveTimeout)
	defer cancel()
	if err := h.Beat(ctx, now(), ok); err != nil {
		r.log().Warn(err.Error(), "action", "heartbeat-failed")
	}
}
