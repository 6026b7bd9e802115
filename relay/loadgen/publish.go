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
}

// Publish connects to url and publishes Frame frames in real time until ctx
// ends. A group with no subscribers is skipped, as a live encoder would.
func Publish(ctx context.Context, url string, o PublishOptions) error {
	if o.Track == "" {
		o.Track = "audio"
	}
	if o.FrameTime <= 0 || o.FramesPerGroup < 1 {
		return errors.New("publish: frame time and frames per group must be positive")
	}
	p, err := client.PublishPaced(ctx, url, &client.Options{Logger: o.Logger, TrustHTTPHash: o.TrustHTTPHash}, o.Broadcast, o.Track, o.FrameTime)
	if err != nil {
		return err
	}
	defer p.Close()
	var gw *client.GroupWriter
	defer func() {
		if gw != nil {
			_ = gw.Close()
		}
	}()
	for seq := uint64(0); ; seq++ {
		gw, err = p.Track.OpenGroup(ctx, seq)
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
			case <-p.Tick.C:
			case <-ctx.Done():
				return nil
			case <-p.Session.Done():
				return errors.New("publish: session closed by relay")
			}
		}
		if gw != nil {
			_ = gw.Close()
			gw = nil
		}
	}
}
