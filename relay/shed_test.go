package relay

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/webtransport-go"

	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/relay/client"
	"github.com/relayfleet/relayfleet/relay/moqlite"
	"github.com/relayfleet/relayfleet/relay/transport"
)

// peer is a test client session and a way to read how it ended.
type peer struct {
	name string
	sess *client.Session
	done <-chan struct{}
	// code returns the session close code the relay sent, or an error
	// saying how else it ended.
	code  func() (uint64, error)
	ended time.Time // set by watch
}

func insecureTLS() *tls.Config {
	return &tls.Config{InsecureSkipVerify: true, NextProtos: []string{moqlite.ALPN}}
}

// dialPeer connects to r over via ("quic", "webtransport", "websocket")
// and performs SETUP.
func dialPeer(t *testing.T, ctx context.Context, r *Relay, via string) *peer {
	t.Helper()
	addr := r.Addr().String()
	p := &peer{name: via}
	var ts transport.Session
	path := ""
	switch via {
	case "quic", "quic+datagrams":
		conn, err := quic.DialAddr(ctx, addr, insecureTLS(), &quic.Config{MaxIdleTimeout: 30 * time.Second, EnableDatagrams: via != "quic"})
		if err != nil {
			t.Fatal(err)
		}
		ts, path, p.done = transport.NewQUIC(conn), "/", conn.Context().Done()
		p.code = func() (uint64, error) {
			var ae *quic.ApplicationError
			if err := context.Cause(conn.Context()); errors.As(err, &ae) && ae.Remote {
				return uint64(ae.ErrorCode), nil
			} else {
				return 0, fmt.Errorf("not closed by the relay: %v", err)
			}
		}
	case "webtransport":
		tr := &webtransport.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, ApplicationProtocols: []string{moqlite.ALPN}}
		_, s, err := tr.Dial(ctx, "https://"+addr+"/", nil)
		if err != nil {
			t.Fatalf("%s: %v", via, err)
		}
		ts, p.done = transport.NewWebTransport(s), s.Context().Done()
		p.code = func() (uint64, error) {
			// The session's context ends without a cause; its calls
			// answer with the SessionError.
			var se *webtransport.SessionError
			if _, err := s.AcceptStream(context.Background()); errors.As(err, &se) && se.Remote {
				return uint64(se.ErrorCode), nil
			} else {
				return 0, fmt.Errorf("not closed by the relay: %v", err)
			}
		}
	case "websocket":
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: insecureTLS()}}
		s, err := transport.DialWebSocket(ctx, "wss://"+addr+"/", hc)
		if err != nil {
			t.Fatal(err)
		}
		ts, p.done = s, s.Done()
		p.code = func() (uint64, error) {
			// A closed session answers with why it closed.
			_, err := s.AcceptStream(context.Background())
			var code uint64
			if _, e := fmt.Sscanf(errText(err, "closed by peer: code "), "%d", &code); e != nil {
				return 0, fmt.Errorf("not closed by the relay: %v", err)
			}
			return code, nil
		}
	default:
		t.Fatalf("unknown transport %q", via)
	}
	sess, err := client.NewSession(ctx, ts, path, testLogger())
	if err != nil {
		t.Fatalf("%s: %v", via, err)
	}
	t.Cleanup(func() { sess.Close() })
	p.sess = sess
	return p
}

// errText is what follows marker in err's text, or "".
func errText(err error, marker string) string {
	if err == nil {
		return ""
	}
	_, after, _ := strings.Cut(err.Error(), marker)
	return after
}

// watch records when each peer's session ends.
func watch(peers []*peer) (wait func(time.Duration) bool) {
	var wg sync.WaitGroup
	for _, p := range peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-p.done
			p.ended = time.Now()
		}()
	}
	all := make(chan struct{})
	go func() { wg.Wait(); close(all) }()
	return func(d time.Duration) bool {
		select {
		case <-all:
			return true
		case <-time.After(d):
			return false
		}
	}
}

func startTestRelay(t *testing.T, cfg Config) *Relay {
	t.Helper()
	cfg.Listen, cfg.Logger = "127.0.0.1:0", testLogger()
	r, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func waitSessions(t *testing.T, r *Relay, n int) {
	t.Helper()
	if !testutil.Poll(15*time.Second, func() bool { return r.Stats().Sessions == n }) {
		t.Fatalf("%d sessions, want %d", r.Stats().Sessions, n)
	}
}

func postShed(t *testing.T, r *Relay, query string) (int, string) {
	t.Helper()
	resp, err := http.Post(fmt.Sprintf("http://%s/shed?%s", r.Addr(), query), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestShedGoingAway: POST /shed closes listeners first, over every
// transport, with CodeGoingAway; the publisher goes last; /stats and
// /metrics count them.
func TestShedGoingAway(t *testing.T) {
	t.Parallel()
	r := startTestRelay(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pub := dialPeer(t, ctx, r, "quic")
	pub.name = "publisher"
	pub.sess.Publish("live").Track("audio")
	if !testutil.Poll(15*time.Second, func() bool { return r.Stats().Publishers == 1 }) {
		t.Fatal("the publisher's broadcast was not announced")
	}
	var listeners []*peer
	for _, via := range []string{"quic", "webtransport", "websocket", "quic"} {
		listeners = append(listeners, dialPeer(t, ctx, r, via))
	}
	waitSessions(t, r, 5)

	code, body := postShed(t, r, "n=4&rate=1000")
	var res ShedResult
	if err := json.Unmarshal([]byte(body), &res); code != http.StatusOK || err != nil {
		t.Fatalf("POST /shed: %d %q (%v)", code, body, err)
	}
	if res.Shed != 4 || res.Remaining != 1 {
		t.Errorf("shed %+v, want 4 shed and 1 remaining", res)
	}
	if !watch(listeners)(15 * time.Second) {
		t.Fatal("not every listener's session ended")
	}
	for _, p := range listeners {
		if c, err := p.code(); err != nil || c != moqlite.CodeGoingAway {
			t.Errorf("%s listener: code %#x, %v; want %#x", p.name, c, err, moqlite.CodeGoingAway)
		}
	}
	select {
	case <-pub.done:
		t.Fatal("the publisher was shed before the listeners were all gone")
	default:
	}

	if code, body := postShed(t, r, "n=all"); code != http.StatusOK || !strings.Contains(body, `"shed":1,"remaining":0`) {
		t.Fatalf("POST /shed?n=all: %d %q", code, body)
	}
	if !watch([]*peer{pub})(15 * time.Second) {
		t.Fatal("the publisher's session did not end")
	}
	if c, err := pub.code(); err != nil || c != moqlite.CodeGoingAway {
		t.Errorf("publisher: code %#x, %v", c, err)
	}
	if st := r.Stats(); st.ShedTotal != 5 {
		t.Errorf("shed_total %d, want 5", st.ShedTotal)
	}
	resp, err := http.Get(fmt.Sprintf("http://%s/metrics", r.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	m, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(m), "\nrelay_sessions_shed_total 5\n") {
		t.Errorf("/metrics has no relay_sessions_shed_total 5")
	}
}

// TestShedRate: 12 sessions shed at 10 per second take at least 1.1 s
// between the first close and the last (with a generous margin: 0.9 s).
func TestShedRate(t *testing.T) {
	r := startTestRelay(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var peers []*peer
	for range 12 {
		peers = append(peers, dialPeer(t, ctx, r, "quic"))
	}
	waitSessions(t, r, 12)
	wait := watch(peers)
	start := time.Now()
	code, body := postShed(t, r, "n=all&rate=10")
	took := time.Since(start)
	if code != http.StatusOK || !strings.Contains(body, `"shed":12`) {
		t.Fatalf("POST /shed: %d %q", code, body)
	}
	if !wait(15 * time.Second) {
		t.Fatal("not every session ended")
	}
	first, last := peers[0].ended, peers[0].ended
	for _, p := range peers {
		if p.ended.Before(first) {
			first = p.ended
		}
		if p.ended.After(last) {
			last = p.ended
		}
	}
	t.Logf("12 sessions at 10/s: the answer took %v; first to last close %v", took.Round(time.Millisecond), last.Sub(first).Round(time.Millisecond))
	if spread := last.Sub(first); spread < 900*time.Millisecond {
		t.Errorf("12 closes at 10/s spread over %v, want at least 1.1 s", spread)
	}
	if took < time.Second {
		t.Errorf("the answer came after %v, before the shed could be done", took)
	}
}

// TestShedRequests: only from loopback; a bad n or rate is a 400 naming
// the parameter.
func TestShedRequests(t *testing.T) {
	r := startTestRelay(t, Config{})
	h := r.handler(false)
	for _, tt := range []struct {
		remote, query string
		status        int
		want          string
	}{
		{"192.0.2.7:4000", "n=all", http.StatusForbidden, "only accepted from the box itself"},
		{"[2001:db8::1]:4000", "n=1", http.StatusForbidden, "only accepted from the box itself"},
		{"127.0.0.1:4000", "", http.StatusBadRequest, "n: missing"},
		{"127.0.0.1:4000", "n=0", http.StatusBadRequest, `n "0"`},
		{"127.0.0.1:4000", "n=-3", http.StatusBadRequest, `n "-3"`},
		{"127.0.0.1:4000", "n=some", http.StatusBadRequest, `n "some"`},
		{"127.0.0.1:4000", "n=1&rate=0", http.StatusBadRequest, `rate "0"`},
		{"127.0.0.1:4000", "n=1&rate=-5", http.StatusBadRequest, `rate "-5"`},
		{"127.0.0.1:4000", "n=1&rate=fast", http.StatusBadRequest, `rate "fast"`},
		{"127.0.0.1:4000", "n=1&rate=NaN", http.StatusBadRequest, `rate "NaN"`},
		{"127.0.0.1:4000", "n=1&rate=1e9", http.StatusBadRequest, `rate "1e9"`},
		{"127.0.0.1:4000", "n=1&grace=soon", http.StatusBadRequest, `grace "soon"`},
		{"127.0.0.1:4000", "n=1&grace=-1s", http.StatusBadRequest, `grace "-1s"`},
		{"127.0.0.1:4000", "n=1&grace=2h", http.StatusBadRequest, `grace "2h"`},
		{"127.0.0.1:4000", "n=1&grace=0s", http.StatusOK, `{"shed":0,"remaining":0}`},
		{"[::1]:4000", "n=all&rate=0.5", http.StatusOK, `{"shed":0,"remaining":0}`},
	} {
		req := httptest.NewRequest(http.MethodPost, "/shed?"+tt.query, nil)
		req.RemoteAddr = tt.remote
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		body := w.Body.String()
		if w.Code != tt.status || !strings.Contains(body, tt.want) {
			t.Errorf("%s POST /shed?%s: %d %q, want %d with %q", tt.remote, tt.query, w.Code, body, tt.status, tt.want)
		}
		if w.Code == http.StatusBadRequest && strings.Count(strings.TrimSpace(body), "\n") != 0 {
			t.Errorf("POST /shed?%s: answer is not one line: %q", tt.query, body)
		}
	}
	if st := r.Stats(); st.Draining {
		t.Error("/shed drains the relay")
	}
}

// TestGracefulStop: when Run's context ends, the relay stops admitting and
// sends every session going-away within the grace: at 1 per second 6
// sessions would take 5 s, so the rate rises to fit the 1 s grace, and
// every one is shed (none left for the close at the end).
func TestGracefulStop(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started := make(chan *Relay, 1)
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{Listen: "127.0.0.1:0", Logger: testLogger(), ShedRate: 1, ShutdownGrace: time.Second},
			func(r *Relay) { started <- r })
	}()
	var r *Relay
	select {
	case r = <-started:
	case err := <-done:
		t.Fatalf("Run: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("the relay did not start")
	}
	dctx, dcancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer dcancel()
	var peers []*peer
	for _, via := range []string{"quic", "quic", "quic", "webtransport", "websocket", "quic"} {
		peers = append(peers, dialPeer(t, dctx, r, via))
	}
	waitSessions(t, r, len(peers))
	stop := time.Now()
	cancel()
	if !watch(peers)(20 * time.Second) {
		t.Fatal("not every session ended")
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return")
	}
	t.Logf("graceful stop of %d sessions took %v", len(peers), time.Since(stop).Round(time.Millisecond))
	for _, p := range peers {
		if c, err := p.code(); err != nil || c != moqlite.CodeGoingAway {
			t.Errorf("%s: code %#x, %v; want %#x", p.name, c, err, moqlite.CodeGoingAway)
		}
	}
	if st := r.Stats(); st.ShedTotal != int64(len(peers)) || !st.Draining {
		t.Errorf("shed_total %d (want %d), draining %v (want true)", st.ShedTotal, len(peers), st.Draining)
	}
}

// TestShedNotice: with a grace, /shed first sends each session that
// carries datagrams the going-away notice, serves it for the grace, then
// closes it with going-away; a session without datagrams (WebSocket, or
// QUIC without them) is closed at once, and so is every session with
// grace=0s.
func TestShedNotice(t *testing.T) {
	t.Parallel()
	r := startTestRelay(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const grace = 1500 * time.Millisecond
	vias := []string{"quic+datagrams", "webtransport", "websocket", "quic"}
	var peers []*peer
	for _, via := range vias {
		peers = append(peers, dialPeer(t, ctx, r, via))
	}
	waitSessions(t, r, len(peers))
	noticed := make([]time.Time, len(peers))
	var wg sync.WaitGroup
	for i, p := range peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-p.sess.GoingAway():
				noticed[i] = time.Now()
			case <-p.done:
			}
		}()
	}
	ended := watch(peers)
	start := time.Now()
	code, body := postShed(t, r, fmt.Sprintf("n=all&rate=1000&grace=%s", grace))
	took := time.Since(start)
	if code != http.StatusOK || !strings.Contains(body, `"shed":4,"remaining":0`) {
		t.Fatalf("POST /shed: %d %q", code, body)
	}
	if took < grace {
		t.Errorf("POST /shed answered after %v, before the grace (%v) was over", took, grace)
	}
	if !ended(15 * time.Second) {
		t.Fatal("not every session ended")
	}
	wg.Wait()
	for i, p := range peers {
		if c, err := p.code(); err != nil || c != moqlite.CodeGoingAway {
			t.Errorf("%s: code %#x, %v; want %#x", p.name, c, err, moqlite.CodeGoingAway)
		}
		withNotice := i < 2
		switch {
		case withNotice && noticed[i].IsZero():
			t.Errorf("%s: no going-away notice", p.name)
		case withNotice && p.ended.Sub(noticed[i]) < grace/2:
			t.Errorf("%s: closed %v after the notice, want about the grace %v", p.name, p.ended.Sub(noticed[i]), grace)
		case !withNotice && !noticed[i].IsZero():
			t.Errorf("%s: got a notice", p.name)
		case !withNotice && p.ended.Sub(start) > grace/2:
			t.Errorf("%s: closed %v after the shed began, want at once (no notice)", p.name, p.ended.Sub(start))
		}
	}

	// grace=0s: no notice, closed at once.
	p := dialPeer(t, ctx, r, "quic+datagrams")
	waitSessions(t, r, 1)
	if code, body := postShed(t, r, "n=all&grace=0s"); code != http.StatusOK || !strings.Contains(body, `"shed":1`) {
		t.Fatalf("POST /shed grace=0s: %d %q", code, body)
	}
	if !watch([]*peer{p})(15 * time.Second) {
		t.Fatal("the session did not end")
	}
	select {
	case <-p.sess.GoingAway():
		t.Error("grace=0s: the session got a notice")
	default:
	}
}
