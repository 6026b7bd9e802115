package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"sync"
	"time"

	"github.com/quic-go/quic-go"
)

// Publishing to several origins. An edge pulls each broadcast from one
// origin and, when that origin fails, from the next (relay/cluster.go): the
// next has something to give only when the publisher publishes there too,
// with the same group sequence, so that the edge resumes at the next group
// it has not delivered. OriginsTrack keeps a session to every origin and
// writes each group, with the same sequence and frames, to the
// subscriptions of all of them; an origin that goes away is dialled again
// with jittered exponential backoff (originBackoffMin to originBackoffMax)
// while the others go on.

const (
	// The same schedule as an edge's links to its origins
	// (relay/cluster.go): every origin away at once (both stopped, say)
	// must be reached again within a second or two of its return, since
	// no listener hears anything until the publisher is back. A capped
	// backoff of 5 s and dials kept 5 s (their Initials retransmitted
	// ever more slowly) reached it up to about 10 s after.
	originBackoffMin = 100 * time.Millisecond
	originBackoffMax = time.Second
	// originDialWait bounds one dial; the next starts its retransmission
	// schedule afresh: at once when this one got no answer at all (its
	// Initials, sent ever more slowly, were the wait: the last went about
	// 0.6 s before it gave up, and a backoff on top left the origin's
	// return unanswered for up to 1.6 s), else after the backoff. A dead
	// origin gets a dial every 1.5 s, three Initials: 2 packets a second.
	originDialWait = 1500 * time.Millisecond
	// originStable is how long a session must have lasted for the
	// backoff to start again from originBackoffMin.
	originStable = 5 * time.Second
	// originIdleTimeout is the QUIC idle timeout of a session to an
	// origin (not the listeners' 30 s): a publisher sends a frame every
	// 20 to 120 ms and the origin acknowledges them, so 5 s without a
	// packet from it is an origin that died, or is cut off, without a
	// word (kill -9, a blackhole, a restart that draws no stateless reset);
	// the session ends then and the origin is dialled again.
	originIdleTimeout = 5 * time.Second
)

// originLabel is an origin's URL for the logs: without its query, which
// carries the publisher's token (?jwt=) when relay publish was given one.
func originLabel(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(an origin URL that does not parse)"
	}
	return redact(u)
}

// OriginsTrack publishes one track of one broadcast to several relays.
type OriginsTrack struct {
	urls        []string
	dial        *Options
	broadcast   string
	track       string
	tokenSource func(ctx context.Context) (string, error)
	logger      *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu   sync.Mutex
	live []*originConn // by URL index; nil while that origin is down
}

type originConn struct {
	s  *Session
	b  *Broadcast
	tw *TrackWriter
}

// PublishOrigins connects to every URL (each with a fresh token from
// tokenSource, if set) and publishes track of broadcast on each; its
// sessions time out after originIdleTimeout without a packet. It fails
// only when no URL connects; the origins that did not connect, and any
// that goes away later, are dialled again in the background until Close.
func PublishOrigins(ctx context.Context, urls []string, dial *Options, broadcast, track string, tokenSource func(ctx context.Context) (string, error)) (*OriginsTrack, error) {
	if len(urls) == 0 {
		return nil, errors.New("publish: no origin URL")
	}
	if dial == nil {
		dial = &Options{}
	}
	d := *dial
	tune := d.TuneQUIC
	d.TuneQUIC = func(c *quic.Config) {
		if tune != nil {
			tune(c)
		}
		if c.MaxIdleTimeout == 0 || c.MaxIdleTimeout > originIdleTimeout {
			c.MaxIdleTimeout = originIdleTimeout
		}
	}
	dial = &d
	logger := dial.Logger
	if logger == nil {
		logger = slog.Default()
	}
	octx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	o := &OriginsTrack{urls: urls, dial: dial, broadcast: broadcast, track: track, tokenSource: tokenSource,
		logger: logger, ctx: octx, cancel: cancel, live: make([]*originConn, len(urls))}
	errs := make([]error, len(urls))
	var wg sync.WaitGroup
	for i := range urls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := o.connect(ctx, i)
			if err != nil {
				errs[i] = err
				return
			}
			o.mu.Lock()
			o.live[i] = c
			o.mu.Unlock()
		}()
	}
	wg.Wait()
	if o.Connected() == 0 {
		o.Close()
		return nil, errors.Join(errs...)
	}
	for i := range urls {
		if errs[i] != nil {
			logger.Warn("origin not connected; retrying", "origin", originLabel(urls[i]), "err", errs[i])
		}
		o.wg.Add(1)
		go o.keep(i)
	}
	return o, nil
}

// connect dials origin i and publishes the track there.
func (o *OriginsTrack) connect(ctx context.Context, i int) (*originConn, error) {
	u := o.urls[i]
	if o.tokenSource != nil {
		tok, err := o.tokenSource(ctx)
		if err != nil {
			return nil, fmt.Errorf("publish: token source: %w", err)
		}
		if u, err = WithToken(u, tok); err != nil {
			return nil, err
		}
	}
	s, err := Dial(ctx, u, o.dial)
	if err != nil {
		return nil, err
	}
	b := s.Publish(o.broadcast)
	return &originConn{s: s, b: b, tw: b.Track(o.track)}, nil
}

// keep redials origin i whenever it is down, until Close.
func (o *OriginsTrack) keep(i int) {
	defer o.wg.Done()
	delay := originBackoffMin
	unanswered := false // the last dial ran out of originDialWait
	for {
		o.mu.Lock()
		c := o.live[i]
		o.mu.Unlock()
		if c != nil {
			up := time.Now()
			select {
			case <-c.s.Done():
			case <-o.ctx.Done():
				return
			}
			o.mu.Lock()
			o.live[i] = nil
			o.mu.Unlock()
			c.b.Close()
			_ = c.s.Close()
			if time.Since(up) >= originStable {
				delay = originBackoffMin
			}
			o.logger.Warn("origin session ended; publishing to the others and reconnecting", "origin", originLabel(o.urls[i]), "err", c.s.Err())
		}
		if !unanswered {
			t := time.NewTimer(delay/2 + rand.N(delay/2+1))
			select {
			case <-t.C:
			case <-o.ctx.Done():
				t.Stop()
				return
			}
			delay = min(delay*2, originBackoffMax)
		}
		dctx, cancel := context.WithTimeout(o.ctx, originDialWait)
		c, err := o.connect(dctx, i)
		unanswered = err != nil && errors.Is(dctx.Err(), context.DeadlineExceeded)
		cancel()
		if err != nil {
			o.logger.Debug("origin reconnect failed", "origin", originLabel(o.urls[i]), "err", err)
			continue
		}
		o.mu.Lock()
		if o.ctx.Err() != nil {
			o.mu.Unlock()
			_ = c.s.Close()
			return
		}
		o.live[i] = c
		o.mu.Unlock()
		o.logger.Info("origin reconnected", "origin", originLabel(o.urls[i]))
	}
}

// Connected is how many origins have a session now.
func (o *OriginsTrack) Connected() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, c := range o.live {
		if c != nil && !isClosed(c.s.Done()) {
			n++
		}
	}
	return n
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// Subscribers is how many subscriptions the track has now, over every
// origin.
func (o *OriginsTrack) Subscribers() int {
	n := 0
	for _, c := range o.conns() {
		n += c.tw.Subscribers()
	}
	return n
}

func (o *OriginsTrack) conns() []*originConn {
	o.mu.Lock()
	defer o.mu.Unlock()
	var cs []*originConn
	for _, c := range o.live {
		if c != nil {
			cs = append(cs, c)
		}
	}
	return cs
}

// OpenGroup starts group seq on every origin that has subscribers: the
// GroupWriter writes each frame to all of them. It returns
// ErrNoSubscribers when no origin has one (or every one failed).
func (o *OriginsTrack) OpenGroup(ctx context.Context, seq uint64) (*GroupWriter, error) {
	all := &GroupWriter{}
	for _, c := range o.conns() {
		g, err := c.tw.OpenGroup(ctx, seq)
		if err != nil { // no subscribers there, or that origin is going away
			continue
		}
		all.streams = append(all.streams, g.streams...)
		all.stops = append(all.stops, g.stops...)
	}
	if len(all.streams) == 0 {
		return nil, ErrNoSubscribers
	}
	return all, nil
}

// WriteGroup writes a complete group to every origin.
func (o *OriginsTrack) WriteGroup(ctx context.Context, seq uint64, frames [][]byte) error {
	g, err := o.OpenGroup(ctx, seq)
	if err != nil {
		return err
	}
	return g.writeAll(frames)
}

// Close ends the broadcast on every origin and closes the sessions.
func (o *OriginsTrack) Close() {
	o.cancel()
	o.wg.Wait()
	o.mu.Lock()
	cs := o.live
	o.live = make([]*originConn, len(o.urls))
	o.mu.Unlock()
	for _, c := range cs {
		if c != nil {
			c.b.Close()
			_ = c.s.Close()
		}
	}
}

// CloseBroadcast ends the broadcast on every origin, leaving the
// sessions up (RunPublishOgg lingers between the two).
func (o *OriginsTrack) CloseBroadcast() {
	for _, c := range o.conns() {
		c.b.Close()
	}
}
