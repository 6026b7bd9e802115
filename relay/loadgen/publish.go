package loadgen

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/relayfleet/relayfleet/relay/client"
)

// PublishOptions configures Publish.
type PublishOptions struct {
	Broadcast string
	Track     string        // "audio" when empty
	FrameTime time.Duration // time between frames (Opus: 20 ms to 120 ms)
	// FramesPerGroup is how many frames share a group (a QUIC stream):
	// 1 is a stream per frame; FrameTime*FramesPerGroup of about a second
	// is a stream per second.
	FramesPerGroup int
	FrameSize      int // bytes per frame, at least 28
	Logger         *slog.Logger
	// TrustHTTPHash: see client.Options.TrustHTTPHash.
	TrustHTTPHash bool
	// Origins are further relays to publish to: each gets the same groups,
	// sequences and frames (client.PublishOrigins), and one that goes away
	// is reconnected while the others go on.
	Origins []string
}

// Publish connects to url (and o.Origins) and publishes Frame frames in
// real time until ctx ends. A group with no subscribers is skipped, as a
// live encoder would. With one URL it returns when the relay closes the
// session; with several it goes on while any origin is left, and
// reconnects the others.
func Publish(ctx context.Context, url string, o PublishOptions) error {
	if o.Track == "" {
		o.Track = "audio"
	}
	if o.FrameTime <= 0 || o.FramesPerGroup < 1 {
		return errors.New("publish: frame time and frames per group must be positive")
	}
	dial := &client.Options{Logger: o.Logger, TrustHTTPHash: o.TrustHTTPHash}
	var (
		track interface {
			OpenGroup(ctx context.Context, seq uint64) (*client.GroupWriter, error)
		}
		ended <-chan struct{} // never, with several origins
	)
	if len(o.Origins) == 0 {
		p, err := client.PublishPaced(ctx, url, dial, o.Broadcast, o.Track, o.FrameTime)
		if err != nil {
			return err
		}
		defer p.Close()
		p.Tick.Stop()
		track, ended = p.Track, p.Session.Done()
	} else {
		p, err := client.PublishOrigins(ctx, append([]string{url}, o.Origins...), dial, o.Broadcast, o.Track, nil)
		if err != nil {
			return err
		}
		defer p.Close()
		track = p
	}
	tick := time.NewTicker(o.FrameTime)
	defer tick.Stop()
	var err error
	var gw *client.GroupWriter
	defer func() {
		if gw != nil {
			_ = gw.Close()
		}
	}()
	for seq := uint64(0); ; seq++ {
		gw, err = track.OpenGroup(ctx, seq)
		if err != nil && ctx.Err() != nil {
			return nil // stopped: the normal end of a publisher
		}
		if err != nil && !errors.Is(err, client.ErrNoSubscribers) {
			return fmt.Errorf("publish: %w", err)
		}
		for i := 0; i < o.FramesPerGroup; i++ {
			if gw != nil {
				fi := FrameInfo{Group: seq, Index: uint32(i), Count: uint32(o.FramesPerGroup), SentNs: time.Now().UnixNano()}
				if gw.WriteFrame(Frame(fi, o.FrameSize)) != nil {
					gw = nil
				}
			}
			select {
			case <-tick.C:
			case <-ctx.Done():
				return nil
			case <-ended:
				return errors.New("publish: session closed by relay")
			}
		}
		if gw != nil {
			_ = gw.Close()
			gw = nil
		}
	}
}
