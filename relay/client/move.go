package client

import (
	"context"
	"errors"
	"sync/atomic"
	"time"
)

// Make-before-break: when the relay sends its going-away notice
// (Session.GoingAway), a listener that reconnects through a router
// subscribes on another relay (avoiding this one) while it still reads the
// old subscription, queues the new one's groups (Pump), and switches
// between two groups once the new one has caught up (Move.Ready); groups
// both served are read once. Listen and the load generator
// (relay/loadgen) share this one implementation: each says how it
// subscribes (MoveOptions) and keeps its own bookkeeping of what it
// hears.

// maxMoveSkip bounds how far behind the old subscription a new one's
// first groups may be: Listen checks the first 2*maxMoveSkip groups after
// a switch against the 2*maxMoveSkip it read last (recentGroups).
const maxMoveSkip = 16

// moveQueue bounds the groups a new subscription queues before the
// switch (some seconds of audio).
const moveQueue = 256

// Pump reads a subscription's groups ahead into a queue, from StartPump
// until Stop, and notes the first and latest of them. A listener that
// switched to a moved subscription reads it through its pump from then
// on (Next).
type Pump struct {
	queue   chan nextGroup
	cancel  context.CancelFunc
	done    chan struct{} // closed when the reading goroutine returned
	stopped atomic.Bool
	started atomic.Bool   // the first group came
	first   atomic.Uint64 // the first group
	latest  atomic.Uint64 // the latest group
}

// nextGroup is a subscription's next group, or why there is none.
type nextGroup struct {
	g   *GroupReader
	err error
}

// StartPump starts reading sub's groups into a queue, each within silence
// (0: as long as the session lasts; see NextGroupWithin). The queue holds
// an ErrSilent and goes on; any other error is its last entry. A full
// queue stops the reading until Next makes room.
func StartPump(sub *Subscription, silence time.Duration) *Pump {
	pctx, cancel := context.WithCancel(context.Background())
	p := &Pump{queue: make(chan nextGroup, moveQueue), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		defer close(p.queue)
		for {
			g, err := sub.NextGroupWithin(pctx, silence)
			if pctx.Err() != nil {
				if g != nil {
					g.Close()
				}
				return
			}
			if err == nil {
				if !p.started.Swap(true) {
					p.first.Store(g.Sequence)
				}
				if g.Sequence > p.latest.Load() {
					p.latest.Store(g.Sequence)
				}
			}
			select {
			case p.queue <- nextGroup{g, err}:
			case <-pctx.Done():
				if g != nil {
					g.Close()
				}
				return
			}
			if err != nil && !errors.Is(err, ErrSilent) {
				return
			}
		}
	}()
	return p
}

// Next is the next queued group, or why there is none: the
// subscription's error as read, ctx's, or ErrClosed once the pump
// stopped and its queue is empty.
func (p *Pump) Next(ctx context.Context) (*GroupReader, error) {
	select {
	case n, ok := <-p.queue:
		if !ok {
			return nil, ErrClosed
		}
		return n.g, n.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Span is the first and the latest group read so far; ok is false before
// the first one came.
func (p *Pump) Span() (first, latest uint64, ok bool) {
	if !p.started.Load() {
		return 0, 0, false
	}
	return p.first.Load(), p.latest.Load(), true
}

// Stop stops the reading and closes the groups still queued; the
// subscription itself is left to the caller. Stop may be called more than
// once, not at once with Next.
func (p *Pump) Stop() {
	if p.stopped.Swap(true) {
		return
	}
	p.cancel()
	<-p.done
	for n := range p.queue {
		if n.g != nil {
			n.g.Close()
		}
	}
}

// MoveOptions says how a Move makes the new subscription. S is the
// caller's record of a subscription (its session, relay, ...).
type MoveOptions[S any] struct {
	// Subscribe makes the new subscription, avoiding the relay that
	// sent the notice, within ctx (ended by Move.Stop). It returns the
	// caller's record and the subscription to pump.
	Subscribe func(ctx context.Context) (S, *Subscription, error)
	// Close closes a new subscription not taken (its pump is stopped
	// first).
	Close func(S)
	// Silence is the pump's silence timeout (StartPump).
	Silence time.Duration
}

// Move is a listener's make-before-break from one subscription: made by
// WatchMove, asked Ready between two groups of the old subscription, and
// then Wait for the new one (or Stop).
type Move[S any] struct {
	fired  atomic.Bool   // the notice came
	done   chan struct{} // closed once the new subscription is made, or failed
	next   S             // once done: the new subscription, if made
	pump   *Pump         // its pump, if made
	cancel context.CancelFunc
	close  func(S)
}

// WatchMove watches sess for the going-away notice; when it comes, it
// makes the new subscription with o.Subscribe and pumps its groups. A nil
// sess is never watched: a listener that does not reconnect through a
// router has nowhere else to go.
func WatchMove[S any](ctx context.Context, sess *Session, o MoveOptions[S]) *Move[S] {
	m := &Move[S]{done: make(chan struct{}), close: o.Close}
	if sess == nil {
		close(m.done)
		return m
	}
	wctx, cancel := context.WithCancel(ctx)
	m.cancel = cancel
	go func() {
		defer close(m.done)
		select {
		case <-sess.GoingAway():
		case <-sess.Done():
			return
		case <-wctx.Done():
			return
		}
		m.fired.Store(true)
		s, sub, err := o.Subscribe(wctx)
		if err != nil {
			return
		}
		m.next, m.pump = s, StartPump(sub, o.Silence)
	}()
	return m
}

// Ready says the new subscription has caught up with the old one, whose
// next group is next: its latest group is at least the old one's latest,
// and its first is not after next (the old one served every group before
// it). It does not wait.
func (m *Move[S]) Ready(next uint64) bool {
	first, latest, ok := m.Span()
	return ok && latest+1 >= next && first <= next
}

// Span is the new subscription's Pump.Span; ok is false while it is not
// made yet or has brought no group. It does not wait.
func (m *Move[S]) Span() (first, latest uint64, ok bool) {
	select {
	case <-m.done:
	default:
		return 0, 0, false
	}
	if m.pump == nil {
		return 0, 0, false
	}
	return m.pump.Span()
}

// Wait returns the new subscription and its pump once made; ok is false
// if that failed or the notice did not come (the watch is then stopped).
// The caller reads the new subscription through the pump and stops it
// when done.
func (m *Move[S]) Wait() (s S, p *Pump, ok bool) {
	if !m.fired.Load() {
		m.Stop()
		return s, nil, false
	}
	<-m.done
	if m.cancel != nil {
		m.cancel() // the watch is over: release its context
	}
	if m.pump == nil {
		return s, nil, false
	}
	s, p = m.next, m.pump
	var zero S
	m.next, m.pump = zero, nil
	return s, p, true
}

// Stop ends the watch and closes a new subscription not taken.
func (m *Move[S]) Stop() {
	if m.cancel != nil {
		m.cancel()
	}
	<-m.done
	if m.pump != nil {
		m.pump.Stop()
		m.close(m.next)
		var zero S
		m.next, m.pump = zero, nil
	}
}
