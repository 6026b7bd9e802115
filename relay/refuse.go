package relay

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Refusal reasons, as counted in /stats refused_by_reason and in the
// relay_sessions_refused_total{reason} counter.
const (
	// ReasonUnauthorized: no token where one is needed, a bad signature,
	// an expired token or key.
	ReasonUnauthorized = "unauthorized"
	// ReasonOverloaded: admission control (memory budget, session cap).
	ReasonOverloaded = "overloaded"
	// ReasonDraining: the operator drains the relay.
	ReasonDraining = "draining"
	// ReasonProtocol: a bad handshake, SETUP or version.
	ReasonProtocol = "protocol"
	// ReasonForbidden: an open session asked to publish or subscribe
	// outside what its token (or the public prefixes) allow.
	ReasonForbidden = "forbidden"
)

// RefusalReasons lists every reason, in the order /metrics shows them.
var RefusalReasons = []string{ReasonUnauthorized, ReasonOverloaded, ReasonDraining, ReasonProtocol, ReasonForbidden}

// Transports, as named in refusal log lines.
const (
	viaQUIC         = "quic"
	viaWebTransport = "webtransport"
	viaWebSocket    = "websocket"
)

// refusalLogsPerSecond caps refusal log lines: a flood of refused
// connections must not fill the disk. Refusals over the cap are counted
// and summed up in one line at the end of the second.
const refusalLogsPerSecond = 20

// refusals counts refusals per reason and logs them, rate-limited.
type refusals struct {
	logger *slog.Logger
	counts [5]atomic.Int64 // indexed as RefusalReasons

	mu         sync.Mutex
	window     time.Time // start of the current one-second window
	logged     int       // lines logged in the window
	suppressed int64     // refusals not logged in the window
	flushing   bool      // a summary is scheduled
}

func reasonIndex(reason string) int {
	for i, r := range RefusalReasons {
		if r == reason {
			return i
		}
	}
	panic("relay: unknown refusal reason " + reason)
}

// refuse counts one refusal and logs it at Info with its reason, the
// transport, the remote address and attrs (never a token).
func (r *refusals) refuse(reason, via, remote string, attrs ...any) {
	// Counted last: whoever sees the count finds the log line written.
	defer r.counts[reasonIndex(reason)].Add(1)
	now := time.Now()
	r.mu.Lock()
	if now.Sub(r.window) >= time.Second {
		r.window, r.logged = now, 0
	}
	if r.logged >= refusalLogsPerSecond {
		r.suppressed++
		if !r.flushing {
			r.flushing = true
			time.AfterFunc(time.Second-now.Sub(r.window), r.flush)
		}
		r.mu.Unlock()
		return
	}
	r.logged++
	r.mu.Unlock()
	r.logger.Info("refused", append([]any{"reason", reason, "transport", via, "remote", remote}, attrs...)...)
}

// flush logs how many refusals the last window did not log.
func (r *refusals) flush() {
	r.mu.Lock()
	n := r.suppressed
	r.suppressed, r.flushing = 0, false
	r.window, r.logged = time.Now(), 1
	r.mu.Unlock()
	if n > 0 {
		r.logger.Info("suppressed refusals", "count", n, "limit_per_second", refusalLogsPerSecond)
	}
}

// byReason returns the counts per reason and their sum.
func (r *refusals) byReason() (map[string]int64, int64) {
	m := make(map[string]int64, len(RefusalReasons))
	var sum int64
	for i, reason := range RefusalReasons {
		n := r.counts[i].Load()
		m[reason] = n
		sum += n
	}
	return m, sum
}

// refuseAdmission counts and logs a session admit refused for cause:
// ReasonDraining while draining, ReasonOverloaded otherwise (memory, the
// session cap, the cap per address), the cause in the log line.
func (s *Server) refuseAdmission(cause, via, remote string) {
	reason := ReasonOverloaded
	if cause == causeDraining {
		reason = ReasonDraining
	}
	s.refused.refuse(reason, via, remote, "cause", cause)
}

// refusedCollector exports relay_sessions_refused_total{reason}.
type refusedCollector struct {
	desc  *prometheus.Desc
	stats func() Stats
}

func newRefusedCollector(stats func() Stats) *refusedCollector {
	return &refusedCollector{
		desc: prometheus.NewDesc("relay_sessions_refused_total",
			"Sessions and requests refused, by reason (unauthorized, overloaded, draining, protocol, forbidden).",
			[]string{"reason"}, nil),
		stats: stats,
	}
}

func (c *refusedCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *refusedCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.stats()
	for _, reason := range RefusalReasons {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(st.RefusedByReason[reason]), reason)
	}
}
