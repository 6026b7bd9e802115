package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/relayfleet/relayfleet/relay/moqlite"
	"github.com/relayfleet/relayfleet/relay/transport"
)

// Shedding: the relay asks clients to reconnect elsewhere now by closing
// their sessions with moqlite.CodeGoingAway (QUIC and WebTransport: the
// session close code; WebSocket: the qmux close frame carries it, and the
// WebSocket closes with status 1001). A client that sees it goes back to
// the router (avoiding this relay) at once, instead of waiting for silence.
// POST /shed does it for some or all sessions (rebalancing, rollouts); a
// graceful stop (Run, on SIGTERM) does it for all within
// Config.ShutdownGrace.
//
// Make-before-break: with a notice grace (Config.NoticeGrace, /shed's
// grace=), a session that carries datagrams (raw QUIC, WebTransport) is
// first sent moqlite.GoAwayNotice as a DATAGRAM and served on for the
// grace, so that a client that knows the notice subscribes elsewhere
// before this session ends; the close with going-away follows, for the
// clients that ignore the notice. WebSocket sessions, and sessions whose
// datagram could not be sent, are closed at once.

// Shed rate and shutdown grace defaults and bounds.
const (
	DefaultShedRate      = 200
	MaxShedRate          = 100000
	DefaultShutdownGrace = 3 * time.Second
	// DefaultNoticeGrace is how long a session is served after its
	// going-away notice: time for a client to resolve, dial and
	// subscribe elsewhere and receive its first group there.
	DefaultNoticeGrace = 2 * time.Second
	MaxNoticeGrace     = time.Minute
)

// shedOrder returns the open sessions in the order they are shed:
// listeners first, then publishers and cluster links (an edge's link to
// this relay carries every listener behind that edge). A cluster link is
// recognized by its token, which may subscribe to everything; without
// auth only publishers are told apart. The relay's own upstream links are
// client sessions it dialled: they are not in the registry.
func (s *Server) shedOrder() []*session {
	s.mu.Lock()
	defer s.mu.Unlock()
	first := make([]*session, 0, len(s.sessions))
	var last []*session
	for sess := range s.sessions {
		if sess.broadcasts > 0 || sess.perms.subscribesEverything() {
			last = append(last, sess)
		} else {
			first = append(first, sess)
		}
	}
	return append(first, last...)
}

// subscribesEverything says a token granted subscribing under every path
// (what a cluster link's token holds).
func (p Permissions) subscribesEverything() bool {
	for _, pre := range p.subscribe {
		if pre == "" {
			return true
		}
	}
	return false
}

// openSessions counts the registered sessions not ended yet, nor shed.
func (s *Server) openSessions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for sess := range s.sessions {
		if sess.ctx.Err() == nil && !sess.shed.Load() {
			n++
		}
	}
	return n
}

// Shed closes up to n open sessions (n < 0: all of them) with
// moqlite.CodeGoingAway, listeners first, at most rate per second (the
// first at once). It stops early when ctx ends and returns how many it
// closed.
func (s *Server) Shed(ctx context.Context, n int, rate float64) int {
	return s.ShedNotice(ctx, n, rate, 0)
}

// ShedNotice is Shed with a going-away notice grace (0: none): each
// session is sent moqlite.GoAwayNotice and closed grace later (at once
// where no notice could be sent). It returns once the last of them is
// closed, or ctx ended (the sessions noticed still close on time).
func (s *Server) ShedNotice(ctx context.Context, n int, rate float64, grace time.Duration) int {
	if n == 0 || rate <= 0 {
		return 0
	}
	interval := time.Duration(float64(time.Second) / rate)
	start := time.Now()
	shed := 0
	var closed []<-chan struct{}
	defer func() {
		for _, c := range closed {
			select {
			case <-c:
			case <-ctx.Done():
				return
			}
		}
	}()
	for _, sess := range s.shedOrder() {
		if n >= 0 && shed >= n {
			break
		}
		if d := time.Until(start.Add(time.Duration(shed) * interval)); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
				return shed
			case <-t.C:
			}
		} else if ctx.Err() != nil {
			return shed
		}
		if c := sess.goAway(grace); c != nil {
			closed = append(closed, c)
			shed++
		}
	}
	return shed
}

// goAway closes the session with CodeGoingAway, once, grace after sending
// it moqlite.GoAwayNotice (grace > 0 and the session carries datagrams)
// or at once. It returns a channel closed once the session is closed,
// or nil if it had ended already.
func (sess *session) goAway(grace time.Duration) <-chan struct{} {
	if sess.ctx.Err() != nil || !sess.shed.CompareAndSwap(false, true) {
		return nil
	}
	sess.srv.counters.sessionsShed.Add(1)
	noticed := false
	if d, ok := sess.t.(transport.Datagrams); ok && grace > 0 {
		noticed = d.SendDatagram(moqlite.GoAwayNotice) == nil
	}
	sess.log.Debug("shedding session", "notice", noticed)
	// The close goes before the cancel, whose own close (code 0) then
	// does nothing; in a goroutine, since a WebSocket close waits for the
	// peer's answer.
	done := make(chan struct{})
	sess.srv.wg.Add(1)
	go func() {
		defer sess.srv.wg.Done()
		defer close(done)
		if noticed {
			t := time.NewTimer(grace)
			select {
			case <-t.C:
			case <-sess.ctx.Done():
				// The client left (it moved), or the relay is closing
				// (with going-away, see closeCode).
				t.Stop()
				return
			}
		}
		_ = sess.t.CloseWithError(moqlite.CodeGoingAway, "going away")
		sess.cancel()
	}()
	return done
}

// closeCode is the code a session gets when it ends with the relay's
// context: going-away once the relay is stopping gracefully.
func (s *Server) closeCode() uint64 {
	if s.goingAway.Load() {
		return moqlite.CodeGoingAway
	}
	return codeOK
}

// ShedResult is the answer to POST /shed.
type ShedResult struct {
	// Shed is how many sessions were closed with going-away.
	Shed int `json:"shed"`
	// Remaining is how many sessions are open after it.
	Remaining int `json:"remaining"`
}

// parseShed reads /shed's n (a positive number, or all: -1), rate
// (sessions per second; def when absent) and grace (a duration, 0 for no
// notice; defGrace when absent).
func parseShed(q map[string][]string, def float64, defGrace time.Duration) (n int, rate float64, grace time.Duration, err error) {
	n, rate, err = parseShedRate(q, def)
	if err != nil {
		return 0, 0, 0, err
	}
	grace = defGrace
	if v, ok := q["grace"]; ok && len(v) > 0 {
		d, err := time.ParseDuration(v[0])
		if err != nil || d < 0 || d > MaxNoticeGrace {
			return 0, 0, 0, fmt.Errorf("grace %q: want a duration from 0s (no notice) to %v", v[0], MaxNoticeGrace)
		}
		grace = d
	}
	return n, rate, grace, nil
}

// parseShedRate reads /shed's n and rate (see parseShed).
func parseShedRate(q map[string][]string, def float64) (n int, rate float64, err error) {
	get := func(k string) (string, bool) {
		v, ok := q[k]
		if !ok || len(v) == 0 {
			return "", false
		}
		return v[0], true
	}
	nv, ok := get("n")
	switch {
	case !ok || nv == "":
		return 0, 0, errors.New("n: missing; want a positive number of sessions or all")
	case nv == "all":
		n = -1
	default:
		v, err := strconv.Atoi(nv)
		if err != nil || v < 1 {
			return 0, 0, fmt.Errorf("n %q: want a positive number of sessions or all", nv)
		}
		n = v
	}
	rate = def
	if rv, ok := get("rate"); ok {
		v, err := strconv.ParseFloat(rv, 64)
		if err != nil || math.IsNaN(v) || v <= 0 || v > MaxShedRate {
			return 0, 0, fmt.Errorf("rate %q: want sessions per second, more than 0 and at most %d", rv, MaxShedRate)
		}
		rate = v
	}
	return n, rate, nil
}

// serveShed is POST /shed?n=N|all[&rate=R][&grace=D], from loopback only
// (like /drain): it sends N sessions the going-away notice at most R per
// second, closes each D later (default Config.NoticeGrace; 0s: at once)
// and answers once done, with ShedResult as JSON. It stops if the asker
// hangs up.
func (r *Relay) serveShed(w http.ResponseWriter, req *http.Request) {
	if !fromLoopback(req) {
		http.Error(w, "shed is only accepted from the box itself", http.StatusForbidden)
		return
	}
	n, rate, grace, err := parseShed(req.URL.Query(), r.shedRate, r.noticeGrace)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	// The answer waits for the shed, which may outlast the write timeout.
	_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
	k := r.srv.ShedNotice(req.Context(), n, rate, grace)
	r.logger.Info("shed sessions", "asked", n, "rate", rate, "grace", grace, "shed", k)
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(ShedResult{Shed: k, Remaining: r.srv.openSessions()})
}

// gracefulStop stops admitting and sends every open session going-away,
// at the shed rate or faster so that all get it within grace (negative:
// none is sent). The notice grace is at most half of grace: the notices
// go out in the rest.
func (r *Relay) gracefulStop(grace time.Duration) {
	r.stopping.Store(true)
	r.srv.adm.draining.Store(true)
	if grace < 0 {
		return
	}
	r.srv.goingAway.Store(true)
	n := r.srv.openSessions()
	notice := min(r.noticeGrace, grace/2)
	rate := r.shedRate
	if need := float64(n) / (grace - notice).Seconds(); need > rate {
		rate = need
	}
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	start := time.Now()
	k := r.srv.ShedNotice(ctx, -1, rate, notice)
	r.logger.Info("graceful stop: sessions sent going-away", "shed", k, "of", n, "rate", math.Round(rate), "notice", notice, "took", time.Since(start).Round(time.Millisecond))
}
