package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/relayfleet/relayfleet/relay/moqlite"
	"github.com/relayfleet/relayfleet/relay/transport"

	"github.com/relayfleet/relayfleet/relay/internal/bpath"
)

// Broadcast is a broadcast this session publishes.
type Broadcast struct {
	s    *Session
	name string

	mu     sync.Mutex
	tracks map[string]*TrackWriter
	closed bool
}

// Publish announces a broadcast under name (relative to the session root)
// and returns it. Publishing a name twice returns the same Broadcast.
func (s *Session) Publish(name string) *Broadcast {
	name = bpath.Clean(name)
	s.mu.Lock()
	defer s.mu.Unlock()
	if b := s.broadcasts[name]; b != nil {
		return b
	}
	b := &Broadcast{s: s, name: name, tracks: make(map[string]*TrackWriter)}
	s.broadcasts[name] = b
	for w := range s.watchers {
		w.update(name, true)
	}
	return b
}

// Name is the broadcast's name relative to the session root.
func (b *Broadcast) Name() string { return b.name }

// Track returns the writer for one track, creating it if needed.
func (b *Broadcast) Track(name string) *TrackWriter {
	b.mu.Lock()
	defer b.mu.Unlock()
	tw := b.tracks[name]
	if tw == nil {
		tw = &TrackWriter{b: b, name: name, subs: make(map[uint64]transport.Stream), changed: make(chan struct{})}
		b.tracks[name] = tw
	}
	return tw
}

// Close unannounces the broadcast and ends its subscriptions.
func (b *Broadcast) Close() {
	s := b.s
	s.mu.Lock()
	if s.broadcasts[b.name] == b {
		delete(s.broadcasts, b.name)
		for w := range s.watchers {
			w.update(b.name, false)
		}
	}
	s.mu.Unlock()
	b.mu.Lock()
	b.closed = true
	tracks := b.tracks
	b.mu.Unlock()
	for _, tw := range tracks {
		tw.closeAll()
	}
}

// TrackWriter writes groups of one track to whoever subscribed to it
// through the relay (normally the relay itself, once).
type TrackWriter struct {
	b    *Broadcast
	name string

	mu      sync.Mutex
	subs    map[uint64]transport.Stream // by the subscriber's id
	changed chan struct{}
}

func (tw *TrackWriter) signal() {
	close(tw.changed)
	tw.changed = make(chan struct{})
}

// Subscribers is how many subscriptions the track has now.
func (tw *TrackWriter) Subscribers() int {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	return len(tw.subs)
}

// WaitSubscribers blocks until the track has at least n subscriptions.
func (tw *TrackWriter) WaitSubscribers(ctx context.Context, n int) error {
	for {
		tw.mu.Lock()
		have, ch := len(tw.subs), tw.changed
		tw.mu.Unlock()
		if have >= n {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-tw.b.s.ctx.Done():
			return ErrClosed
		}
	}
}

func (tw *TrackWriter) closeAll() {
	tw.mu.Lock()
	subs := tw.subs
	tw.subs = map[uint64]transport.Stream{}
	tw.signal()
	tw.mu.Unlock()
	for _, st := range subs {
		_ = st.Close()
	}
}

// GroupWriter writes the frames of one group to every subscription the
// track had when the group was opened.
type GroupWriter struct {
	streams []transport.SendStream
	stops   []func() bool
}

// ErrNoSubscribers is returned by OpenGroup when nobody subscribed.
var ErrNoSubscribers = errors.New("client: track has no subscribers")

// OpenGroup starts group seq on a new stream per subscription.
func (tw *TrackWriter) OpenGroup(ctx context.Context, seq uint64) (*GroupWriter, error) {
	tw.mu.Lock()
	ids := make([]uint64, 0, len(tw.subs))
	for id := range tw.subs {
		ids = append(ids, id)
	}
	tw.mu.Unlock()
	if len(ids) == 0 {
		return nil, ErrNoSubscribers
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	g := &GroupWriter{}
	s := tw.b.s
	for _, id := range ids {
		st, err := s.t.OpenUniStream(ctx)
		if err != nil {
			g.Abort()
			return nil, fmt.Errorf("open group stream: %w", err)
		}
		stop := context.AfterFunc(s.ctx, func() { st.CancelWrite(codeCancelled) })
		if _, err := st.Write(moqlite.AppendGroupStart(nil, moqlite.GroupHeader{Subscribe: id, Sequence: seq})); err != nil {
			stop()
			continue
		}
		g.streams = append(g.streams, st)
		g.stops = append(g.stops, stop)
	}
	if len(g.streams) == 0 {
		return nil, ErrNoSubscribers
	}
	return g, nil
}

// WriteFrame sends one frame to every stream of the group; a stream that
// fails is dropped. It fails only when every stream failed.
func (g *GroupWriter) WriteFrame(payload []byte) error {
	b := moqlite.AppendFrame(nil, payload)
	ok := 0
	for i, st := range g.streams {
		if st == nil {
			continue
		}
		if _, err := st.Write(b); err != nil {
			g.stops[i]()
			g.streams[i] = nil
			continue
		}
		ok++
	}
	if ok == 0 {
		return ErrNoSubscribers
	}
	return nil
}

// Close ends the group cleanly.
func (g *GroupWriter) Close() error {
	for i, st := range g.streams {
		if st != nil {
			_ = st.Close()
			g.stops[i]()
		}
	}
	return nil
}

// Abort resets the group's streams.
func (g *GroupWriter) Abort() {
	for i, st := range g.streams {
		if st != nil {
			st.CancelWrite(codeCancelled)
			g.stops[i]()
		}
	}
}

// WriteGroup writes a complete group.
func (tw *TrackWriter) WriteGroup(ctx context.Context, seq uint64, frames [][]byte) error {
	g, err := tw.OpenGroup(ctx, seq)
	if err != nil {
		return err
	}
	return g.writeAll(frames)
}

// writeAll writes frames and closes the group.
func (g *GroupWriter) writeAll(frames [][]byte) error {
	for _, f := range frames {
		if err := g.WriteFrame(f); err != nil {
			return err
		}
	}
	return g.Close()
}

// serveSubscribe answers the relay's SUBSCRIBE for one of our tracks.
func (s *Session) serveSubscribe(st transport.Stream, m *moqlite.Subscribe) {
	s.mu.Lock()
	b := s.broadcasts[bpath.Clean(m.Broadcast)]
	s.mu.Unlock()
	if b == nil {
		st.CancelWrite(codeNotFound)
		st.CancelRead(codeNotFound)
		return
	}
	b.mu.Lock()
	closed := b.closed
	b.mu.Unlock()
	if closed {
		st.CancelWrite(codeNotFound)
		st.CancelRead(codeNotFound)
		return
	}
	tw := b.Track(m.Track)
	if _, err := st.Write(moqlite.AppendMessage(nil, &moqlite.SubscribeOk{})); err != nil {
		return
	}
	tw.mu.Lock()
	tw.subs[m.ID] = st
	tw.signal()
	tw.mu.Unlock()
	// Until the subscriber ends it (FIN or reset); SUBSCRIBE_UPDATE is ignored.
	_, _ = io.Copy(io.Discard, st)
	tw.mu.Lock()
	if tw.subs[m.ID] == st {
		delete(tw.subs, m.ID)
		tw.signal()
	}
	tw.mu.Unlock()
	_ = st.Close()
}

// announceWatcher is the relay's interest in our broadcasts.
type announceWatcher struct {
	prefix  string
	mu      sync.Mutex
	pending []moqlite.Announce
	notify  chan struct{}
}

func (w *announceWatcher) update(name string, active bool) {
	suffix, ok := bpath.StripPrefix(w.prefix, name)
	if !ok {
		return
	}
	w.mu.Lock()
	w.pending = append(w.pending, moqlite.Announce{Active: active, Suffix: suffix})
	w.mu.Unlock()
	select {
	case w.notify <- struct{}{}:
	default:
	}
}

func (s *Session) serveAnnounce(st transport.Stream, prefix string) {
	w := &announceWatcher{prefix: prefix, notify: make(chan struct{}, 1)}
	var init moqlite.AnnounceInit
	s.mu.Lock()
	for name := range s.broadcasts {
		if suffix, ok := bpath.StripPrefix(prefix, name); ok {
			init.Suffixes = append(init.Suffixes, suffix)
		}
	}
	s.watchers[w] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.watchers, w)
		s.mu.Unlock()
	}()
	sort.Strings(init.Suffixes)
	// More suffixes than one AnnounceInit may carry follow as Announces.
	b, _ := moqlite.AppendAnnounceInit(nil, init.Suffixes)
	if _, err := st.Write(b); err != nil {
		return
	}
	readDone := make(chan struct{})
	s.spawn(func() {
		defer close(readDone)
		_, _ = io.Copy(io.Discard, st)
	})
	for {
		select {
		case <-readDone:
			_ = st.Close()
			return
		case <-s.ctx.Done():
			return
		case <-w.notify:
			w.mu.Lock()
			p := w.pending
			w.pending = nil
			w.mu.Unlock()
			var b []byte
			for _, a := range p {
				b = moqlite.AppendMessage(b, &a)
			}
			if _, err := st.Write(b); err != nil {
				return
			}
		}
	}
}

// OggPublishOptions configures RunPublishOgg.
type OggPublishOptions struct {
	Broadcast string    // broadcast name, relative to the URL path
	Track     string    // track name; "audio" when empty
	Input     io.Reader // an Ogg Opus stream
	// Pace sends each packet at its time from the start (the sum of the
	// durations before it), for a file. A live input that already comes
	// in real time (ffmpeg -re on a pipe) is sent as it is read.
	Pace bool
	// Origins are further relays to publish to, the same packets with the
	// same group sequences to each (PublishOrigins): an edge pulling from
	// one fails over to another.
	Origins []string
}

// OggStats counts what PublishOgg sent.
type OggStats struct {
	Packets  int           // audio packets read, one group each
	Skipped  int           // of those, sent to nobody: no subscribers yet
	Duration time.Duration // total audio duration
	Min, Max time.Duration // shortest and longest packet
}

// String is the summary line: published 250 Opus packets (30.0 s, 120 ms each).
func (st OggStats) String() string {
	each := "none"
	switch {
	case st.Packets == 0:
	case st.Min == st.Max:
		each = fmtMillis(st.Min) + " each"
	default:
		each = fmtMillis(st.Min) + " to " + fmtMillis(st.Max)
	}
	s := fmt.Sprintf("published %d Opus packets (%.1f s, %s)", st.Packets, st.Duration.Seconds(), each)
	if st.Skipped > 0 {
		s += fmt.Sprintf(", %d with no subscribers", st.Skipped)
	}
	return s
}

func fmtMillis(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', -1, 64) + " ms"
}

// PublishOgg writes the audio packets of r to tw until r ends: each Opus
// packet is one frame in a group of its own (group sequence = packet
// index), so a late joiner starts at any packet. A packet with no
// subscribers is skipped, as a live encoder would. With pace, packet n is
// sent at the start plus the durations of packets 0 to n-1; without, as
// soon as it is read. It returns nil at the end of r, and ctx's error when
// ctx ends first.
func PublishOgg(ctx context.Context, tw *TrackWriter, r *OggOpusReader, pace bool) (OggStats, error) {
	return publishOgg(ctx, tw.WriteGroup, tw.b.s.Done(), r, pace)
}

// publishOgg is PublishOgg writing each group with write; it stops when
// done is closed (nil: never).
func publishOgg(ctx context.Context, write func(ctx context.Context, seq uint64, frames [][]byte) error, done <-chan struct{}, r *OggOpusReader, pace bool) (OggStats, error) {
	var st OggStats
	var start time.Time
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for seq := uint64(0); ; seq++ {
		p, _, err := r.Next()
		if err == io.EOF {
			return st, nil
		}
		if err != nil {
			return st, err
		}
		d, err := PacketDuration(p) // Next checked it
		if err != nil {
			return st, err
		}
		if seq == 0 {
			start = time.Now()
		}
		if wait := time.Until(start.Add(st.Duration)); pace && wait > 0 {
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			select {
			case <-timer.C:
			case <-ctx.Done():
				return st, ctx.Err()
			case <-done:
				return st, errors.New("publish: session closed by relay")
			}
		}
		select {
		case <-ctx.Done():
			return st, ctx.Err()
		case <-done:
			return st, errors.New("publish: session closed by relay")
		default:
		}
		if err := write(ctx, seq, [][]byte{p}); err != nil {
			if !errors.Is(err, ErrNoSubscribers) {
				return st, err
			}
			st.Skipped++
		}
		st.Packets++
		st.Duration += d
		if st.Packets == 1 || d < st.Min {
			st.Min = d
		}
		st.Max = max(st.Max, d)
	}
}

// publishLinger is how long RunPublishOgg waits after the last group, and
// again after ending the broadcast, before closing the session: closing a
// QUIC connection drops the stream data not sent yet.
const publishLinger = 250 * time.Millisecond

// RunPublishOgg connects to url (and o.Origins), publishes a broadcast with one track and
// writes the audio packets of the Ogg Opus stream o.Input with PublishOgg.
// At the end of the input it ends the broadcast cleanly. It prints the
// summary line (OggStats.String) to out, also when ctx ends first, which
// is not an error.
func RunPublishOgg(ctx context.Context, url string, dial *Options, o OggPublishOptions, out io.Writer) error {
	if o.Track == "" {
		o.Track = "audio"
	}
	var (
		write func(ctx context.Context, seq uint64, frames [][]byte) error
		ended <-chan struct{} // the session's end; with several origins, never
		unpub func()
	)
	if len(o.Origins) == 0 {
		s, err := Dial(ctx, url, dial)
		if err != nil {
			return err
		}
		defer s.Close()
		b := s.Publish(o.Broadcast)
		defer b.Close()
		write, ended, unpub = b.Track(o.Track).WriteGroup, s.Done(), b.Close
	} else {
		p, err := PublishOrigins(ctx, append([]string{url}, o.Origins...), dial, o.Broadcast, o.Track, nil)
		if err != nil {
			return err
		}
		defer p.Close()
		write, unpub = p.WriteGroup, p.CloseBroadcast
	}
	st, err := publishOgg(ctx, write, ended, NewOggOpusReader(o.Input), o.Pace)
	switch {
	case ctx.Err() != nil:
		fmt.Fprintln(out, st)
		return nil
	case err != nil:
		if st.Packets > 0 {
			fmt.Fprintln(out, st)
		}
		return err
	}
	// Let the last groups drain, then the unannounce and the ends of the
	// subscriptions.
	linger := func() {
		t := time.NewTimer(publishLinger)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		case <-ended:
		}
	}
	linger()
	unpub()
	linger()
	fmt.Fprintln(out, st)
	return nil
}
