package client

import (
	"context"
	"crypto/x509"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/url"
	"os"
	"slices"
	"time"

	"github.com/relayfleet/relayfleet/internal/cli"
)

// The fleet heartbeat as the relay publishes it (package relay,
// heartbeat.go; a test there holds these equal to its own): broadcast
// HeartbeatBroadcast under the session root HeartbeatRoot, which a
// session without a token may connect to, track HeartbeatTrack, one
// group every DefaultHeartbeatInterval holding one frame of
// HeartbeatFrameLen bytes: the group's sequence and the send time in Unix
// nanoseconds, each 8 bytes big-endian.
const (
	HeartbeatRoot            = "/.fleet"
	HeartbeatBroadcast       = "heartbeat"
	HeartbeatTrack           = "heartbeat"
	HeartbeatFrameLen        = 16
	DefaultHeartbeatInterval = 120 * time.Millisecond
)

// Probe defaults.
const (
	DefaultProbeWindow         = 5 * time.Second
	DefaultProbeConnectTimeout = 10 * time.Second
)

// ProbeOptions configures ProbeHeartbeat.
type ProbeOptions struct {
	// URL is the relay process, http(s)://HOST:PORT, as relay listen
	// takes it: its path is replaced by HeartbeatRoot; a ?jwt= token and
	// a #spki= pin are kept.
	URL string
	// Window is how long to receive; 0 means DefaultProbeWindow.
	Window time.Duration
	// Interval is the heartbeat's interval, for the count of beats due
	// but never received; 0 means DefaultHeartbeatInterval.
	Interval time.Duration
	// ConnectTimeout bounds the dial and the subscription; 0 means
	// DefaultProbeConnectTimeout.
	ConnectTimeout time.Duration
	// Dial are the options the session is dialled with: the transport,
	// and how the relay's certificate is trusted (CertificateHash, a pin;
	// RootCAs; TrustHTTPHash).
	Dial Options
}

// ProbeResult is what a probe heard.
type ProbeResult struct {
	URL    string        // the relay, without token
	Window time.Duration // how long it received
	// Connect is how long the dial and the subscription took.
	Connect time.Duration
	// Groups counts the distinct heartbeat groups received.
	Groups int
	// FirstGroup is how long after the subscription the first group
	// came; 0 with none.
	FirstGroup time.Duration
	// FirstSeq and LastSeq are the smallest and largest sequence seen.
	FirstSeq, LastSeq uint64
	// Lost counts the sequences missing between FirstSeq and LastSeq,
	// plus the beats due by the end of the window after the last one
	// received (at Interval, half an interval's grace), or all those due
	// in the window when none came.
	Lost int
	// MaxGap and P99Gap are the largest and the 99th percentile time
	// between two groups' arrivals.
	MaxGap, P99Gap time.Duration
	// Duplicates counts groups whose sequence came before; Reordered,
	// groups that came after a larger sequence.
	Duplicates, Reordered int
	// Malformed counts groups whose frame is not a heartbeat frame of
	// their sequence.
	Malformed int
	// Ended says why the subscription ended before the window did ("" if
	// it did not).
	Ended string
}

// ProbeHeartbeat connects to one relay process, subscribes to the fleet
// heartbeat and receives it for opts.Window. Its error is for a probe
// that could not connect or subscribe (or whose ctx ended); hearing
// nothing is a result with no groups.
func ProbeHeartbeat(ctx context.Context, opts ProbeOptions) (ProbeResult, error) {
	res := ProbeResult{Window: cmpOr(opts.Window, DefaultProbeWindow)}
	interval := cmpOr(opts.Interval, DefaultHeartbeatInterval)
	u, err := url.Parse(opts.URL)
	if err != nil {
		return res, fmt.Errorf("probe: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return res, fmt.Errorf("probe %s: want an http:// or https:// URL", redact(u))
	}
	u.Path, u.RawPath = HeartbeatRoot, ""
	res.URL = redact(u)
	dial := opts.Dial
	began := time.Now()
	cctx, cancel := context.WithTimeout(ctx, cmpOr(opts.ConnectTimeout, DefaultProbeConnectTimeout))
	defer cancel()
	sess, err := Dial(cctx, u.String(), &dial)
	if err != nil {
		return res, fmt.Errorf("probe: %w", err)
	}
	defer sess.Close()
	sub, err := sess.Subscribe(cctx, HeartbeatBroadcast, HeartbeatTrack)
	if err != nil {
		return res, fmt.Errorf("probe %s: subscribe to the heartbeat: %w", res.URL, err)
	}
	defer sub.Close()
	start := time.Now()
	res.Connect = start.Sub(began)
	end := start.Add(res.Window)
	wctx, wcancel := context.WithDeadline(ctx, end)
	defer wcancel()

	var h hearing
	for {
		g, err := sub.NextGroup(wctx)
		if err != nil {
			if ctx.Err() != nil {
				return res, ctx.Err()
			}
			if wctx.Err() == nil {
				res.Ended = err.Error()
			}
			break
		}
		at := time.Now()
		stop := context.AfterFunc(wctx, g.Abort)
		f, ferr := g.ReadFrame()
		stop()
		g.Close()
		h.group(at, g.Sequence, ferr == nil && len(f) == HeartbeatFrameLen && binary.BigEndian.Uint64(f) == g.Sequence)
	}
	h.result(&res, start, end, interval)
	return res, nil
}

func cmpOr(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// hearing accumulates a probe's groups.
type hearing struct {
	seen      map[uint64]bool
	arrivals  []time.Time // of every group, in order
	min, max  uint64
	dup, reo  int
	malformed int
}

func (h *hearing) group(at time.Time, seq uint64, wellFormed bool) {
	if h.seen == nil {
		h.seen = make(map[uint64]bool)
		h.min, h.max = seq, seq
	}
	h.arrivals = append(h.arrivals, at)
	if !wellFormed {
		h.malformed++
	}
	switch {
	case h.seen[seq]:
		h.dup++
		return
	case seq < h.max:
		h.reo++
	}
	h.seen[seq] = true
	h.min, h.max = min(h.min, seq), max(h.max, seq)
}

// result fills in res for a window from start to end of a heartbeat
// every interval.
func (h *hearing) result(res *ProbeResult, start, end time.Time, interval time.Duration) {
	res.Groups = len(h.seen)
	res.Duplicates, res.Reordered, res.Malformed = h.dup, h.reo, h.malformed
	if res.Groups == 0 {
		res.Lost = int(end.Sub(start) / interval)
		return
	}
	res.FirstSeq, res.LastSeq = h.min, h.max
	res.FirstGroup = h.arrivals[0].Sub(start)
	gap := int(h.max-h.min+1) - res.Groups
	last := h.arrivals[len(h.arrivals)-1]
	due := max(0, int((end.Sub(last)-interval/2)/interval))
	res.Lost = gap + due
	var gaps []time.Duration
	for i := 1; i < len(h.arrivals); i++ {
		gaps = append(gaps, h.arrivals[i].Sub(h.arrivals[i-1]))
	}
	if len(gaps) > 0 {
		slices.Sort(gaps)
		res.MaxGap = gaps[len(gaps)-1]
		res.P99Gap = gaps[int(math.Ceil(0.99*float64(len(gaps))))-1]
	}
}

// String is the result on one line.
func (r ProbeResult) String() string {
	s := fmt.Sprintf("heartbeat %s: %d groups in %v (connect %v, first after %v), lost %d, max gap %v, p99 gap %v, %d duplicates, %d reordered",
		r.URL, r.Groups, r.Window, ms(r.Connect), ms(r.FirstGroup), r.Lost, ms(r.MaxGap), ms(r.P99Gap), r.Duplicates, r.Reordered)
	if r.Malformed > 0 {
		s += fmt.Sprintf(", %d malformed", r.Malformed)
	}
	if r.Ended != "" {
		s += ", ended: " + r.Ended
	}
	return s
}

func ms(d time.Duration) time.Duration { return d.Round(time.Millisecond) }

// MarshalJSON writes the result with durations in milliseconds.
func (r ProbeResult) MarshalJSON() ([]byte, error) {
	f := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	return json.Marshal(struct {
		URL          string  `json:"url"`
		WindowMS     float64 `json:"window_ms"`
		ConnectMS    float64 `json:"connect_ms"`
		Groups       int     `json:"groups"`
		FirstGroupMS float64 `json:"first_group_ms"`
		FirstSeq     uint64  `json:"first_seq"`
		LastSeq      uint64  `json:"last_seq"`
		Lost         int     `json:"lost"`
		MaxGapMS     float64 `json:"max_gap_ms"`
		P99GapMS     float64 `json:"p99_gap_ms"`
		Duplicates   int     `json:"duplicates"`
		Reordered    int     `json:"reordered"`
		Malformed    int     `json:"malformed"`
		Ended        string  `json:"ended,omitempty"`
	}{r.URL, f(r.Window), f(r.Connect), r.Groups, f(r.FirstGroup), r.FirstSeq, r.LastSeq, r.Lost,
		f(r.MaxGap), f(r.P99Gap), r.Duplicates, r.Reordered, r.Malformed, r.Ended})
}

// ProbeFlags are the values of relay probe's flags and its URL argument.
type ProbeFlags struct {
	URL, CertSHA256, CAFile, Transport, TokenFile string
	Window                                        time.Duration
	JSON, TrustHTTPHash                           bool
}

// ErrNoHeartbeat is returned by ProbeFlags.Run when no heartbeat group
// came within the window.
var ErrNoHeartbeat = errors.New("no heartbeat group received")

// Run is relay probe: it checks the flags, probes the relay at URL
// (ProbeHeartbeat) and prints the result on one line, or as JSON, to
// stdout; it fails (exit status 1) when no group came.
func (f *ProbeFlags) Run(ctx context.Context, stdout, stderr io.Writer) error {
	tok, err := ReadTokenFile("token-file", f.TokenFile)
	if err != nil {
		return err
	}
	if f.Transport != TransportQUIC && f.Transport != TransportWebSocket && f.Transport != TransportWebTransport {
		return cli.Usagef("--transport %q: want quic, websocket or webtransport", f.Transport)
	}
	if f.CertSHA256 != "" {
		if err := CheckHash(f.CertSHA256); err != nil {
			return cli.Usagef("--cert-sha256: %v", err)
		}
	}
	if err := CheckHashTrust(f.URL, f.CertSHA256, f.TrustHTTPHash); err != nil {
		return err
	}
	logger, _ := cli.NewLogger(stderr, "warn")
	o := ProbeOptions{URL: f.URL, Window: f.Window, Dial: Options{Transport: f.Transport, CertificateHash: f.CertSHA256,
		TrustHTTPHash: f.TrustHTTPHash, Logger: logger}}
	if f.CAFile != "" {
		pem, err := os.ReadFile(f.CAFile)
		if err != nil {
			return cli.Usagef("--ca: %v", err)
		}
		o.Dial.RootCAs = x509.NewCertPool()
		if !o.Dial.RootCAs.AppendCertsFromPEM(pem) {
			return cli.Usagef("--ca %s: no PEM certificates in it", f.CAFile)
		}
	}
	if tok != "" {
		if o.URL, err = WithToken(o.URL, tok); err != nil {
			return cli.Usagef("URL %q: %v", f.URL, err)
		}
	}
	res, err := ProbeHeartbeat(ctx, o)
	if err != nil {
		return err
	}
	if f.JSON {
		b, err := json.Marshal(res)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s\n", b)
	} else {
		fmt.Fprintln(stdout, res)
	}
	if res.Groups == 0 {
		return &cli.ExitError{Code: cli.ExitFailure, Msg: fmt.Sprintf("%s: %v in %v", res.URL, ErrNoHeartbeat, res.Window)}
	}
	return nil
}
