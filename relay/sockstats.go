package relay

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/relayfleet/relayfleet/relay/internal/udpbatch"
)

// Send error kinds, as counted in /stats udp_send_errors and in the
// relay_udp_send_errors_total{kind} counter. Go's poller waits out EAGAIN
// on its own, so "eagain" stays zero unless a write deadline is set; a
// full device queue shows as "enobufs".
const (
	SendErrEAGAIN  = "eagain"
	SendErrENOBUFS = "enobufs"
	SendErrOther   = "other"
)

// SendErrorKinds lists every kind, in the order /metrics shows them.
var SendErrorKinds = []string{SendErrEAGAIN, SendErrENOBUFS, SendErrOther}

// sendErrors counts UDP writes, and the failed ones by kind.
type sendErrors struct {
	counts       [3]atomic.Int64
	writes, sent atomic.Int64
	// segmented counts writes with a GSO segment size (gso.go: none
	// unless QUIC_GO_DISABLE_GSO=false).
	segmented atomic.Int64
}

// count records a write's result (a closed socket's error is not counted
// as an error).
func (s *sendErrors) count(err error) {
	s.writes.Add(1)
	if err == nil {
		s.sent.Add(1)
		return
	}
	if errors.Is(err, net.ErrClosed) {
		return
	}
	s.counts[sendErrorIndex(err)].Add(1)
}

func sendErrorIndex(err error) int {
	switch {
	case errors.Is(err, syscall.EAGAIN):
		return 0
	case errors.Is(err, syscall.ENOBUFS):
		return 1
	}
	return 2
}

func (s *sendErrors) byKind() map[string]int64 {
	m := make(map[string]int64, len(SendErrorKinds))
	for i, k := range SendErrorKinds {
		m[k] = s.counts[i].Load()
	}
	return m
}

// countingConn is the UDP socket as quic-go sees it: every write goes
// through here and its errors are counted. It keeps *net.UDPConn's methods
// (ReadMsgUDP, SyscallConn, ...), so quic-go keeps its GSO and ECN paths.
//
// With batch set, writes go through it: packets from many connections
// leave in one sendmmsg, each still with its own result (errors counted
// per packet, as before).
type countingConn struct {
	*net.UDPConn
	batch *udpbatch.Conn
	errs  *sendErrors
}

func (c *countingConn) WriteMsgUDP(b, oob []byte, addr *net.UDPAddr) (n, oobn int, err error) {
	if len(oob) > 0 && hasSegmentSize(oob) {
		c.errs.segmented.Add(1)
	}
	if c.batch != nil {
		n, oobn, err = c.batch.WriteMsgUDP(b, oob, addr)
	} else {
		// The netip form: WriteMsgUDP allocates a sockaddr per packet.
		ap := addr.AddrPort()
		n, oobn, err = c.UDPConn.WriteMsgUDPAddrPort(b, oob, netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()))
	}
	c.errs.count(err)
	return n, oobn, err
}

func (c *countingConn) WriteTo(b []byte, addr net.Addr) (int, error) {
	var (
		n   int
		err error
	)
	if c.batch != nil {
		n, err = c.batch.WriteTo(b, addr)
	} else {
		n, err = c.UDPConn.WriteTo(b, addr)
	}
	c.errs.count(err)
	return n, err
}

// SysctlKeys are the kernel settings the relay reads back and exports
// (relay_sysctl{key}), so that monitoring sees a box whose buffers drifted
// from the fleet's profile: the story's drops began with these.
var SysctlKeys = []string{
	"net.core.rmem_default", "net.core.wmem_default",
	"net.core.rmem_max", "net.core.wmem_max",
	"net.core.netdev_max_backlog",
}

// readSysctls reads SysctlKeys under root (normally /proc/sys); a key that
// cannot be read or is not a number is left out.
func readSysctls(root string) map[string]int64 {
	m := make(map[string]int64, len(SysctlKeys))
	for _, k := range SysctlKeys {
		data, err := os.ReadFile(root + "/" + strings.ReplaceAll(k, ".", "/"))
		if err != nil {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
		if err != nil {
			continue
		}
		m[k] = n
	}
	return m
}

// labelledCollector exports one labelled metric from Stats.
type labelledCollector struct {
	desc   *prometheus.Desc
	typ    prometheus.ValueType
	labels []string
	values func(Stats) map[string]int64
	stats  func() Stats
}

func (c *labelledCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *labelledCollector) Collect(ch chan<- prometheus.Metric) {
	vals := c.values(c.stats())
	for _, l := range c.labels {
		v, ok := vals[l]
		if !ok {
			continue
		}
		ch <- prometheus.MustNewConstMetric(c.desc, c.typ, float64(v), l)
	}
}

// registerSocketMetrics adds the socket's drops and send errors, sessions
// by transport, the sysctls read back, and the process's own figures
// (process_cpu_seconds_total, process_resident_memory_bytes,
// process_start_time_seconds: CPU per listener, memory against the
// ceiling, restarts).
func (r *Relay) registerSocketMetrics(reg *prometheus.Registry, snap func() Stats) {
	reg.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "relay", Name: "udp_receive_drops_total",
		Help: "Datagrams the kernel dropped at this process's UDP socket (its receive buffer full): the drops column of /proc/net/udp for this socket."},
		func() float64 { return float64(snap().UDPDrops) }))
	reg.MustRegister(&labelledCollector{
		desc: prometheus.NewDesc("relay_udp_send_errors_total", "UDP writes that failed, by kind (eagain, enobufs, other).",
			[]string{"kind"}, nil),
		typ: prometheus.CounterValue, labels: SendErrorKinds, stats: snap,
		values: func(s Stats) map[string]int64 { return s.UDPSendErrors },
	})
	reg.MustRegister(&labelledCollector{
		desc: prometheus.NewDesc("relay_transport_sessions", "Open client sessions by transport (quic, webtransport, websocket).",
			[]string{"transport"}, nil),
		typ: prometheus.GaugeValue, labels: Transports, stats: snap,
		values: func(s Stats) map[string]int64 { return s.SessionsByTransport },
	})
	reg.MustRegister(&labelledCollector{
		desc: prometheus.NewDesc("relay_sysctl", "Kernel settings as the relay reads them in /proc/sys (the fleet's profile sets them).",
			[]string{"key"}, nil),
		typ: prometheus.GaugeValue, labels: SysctlKeys, stats: snap,
		values: func(s Stats) map[string]int64 { return s.Sysctl },
	})
}

// udpDrops is the socket's drop count; 0 when it cannot be read.
func (r *Relay) udpDrops() int64 {
	n, err := socketDrops(r.udp)
	if err != nil {
		r.dropsErr.Do(func() { r.logger.Warn("cannot read the UDP socket's drops", "err", err) })
		return 0
	}
	return n
}

// Transports names the session transports, in the order /metrics shows
// them.
var Transports = []string{viaQUIC, viaWebTransport, viaWebSocket}

// transportSessions counts open sessions by transport.
type transportSessions struct{ counts [3]atomic.Int64 }

func (t *transportSessions) add(via string, d int64) {
	for i, v := range Transports {
		if v == via {
			t.counts[i].Add(d)
			return
		}
	}
}

func (t *transportSessions) byTransport() map[string]int64 {
	m := make(map[string]int64, len(Transports))
	for i, v := range Transports {
		m[v] = t.counts[i].Load()
	}
	return m
}
