package client

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Make-before-break: when the relay sends its going-away notice
// (Session.GoingAway), a listener that reconnects through a router
// subscribes on another relay (avoiding this one) while it still reads the
// old subscription, queues the new one's groups, and switches between two
// groups once the new one has caught up; groups both served are read
// once.

// move is a listener's make-before-break from one subscription.
type move struct {
	fired   atomic.Bool   // the notice came
	done    chan struct{} // closed once the new subscription is made, or failed
	l       *listening    // once done: the new subscription, if made
	started atomic.Bool   // its first group came
	first   atomic.Uint64 // its first group
	latest  atomic.Uint64 // its latest group
	cancel  context.CancelFunc
}

// maxMoveSkip bounds how far behind the old subscription a new one's
// groups are taken as served already; further back, the publisher
// restarted.
const maxMoveSkip = 16

// moveQueue bounds the groups a new subscription queues before the
// switch (some seconds of audio).
const moveQueue = 256

// watchMove watches old's session for the notice, with o.Reconnect
// through a router (there is nowhere else to go otherwise).
func watchMove(ctx context.Context, res *Resolver, dial *Options, o *ListenOptions, log *slog.Logger, old *listening) *move {
	m := &move{done: make(chan struct{})}
	if !o.Reconnect || !res.Routed() || old.sess == nil {
		close(m.done)
		return m
	}
	wctx, cancel := context.WithCancel(ctx)
	m.cancel = cancel
	go func() {
		defer close(m.done)
		select {
		case <-old.sess.GoingAway():
		case <-old.sess.Done():
			return
		case <-wctx.Done():
			return
		}
		m.fired.Store(true)
		log.Info("relay sent going-away notice: subscribing elsewhere first", "relay", old.tg.Relay)
		actx, cancelA := context.WithTimeout(wctx, reconnectAttemptTimeout)
		l, _, err := connectListener(actx, res, time.Now(), []string{old.tg.Relay}, dial, o)
		cancelA()
		if err != nil {
			log.Info("subscribing elsewhere failed", "err", err)
			return
		}
		l.pump(o.Silence, m)
		m.l = l
	}()
	return m
}

// ready says the new subscription has caught up with the old one, whose
// next group is next: its latest group is at least the old one's latest,
// and its first is not after next. It does not wait.
func (m *move) ready(next uint64) bool {
	select {
	case <-m.done:
	default:
		return false
	}
	return m.l != nil && m.started.Load() && m.latest.Load()+1 >= next && m.first.Load() <= next
}

// wait returns the new subscription once made, nil if that failed or the
// notice did not come (the watch is then stopped).
func (m *move) wait() *listening {
	if !m.fired.Load() {
		m.stop()
		return nil
	}
	<-m.done
	l := m.l
	m.l = nil
	return l
}

// stop ends the watch and closes a new subscription not taken.
func (m *move) stop() {
	if m.cancel != nil {
		m.cancel()
	}
	<-m.done
	if m.l != nil {
		m.l.close()
		m.l = nil
	}
}

// nextGroup is a subscription's next group, or why there is none.
type nextGroup struct {
	g   *GroupReader
	err error
}

// pump reads l's groups into a queue from now on, noting them in m,
// until l is closed.
func (l *listening) pump(silence time.Duration, m *move) {
	pctx, cancel := context.WithCancel(context.Background())
	q := make(chan nextGroup, moveQueue)
	l.queue, l.stopPump = q, cancel
	l.pumped.Add(1)
	go func() {
		defer l.pumped.Done()
		for {
			g, err := l.sub.NextGroupWithin(pctx, silence)
			if pctx.Err() != nil {
				if g != nil {
					g.Close()
				}
				return
			}
			if err == nil {
				if !m.started.Swap(true) {
					m.first.Store(g.Sequence)
				}
				if g.Sequence > m.latest.Load() {
					m.latest.Store(g.Sequence)
				}
			}
			select {
			case q <- nextGroup{g, err}:
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
}

// nextGroup is l's next group: from its queue once pumped, else from the
// subscription, within silence.
func (l *listening) nextGroup(ctx context.Context, silence time.Duration) (*GroupReader, error) {
	if l.queue == nil {
		return l.sub.NextGroupWithin(ctx, silence)
	}
	select {
	case n := <-l.queue:
		return n.g, n.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// stopQueue stops the pump, if any, and drops what it queued.
func (l *listening) stopQueue() {
	if l.stopPump == nil {
		return
	}
	l.stopPump()
	l.pumped.Wait()
	for {
		select {
		case n := <-l.queue:
			if n.g != nil {
				n.g.Close()
			}
		default:
			return
		}
	}
}

// listeningPump is the pump state of a listening (a move's).
type listeningPump struct {
	queue    chan nextGroup
	stopPump context.CancelFunc
	pumped   sync.WaitGroup
}
