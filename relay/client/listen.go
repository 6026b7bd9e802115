package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"
)

// Reconnect limits; the wait before each attempt is Backoff's (backoff.go).
const (
	// reconnectAttemptTimeout bounds one attempt: resolve, dial, wait
	// for the broadcast, subscribe.
	reconnectAttemptTimeout = 10 * time.Second
	// maxAvoid bounds the relays one reconnect asks the router to avoid.
	maxAvoid = 4
	// firstAttempts bounds the attempts after a first connection through
	// a router failed.
	firstAttempts = 3
)

// listening is one subscription of a listener.
type listening struct {
	tg   Target
	sess *Session
	sub  *Subscription
	pump *Pump // a moved subscription's: its groups come from there
}

func (l *listening) close() {
	if l.pump != nil {
		l.pump.Stop()
	}
	if l.sub != nil {
		l.sub.Close()
	}
	if l.sess != nil {
		l.sess.Close()
	}
}

// connectListener resolves, dials, waits for the broadcast and
// subscribes. The target is returned also on failure, once resolved.
func connectListener(ctx context.Context, res *Resolver, since time.Time, avoid []string, dial *Options, o *ListenOptions) (*listening, Target, error) {
	tg, err := res.Resolve(ctx, since, avoid...)
	if err != nil {
		return nil, Target{}, err
	}
	s, err := DialTarget(ctx, tg, dial)
	if err != nil {
		return nil, tg, err
	}
	sub, err := s.SubscribeAnnounced(ctx, o.Broadcast, o.Track)
	if err != nil {
		s.Close()
		return nil, tg, err
	}
	return &listening{tg: tg, sess: s, sub: sub}, tg, nil
}

// SubscribeAnnounced waits until broadcast is announced on s, then
// subscribes to its track.
func (s *Session) SubscribeAnnounced(ctx context.Context, broadcast, track string) (*Subscription, error) {
	ann, err := s.Announced(ctx, "")
	if err != nil {
		return nil, err
	}
	err = ann.WaitFor(ctx, broadcast)
	ann.Close()
	if err != nil {
		return nil, fmt.Errorf("wait for broadcast %q: %w", broadcast, err)
	}
	return s.Subscribe(ctx, broadcast, track)
}

// nextGroup is l's next group: from its pump once moved, else from the
// subscription, within silence.
func (l *listening) nextGroup(ctx context.Context, silence time.Duration) (*GroupReader, error) {
	if l.pump == nil {
		return l.sub.NextGroupWithin(ctx, silence)
	}
	return l.pump.Next(ctx)
}

// watchMove watches old's session for the notice, with o.Reconnect
// through a router (there is nowhere else to go otherwise).
func watchMove(ctx context.Context, res *Resolver, dial *Options, o *ListenOptions, log *slog.Logger, old *listening) *Move[*listening] {
	var sess *Session
	if o.Reconnect && res.Routed() {
		sess = old.sess
	}
	return WatchMove(ctx, sess, MoveOptions[*listening]{
		Silence: o.Silence,
		Close:   (*listening).close,
		Subscribe: func(wctx context.Context) (*listening, *Subscription, error) {
			log.Info("relay sent going-away notice: subscribing elsewhere first", "relay", old.tg.Relay)
			actx, cancel := context.WithTimeout(wctx, reconnectAttemptTimeout)
			defer cancel()
			l, _, err := connectListener(actx, res, time.Now(), []string{old.tg.Relay}, dial, o)
			if err != nil {
				log.Info("subscribing elsewhere failed", "err", err)
				return nil, nil, err
			}
			return l, l.sub, nil
		},
	})
}

// takeMove returns mv's new subscription, reading through its pump, or
// nil if there is none (see Move.Wait).
func takeMove(mv *Move[*listening]) *listening {
	l, p, ok := mv.Wait()
	if !ok {
		return nil
	}
	l.pump = p
	return l
}

// Listen resolves the relay with res, waits for the broadcast to be
// announced, subscribes and reads groups, printing one line per group
// when verbose and a summary at the end. With o.Reconnect, a subscription
// that ends for a ReconnectReason (silence over o.Silence among them) is
// replaced: the relay is resolved again, avoiding the one that failed, and
// one line says why, from where to where, and how long no audio came.
func Listen(ctx context.Context, res *Resolver, dial *Options, o ListenOptions, out io.Writer) error {
	if dial == nil {
		dial = &Options{}
	}
	log := dial.Logger
	if log == nil {
		log = slog.Default()
	}
	var bo Backoff // this listener's reconnect schedule
	l, tg, err := connectListener(ctx, res, time.Time{}, nil, dial, &o)
	if err != nil {
		// Through a router, the relay it named may have failed since
		// its last poll: ask again, avoiding it, a few times.
		reason, ok := ReconnectReason(err)
		if !ok || !o.Reconnect || !res.Routed() || ctx.Err() != nil {
			return err
		}
		log.Info("first connection failed", "relay", tg.Relay, "reason", reason, "err", err)
		if l, err = reconnectListener(ctx, res, dial, &o, log, &bo, reason, err, tg.Relay, firstAttempts, false); err != nil {
			return err
		}
	}
	defer func() { l.close() }()
	mv := watchMove(ctx, res, dial, &o, log, l)
	defer func() { mv.Stop() }()

	var (
		groups, frames, bytes int
		reconnects            int
		longest               time.Duration
		lastGroup             = time.Now() // audio is due from the subscription on
		pending               string       // the line of a reconnect, printed at its first group
		next                  uint64       // the group after the latest read
		heard                 recentGroups // the latest groups read
		moved                 int          // groups after a make-before-break switch still checked against heard
		again                 *GroupReader // a group a silent subscription brought while the listener waited
	)
	summary := func() {
		fmt.Fprintf(out, "received %d groups, %d frames, %d bytes\n", groups, frames, bytes)
		if reconnects > 0 {
			fmt.Fprintf(out, "reconnects %d, longest without audio %.3f s\n", reconnects, longest.Seconds())
		}
	}
	for o.Groups == 0 || groups < o.Groups {
		var (
			g   *GroupReader
			err error
		)
		if again != nil {
			g, again = again, nil
		} else {
			g, err = l.nextGroup(ctx, o.Silence)
		}
		if err == nil && moved > 0 {
			moved--
			if heard.has(g.Sequence) {
				g.Close() // the old subscription served it
				continue
			}
		}
		if err == nil {
			n, nb, rerr := readListenGroup(g, o.Check)
			if rerr != nil && ctx.Err() == nil {
				var ce *checkError
				if errors.As(rerr, &ce) {
					return fmt.Errorf("listen: %w", rerr)
				}
				if l.sess.Err() == nil {
					// The relay dropped this group; the session goes on.
					log.Debug("group cut", "group", g.Sequence, "err", rerr)
				} else {
					err = l.sess.Err()
				}
			}
			if n > 0 || rerr == nil {
				now := time.Now()
				if pending != "" {
					down := now.Sub(lastGroup)
					longest = max(longest, down)
					fmt.Fprintf(out, "%s: no audio for %.3f s\n", pending, down.Seconds())
					pending = ""
				}
				lastGroup = now
				bo.Heard(now)
				next = max(next, g.Sequence+1)
				heard.add(g.Sequence)
				groups++
				frames += n
				bytes += nb
				if o.Verbose {
					fmt.Fprintf(out, "group %d: %d frames, %d bytes\n", g.Sequence, n, nb)
				}
			}
			if err == nil {
				if mv.Ready(next) {
					// Make-before-break: the new subscription caught
					// up; the old one served every group before it.
					from := l.tg.Relay
					l.close()
					l = takeMove(mv)
					mv = watchMove(ctx, res, dial, &o, log, l)
					moved = len(heard.seqs)
					reconnects++
					pending = fmt.Sprintf("moved (%s) from %s to %s", ReasonGoingAway, from, l.tg.Relay)
				}
				continue
			}
		}
		if ctx.Err() != nil {
			break
		}
		reason, ok := ReconnectReason(err)
		if !ok || !o.Reconnect {
			return fmt.Errorf("listen: %w", err)
		}
		// Silent: the relay may be up and its upstream away. The wait
		// before the reconnect is spent still subscribed, so that audio
		// coming back there is heard at once.
		waited := false
		if reason == ReasonSilent && l.pump == nil && l.sub != nil {
			wait := bo.Next(0)
			waited = true
			if wait >= time.Millisecond {
				if g, werr := l.sub.NextGroupWithin(ctx, wait); werr == nil {
					log.Debug("silent subscription heard again", "relay", l.tg.Relay)
					again = g
					continue
				}
				if ctx.Err() != nil {
					break
				}
			}
		}
		from := l.tg.Relay
		l.close()
		if nl := takeMove(mv); nl != nil {
			// The notice came before the close: the new subscription
			// is made.
			l, reason, moved = nl, ReasonGoingAway, len(heard.seqs)
		} else {
			l, err = reconnectListener(ctx, res, dial, &o, log, &bo, reason, err, from, 0, waited)
			if err != nil {
				if ctx.Err() != nil {
					l = &listening{}
					break
				}
				l = &listening{}
				return fmt.Errorf("listen: reconnect: %w", err)
			}
		}
		mv = watchMove(ctx, res, dial, &o, log, l)
		reconnects++
		pending = fmt.Sprintf("reconnected (%s) from %s to %s", reason, from, l.tg.Relay)
	}
	summary()
	return nil
}

// recentGroups is the sequences of the latest groups a listener read:
// after a make-before-break switch, the new subscription's first groups
// are checked against it, so that each group is heard once although the
// relays' groups may arrive out of order (a group the old subscription
// skipped over is still heard from the new one).
type recentGroups struct {
	seqs [2 * maxMoveSkip]uint64
	n    int
}

func (r *recentGroups) add(seq uint64) {
	r.seqs[r.n%len(r.seqs)] = seq
	r.n++
}

func (r *recentGroups) has(seq uint64) bool {
	for _, s := range r.seqs[:min(r.n, len(r.seqs))] {
		if s == seq {
			return true
		}
	}
	return false
}

// reconnectListener replaces a subscription that ended with err, for
// reason, on the relay from: it tries until it succeeds, ctx ends, an
// error is not worth retrying, or maxAttempts (0: no limit) failed (the
// last error). Before each attempt it waits bo.Next (a Retry-After the
// router sent honoured), but the first when waited (the caller spent
// that wait on the silent subscription); an expired token is renewed at
// once.
func reconnectListener(ctx context.Context, res *Resolver, dial *Options, o *ListenOptions, log *slog.Logger, bo *Backoff, reason string, err error, from string, maxAttempts int, waited bool) (*listening, error) {
	var avoid []string
	if res.Routed() && from != "" {
		avoid = []string{from}
	}
	since := time.Now() // a relay restarted may have a new certificate
	for attempt := 1; ; attempt++ {
		var wait time.Duration
		switch {
		case attempt == 1 && (waited || reason == ReasonTokenExpired):
		default:
			wait = bo.Next(RetryAfter(err))
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		actx, cancel := context.WithTimeout(ctx, reconnectAttemptTimeout)
		var (
			l  *listening
			tg Target
		)
		l, tg, err = connectListener(actx, res, since, avoid, dial, o)
		cancel()
		if err == nil {
			return l, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		r, ok := ReconnectReason(err)
		if !ok || attempt == maxAttempts {
			return nil, err
		}
		log.Info("reconnect attempt failed", "attempt", attempt, "relay", tg.Relay, "reason", r, "err", err)
		switch {
		case tg.Relay == "":
			// The router failed (it may have nothing left to give
			// without the avoided relays): ask it plainly next time.
			avoid = nil
		case res.Routed():
			avoid = append(avoid, tg.Relay)
			if len(avoid) > maxAvoid {
				avoid = avoid[len(avoid)-maxAvoid:]
			}
		}
	}
}

// checkError is a frame that is not the Pattern it should be.
type checkError struct{ err error }

func (e *checkError) Error() string { return e.err.Error() }

// readListenGroup reads a group's frames, checking them against Pattern
// when check > 0.
func readListenGroup(g *GroupReader, check int) (n, nb int, err error) {
	defer g.Close()
	for {
		p, err := g.ReadFrame()
		if err == io.EOF {
			return n, nb, nil
		}
		if err != nil {
			return n, nb, fmt.Errorf("group %d: %w", g.Sequence, err)
		}
		if check > 0 {
			gs, _, err := CheckPattern(p, check)
			if err == nil && gs != g.Sequence {
				err = fmt.Errorf("frame of group %d in group %d", gs, g.Sequence)
			}
			if err != nil {
				return n, nb, &checkError{err}
			}
		}
		n++
		nb += len(p)
	}
}
