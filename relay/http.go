package relay

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/relayfleet/relayfleet/relay/transport"
	"github.com/relayfleet/relayfleet/relay/wire"
)

// Stats is a snapshot of the relay, as served on /stats: the wire type
// every reader of /stats decodes (package relay/wire).
type Stats = wire.Stats

// Stats returns the core's counters; the UDP fields are zero.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	st := Stats{Sessions: len(s.sessions), Broadcasts: len(s.broadcasts)}
	admitted := st.Sessions + s.pending // what admission counts
	pubs := make(map[*session]struct{})
	for _, b := range s.broadcasts {
		pubs[b.owner] = struct{}{}
		st.Tracks += len(b.tracks)
	}
	st.Publishers = len(pubs)
	pulls := make([]int, len(s.links))
	for _, b := range s.remote {
		st.UpstreamTracks += len(b.tracks)
		for _, t := range b.tracks {
			if i := t.upstream.Load(); i > 0 {
				pulls[i-1]++
				if st.UpstreamPulls == nil {
					st.UpstreamPulls = make(map[string]string)
				}
				st.UpstreamPulls[b.path] = s.links[i-1].urls[0]
			}
		}
	}
	s.mu.Unlock()
	for i, l := range s.links {
		up := l.connected()
		st.UpstreamConnected = st.UpstreamConnected || up
		st.Upstreams = append(st.Upstreams, wire.Upstream{URL: l.urls[0], Connected: up, Tracks: pulls[i],
			Groups: l.pulledGroups.Load(), Bytes: l.pulledBytes.Load()})
	}
	st.UpstreamFailovers = s.counters.upstreamFailovers.Load()
	st.UpstreamSubscribes = s.counters.upstreamSubscribes.Load()
	a := s.adm
	st.MemoryBudget, st.MemoryUsed, st.MemoryHighWater = a.budget, a.used.Load(), a.highWater
	st.Admitting, st.MaxSessions, st.Headroom = a.admit(admitted), a.maxSessions, a.headroom(admitted)
	st.Draining = a.draining.Load()
	st.RefusedByReason, st.Refused = s.refused.byReason()
	st.Reaped = a.reaped.Load()
	c := &s.counters
	st.SessionsTotal = c.sessionsTotal.Load()
	st.Subscribers = c.subscribers.Load()
	st.GroupsIn = c.groupsIn.Load()
	st.FramesIn = c.framesIn.Load()
	st.BytesIn = c.bytesIn.Load()
	st.GroupsOut = c.groupsOut.Load()
	st.FramesOut = c.framesOut.Load()
	st.BytesOut = c.bytesOut.Load()
	st.GroupsDropped = c.groupsDropped.Load()
	st.SessionsOverloaded = c.sessionsOverloaded.Load()
	st.StreamsRefused, st.StreamsTimedOut = c.streamsRefused.Load(), c.streamsTimedOut.Load()
	st.AnnouncesRefused = c.announcesRefused.Load()
	st.ShedTotal = c.sessionsShed.Load()
	st.SessionsByTransport = s.transports.byTransport()
	return st
}

// Stats returns a snapshot including the UDP buffers granted.
func (r *Relay) Stats() Stats {
	r.snapshots.Add(1)
	st := r.srv.Stats()
	st.UDPBufferRequested = r.bufAsked
	st.UDPReceiveBuffer = r.bufRcv
	st.UDPSendBuffer = r.bufSnd
	if ci := r.certs.info(); ci != nil {
		st.CertificateSHA256, st.CertificateNotAfter, st.SPKISHA256 = ci.hash, ci.notAfter, ci.spki
	}
	st.TCPConns, st.TCPConnsRefused = r.conns.Open(), r.conns.Refused()
	st.UDPDrops, st.UDPSendErrors = r.udpDrops(), r.sendErrs.byKind()
	st.UDPPacketsSent, st.UDPSendCalls = r.sendErrs.sent.Load(), r.sendErrs.writes.Load()
	if r.batch != nil {
		st.UDPSendCalls, _ = r.batch.Stats()
	}
	st.Sysctl = readSysctls("/proc/sys")
	return st
}

// metricsMaxAge is how long a /metrics snapshot serves: every metric of
// a scrape, and of scrapes within it, reads the same one.
const metricsMaxAge = time.Second

// snapshotCache hands out one Stats snapshot for up to metricsMaxAge.
type snapshotCache struct {
	take func() Stats
	now  func() time.Time

	mu    sync.Mutex
	taken time.Time
	st    Stats
}

// get returns the cached snapshot, taking a new one when it is older than
// metricsMaxAge. Callers must not modify its maps.
func (c *snapshotCache) get() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now := c.now(); c.taken.IsZero() || now.Sub(c.taken) >= metricsMaxAge {
		c.st, c.taken = c.take(), now
	}
	return c.st
}

// registry is the /metrics registry: every metric reads one snapshot per
// scrape (a Stats reads sysctls and /proc/self/net/udp*), cached for
// metricsMaxAge of the relay's clock (Config.Now).
func (r *Relay) registry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	snap := (&snapshotCache{take: r.Stats, now: r.certs.now}).get
	gauge := func(name, help string, f func(Stats) float64) {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "relay", Name: name, Help: help},
			func() float64 { return f(snap()) }))
	}
	counter := func(name, help string, f func(Stats) float64) {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "relay", Name: name, Help: help},
			func() float64 { return f(snap()) }))
	}
	gauge("sessions", "Open client sessions.", func(s Stats) float64 { return float64(s.Sessions) })
	gauge("publishers", "Sessions publishing at least one broadcast.", func(s Stats) float64 { return float64(s.Publishers) })
	gauge("subscribers", "Open downstream subscriptions.", func(s Stats) float64 { return float64(s.Subscribers) })
	gauge("broadcasts", "Announced broadcasts.", func(s Stats) float64 { return float64(s.Broadcasts) })
	gauge("tracks", "Tracks pulled from publishers.", func(s Stats) float64 { return float64(s.Tracks) })
	counter("sessions_total", "Sessions accepted.", func(s Stats) float64 { return float64(s.SessionsTotal) })
	counter("groups_received_total", "Groups received from publishers.", func(s Stats) float64 { return float64(s.GroupsIn) })
	counter("frames_received_total", "Frames received from publishers.", func(s Stats) float64 { return float64(s.FramesIn) })
	counter("bytes_received_total", "Frame payload bytes received from publishers.", func(s Stats) float64 { return float64(s.BytesIn) })
	counter("groups_sent_total", "Groups delivered completely to subscribers.", func(s Stats) float64 { return float64(s.GroupsOut) })
	counter("frames_sent_total", "Frames sent to subscribers.", func(s Stats) float64 { return float64(s.FramesOut) })
	counter("groups_dropped_total", "Groups subscribers lost for being too slow.", func(s Stats) float64 { return float64(s.GroupsDropped) })
	counter("bytes_sent_total", "Frame payload bytes sent to subscribers.", func(s Stats) float64 { return float64(s.BytesOut) })
	gauge("upstream_tracks", "Tracks pulled from upstream relays.", func(s Stats) float64 { return float64(s.UpstreamTracks) })
	counter("upstream_failovers_total", "Pulled tracks moved to another upstream because theirs went silent or away.", func(s Stats) float64 { return float64(s.UpstreamFailovers) })
	reg.MustRegister(newUpstreamCollector(snap))
	counter("upstream_subscribes_total", "Subscriptions made to upstream relays, re-subscriptions included.", func(s Stats) float64 { return float64(s.UpstreamSubscribes) })
	gauge("memory_budget_bytes", "Memory budget (0: none).", func(s Stats) float64 { return float64(s.MemoryBudget) })
	gauge("memory_used_bytes", "Memory the Go runtime holds, as last sampled.", func(s Stats) float64 { return float64(s.MemoryUsed) })
	gauge("memory_high_water_bytes", "Memory above which new sessions are refused.", func(s Stats) float64 { return float64(s.MemoryHighWater) })
	gauge("admitting", "1 while new sessions are admitted.", func(s Stats) float64 {
		if s.Admitting {
			return 1
		}
		return 0
	})
	gauge("headroom", "Listeners the relay expects to take still.", func(s Stats) float64 { return float64(s.Headroom) })
	reg.MustRegister(newRefusedCollector(snap))
	r.registerSocketMetrics(reg, snap)
	counter("sessions_reaped_total", "Silent sessions ended by the reaper.", func(s Stats) float64 { return float64(s.Reaped) })
	counter("announces_refused_total", "Announces refused: too many broadcasts on one session, or a path too long.", func(s Stats) float64 { return float64(s.AnnouncesRefused) })
	counter("sessions_overloaded_total", "Sessions closed for holding more buffered frame bytes than their budget.", func(s Stats) float64 { return float64(s.SessionsOverloaded) })
	counter("streams_refused_total", "Streams reset as they opened: under memory pressure, or past the caps on streams awaiting their first message.", func(s Stats) float64 { return float64(s.StreamsRefused) })
	counter("streams_timed_out_total", "Streams reset for carrying no request within the first-message deadline.", func(s Stats) float64 { return float64(s.StreamsTimedOut) })
	counter("sessions_shed_total", "Sessions closed with going-away (POST /shed, graceful stop).", func(s Stats) float64 { return float64(s.ShedTotal) })
	gauge("udp_receive_buffer_bytes", "UDP receive buffer granted by the kernel (SO_RCVBUF).", func(s Stats) float64 { return float64(s.UDPReceiveBuffer) })
	gauge("udp_send_buffer_bytes", "UDP send buffer granted by the kernel (SO_SNDBUF).", func(s Stats) float64 { return float64(s.UDPSendBuffer) })
	gauge("udp_buffer_requested_bytes", "UDP buffer size the relay asked for.", func(s Stats) float64 { return float64(s.UDPBufferRequested) })
	gauge("certificate_expiry_timestamp_seconds", "When the certificate served now expires, in Unix seconds (0: none yet).", func(s Stats) float64 {
		if s.CertificateNotAfter.IsZero() {
			return 0
		}
		return float64(s.CertificateNotAfter.Unix())
	})
	return reg
}

// handler serves the TCP side (and HTTP/3 requests): the informational
// endpoints, and WebSocket or WebTransport sessions on any other path.
func (r *Relay) handler(withPprof bool) http.Handler {
	mux := http.NewServeMux()
	if withPprof {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	handleTestAlloc(mux)
	mux.HandleFunc("GET /certificate.sha256", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Access-Control-Allow-Origin", "*")
		_, _ = w.Write([]byte(r.CertificateHash()))
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		if r.ctx.Err() != nil || r.stopping.Load() {
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Access-Control-Allow-Origin", "*")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(r.Stats())
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(r.registry(), promhttp.HandlerOpts{}))
	listenRoutes(mux) // GET /listen, /listen.js: listenpage.go
	// Draining: POST /drain stops admitting new sessions (the router sees
	// headroom 0 and sends new listeners elsewhere) while open sessions are
	// served on; DELETE /drain admits again. Only from the box itself: the
	// fleet tool asks over SSH during a rolling restart.
	drain := func(on bool) http.HandlerFunc {
		return func(w http.ResponseWriter, req *http.Request) {
			if !fromLoopback(req) {
				http.Error(w, "drain is only accepted from the box itself", http.StatusForbidden)
				return
			}
			r.srv.adm.draining.Store(on)
			_, _ = fmt.Fprintf(w, "draining=%v\n", on)
		}
	}
	mux.HandleFunc("POST /drain", drain(true))
	mux.HandleFunc("DELETE /drain", drain(false))
	// Shedding: POST /shed?n=N|all[&rate=R][&grace=D] closes sessions
	// with going-away, after a notice and a grace (shed.go). Only from the box itself, like /drain.
	mux.HandleFunc("POST /shed", r.serveShed)
	mux.HandleFunc("/", r.serveSession)
	return mux
}

// fromLoopback says whether a request came from this machine.
func fromLoopback(req *http.Request) bool {
	host, _, err := net.SplitHostPort(req.RemoteAddr)
	if err != nil {
		return false
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

func (r *Relay) serveSession(w http.ResponseWriter, req *http.Request) {
	r.srv.wg.Add(1)
	defer r.srv.wg.Done()
	isWT := req.Method == http.MethodConnect && req.ProtoMajor == 3
	isWS := strings.EqualFold(req.Header.Get("Upgrade"), "websocket")
	via := viaWebSocket
	if isWT {
		via = viaWebTransport
	}
	if (isWT || isWS) && r.srv.auth != nil {
		// Refuse before upgrading; ServeSession checks again.
		perms, err := r.srv.auth.Authorize(req.URL)
		if err == nil && r.srv.revoked(perms) {
			err = errors.New(reasonRevoked)
		}
		if err != nil {
			r.srv.refused.refuse(ReasonUnauthorized, via, req.RemoteAddr, "err", err)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
	}
	admitted := false
	from := r.srv.capKey(req.RemoteAddr)
	if isWT || isWS {
		if cause := r.srv.admit(from); cause != "" {
			r.srv.refuseAdmission(cause, via, req.RemoteAddr)
			http.Error(w, "relay full", http.StatusServiceUnavailable)
			return
		}
		admitted = true
		defer func() {
			if admitted { // the upgrade failed: never served
				r.srv.abandon(from)
			}
		}()
	}
	var sess transport.Session
	switch {
	case isWT:
		s, err := r.wt.Upgrade(w, req)
		if err != nil {
			r.srv.refused.refuse(ReasonProtocol, via, req.RemoteAddr, "err", err)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		sess = transport.NewWebTransport(s)
	case isWS:
		s, err := transport.AcceptWebSocket(w, req)
		if err != nil {
			r.srv.refused.refuse(ReasonProtocol, via, req.RemoteAddr, "err", err)
			return
		}
		sess = s
	default:
		http.NotFound(w, req)
		return
	}
	admitted = false // serveSession ends the admission
	if err := r.srv.serveSession(r.ctx, sess, req.URL, via, true, from); err != nil {
		r.logger.Debug("session", "err", err)
	}
}

// sniffListener serves plain HTTP and TLS on one TCP port: a connection
// whose first byte is a TLS handshake record gets TLS.
type sniffListener struct {
	net.Listener
	timeout time.Duration // for the first byte
	tlsConf *tls.Config
	conns   chan net.Conn
	done    chan struct{}
	once    sync.Once
}

func newSniffListener(l net.Listener, tc *tls.Config, timeout time.Duration) net.Listener {
	tc = tc.Clone()
	tc.NextProtos = tcpProtos(tc.NextProtos)
	s := &sniffListener{Listener: l, timeout: timeout, tlsConf: tc, conns: make(chan net.Conn), done: make(chan struct{})}
	go s.run()
	return s
}

func (s *sniffListener) run() {
	for {
		c, err := s.Listener.Accept()
		if err != nil {
			s.close()
			return
		}
		go s.sniff(c)
	}
}

func (s *sniffListener) sniff(c net.Conn) {
	_ = c.SetReadDeadline(time.Now().Add(s.timeout))
	br := bufio.NewReader(c)
	first, err := br.Peek(1)
	_ = c.SetReadDeadline(time.Time{})
	if err != nil {
		c.Close()
		return
	}
	var out net.Conn = &peekedConn{Conn: c, r: br}
	if first[0] == 0x16 {
		out = tls.Server(out, s.tlsConf)
	}
	select {
	case s.conns <- out:
	case <-s.done:
		c.Close()
	}
}

func (s *sniffListener) close() { s.once.Do(func() { close(s.done) }) }

func (s *sniffListener) Accept() (net.Conn, error) {
	select {
	case c := <-s.conns:
		return c, nil
	case <-s.done:
		return nil, net.ErrClosed
	}
}

func (s *sniffListener) Close() error {
	s.close()
	err := s.Listener.Close()
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

type peekedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *peekedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// upstreamCollector exports, per upstream URL, whether its link is up,
// how many pulled tracks use it now (relay_upstream_connected,
// relay_upstream_pulled_tracks: which origin an edge pulls from) and the
// groups and frame bytes pulled over it so far (relay_upstream_groups_total,
// relay_upstream_bytes_total: on a region's origins, the long-haul
// traffic from the publishers' region).
type upstreamCollector struct {
	snap                            func() Stats
	connected, pulls, groups, bytes *prometheus.Desc
}

func newUpstreamCollector(snap func() Stats) *upstreamCollector {
	return &upstreamCollector{snap: snap,
		connected: prometheus.NewDesc("relay_upstream_connected", "1 while the link to this upstream is up.", []string{"upstream"}, nil),
		pulls:     prometheus.NewDesc("relay_upstream_pulled_tracks", "Tracks pulled from this upstream now.", []string{"upstream"}, nil),
		groups:    prometheus.NewDesc("relay_upstream_groups_total", "Groups pulled over the link to this upstream.", []string{"upstream"}, nil),
		bytes:     prometheus.NewDesc("relay_upstream_bytes_total", "Frame payload bytes pulled over the link to this upstream (between regions: the long-haul traffic).", []string{"upstream"}, nil),
	}
}

func (c *upstreamCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.connected
	ch <- c.pulls
	ch <- c.groups
	ch <- c.bytes
}

func (c *upstreamCollector) Collect(ch chan<- prometheus.Metric) {
	for _, u := range c.snap().Upstreams {
		up := 0.0
		if u.Connected {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(c.connected, prometheus.GaugeValue, up, u.URL)
		ch <- prometheus.MustNewConstMetric(c.pulls, prometheus.GaugeValue, float64(u.Tracks), u.URL)
		ch <- prometheus.MustNewConstMetric(c.groups, prometheus.CounterValue, float64(u.Groups), u.URL)
		ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.CounterValue, float64(u.Bytes), u.URL)
	}
}
