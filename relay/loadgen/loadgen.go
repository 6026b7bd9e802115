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
	// URL is the relay (http:// pins the hash from /certificate.sha256,
	// https:// verifies against RootCAs). Ignored when Router is set.
	URL string
	// Router, if set, is a router base URL: each listener asks
	// Router/route?broadcast=NAME for its relay.
	Router    string
	Broadcast string
	Track     string // "audio" when empty
	Listeners int
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
}

// Report is what Run measured. Rates and counts are over the listeners
// that connected and were not frozen.
type Report struct {
	Listeners      int            `json:"listeners"`
	Connected      int            `json:"connected"`
	Failed         int            `json:"failed"`
	Frozen         int            `json:"frozen"`
	Ended          int            `json:"ended"` // subscriptions that ended early
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
}

// maxMissing bounds the groups a listener remembers as possibly reordered.
const maxMissing = 256

func (l *listener) group(seq uint64, now time.Time) {
	if !l.started {
		l.started, l.next = true, seq+1
		return
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
		resolver  = newResolver(o)
		sem       = make(chan struct{}, o.Parallel)
		startTime = time.Now()
		window    atomic.Int64
	)
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
			listen(runCtx, o, resolver, sh, l, connected)
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
