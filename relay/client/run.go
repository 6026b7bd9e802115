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

// ListenOptions configures RunListen.
type ListenOptions struct {
	Broadcast string
	Track     string
	Groups    int  // stop after this many groups; 0 means until ctx ends
	Check     int  // if > 0, check every frame is a Pattern of this size
	Verbose   bool // one line per group
}

// RunListen connects to url, waits for the broadcast to be announced,
// subscribes and reads groups, printing one line per group when verbose
// and a summary at the end.
func RunListen(ctx context.Context, url string, dial *Options, o ListenOptions, out io.Writer) error {
	s, err := Dial(ctx, url, dial)
	if err != nil {
		return err
	}
	defer s.Close()
	ann, err := s.Announced(ctx, "")
	if err != nil {
		return err
	}
	if err := ann.WaitFor(ctx, o.Broadcast); err != nil {
		ann.Close()
		return fmt.Errorf("wait for broadcast %q: %w", o.Broadcast, err)
	}
	ann.Close()
	sub, err := s.Subscribe(ctx, o.Broadcast, o.Track)
	if err != nil {
		return err
	}
	defer sub.Close()
	var groups, frames, bytes int
	for o.Groups == 0 || groups < o.Groups {
		g, err := sub.NextGroup(ctx)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			return fmt.Errorf("listen: %w", err)
		}
		n, nb := 0, 0
		for {
			p, err := g.ReadFrame()
			if err == io.EOF {
				break
			}
			if err != nil {
				if ctx.Err() != nil {
					break
				}
				return fmt.Errorf("listen: group %d: %w", g.Sequence, err)
			}
			if o.Check > 0 {
				gs, _, err := CheckPattern(p, o.Check)
				if err == nil && gs != g.Sequence {
					err = fmt.Errorf("frame of group %d in group %d", gs, g.Sequence)
				}
				if err != nil {
					return fmt.Errorf("listen: %w", err)
				}
			}
			n++
			nb += len(p)
		}
		groups++
		frames += n
		bytes += nb
		if o.Verbose {
			fmt.Fprintf(out, "group %d: %d frames, %d bytes\n", g.Sequence, n, nb)
		}
	}
	fmt.Fprintf(out, "received %d groups, %d frames, %d bytes\n", groups, frames, bytes)
	return nil
}
