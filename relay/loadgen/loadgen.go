package loadgen

import (
	"context"
	"crypto/x509"
	"errors"
	"log/slog"
	"math"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/relayfleet/relayfleet/relay/client"
)

// Options configures Run.
type Options struct {
	// URL is the relay: #spki=HEX or CertificateHash pins it; otherwise
	// https:// verifies against RootCAs, and http:// pins the hash from
	// /certificate.sha256, fetched over plain HTTP (loopback hosts only,
	// unless TrustHTTPHash). Ignored when Router is set.
	URL string
	// Token, if set, is presented by every listener as ?jwt= on the
	// relay's URL (a router's answer too).
	Token string
	// TokenSource, if set, is asked for the token at every connection
	// and reconnection in place of Token (client.ResolverOptions): with
	// Reconnect, a listener whose token expired comes back with a fresh
	// one. relay loadgen re-reads --token-file.
	TokenSource func(ctx context.Context) (string, error)
	// CertificateHash, if set, is the hex SHA-256 URL's certificate must
	// have (as from a trusted channel: over SSH, from the router).
	CertificateHash string
	// TrustHTTPHash allows fetching an http:// URL's certificate hash over
	// plain HTTP from a host that is not loopback.
	TrustHTTPHash bool
	// Router, if set, is a router base URL: each listener asks
	// Router/route?broadcast=NAME for its relay and pins the certificate
	// hash it answers. An http:// router must be on loopback unless
	// InsecureRouter; an https:// one is verified against RootCAs, or by
	// RouterSPKI, the SHA-256 of its public key.
	Router         string
	RouterSPKI     string
	InsecureRouter bool
	// RouterRegion is the listeners' region hint to the router
	// (/route?region=).
	RouterRegion string
	Broadcast    string
	Track        string // "audio" when empty
	Listeners    int
	// Ramp is how many listeners start per second; 0 means as fast as
	// Parallel dials allow.
	Ramp float64
	// Duration is how long to measure once every listener has started.
	Duration time.Duration
	// Freeze is the fraction of listeners to freeze FreezeAt into the
	// measurement.
	Freeze   float64
	FreezeAt time.Duration
	// FreezeFor, if positive, thaws the frozen listeners this long after
	// they froze: their packets flow again and they read on, as after a
	// network blackhole that heals. Thawed listeners are measured as any
	// other, their time frozen included; 0 keeps them frozen to the end,
	// and then they are reported apart (Report.Frozen).
	FreezeFor time.Duration
	// Late is how old a frame may be on arrival; 0 means 1 s.
	Late time.Duration
	// Shards is how many UDP sockets the listeners share; 0 means 32 (or
	// one per listener when there are fewer).
	Shards int
	// Parallel bounds dials in flight; 0 means 16 (quic-go servers queue
	// at most 32 connections awaiting accept and refuse the rest).
	Parallel int
	RootCAs  *x509.CertPool
	Logger   *slog.Logger
	// Window, if set, is called when the measurement starts (true) and
	// when it ends (false), before the listeners are closed.
	Window func(start bool)
	// Reconnect: when a connected listener's session or subscription ends
	// while Run is still running (not by its own shutdown), the listener
	// resolves its relay again (Router or URL), reconnects and resubscribes,
	// until Run ends, waiting before each attempt as client.Backoff says
	// (full jitter from 500 ms to 2 s, reset only by 10 s of audio; a
	// router's Retry-After honoured), a silent listener still subscribed
	// while it waits.
	// Without it such a listener stays ended.
	Reconnect bool
	// IdleTimeout is the QUIC idle timeout listeners ask for (the relay
	// may lower it); 0 means 30 s. A relay that goes without closing its
	// connections is noticed only this long after it last sent.
	IdleTimeout time.Duration
	// Progress, if set, is called about once a second, from one goroutine,
	// until the listeners are closed.
	Progress func(Snapshot)
	// Silence is how long a listener goes without a new group, or without
	// the next frame of a group, before it presumes its path dead: with
	// Reconnect it then reconnects (client.ErrSilent). It is also how
	// recent a listener's last frame must be at the end not to count as
	// silent then, and how long a frame may be in flight before it counts
	// as lost. 0 means client.DefaultSilence.
	Silence time.Duration
	// NoAckFrequency makes the listeners' QUIC lack the ACK frequency
	// extension, as Chromium's does: a relay cannot ask them to acknowledge
	// every other audio packet, and they acknowledge each one.
	NoAckFrequency bool
	// TuneQUIC, if set, is called with each listener's QUIC configuration
	// before it dials, and may change it (tests measure listeners whose
	// QUIC behaves like another's).
	TuneQUIC func(*quic.Config)
}

// Snapshot is Run's progress at one moment, over every listener, frozen
// ones included.
type Snapshot struct {
	Connected      int   `json:"connected"`       // listeners that have subscribed, ever
	Live           int   `json:"live"`            // listeners with a subscription now
	Reconnects     int64 `json:"reconnects"`      // successful resubscriptions so far
	FramesReceived int64 `json:"frames_received"` // so far
}

// Report is what Run measured. Listeners frozen to the end are reported
// apart (Frozen) and measured in nothing else. The audible figures (GapMs,
// SilentAtEnd, FramesLost, FramesExpected, LossRatio) cover every other
// listener, those that never connected included: they heard nothing. The
// rest (frames received, lateness, bitrate) cover the listeners that
// connected.
type Report struct {
	Listeners int `json:"listeners"`
	Connected int `json:"connected"`
	Failed    int `json:"failed"`
	Frozen    int `json:"frozen"`
	Ended     int `json:"ended"` // listeners whose subscription ended early, at least once
	// GapMs is the audible gap: per listener, the longest time from one
	// frame received to the next (and from subscribing to the first); a
	// listener silent at the end counts as silent from its last frame to
	// the end, and one that never got a frame for the whole run. P50, P99
	// and Max are across listeners.
	GapMs GapStats `json:"gap_ms"`
	// SecondGapMs is, per listener, the second longest such gap: a
	// listener that heard one fault (an origin failover) shows it in
	// GapMs, and a second interruption (the origin's return, say) here.
	SecondGapMs GapStats `json:"second_gap_ms"`
	// SilentAtEnd is how many listeners got no frame in the last
	// Options.Silence of the run (or never got one).
	SilentAtEnd    int   `json:"silent_at_end"`
	FramesReceived int64 `json:"frames_received"`
	// FramesLost is how many frames the publisher sent while a listener
	// was subscribed, or should have been, that the listener never got:
	// groups skipped or cut short, groups sent while it was away, and,
	// for a listener silent at the end or one that never got a frame, the
	// groups the publisher sent since (estimated from its group rate, up
	// to Options.Silence before the end: those may be in flight).
	FramesLost int64 `json:"frames_lost"`
	// FramesExpected is FramesReceived plus FramesLost: what the listeners
	// should have got. LossRatio is FramesLost over it (0 when nothing was
	// expected).
	FramesExpected int64          `json:"frames_expected"`
	LossRatio      float64        `json:"loss_ratio"`
	LateFrames     int64          `json:"late_frames"`
	GroupsMissing  int64          `json:"groups_missing"` // never arrived
	GroupsCut      int64          `json:"groups_cut"`     // arrived incomplete
	BytesReceived  int64          `json:"bytes_received"`
	BitrateBpsMean float64        `json:"bitrate_bps_mean"`
	BitrateBpsMin  float64        `json:"bitrate_bps_min"`
	LatencyMsP50   float64        `json:"latency_ms_p50"`
	LatencyMsMax   float64        `json:"latency_ms_max"`
	Seconds        float64        `json:"seconds"`
	Errors         map[string]int `json:"errors,omitempty"`

	// Reconnects is how many times listeners resubscribed after their
	// subscription ended (Options.Reconnect), and ReconnectsByReason the
	// same by why it ended (client.ReconnectReason: "silent",
	// "going-away", "stateless-reset", "idle-timeout", ...).
	Reconnects         int64            `json:"reconnects"`
	ReconnectsByReason map[string]int64 `json:"reconnects_by_reason,omitempty"`
	// ListenersLost is how many listeners had no subscription when the
	// run ended and closed them; without Options.Reconnect it equals
	// Ended.
	ListenersLost int `json:"listeners_lost"`
}

// GapStats is a distribution across listeners, in milliseconds.
type GapStats struct {
	P50 float64 `json:"p50"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

// listener is one listener session's counters, written by its reader.
type listener struct {
	id          int // its index, in the debug log
	frozen      atomic.Bool
	thaw        <-chan struct{} // closed when the frozen listeners thaw
	windowStart *atomic.Int64   // Unix ns when measurement starts; 0 before
	windowBytes int64
	connected   bool
	ended       bool
	err         string

	frames, lost, late, bytes int64
	missed, cut               int64
	first, last               time.Time // first and last frame received
	latMax                    time.Duration
	latSample                 []time.Duration

	startedAt    time.Time     // when it started dialing
	subscribedAt time.Time     // when it first subscribed
	gap          time.Duration // longest from one frame to the next, or from subscribing to the first
	gapEnd       time.Time     // when the longest gap between two frames ended
	gap2         time.Duration // the second longest, as gap

	started  bool
	firstSeq uint64               // the first group seen
	next     uint64               // next group sequence expected
	missing  map[uint64]time.Time // groups skipped over, by sequence: when
	count    uint32               // frame count of the last group seen
	resumed  bool                 // resubscribed, no group seen since
	moving   bool                 // moved make-before-break, no new group seen since
	cutAt    groupCut             // the last group read, if it was cut short
	resumeAt uint32               // the next group read resumes a cut one: frames before this were received
	unread   int64                // frames of the group being read at the end that it did not get

	// tlFirst and tlLast are the first and the latest group starts seen
	// since the publisher's sequence last went back: the publisher's
	// timeline as this listener saw it.
	tlFirst, tlLast groupStart
	tlOK            bool

	live       bool      // subscribed (the state at the end, once Run stops)
	downSince  time.Time // when the last subscription ended
	reconnects int64
	reasons    map[string]int64 // reconnects by why the subscription ended
}

// groupStart is the first frame of a group, as a listener received it.
type groupStart struct {
	seq   uint64
	sent  int64     // when the publisher sent it (Unix ns, from the frame); 0: the frame does not say
	at    time.Time // when it arrived
	count uint32    // frames in the group; 0: the frame does not say
}

// observe notes a group's first frame for the publisher's timeline.
func (l *listener) observe(p groupStart) {
	if !l.tlOK || p.seq < l.tlLast.seq {
		l.tlFirst = p
	}
	l.tlLast, l.tlOK = p, true
}

// progress is what Snapshot reports, kept as atomics by the listeners.
type progress struct {
	connected, live, reconnects atomic.Int64
}

// maxMissing bounds the groups a listener remembers as possibly reordered.
const maxMissing = 256

// groupCut is a group cut short: its frames received and those counted
// lost.
type groupCut struct {
	ok   bool
	seq  uint64
	read uint32
	lost int64
}

// group notes group seq's arrival and says whether to read it: not when
// it is the group last seen before a resubscription, served again,
// unless that one was cut short: then it is read on from where it was
// cut (l.resumeAt), and its frames are no longer lost.
func (l *listener) group(seq uint64, now time.Time) bool {
	cut := l.cutAt
	l.cutAt = groupCut{}
	if !l.started {
		l.started, l.firstSeq, l.next = true, seq, seq+1
		return true
	}
	if l.moving {
		// Moved make-before-break: the new subscription serves again
		// groups the old one served (skipped), and may serve those the
		// old one skipped over.
		if seq < l.next {
			if _, ok := l.missing[seq]; !ok {
				return false
			}
			delete(l.missing, seq)
			return true
		}
		l.moving = false
	}
	if l.resumed {
		l.resumed = false
		switch {
		case seq >= l.next:
			// Sent while away: they will not arrive on this subscription,
			// which starts at the latest group.
			l.lost += int64(max(l.count, 1)) * int64(seq-l.next)
			l.missed += int64(seq - l.next)
			l.next = seq + 1
			return true
		case seq+1 == l.next && cut.ok && cut.seq == seq:
			l.lost -= cut.lost
			l.cut--
			l.resumeAt = cut.read
			return true
		case seq+1 == l.next:
			return false // already counted: received
		default:
			// The sequence went back: the publisher restarted. What it
			// sent in between cannot be known; count from here.
			l.next = seq + 1
			return true
		}
	}
	switch {
	case seq >= l.next:
		for s := l.next; s < seq; s++ {
			if len(l.missing) >= maxMissing {
				l.lost += int64(max(l.count, 1)) * int64(seq-s)
				l.missed += int64(seq - s)
				break
			}
			if l.missing == nil {
				l.missing = make(map[uint64]time.Time)
			}
			l.missing[s] = now
		}
		l.next = seq + 1
	default:
		delete(l.missing, seq) // arrived out of order
	}
	return true
}

// moveTo starts counting on a move's new subscription, whose first group
// is first: the groups the old one skipped over before first can no
// longer arrive.
func (l *listener) moveTo(first uint64) {
	for seq := range l.missing {
		if seq < first {
			l.lost += int64(max(l.count, 1))
			l.missed++
			delete(l.missing, seq)
		}
	}
	l.moving = l.started
}

// resume starts counting on a new subscription: the groups the old one
// skipped over and had not delivered count as lost now (they can no longer
// arrive), and the first group on the new one counts the groups skipped
// while away as missing.
func (l *listener) resume() {
	for range l.missing {
		l.lost += int64(max(l.count, 1))
		l.missed++
	}
	l.missing = nil
	l.resumed = l.started
}

func (l *listener) frame(p []byte, now time.Time, late time.Duration) (FrameInfo, bool) {
	l.frames++
	l.bytes += int64(len(p))
	if l.first.IsZero() {
		l.first = now
		l.noteGap(now.Sub(l.subscribedAt))
	} else if l.noteGap(now.Sub(l.last)) {
		l.gapEnd = now
	}
	l.last = now
	if ws := l.windowStart.Load(); ws != 0 && now.UnixNano() >= ws {
		l.windowBytes += int64(len(p))
	}
	fi, ok := ParseFrame(p)
	if !ok {
		return fi, false
	}
	l.count = fi.Count
	d := now.Sub(fi.sentAt())
	if d > late {
		l.late++
	}
	l.latMax = max(l.latMax, d)
	if len(l.latSample) < 64 || l.frames%16 == 0 {
		if len(l.latSample) < 1024 {
			l.latSample = append(l.latSample, d)
		}
	}
	return fi, true
}

// noteGap records a gap d between frames (or before the first): it
// says whether d is the longest so far; the one it replaces becomes the
// second longest.
func (l *listener) noteGap(d time.Duration) bool {
	switch {
	case d > l.gap:
		l.gap, l.gap2 = d, l.gap
		return true
	case d > l.gap2:
		l.gap2 = d
	}
	return false
}

// secondGap is the listener's second longest audible gap at end, the
// silence since its last frame counted as one (0 for a listener that
// never got a frame: its one gap is the whole run).
func (l *listener) secondGap(end time.Time) time.Duration {
	if l.last.IsZero() {
		return 0
	}
	tail := end.Sub(l.last)
	switch {
	case tail > l.gap:
		return l.gap
	case tail > l.gap2:
		return tail
	}
	return l.gap2
}

// finish counts the groups still missing at end as lost, except those
// skipped over less than inflight ago: they may be in flight, reordered.
func (l *listener) finish(end time.Time, inflight time.Duration) {
	for _, at := range l.missing {
		if end.Sub(at) >= inflight {
			l.lost += int64(max(l.count, 1))
			l.missed++
		}
	}
	l.missing = nil
}

// settle closes the listener's accounts at end, once its reader is done:
// the groups still missing, its longest gap, whether it is silent at the
// end (no frame in the last silence), and the frames it should have had
// but did not (the publisher's timeline tl says how many groups it sent
// meanwhile): before its first frame, if that came more than silence
// after it subscribed; after its last, if it is silent at the end; the
// whole run, for one that never got a frame. Frames sent less than
// silence before the end may be in flight: they do not count.
func (l *listener) settle(end time.Time, silence time.Duration, tl timeline) (gap time.Duration, silent bool) {
	l.finish(end, silence)
	if l.last.IsZero() {
		from := l.startedAt
		if tl.ok {
			g := max(0, tl.seqAt(end.Add(-silence))-tl.seqAt(from.Add(silence)))
			l.lost += g * int64(max(tl.count, 1))
			l.missed += g
		}
		return max(0, end.Sub(from)), true
	}
	gap = max(l.gap, end.Sub(l.last))
	silent = end.Sub(l.last) > silence
	if !tl.ok {
		return gap, silent
	}
	// Sequence numbers compare only within one run of the publisher: a
	// listener that saw a later sequence than the latest arrival saw a
	// publisher since restarted; count by time then.
	if !l.subscribedAt.IsZero() && l.first.Sub(l.subscribedAt) > silence && l.firstSeq <= tl.seq {
		g := max(0, int64(l.firstSeq)-1-tl.seqAt(l.subscribedAt.Add(silence)))
		l.lost += g * int64(max(l.count, 1))
		l.missed += g
	}
	if silent {
		var g int64
		if last := l.next - 1; last <= tl.seq {
			g = tl.seqAt(end.Add(-silence)) - int64(last)
		} else {
			g = int64(math.Floor(float64(end.Sub(l.last)-silence) / float64(tl.every)))
		}
		g = max(0, g)
		l.lost += g*int64(max(l.count, 1)) + l.unread
		l.missed += g
	}
	return gap, silent
}

// timeline is the publisher's group sequence against time, as the
// listeners saw it: the latest group start to arrive and the time between
// group starts.
type timeline struct {
	ok    bool
	seq   uint64    // the group whose start arrived last
	at    time.Time // when
	count uint32    // its frames
	every time.Duration
}

// seqAt is the last group the publisher started by t (estimated: when its
// first frame would have arrived).
func (tl timeline) seqAt(t time.Time) int64 {
	return int64(tl.seq) + int64(math.Floor(float64(t.Sub(tl.at))/float64(tl.every)))
}

// publisherTimeline merges what the listeners saw of the publisher: the
// latest group start to arrive anchors it (any delay on its way makes
// the estimate of what was sent since smaller, never larger), and the
// listener that saw the longest run of groups gives the time between
// group starts, from the send times the frames carry (so that the clocks
// need not agree) or else from their arrivals.
func publisherTimeline(ls []*listener) timeline {
	var tl timeline
	var span uint64
	for _, l := range ls {
		if l == nil || !l.tlOK {
			continue
		}
		if p := l.tlLast; !tl.ok || p.at.After(tl.at) {
			tl.ok, tl.seq, tl.at, tl.count = true, p.seq, p.at, p.count
		}
		f, p := l.tlFirst, l.tlLast
		if n := p.seq - f.seq; p.seq > f.seq && n > span {
			d := p.at.Sub(f.at)
			if f.sent != 0 && p.sent != 0 {
				d = time.Duration(p.sent - f.sent)
			}
			if d > 0 {
				span, tl.every = n, d/time.Duration(n)
			}
		}
	}
	tl.ok = tl.ok && tl.every > 0
	return tl
}

// percentiles returns the nearest-rank p50, p99 and maximum of v, in ms.
func percentiles(v []time.Duration) GapStats {
	if len(v) == 0 {
		return GapStats{}
	}
	slices.Sort(v)
	at := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(v)))) - 1
		return float64(v[min(max(i, 0), len(v)-1)]) / 1e6
	}
	return GapStats{P50: at(0.50), P99: at(0.99), Max: at(1)}
}

// Run starts the listeners, measures for o.Duration and reports. It ends
// early, with what it has, when ctx ends.
func Run(ctx context.Context, o Options) (*Report, error) {
	if o.Listeners < 1 {
		return nil, errors.New("loadgen: need at least one listener")
	}
	if o.Track == "" {
		o.Track = "audio"
	}
	if o.Late <= 0 {
		o.Late = time.Second
	}
	if o.Parallel <= 0 {
		o.Parallel = 16
	}
	if o.Shards <= 0 {
		o.Shards = 32
	}
	if o.Silence <= 0 {
		o.Silence = client.DefaultSilence
	}
	o.Shards = min(o.Shards, o.Listeners)
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	resolver, err := newResolver(o)
	if err != nil {
		return nil, err
	}
	shards := make([]*shard, o.Shards)
	for i := range shards {
		sh, err := newShard(o.Freeze > 0)
		if err != nil {
			for _, s := range shards[:i] {
				s.close()
			}
			return nil, err
		}
		shards[i] = sh
	}
	defer func() {
		for _, s := range shards {
			s.close()
		}
	}()
	frozenShards := int(math.Round(o.Freeze * float64(len(shards))))

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var (
		wg        sync.WaitGroup
		ls        = make([]*listener, o.Listeners)
		sem       = make(chan struct{}, o.Parallel)
		startTime = time.Now()
		window    atomic.Int64
		pg        progress
		thaw      = make(chan struct{})
	)
	progressDone := make(chan struct{})
	if o.Progress != nil {
		go func() {
			defer close(progressDone)
			t := time.NewTicker(time.Second)
			defer t.Stop()
			for {
				select {
				case <-t.C:
					o.Progress(pg.snapshot(shards))
				case <-runCtx.Done():
					return
				}
			}
		}()
	} else {
		close(progressDone)
	}
	var tick <-chan time.Time
	if o.Ramp > 0 {
		t := time.NewTicker(time.Duration(float64(time.Second) / o.Ramp))
		defer t.Stop()
		tick = t.C
	}
	var dialWG sync.WaitGroup
start:
	for i := range ls {
		l := &listener{id: i, windowStart: &window, thaw: thaw}
		ls[i] = l
		sh := shards[i%len(shards)]
		if tick != nil && i > 0 {
			select {
			case <-tick:
			case <-ctx.Done():
				break start
			}
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			break start
		}
		l.startedAt = time.Now()
		wg.Add(1)
		dialWG.Add(1)
		go func() {
			defer wg.Done()
			connected := make(chan struct{})
			go func() {
				select {
				case <-connected:
				case <-runCtx.Done():
				}
				<-sem
				dialWG.Done()
			}()
			listen(runCtx, o, resolver, sh, l, connected, sem, &pg)
		}()
	}
	dialWG.Wait()
	measureStart := time.Now()
	window.Store(measureStart.UnixNano())
	if o.Window != nil {
		o.Window(true)
	}
	o.Logger.Info("listeners started", "listeners", o.Listeners, "seconds", measureStart.Sub(startTime).Seconds())

	timer := time.NewTimer(o.Duration)
	defer timer.Stop()
	var freeze, unfreeze <-chan time.Time
	if frozenShards > 0 {
		ft := time.NewTimer(o.FreezeAt)
		defer ft.Stop()
		freeze = ft.C
	}
wait:
	for {
		select {
		case <-freeze:
			freeze = nil
			for i, l := range ls {
				if l != nil && i%len(shards) < frozenShards {
					l.frozen.Store(true)
				}
			}
			for _, sh := range shards[:frozenShards] {
				sh.frozen.Store(true)
			}
			o.Logger.Info("froze listeners", "shards", frozenShards, "of", len(shards))
			if o.FreezeFor > 0 {
				tt := time.NewTimer(o.FreezeFor)
				defer tt.Stop()
				unfreeze = tt.C
			}
		case <-unfreeze:
			unfreeze = nil
			for _, sh := range shards[:frozenShards] {
				sh.frozen.Store(false)
			}
			for _, l := range ls {
				if l != nil {
					l.frozen.Store(false)
				}
			}
			close(thaw)
			o.Logger.Info("thawed listeners", "shards", frozenShards, "of", len(shards))
		case <-timer.C:
			break wait
		case <-ctx.Done():
			break wait
		}
	}
	end := time.Now()
	if o.Window != nil {
		o.Window(false)
	}
	stop()
	wg.Wait()
	<-progressDone

	rep := &Report{Listeners: o.Listeners, Seconds: end.Sub(measureStart).Seconds(), Errors: map[string]int{}, ReconnectsByReason: map[string]int64{}}
	tl := publisherTimeline(ls)
	var (
		lat   []time.Duration
		rates []float64
		gaps  []time.Duration
		gaps2 []time.Duration
	)
	for _, l := range ls {
		if l == nil {
			continue
		}
		if l.connected && l.frozen.Load() {
			rep.Frozen++
			rep.Connected++
			continue
		}
		gap, silent := l.settle(end, o.Silence, tl)
		gaps = append(gaps, gap)
		gaps2 = append(gaps2, l.secondGap(end))
		o.Logger.Debug("listener gap", "listener", l.id, "gap", gap, "first_frame_after", l.first.Sub(l.subscribedAt), "longest_between_frames_ended", l.gapEnd.Format(time.RFC3339Nano), "reconnects", l.reasons)
		if silent {
			rep.SilentAtEnd++
		}
		rep.FramesLost += l.lost
		rep.GroupsMissing += l.missed
		if !l.connected {
			rep.Failed++
			rep.Errors[l.err]++
			continue
		}
		rep.Connected++
		if l.ended {
			rep.Ended++
			rep.Errors[l.err]++
		}
		rep.Reconnects += l.reconnects
		for r, n := range l.reasons {
			rep.ReconnectsByReason[r] += n
		}
		if !l.live {
			rep.ListenersLost++
		}
		rep.FramesReceived += l.frames
		rep.LateFrames += l.late
		rep.GroupsCut += l.cut
		rep.BytesReceived += l.bytes
		lat = append(lat, l.latSample...)
		rep.LatencyMsMax = max(rep.LatencyMsMax, float64(l.latMax)/1e6)
		if secs := end.Sub(measureStart).Seconds(); secs > 0 {
			rates = append(rates, float64(l.windowBytes)*8/secs)
		}
	}
	rep.GapMs = percentiles(gaps)
	rep.SecondGapMs = percentiles(gaps2)
	rep.FramesExpected = rep.FramesReceived + rep.FramesLost
	if rep.FramesExpected > 0 {
		rep.LossRatio = float64(rep.FramesLost) / float64(rep.FramesExpected)
	}
	if len(rates) > 0 {
		sum, mn := 0.0, math.Inf(1)
		for _, r := range rates {
			sum += r
			mn = min(mn, r)
		}
		rep.BitrateBpsMean, rep.BitrateBpsMin = sum/float64(len(rates)), mn
	}
	if len(lat) > 0 {
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		rep.LatencyMsP50 = float64(lat[len(lat)/2]) / 1e6
	}
	if len(rep.Errors) == 0 {
		rep.Errors = nil
	}
	if len(rep.ReconnectsByReason) == 0 {
		rep.ReconnectsByReason = nil
	}
	return rep, nil
}

func (p *progress) snapshot(shards []*shard) Snapshot {
	s := Snapshot{Connected: int(p.connected.Load()), Live: int(p.live.Load()), Reconnects: p.reconnects.Load()}
	for _, sh := range shards {
		s.FramesReceived += sh.frames.Load()
	}
	return s
}
