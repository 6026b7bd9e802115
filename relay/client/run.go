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
}

// RunPublish connects to url, publishes a broadcast with one track and
// writes Pattern frames at a steady pace until done. It prints a summary
// line to out.
func RunPublish(ctx context.Context, url string, dial *Options, o PublishOptions, out io.Writer) error {
	s, err := Dial(ctx, url, dial)
	if err != nil {
		return err
	}
	defer s.Close()
	b := s.Publish(o.Broadcast)
	defer b.Close()
	tw := b.Track(o.Track)
	tick := time.NewTicker(o.Interval)
	defer tick.Stop()
	var sent, skipped, frames int
	for g := uint64(0); o.Groups == 0 || g < uint64(o.Groups); g++ {
		gw, err := tw.OpenGroup(ctx, g)
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
		case <-tick.C:
		case <-ctx.Done():
			fmt.Fprintf(out, "published %d groups (%d frames), %d groups without subscribers\n", sent, frames, skipped)
			return nil
		case <-s.Done():
			return errors.New("publish: session closed by relay")
		}
	}
	fmt.Fprintf(out, "published %d groups (%d frames), %d groups without subscribers\n", sent, frames, skipped)
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
