package loadgen

import (
	"context"
	"crypto/x509"
	"errors"
	"log/slog"
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"
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
	Broadcast      string
	Track          string // "audio" when empty
	Listeners      int
	// Ramp is how many listeners start per second; 0 means as fast as
	// Parallel dials allow.
	Ramp float64
	// Duration is how long to measure once every listener has started.
	Duration time.Duration
	// Freeze is the fraction of listeners to freeze FreezeAt into the
	// measurement.
	Freeze   float64
	FreezeAt time.Duration
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
	// backing off from 100 ms, doubling to at most 2 s, until Run ends.
	// Without it such a listener stays ended.
	Reconnect bool
	// IdleTimeout is the QUIC idle timeout listeners ask for (the relay
	// may lower it); 0 means 30 s. A relay that goes without closing its
	// connections is noticed only this long after it last sent.
	IdleTimeout time.Duration
	// Progress, if set, is called about once a second, from one goroutine,
	// until the listeners are closed.
	Progress func(Snapshot)
}

// Snapshot is Run's progress at one moment, over every listener, frozen
// ones included.
type Snapshot struct {
	Connected      int   `json:"connected"`       // listeners that have subscribed, ever
	Live           int   `json:"live"`            // listeners with a subscription now
	Reconnects     int64 `json:"reconnects"`      // successful resubscriptions so far
	FramesReceived int64 `json:"frames_received"` // so far
}

// Report is what Run measured. Rates and counts are over the listeners
// that connected and were not frozen.
type Report struct {
	Listeners      int            `json:"listeners"`
	Connected      int            `json:"connected"`
	Failed         int            `json:"failed"`
	Frozen         int            `json:"frozen"`
	Ended          int            `json:"ended"` // listeners whose subscription ended early, at least once
	FramesReceived int64          `json:"frames_received"`
	FramesLost     int64          `json:"frames_lost"`
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
	// subscription ended (Options.Reconnect).
	Reconnects int64 `json:"reconnects"`
	// ListenersLost is how many listeners had no subscription when the
	// run ended and closed them; without Options.Reconnect it equals
	// Ended.
	ListenersLost int `json:"listeners_lost"`
	// MaxGapMs is the longest a listener was without a subscription:
	// from noticing its end to resubscribing, or to the end of the
	// window for a listener still without one then.
	MaxGapMs float64 `json:"max_gap_ms"`
}

// listener is one listener session's counters, written by its reader.
type listener struct {
	frozen      atomic.Bool
	windowStart *atomic.Int64 // Unix ns when measurement starts; 0 before
	windowBytes int64
	connected   bool
	ended       bool
	err         string

	frames, lost, late, bytes int64
	missed, cut               int64
	first, last               time.Time
	latMax                    time.Duration
	latSample                 []time.Duration

	started bool
	next    uint64               // next group sequence expected
	missing map[uint64]time.Time // groups skipped over, by sequence: when
	count   uint32               // frame count of the last group seen
	resumed bool                 // resubscribed, no group seen since

	live       bool      // subscribed (the state at the end, once Run stops)
	downSince  time.Time // when the last subscription ended
	reconnects int64
	maxGap     time.Duration
}

// progress is what Snapshot reports, kept as atomics by the listeners.
type progress struct {
	connected, live, reconnects atomic.Int64
}

// maxMissing bounds the groups a listener remembers as possibly reordered.
const maxMissing = 256

// group notes group seq's arrival and says whether to read it: not when
// it is the group last seen before a resubscription, served again.
func (l *listener) group(seq uint64, now time.Time) bool {
	if !l.started {
		l.started, l.next = true, seq+1
		return true
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
		case seq+1 == l.next:
			return false // already counted: received, or cut short
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

// finish counts the groups still missing at end as lost, except those
// skipped over less than late ago: they may be in flight, reordered.
func (l *listener) finish(end time.Time, late time.Duration) {
	for _, at := range l.missing {
		if end.Sub(at) >= late {
			l.lost += int64(max(l.count, 1))
			l.missed++
		}
	}
	l.missing = nil
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
		l := &listener{windowStart: &window}
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
	var freeze <-chan time.Time
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

	rep := &Report{Listeners: o.Listeners, Seconds: end.Sub(measureStart).Seconds(), Errors: map[string]int{}}
	var lat []time.Duration
	var rates []float64
	for _, l := range ls {
		if l == nil {
			continue
		}
		switch {
		case !l.connected:
			rep.Failed++
			rep.Errors[l.err]++
			continue
		case l.frozen.Load():
			rep.Frozen++
			rep.Connected++
			continue
		}
		rep.Connected++
		if l.ended {
			rep.Ended++
			rep.Errors[l.err]++
		}
		rep.Reconnects += l.reconnects
		gap := l.maxGap
		if !l.live {
			rep.ListenersLost++
			gap = max(gap, end.Sub(l.downSince))
		}
		rep.MaxGapMs = max(rep.MaxGapMs, float64(gap)/1e6)
		l.finish(end, o.Late)
		rep.FramesReceived += l.frames
		rep.FramesLost += l.lost
		rep.LateFrames += l.late
		rep.GroupsMissing += l.missed
		rep.GroupsCut += l.cut
		rep.BytesReceived += l.bytes
		lat = append(lat, l.latSample...)
		rep.LatencyMsMax = max(rep.LatencyMsMax, float64(l.latMax)/1e6)
		if secs := end.Sub(measureStart).Seconds(); secs > 0 {
			rates = append(rates, float64(l.windowBytes)*8/secs)
		}
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
	return rep, nil
}

func (p *progress) snapshot(shards []*shard) Snapshot {
	s := Snapshot{Connected: int(p.connected.Load()), Live: int(p.live.Load()), Reconnects: p.reconnects.Load()}
	for _, sh := range shards {
		s.FramesReceived += sh.frames.Load()
	}
	return s
}
