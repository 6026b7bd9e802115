package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"
)

// PublishOptions configures RunPublish.
type PublishOptions struct {
	Broadcast      string        // broadcast name, relative to the URL path
	Track          string        // track name
	Interval       time.Duration // time between groups
	FramesPerGroup int
	FrameSize      int // bytes per frame (Pattern payloads)
	Groups         int // how many groups; 0 means until ctx ends
	// TokenSource, if set, is asked for the token (?jwt=) of every
	// connection, and RunPublish connects again, at once, when the relay
	// closes the session because its token expired (ReasonTokenExpired),
	// going on from the next group; relay publish re-reads --token-file.
	TokenSource func(ctx context.Context) (string, error)
	// Origins are further relays to publish to, the same groups with the
	// same sequences to each (PublishOrigins); an origin that goes away is
	// reconnected with backoff (a fresh TokenSource token each time) while
	// the others go on, and RunPublish returns only when ctx ends.
	Origins []string
}

// PacedTrack is one track published on a session of its own, with the
// ticker that paces its writes: RunPublish's and loadgen's publishers.
type PacedTrack struct {
	Session *Session
	Track   *TrackWriter
	Tick    *time.Ticker
	b       *Broadcast
}

// PublishPaced connects to url (with dial) and publishes track of
// broadcast, ticking every interval. Close stops it all.
func PublishPaced(ctx context.Context, url string, dial *Options, broadcast, track string, interval time.Duration) (*PacedTrack, error) {
	s, err := Dial(ctx, url, dial)
	if err != nil {
		return nil, err
	}
	b := s.Publish(broadcast)
	return &PacedTrack{Session: s, Track: b.Track(track), Tick: time.NewTicker(interval), b: b}, nil
}

// Close stops the ticker, ends the broadcast and closes the session.
func (p *PacedTrack) Close() {
	p.Tick.Stop()
	p.b.Close()
	_ = p.Session.Close()
}

// RunPublish connects to url, publishes a broadcast with one track and
// writes Pattern frames at a steady pace until done. It prints a summary
// line to out.
func RunPublish(ctx context.Context, url string, dial *Options, o PublishOptions, out io.Writer) error {
	connect := func() (*PacedTrack, error) {
		u := url
		if o.TokenSource != nil {
			tok, err := o.TokenSource(ctx)
			if err != nil {
				return nil, fmt.Errorf("publish: token source: %w", err)
			}
			if u, err = WithToken(url, tok); err != nil {
				return nil, err
			}
		}
		return PublishPaced(ctx, u, dial, o.Broadcast, o.Track, o.Interval)
	}
	if len(o.Origins) > 0 {
		return runPublishOrigins(ctx, url, dial, o, out)
	}
	p, err := connect()
	if err != nil {
		return err
	}
	defer func() { p.Close() }()
	var sent, skipped, frames int
	for g := uint64(0); o.Groups == 0 || g < uint64(o.Groups); g++ {
		gw, err := p.Track.OpenGroup(ctx, g)
		switch {
		case errors.Is(err, ErrNoSubscribers):
			skipped++
		case err != nil:
			return err
		default:
			for f := 0; f < o.FramesPerGroup; f++ {
				if err := gw.WriteFrame(Pattern(g, uint64(f), o.FrameSize)); err != nil {
					break
				}
				frames++
			}
			_ = gw.Close()
			sent++
		}
		select {
		case <-p.Tick.C:
		case <-ctx.Done():
			fmt.Fprintf(out, "published %d groups (%d frames), %d groups without subscribers\n", sent, frames, skipped)
			return nil
		case <-p.Session.Done():
			if reason, _ := ReconnectReason(p.Session.Err()); reason != ReasonTokenExpired || o.TokenSource == nil {
				return fmt.Errorf("publish: session closed by relay: %w", p.Session.Err())
			}
			p.Close()
			if p, err = connect(); err != nil {
				return fmt.Errorf("publish: reconnect after %s: %w", ReasonTokenExpired, err)
			}
			fmt.Fprintf(out, "reconnected (%s) at group %d\n", ReasonTokenExpired, g+1)
		}
	}
	fmt.Fprintf(out, "published %d groups (%d frames), %d groups without subscribers\n", sent, frames, skipped)
	return nil
}

// runPublishOrigins is RunPublish to url and o.Origins at once.
func runPublishOrigins(ctx context.Context, url string, dial *Options, o PublishOptions, out io.Writer) error {
	p, err := PublishOrigins(ctx, append([]string{url}, o.Origins...), dial, o.Broadcast, o.Track, o.TokenSource)
	if err != nil {
		return err
	}
	defer p.Close()
	tick := time.NewTicker(o.Interval)
	defer tick.Stop()
	var sent, skipped, frames int
	summary := func() {
		fmt.Fprintf(out, "published %d groups (%d frames), %d groups without subscribers\n", sent, frames, skipped)
	}
	for g := uint64(0); o.Groups == 0 || g < uint64(o.Groups); g++ {
		gw, err := p.OpenGroup(ctx, g)
		if err != nil {
			skipped++
		} else {
			for f := 0; f < o.FramesPerGroup; f++ {
				if err := gw.WriteFrame(Pattern(g, uint64(f), o.FrameSize)); err != nil {
					break
				}
				frames++
			}
			_ = gw.Close()
			sent++
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			summary()
			return nil
		}
	}
	summary()
	return nil
}

// ListenOptions configures RunListen and Listen.
type ListenOptions struct {
	Broadcast string
	Track     string
	Groups    int  // stop after this many groups; 0 means until ctx ends
	Check     int  // if > 0, check every frame is a Pattern of this size
	Verbose   bool // one line per group
	// Silence is how long a subscription may go without a group before
	// the path is presumed dead (ErrSilent); 0 means no limit.
	Silence time.Duration
	// Reconnect makes a listener whose subscription ends for a
	// ReconnectReason resolve its relay again (through the router,
	// avoiding the relay that failed) and resubscribe, printing one line
	// per reconnect. The first connection is not retried.
	Reconnect bool
}

// RunListen connects to url, waits for the broadcast to be announced,
// subscribes and reads groups, printing one line per group when verbose
// and a summary at the end. dial's CertificateHash, RootCAs,
// TrustHTTPHash and HTTPClient decide how the relay is trusted.
func RunListen(ctx context.Context, url string, dial *Options, o ListenOptions, out io.Writer) error {
	if dial == nil {
		dial = &Options{}
	}
	res, err := NewResolver(ResolverOptions{URL: url, CertificateHash: dial.CertificateHash,
		RootCAs: dial.RootCAs, TrustHTTPHash: dial.TrustHTTPHash, HTTPClient: dial.HTTPClient})
	if err != nil {
		return err
	}
	return Listen(ctx, res, dial, o, out)
}
