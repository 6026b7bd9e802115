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
)

// Stats is a snapshot of the relay, as served on /stats.
type Stats struct {
	Sessions      int   `json:"sessions"`
	SessionsTotal int64 `json:"sessions_total"`
	Publishers    int   `json:"publishers"`
	Subscribers   int64 `json:"subscribers"`
	Broadcasts    int   `json:"broadcasts"`
	Tracks        int   `json:"tracks"`
	GroupsIn      int64 `json:"groups_in"`
	FramesIn      int64 `json:"frames_in"`
	BytesIn       int64 `json:"bytes_in"`
	GroupsOut     int64 `json:"groups_out"`
	FramesOut     int64 `json:"frames_out"`
	BytesOut      int64 `json:"bytes_out"`
	// GroupsDropped counts groups subscribers lost for being too slow
	// (more than 16 groups behind).
	GroupsDropped int64 `json:"groups_dropped"`
	// Cluster links: tracks pulled from upstream relays, subscriptions
	// made upstream so far (re-subscriptions included), and whether the
	// upstream session is up.
	UpstreamTracks     int   `json:"upstream_tracks"`
	UpstreamSubscribes int64 `json:"upstream_subscribes_total"`
	UpstreamConnected  bool  `json:"upstream_connected"`
	// Memory budget and admission control: the budget (0: none), the Go
	// runtime's memory in use, the mark above which new sessions are
	// refused, whether sessions are admitted now, the session cap (0:
	// none), how many more listeners the relay expects to take (what the
	// router compares), sessions refused and sessions reaped so far.
	MemoryBudget    int64 `json:"memory_budget"`
	MemoryUsed      int64 `json:"memory_used"`
	MemoryHighWater int64 `json:"memory_high_water"`
	Admitting       bool  `json:"admitting"`
	Draining        bool  `json:"draining"`
	MaxSessions     int   `json:"max_sessions"`
	Headroom        int   `json:"headroom"`
	Refused         int64 `json:"refused_total"`
	Reaped          int64 `json:"reaped_total"`
	// SessionsOverloaded counts sessions closed for holding more buffered
	// frame bytes than their budget.
	SessionsOverloaded int64 `json:"sessions_overloaded_total"`
	// AnnouncesRefused counts announces refused for passing the
	// per-session broadcast cap or the path length cap.
	AnnouncesRefused int64 `json:"announces_refused_total"`
	// RefusedByReason splits refused_total: sessions refused at connect
	// (unauthorized, overloaded, draining, protocol) and requests refused
	// on open sessions (forbidden).
	RefusedByReason map[string]int64 `json:"refused_by_reason"`
	// UDP buffers: what was asked and what the kernel reports (SO_RCVBUF,
	// SO_SNDBUF, which Linux doubles).
	UDPBufferRequested int `json:"udp_buffer_requested"`
	UDPReceiveBuffer   int `json:"udp_receive_buffer"`
	UDPSendBuffer      int `json:"udp_send_buffer"`
	// The certificate served now: SHA-256 of its DER (what
	// /certificate.sha256 gives), its expiry, and the SHA-256 of its
	// public key (SubjectPublicKeyInfo), which stays across rotations
	// with a kept key.
	CertificateSHA256   string    `json:"certificate_sha256"`
	CertificateNotAfter time.Time `json:"certificate_not_after"`
	SPKISHA256          string    `json:"spki_sha256"`
	// TCP connections open now, and those closed at once for being past
	// Config.MaxConns so far.
	TCPConns        int   `json:"tcp_conns"`
	TCPConnsRefused int64 `json:"tcp_conns_refused_total"`

	// ShedTotal counts sessions closed with going-away (POST /shed, a
	// graceful stop).
	ShedTotal int64 `json:"shed_total"`
	// The UDP socket's own counters: datagrams the kernel dropped at it
	// (its receive buffer full; this socket's line in /proc/net/udp, not
	// the host's total) and writes that failed, by kind (eagain, enobufs,
	// other). Open sessions by transport (quic, webtransport, websocket),
	// and the net.core sysctls as this process reads them.
	UDPDrops            int64            `json:"udp_drops_total"`
	UDPSendErrors       map[string]int64 `json:"udp_send_errors"`
	SessionsByTransport map[string]int64 `json:"sessions_by_transport"`
	Sysctl              map[string]int64 `json:"sysctl,omitempty"`

	// UDP writes that succeeded (QUIC packets, a GSO train counting
	// once) and the system calls that made them: fewer with
	// Config.SendBatch, one sendmmsg carrying the packets of many
	// connections.
	UDPPacketsSent int64 `json:"udp_packets_sent_total"`
	UDPSendCalls   int64 `json:"udp_send_calls_total"`
}

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
	for _, b := range s.remote {
		st.UpstreamTracks += len(b.tracks)
	}
	s.mu.Unlock()
	if s.link != nil {
		st.UpstreamConnected = s.link.connected()
	}
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
	st.AnnouncesRefused = c.announcesRefused.Load()
	st.ShedTotal = c.sessionsShed.Load()
	st.SessionsByTransport = s.transports.byTransport()
	return st
}

// Stats returns a snapshot including the UDP buffers granted.
func (r *Relay) Stats() Stats {
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

func (r *Relay) registry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	gauge := func(name, help string, f func(Stats) float64) {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "relay", Name: name, Help: help},
			func() float64 { return f(r.Stats()) }))
	}
	counter := func(name, help string, f func(Stats) float64) {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "relay", Name: name, Help: help},
			func() float64 { return f(r.Stats()) }))
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
	reg.MustRegister(newRefusedCollector(r.Stats))
	r.registerSocketMetrics(reg)
	counter("sessions_reaped_total", "Silent sessions ended by the reaper.", func(s Stats) float64 { return float64(s.Reaped) })
	counter("announces_refused_total", "Announces refused: too many broadcasts on one session, or a path too long.", func(s Stats) float64 { return float64(s.AnnouncesRefused) })
	counter("sessions_overloaded_total", "Sessions closed for holding more buffered frame bytes than their budget.", func(s Stats) float64 { return float64(s.SessionsOverloaded) })
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
		if _, err := r.srv.auth.Authorize(req.URL); err != nil {
			r.srv.refused.refuse(ReasonUnauthorized, via, req.RemoteAddr, "err", err)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
	}
	admitted := false
	if isWT || isWS {
		if !r.srv.admit() {
			r.srv.refused.refuse(r.srv.admissionRefusal(), via, req.RemoteAddr)
			http.Error(w, "relay full", http.StatusServiceUnavailable)
			return
		}
		admitted = true
		defer func() {
			if admitted { // the upgrade failed: never served
				r.srv.abandon()
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
	if err := r.srv.serveSession(r.ctx, sess, req.URL, via, true); err != nil {
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
