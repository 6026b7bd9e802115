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
)

// Shedding: the relay asks clients to reconnect elsewhere now by closing
// their sessions with moqlite.CodeGoingAway (QUIC and WebTransport: the
// session close code; WebSocket: the qmux close frame carries it, and the
// WebSocket closes with status 1001). A client that sees it goes back to
// the router (avoiding this relay) at once, instead of waiting for silence.
// POST /shed does it for some or all sessions (rebalancing, rollouts); a
// graceful stop (Run, on SIGTERM) does it for all within
// Config.ShutdownGrace.

// Shed rate and shutdown grace defaults and bounds.
const (
	DefaultShedRate      = 200
	MaxShedRate          = 100000
	DefaultShutdownGrace = 3 * time.Second
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
	if n == 0 || rate <= 0 {
		return 0
	}
	interval := time.Duration(float64(time.Second) / rate)
	start := time.Now()
	shed := 0
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
		if sess.goAway() {
			shed++
		}
	}
	return shed
}

// goAway closes the session with CodeGoingAway, once; false if it had
// ended already.
func (sess *session) goAway() bool {
	if sess.ctx.Err() != nil || !sess.shed.CompareAndSwap(false, true) {
		return false
	}
	sess.srv.counters.sessionsShed.Add(1)
	sess.log.Debug("shedding session")
	// The close goes before the cancel, whose own close (code 0) then
	// does nothing; in a goroutine, since a WebSocket close waits for the
	// peer's answer.
	sess.srv.wg.Add(1)
	go func() {
		defer sess.srv.wg.Done()
		_ = sess.t.CloseWithError(moqlite.CodeGoingAway, "going away")
		sess.cancel()
	}()
	return true
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

// parseShed reads /shed's n (a positive number, or all: -1) and rate
// (sessions per second; def when absent).
func parseShed(q map[string][]string, def float64) (n int, rate float64, err error) {
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

// serveShed is POST /shed?n=N|all[&rate=R], from loopback only (like
// /drain): it closes N sessions with going-away at most R per second and
// answers once done, with ShedResult as JSON. It stops if the asker hangs
// up.
func (r *Relay) serveShed(w http.ResponseWriter, req *http.Request) {
	if !fromLoopback(req) {
		http.Error(w, "shed is only accepted from the box itself", http.StatusForbidden)
		return
	}
	n, rate, err := parseShed(req.URL.Query(), r.shedRate)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	// The answer waits for the shed, which may outlast the write timeout.
	_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
	k := r.srv.Shed(req.Context(), n, rate)
	r.logger.Info("shed sessions", "asked", n, "rate", rate, "shed", k)
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(ShedResult{Shed: k, Remaining: r.srv.openSessions()})
}

// gracefulStop stops admitting and sends every open session going-away,
// at the shed rate or faster so that all get it within grace (negative:
// none is sent).
func (r *Relay) gracefulStop(grace time.Duration) {
	r.stopping.Store(true)
	r.srv.adm.draining.Store(true)
	if grace < 0 {
		return
	}
	r.srv.goingAway.Store(true)
	n := r.srv.openSessions()
	rate := r.shedRate
	if need := float64(n) / grace.Seconds(); need > rate {
		rate = need
	}
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	start := time.Now()
	k := r.srv.Shed(ctx, -1, rate)
	r.logger.Info("graceful stop: sessions sent going-away", "shed", k, "of", n, "rate", math.Round(rate), "took", time.Since(start).Round(time.Millisecond))
}
