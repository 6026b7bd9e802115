package relay

import (
	"context"
	"net/netip"
	"runtime/metrics"
	"sync/atomic"
	"time"

	"github.com/relayfleet/relayfleet/relay/transport"
)

// Memory budget, admission control and the reaper.
//
// The budget is Config.MemoryBudget or the cgroup's memory limit, the
// smaller of the two. Run sets the Go soft memory limit (debug.
// SetMemoryLimit) to softLimitFraction of it, so the collector works harder
// before the kernel kills. Admission control refuses new sessions while the
// memory the Go runtime holds (the quantity the soft limit governs) is above
// highWaterFraction of the budget, until it falls below lowWaterFraction,
// while MaxSessions are open, and while MaxSessionsPerAddress are open from
// the session's source address (addressKey). Refused raw-QUIC sessions are
// closed with codeOverloaded, WebSocket and WebTransport requests get 503.
// Open sessions' new bidirectional streams are refused (reset with
// codeOverloaded) while memory is above the high-water mark, until it
// falls below the low one, and while too many wait for their first
// message (acceptBidi; awaiting in server.go).
//
// The reaper is one goroutine on a ticker. Each sweep reads every QUIC
// and WebSocket session's received-packet counter (an atomic in quic-go;
// messages and pongs for WebSocket) and cancels a session that received
// nothing for ReapAfter (a third of that under memory pressure). A live
// QUIC peer always sends something within the keep-alive period: ACKs of
// the audio, or of the relay's keep-alive PINGs. A WebSocket listener
// sends nothing of its own, so a session silent for a third of ReapAfter
// is pinged (keepAliver), and a live peer's pong arrives in time. The sweep
// needs no per-session goroutine to run to find a dead session, costs a few
// atomic loads per session, and cancelling is non-blocking: it drops the
// session's subscriptions and queued groups at once, while the session's
// own goroutine closes the connection when it next runs. Go's scheduler is
// preemptive and runs a ready timer goroutine within a few time slices
// however busy the other goroutines are, so CPU saturation delays a sweep
// by milliseconds, not indefinitely; QUIC's own idle timeout is the second
// layer. Slow or frozen subscribers also cannot pile up data meanwhile:
// each holds at most maxInflightGroups group streams.

const (
	softLimitFraction = 0.90
	highWaterFraction = 0.80
	lowWaterFraction  = 0.75

	// DefaultReapAfter is how long a session may receive nothing.
	DefaultReapAfter = 15 * time.Second
	sweepEvery       = time.Second

	// DefaultListenerBytes is the memory one listener is assumed to need
	// when turning the memory left into headroom.
	DefaultListenerBytes = 100 << 10
	// socketCeiling is the listeners one UDP socket drains (README.md,
	// "What it is, in five lines"; docs/benchmarks.md measures it):
	// the headroom of a relay with no other limit.
	socketCeiling = 6500
	// measureFrom is how many sessions the relay needs open before it
	// trusts its own memory per session (growth since it started, over
	// the sessions) over DefaultListenerBytes for its headroom.
	measureFrom = 50
)

// admission holds the budget, the last memory sample and the counters.
type admission struct {
	budget      int64
	highWater   int64
	lowWater    int64
	maxSessions int
	// maxPerAddress caps the sessions admitted from one source address
	// (addressKey); 0 means no cap.
	maxPerAddress int
	perListener   int64
	reapAfter     time.Duration
	usage         func() uint64

	used atomic.Int64
	// base is the memory in use when the relay started, before any
	// session: what the sessions' memory is measured from.
	base int64
	// fresh counts sessions the last memory sample cannot include: those
	// admitted since it, and those still in their handshake when it was
	// taken. Each is assumed to need perListener, so that a reconnect
	// storm inside one sample cannot pass the high-water mark.
	fresh    atomic.Int64
	pressure atomic.Bool // above the high-water mark (until the low one)
	// draining refuses new sessions while the operator moves listeners
	// off this process (a rolling restart); open ones keep being served.
	draining atomic.Bool
	reaped   atomic.Int64
}

func newAdmission(budget int64, maxSessions, maxPerAddress int, reapAfter time.Duration, usage func() uint64) *admission {
	a := &admission{budget: budget, maxSessions: maxSessions, maxPerAddress: maxPerAddress, perListener: DefaultListenerBytes, reapAfter: reapAfter, usage: usage}
	if a.reapAfter <= 0 {
		a.reapAfter = DefaultReapAfter
	}
	if a.usage == nil {
		a.usage = goMemory
	}
	if budget > 0 {
		a.highWater = int64(float64(budget) * highWaterFraction)
		a.lowWater = int64(float64(budget) * lowWaterFraction)
	}
	a.sample()
	a.base = a.used.Load()
	return a
}

var goMemorySamples = []metrics.Sample{
	{Name: "/memory/classes/total:bytes"},
	{Name: "/memory/classes/heap/released:bytes"},
}

// goMemory is what the Go soft memory limit counts: everything the runtime
// mapped, less what it returned to the kernel.
func goMemory() uint64 {
	s := make([]metrics.Sample, len(goMemorySamples))
	copy(s, goMemorySamples)
	metrics.Read(s)
	return s[0].Value.Uint64() - s[1].Value.Uint64()
}

// sample reads the memory in use and updates the pressure flag.
func (a *admission) sample() {
	u := int64(a.usage())
	a.used.Store(u)
	if a.budget <= 0 {
		return
	}
	switch {
	case u >= a.highWater:
		a.pressure.Store(true)
	case u < a.lowWater:
		a.pressure.Store(false)
	}
}

// Causes of an admission refusal, as logged (cause=); admissionReason
// turns them into the counted reasons.
const (
	causeDraining = "draining"
	causeSessions = "session cap"
	causeMemory   = "memory"
	causeAddress  = "sessions per address"
)

// refusal says why a new session may not start now ("" when it may),
// given how many are open or admitted and still in their handshake.
func (a *admission) refusal(sessions int) string {
	switch {
	case a.draining.Load():
		return causeDraining
	case a.maxSessions > 0 && sessions >= a.maxSessions:
		return causeSessions
	case a.budget > 0 && a.used.Load()+(a.fresh.Load()+1)*a.perListener > a.highWater:
		return causeMemory
	case a.pressure.Load():
		return causeMemory
	}
	return ""
}

// admit reports whether a new session may start, given how many are open
// or admitted and still in their handshake.
func (a *admission) admit(sessions int) bool { return a.refusal(sessions) == "" }

// headroom is how many more listeners the relay expects to take.
func (a *admission) headroom(sessions int) int {
	if !a.admit(sessions) {
		return 0
	}
	h := socketCeiling - sessions
	if a.maxSessions > 0 {
		h = a.maxSessions - sessions
	}
	if a.budget > 0 {
		h = min(h, int((a.highWater-a.used.Load())/a.perSession(sessions)-a.fresh.Load()))
	}
	return max(h, 0)
}

// perSession is the memory one more listener is expected to take: what
// each open session has taken so far (growth since the relay started,
// over the sessions), once there are enough to tell, and never less than
// DefaultListenerBytes. The measured figure (170-340 KiB per listener,
// docs/benchmarks.md) is well above the default: headroom from the
// default alone promised about twice the listeners the budget holds.
func (a *admission) perSession(sessions int) int64 {
	per := a.perListener
	if sessions >= measureFrom {
		per = max(per, (a.used.Load()-a.base)/int64(sessions))
	}
	return per
}

// admit is called for every new session, from source address addr (see
// addressKey), before it is served; it returns why the session is
// refused, or "" when it is admitted. An admitted session counts against
// the caps from here: the caller must end it with exactly one of setUp
// (registered) or abandon (gone before that), and a registered one with
// leave. A refused session is the caller's to count (refuseAdmission).
func (s *Server) admit(addr netip.Addr) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cause := s.adm.refusal(len(s.sessions) + s.pending); cause != "" {
		return cause
	}
	if m := s.adm.maxPerAddress; m > 0 && addr.IsValid() && s.perAddress[addr] >= m {
		return causeAddress
	}
	s.pending++
	s.adm.fresh.Add(1)
	if addr.IsValid() {
		s.perAddress[addr]++
	}
	return ""
}

// abandon ends an admission whose session never got registered.
func (s *Server) abandon(addr netip.Addr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pending--
	if s.adm.fresh.Load() > 0 {
		s.adm.fresh.Add(-1)
	}
	s.leaveLocked(addr)
}

// leave gives back the place of an admitted session from addr that ended.
func (s *Server) leave(addr netip.Addr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.leaveLocked(addr)
}

func (s *Server) leaveLocked(addr netip.Addr) {
	if !addr.IsValid() {
		return
	}
	if s.perAddress[addr]--; s.perAddress[addr] <= 0 {
		delete(s.perAddress, addr)
	}
}

// addressKey is the source address sessions are counted by for
// MaxSessionsPerAddress, from a remote address as HOST:PORT: the IPv4
// address, or the /64 an IPv6 address is in (what one subscriber line
// is commonly given); the zero Addr, counted by no cap, when it does not
// parse.
func addressKey(remote string) netip.Addr {
	ap, err := netip.ParseAddrPort(remote)
	if err != nil {
		return netip.Addr{}
	}
	a := ap.Addr().Unmap()
	if a.Is6() {
		p, _ := a.WithZone("").Prefix(64)
		return p.Addr()
	}
	return a
}

// capKey is addressKey(remote), or the zero Addr, which no per-address
// cap counts, when remote is one of the server's uncapped addresses.
func (s *Server) capKey(remote string) netip.Addr {
	if len(s.uncapped) > 0 {
		if ap, err := netip.ParseAddrPort(remote); err == nil {
			a := ap.Addr().Unmap().WithZone("")
			for _, p := range s.uncapped {
				if p.Contains(a) {
					return netip.Addr{}
				}
			}
		}
	}
	return addressKey(remote)
}

// packetCounter is implemented by transports that count received packets
// (raw QUIC; WebSocket counts messages).
type packetCounter interface{ PacketsReceived() uint64 }

// keepAliver is implemented by transports whose peer sends nothing of its
// own while it listens (WebSocket): KeepAlive asks it for something (a
// ping, whose pong counts in PacketsReceived) without waiting.
type keepAliver interface{ KeepAlive() }

var _ packetCounter = transport.NewQUIC(nil).(packetCounter)

// RunReaper samples memory and reaps dead sessions every second until ctx
// ends. Relay runs it; a bare Server needs it started.
func (s *Server) RunReaper(ctx context.Context) {
	t := time.NewTicker(sweepEvery)
	defer t.Stop()
	var list []*session
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			list = s.sweep(now, list[:0])
		}
	}
}

// sweep is one pass of the reaper; list is scratch space, returned for reuse.
func (s *Server) sweep(now time.Time, list []*session) []*session {
	a := s.adm
	s.mu.Lock()
	a.sample()
	// The sample includes the registered sessions, not the ones still in
	// their handshake.
	a.fresh.Store(int64(s.pending))
	s.mu.Unlock()
	after := a.reapAfter
	if a.pressure.Load() {
		after /= 3
	}
	s.mu.Lock()
	for sess := range s.sessions {
		list = append(list, sess)
	}
	s.mu.Unlock()
	for _, sess := range list {
		pc, ok := sess.t.(packetCounter)
		if !ok || sess.reaped {
			continue
		}
		n := pc.PacketsReceived()
		if n != sess.sweepPackets || sess.sweepSeen.IsZero() {
			sess.sweepPackets, sess.sweepSeen = n, now
			continue
		}
		silent := now.Sub(sess.sweepSeen)
		if ka, ok := sess.t.(keepAliver); ok && silent >= after/3 && silent < after {
			ka.KeepAlive() // a live peer answers before the reaper's turn
		}
		if silent >= after {
			sess.reaped = true
			a.reaped.Add(1)
			sess.log.Info("reaping silent session", "silent", now.Sub(sess.sweepSeen).Round(time.Millisecond))
			sess.cancel()
		}
	}
	clear(list)
	return list
}
