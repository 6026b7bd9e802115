// Package router hands each new listener the relay process with the most
// headroom.
//
// It serves GET /route?broadcast=NAME: the body is JSON naming the chosen
// relay process and the SHA-256 of the certificate it serves now,
//
//	{"url": "http://relay1.example:4443/", "certificate_sha256": "HEX"}
//
// (certificate_sha256 left out only for an https:// relay that did not
// report one), or 503 when no process has headroom. A client that fetched
// this over TLS pins the certificate by that hash (client.DialRoute); over
// plain HTTP it trusts the network between it and the router. Every
// process's /stats is polled (Options.Poll, default one
// second); its "headroom" field, which the relay computes as the listeners
// it expects to take still (0 while admission control refuses: memory above
// the high-water mark or the session cap reached; otherwise the smaller of
// the sessions left under the cap, or under the per-socket ceiling, and the
// memory left under the high-water mark divided by 100 KiB), is the
// process's headroom. Only that polled figure, which counts the sessions a
// relay admitted, decides whether a process may get listeners: /route is
// anonymous, so its answers must not use headroom up. Between polls, each
// answer reserves one listener of the process's headroom for the ranking
// only (at most its headroom, forgotten at the next poll), so a burst does
// not all land on one process.
// A process marked last_resort gets new listeners only while no other
// process has headroom (an event's burst relays after its end: the steady
// fleet takes new listeners while it has room, and nobody is refused when
// it has none). A process marked draining, or whose last poll failed, gets
// no new listeners, and so does an http:// process whose /stats gives no
// certificate_sha256. One failed poll takes a process out of the pool and
// one good poll brings it back; a poll times out after the poll interval or
// PollTimeout (500 ms), whichever is shorter, so a hung (SIGSTOPped) process
// leaves within one poll. Ties go to the process listed first. The broadcast name is
// required but does not affect the choice: every process pulls any
// broadcast from upstream.
//
// A listener that lost its relay asks again with avoid=URL (repeatable, the
// "url" of an earlier answer; a query or #fragment on it is ignored): the
// answer is an avoided relay only when no other has headroom (then the one
// with the most, rather than a 503), and each avoided relay the router knows
// is polled again at once (at most once per RepollEvery per relay, so
// anonymous callers cannot make it poll faster), so a dead process leaves
// the pool for every listener within about one poll round trip.
//
// The relays file, which the fleet tool writes, is JSON:
//
//	{"relays": [
//	  {"url": "http://relay1.example:4443/", "stats": "http://relay1.example:4443/stats",
//	   "spki_sha256": "HEX", "draining": false}
//	]}
//
// "url" is what /route answers (http:// or https://), "stats" the /stats
// URL to poll, "draining" true to stop sending new listeners there,
// "last_resort" true to send them there only when no other relay has
// headroom, "region" the relay's region. The file's optional "regions"
// list names each region's listener address prefixes; /route?region=NAME
// (or, without it, the client's address) prefers that region's relays
// and says when it falls back to another's (region.go).
// "spki_sha256", optional, is the SHA-256 of the relay's public key (`relay
// pin`): with it the router polls https:// (the relay's TCP port answers
// TLS on the same port) and accepts only a certificate with that key, so
// the certificate hash it hands out is the relay's own: each poll is a
// new TLS handshake, and a certificate_sha256 that is not the hash of the
// certificate that handshake presented under the pinned key is refused
// (the relay is not routed; logged once). Without it the poll, and so
// the hash, is only as trustworthy as the network between the router
// and the relay (a warning is logged at each load for an unpinned relay
// off loopback); with Options.RequirePins (relay router --require-pins)
// an unpinned relay is neither polled nor routed. fleet up writes a pin
// for every relay of the fleet.
// Unknown fields and duplicate URLs are errors. Reload re-reads it (the
// router command does on SIGHUP); a file that fails to load leaves the
// previous one in force. Run also reloads it when the file changes (within
// one poll). GET /relays shows the state as JSON.
//
// relay router (cmd/relay) is Flags.Run: the flags checked, then the
// router served over HTTP or TLS until its context ends (flags.go).
package router

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/relayfleet/relayfleet/relay/client"
	"github.com/relayfleet/relayfleet/relay/internal/connlimit"
	"github.com/relayfleet/relayfleet/relay/wire"
)

// File is the relays file (package relay/wire defines it).
type File = wire.RelaysFile

// Relay is one relay process in the file; see the package comment.
type Relay = wire.Relay

// Region is one region of the relays file (region.go).
type Region = wire.Region

// Parse decodes and validates a relays file.
func Parse(data []byte) (*File, error) {
	f, err := wire.ParseRelaysFile(data)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for i, r := range f.Relays {
		for field, v := range map[string]string{"url": r.URL, "stats": r.Stats} {
			u, err := url.Parse(v)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return nil, fmt.Errorf("relays file: relay %d: %s %q: want an http:// or https:// URL", i, field, v)
			}
		}
		if r.SPKI != "" {
			if err := client.CheckHash(r.SPKI); err != nil {
				return nil, fmt.Errorf("relays file: relay %d: spki_sha256: %w", i, err)
			}
		}
		if seen[r.URL] {
			return nil, fmt.Errorf("relays file: relay %d: url %q listed twice", i, r.URL)
		}
		seen[r.URL] = true
	}
	if _, err := parseRegions(f); err != nil {
		return nil, err
	}
	return f, nil
}

// Load reads and validates the relays file at path.
func Load(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("relays file: %w", err)
	}
	return Parse(data)
}

// Poll timing.
const (
	// PollTimeout caps how long one poll of a relay may take: a relay that
	// does not answer within it (or within the poll interval, if shorter)
	// leaves the pool.
	PollTimeout = 500 * time.Millisecond
	// RepollEvery is the least time between two extra polls of one relay
	// that avoid= asked for.
	RepollEvery = 250 * time.Millisecond
	// maxAvoid caps the avoid= parameters one /route looks at.
	maxAvoid = 8
)

// Options configures a Router.
type Options struct {
	// File is the relays file's path.
	File string
	// Poll is how often each relay's /stats is read; 0 means a second.
	Poll time.Duration
	// Client polls relays without spki_sha256; nil means one with a
	// timeout of Poll or PollTimeout, whichever is shorter. Relays with one
	// are polled by a client of the same timeout that checks the pin.
	Client *http.Client
	// Logger receives the router's logs; nil means slog.Default().
	Logger *slog.Logger
	// RequirePins routes only relays with an spki_sha256 pin (relay
	// router --require-pins): an unpinned relay's certificate hash is
	// only as trustworthy as the network, and it is never handed out.
	RequirePins bool
	// Rate and Burst bound /route (a token bucket, limit.go): at most
	// Rate answers a second on average, Burst at once; past them a 503
	// with a Retry-After. A Rate of 0 means no limit (relay router's
	// --rate defaults to DefaultRate); a Burst of 0 means DefaultBurst.
	Rate  float64
	Burst int
}

// Router chooses relays. Create one with New, poll with Run (or PollOnce)
// and serve it as an http.Handler.
type Router struct {
	file        string
	requirePins bool
	poll        time.Duration
	hc          *http.Client
	logger      *slog.Logger
	mux         *http.ServeMux

	// runCtx is Run's context, for avoid= re-polls (under mu).
	runCtx context.Context

	mu     sync.Mutex
	relays []*relayState
	stamp  fileStamp               // the relays file as last loaded
	pinned map[string]*http.Client // by SPKI pin

	counts routeCounts // /route answers, for /metrics

	// Regions (region.go), from the relays file (under mu): prefixes
	// longest first, the region names it knows (its regions and its
	// relays' regions) and the regions as the file lists them.
	prefixes    []regionPrefix
	knownRegion map[string]bool
	regionList  []wire.Region
	rcounts     regionCounts
	limit       *bucket // nil: no rate limit

	// starved counts the polls in a row in which every relay timed out
	// (under mu): see PollOnce.
	starved int
}

// MaxStarvedPolls is how many polls in a row the router keeps its last
// known state when every relay's poll timed out at once. One relay that
// stops answering leaves the pool at once; every relay timing out
// together says more about the router (a starved CPU, its own network)
// than about the relays, and emptying the pool would refuse every
// listener. After this many polls the timeouts are believed.
const MaxStarvedPolls = 3

// fileStamp tells a rewritten relays file from the one loaded: the fleet
// tool replaces it with a rename, which changes the inode.
type fileStamp struct {
	ino     uint64
	size    int64
	modTime time.Time
}

func stampOf(path string) fileStamp {
	st, err := os.Stat(path)
	if err != nil {
		return fileStamp{}
	}
	fs := fileStamp{size: st.Size(), modTime: st.ModTime()}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		fs.ino = uint64(sys.Ino)
	}
	return fs
}

type relayState struct {
	wire.RelayState

	repolledAt time.Time // the last re-poll avoid= started
	repolling  bool      // one is in flight
}

// New loads the relays file. No relay is healthy until its first poll.
func New(opts Options) (*Router, error) {
	r := &Router{file: opts.File, requirePins: opts.RequirePins, poll: opts.Poll, hc: opts.Client, logger: opts.Logger}
	if r.poll <= 0 {
		r.poll = time.Second
	}
	if r.hc == nil {
		r.hc = &http.Client{Timeout: min(r.poll, PollTimeout)}
	}
	if r.logger == nil {
		r.logger = slog.Default()
	}
	if opts.Rate > 0 {
		burst := opts.Burst
		if burst <= 0 {
			burst = DefaultBurst
		}
		r.limit = newBucket(opts.Rate, burst)
	}
	if err := r.Reload(); err != nil {
		return nil, err
	}
	r.mux = http.NewServeMux()
	r.mux.HandleFunc("GET /route", r.route)
	r.mux.HandleFunc("GET /relays", r.list)
	r.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	r.mux.Handle("GET /metrics", r.metricsHandler())
	return r, nil
}

// Reload re-reads the relays file. Relays still listed keep their last
// poll; new ones are unhealthy until polled.
func (r *Router) Reload() error {
	stamp := stampOf(r.file)
	f, err := Load(r.file)
	if err != nil {
		return err
	}
	prefixes, err := parseRegions(f)
	if err != nil {
		return err
	}
	known := map[string]bool{}
	for _, rg := range f.Regions {
		known[rg.Name] = true
	}
	for _, rl := range f.Relays {
		if rl.Region != "" {
			known[rl.Region] = true
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.prefixes, r.knownRegion, r.regionList = prefixes, known, f.Regions
	old := map[string]*relayState{}
	for _, s := range r.relays {
		old[s.URL] = s
	}
	next := make([]*relayState, 0, len(f.Relays))
	for _, rl := range f.Relays {
		s := &relayState{RelayState: wire.RelayState{Relay: rl}}
		if o := old[rl.URL]; o != nil && o.Stats == rl.Stats && o.SPKI == rl.SPKI {
			s.Healthy, s.Headroom, s.CertHash, s.Routed, s.Error = o.Healthy, o.Headroom, o.CertHash, o.Routed, o.Error
			s.repolledAt, s.repolling = o.repolledAt, o.repolling
		}
		next = append(next, s)
	}
	r.relays = next
	r.stamp = stamp
	r.logger.Info("relays loaded", "file", r.file, "relays", len(next), "regions", len(f.Regions))
	if !r.requirePins {
		for _, s := range next {
			if u, err := url.Parse(s.Stats); err == nil && s.SPKI == "" && !client.IsLoopback(u.Hostname()) {
				r.logger.Warn("relay has no spki_sha256 pin: its certificate hash is only as trustworthy as the network to it (fleet up writes pins; --require-pins refuses unpinned relays)", "url", s.URL)
			}
		}
	}
	return nil
}

// Run polls every relay's /stats until ctx ends. Before each poll it
// reloads the relays file if the file changed, so that relays the fleet
// tool adds, drains or removes take effect within one poll without a
// SIGHUP.
func (r *Router) Run(ctx context.Context) {
	r.mu.Lock()
	r.runCtx = ctx
	r.mu.Unlock()
	t := time.NewTicker(r.poll)
	defer t.Stop()
	for {
		r.mu.Lock()
		changed := stampOf(r.file) != r.stamp
		r.mu.Unlock()
		if changed {
			if err := r.Reload(); err != nil {
				r.logger.Warn("relays file changed but did not load; keeping the previous one", "file", r.file, "err", err)
				r.mu.Lock()
				r.stamp = stampOf(r.file) // warn once per change
				r.mu.Unlock()
			}
		}
		r.PollOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// PollOnce reads every relay's /stats once, in parallel.
func (r *Router) PollOnce(ctx context.Context) {
	r.mu.Lock()
	targets := make([]Relay, len(r.relays))
	for i, s := range r.relays {
		targets[i] = s.Relay
	}
	r.mu.Unlock()
	results := make([]pollResult, len(targets))
	var wg sync.WaitGroup
	for i, t := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = r.pollRelay(ctx, t)
		}()
	}
	wg.Wait()
	r.mu.Lock()
	defer r.mu.Unlock()
	if allTimedOut(results) && r.starved < MaxStarvedPolls {
		r.starved++
		r.logger.Warn("every relay's poll timed out at once: keeping the last known state (is this router starved of CPU, or cut off?)",
			"relays", len(targets), "polls_in_a_row", r.starved, "max", MaxStarvedPolls)
		return
	}
	r.starved = 0
	for i, t := range targets {
		r.applyLocked(t, results[i], true)
	}
}

// allTimedOut says whether there were at least two polls and every one
// ended in a timeout.
func allTimedOut(results []pollResult) bool {
	if len(results) < 2 {
		return false
	}
	for _, res := range results {
		var ne net.Error
		if res.err == nil || !(errors.Is(res.err, context.DeadlineExceeded) || errors.As(res.err, &ne) && ne.Timeout()) {
			return false
		}
	}
	return true
}

// applyLocked records a poll of t: a failure takes the relay out of the
// pool at once, a success brings it back. resetRouted forgets the answers
// given since the last poll (a full poll does; an avoid= re-poll keeps
// them). r.mu is held.
func (r *Router) applyLocked(t Relay, res pollResult, resetRouted bool) {
	for _, s := range r.relays {
		if s.URL != t.URL || s.Stats != t.Stats || s.SPKI != t.SPKI {
			continue
		}
		if res.err != nil {
			// Once per spell of failures: when a routed relay fails, or
			// when one never polled well since the file listed it fails
			// its first poll (a pin that never matched says so once).
			if s.Healthy || s.Error == "" {
				r.logger.Warn("relay unreachable", "url", s.URL, "err", res.err)
			}
			s.Healthy, s.Headroom, s.CertHash, s.Error = false, 0, "", res.err.Error()
			s.Routed = 0
			continue
		}
		if !s.Healthy && s.Error != "" {
			r.logger.Info("relay reachable again", "url", s.URL)
		}
		s.Healthy, s.Headroom, s.CertHash, s.Error = true, res.headroom, res.certHash, ""
		if resetRouted {
			s.Routed = 0
		} else {
			s.Routed = min(s.Routed, s.Headroom)
		}
	}
}

// repoll polls the relays in avoid again now, each at most once per
// RepollEvery and one at a time: a listener that lost its relay says so,
// and a dead one leaves the pool for everyone without waiting for the
// next poll. URLs the router does not know are ignored.
func (r *Router) repoll(avoid []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ctx := r.runCtx
	if ctx == nil {
		ctx = context.Background()
	}
	if ctx.Err() != nil {
		return
	}
	now := time.Now()
	for _, s := range r.relays {
		if s.repolling || now.Sub(s.repolledAt) < RepollEvery || !avoided(s.URL, avoid) {
			continue
		}
		s.repolling, s.repolledAt = true, now
		t := s.Relay
		go func() {
			res := r.pollRelay(ctx, t)
			r.mu.Lock()
			defer r.mu.Unlock()
			if ctx.Err() == nil {
				r.applyLocked(t, res, false)
			}
			for _, s := range r.relays {
				if s.URL == t.URL {
					s.repolling = false
				}
			}
		}()
	}
}

// sameRelay normalises a relay URL for avoid=: scheme, host and path, a
// trailing slash, query and fragment ignored.
func sameRelay(a, b string) bool {
	norm := func(s string) string {
		u, err := url.Parse(s)
		if err != nil {
			return s
		}
		return strings.ToLower(u.Scheme) + "://" + strings.ToLower(u.Host) + strings.TrimSuffix(u.Path, "/")
	}
	return norm(a) == norm(b)
}

// avoided reports whether relay URL u is one of avoid.
func avoided(u string, avoid []string) bool {
	for _, a := range avoid {
		if sameRelay(u, a) {
			return true
		}
	}
	return false
}

type pollResult struct {
	headroom int
	certHash string
	err      error
}

// pollRelay reads one relay's /stats: over https:// checked against its
// SPKI pin when it has one.
func (r *Router) pollRelay(ctx context.Context, rl Relay) pollResult {
	if r.requirePins && rl.SPKI == "" {
		return pollResult{err: errors.New("no spki_sha256 pin in the relays file (--require-pins): not polled, not routed")}
	}
	statsURL, hc := rl.Stats, r.hc
	if rl.SPKI != "" {
		u, err := url.Parse(rl.Stats)
		if err != nil {
			return pollResult{err: fmt.Errorf("poll %s: %w", rl.Stats, err)}
		}
		u.Scheme = "https"
		statsURL, hc = u.String(), r.pinnedClient(rl.SPKI)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, statsURL, nil)
	if err != nil {
		return pollResult{err: fmt.Errorf("poll %s: %w", statsURL, err)}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return pollResult{err: fmt.Errorf("poll: %w", err)}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return pollResult{err: fmt.Errorf("poll %s: %s", statsURL, resp.Status)}
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return pollResult{err: fmt.Errorf("poll %s: %w", statsURL, err)}
	}
	st, err := wire.ParseStats(body, "headroom")
	if err != nil {
		return pollResult{err: fmt.Errorf("poll %s: %w", statsURL, err)}
	}
	if st.CertificateSHA256 != "" {
		if err := client.CheckHash(st.CertificateSHA256); err != nil {
			return pollResult{err: fmt.Errorf("poll %s: certificate_sha256: %w", statsURL, err)}
		}
		if rl.SPKI != "" {
			// The pin checked the key of the certificate this poll's TLS
			// handshake presented; the hash handed to listeners must be
			// that certificate's, or it was not the key holder's.
			if err := presented(resp.TLS, st.CertificateSHA256); err != nil {
				return pollResult{err: fmt.Errorf("poll %s: %w", statsURL, err)}
			}
		}
	} else if strings.HasPrefix(rl.URL, "http://") {
		// The listener would have to fetch the hash in clear text.
		return pollResult{err: fmt.Errorf("poll %s: no certificate_sha256 field for an http:// relay", statsURL)}
	}
	return pollResult{headroom: st.Headroom, certHash: strings.ToLower(st.CertificateSHA256)}
}

// presented checks that hash is the SHA-256 of the leaf certificate cs
// presented.
func presented(cs *tls.ConnectionState, hash string) error {
	if cs == nil || len(cs.PeerCertificates) == 0 {
		return errors.New("certificate_sha256 not checked: the poll was not over TLS")
	}
	sum := sha256.Sum256(cs.PeerCertificates[0].Raw)
	if got := hex.EncodeToString(sum[:]); !strings.EqualFold(got, hash) {
		return fmt.Errorf("certificate_sha256 %s is not the certificate it presented under the pinned key (%s)", strings.ToLower(hash), got)
	}
	return nil
}

// pinnedClient is the client that polls relays with the SPKI pin spki.
// Each poll makes a new connection: the certificate its handshake
// presents is the one the relay serves now, which /stats must name.
func (r *Router) pinnedClient(spki string) *http.Client {
	r.mu.Lock()
	defer r.mu.Unlock()
	if hc := r.pinned[spki]; hc != nil {
		return hc
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS13, NextProtos: []string{"http/1.1"}}
	client.Pin(tc, "", spki)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = tc
	tr.ForceAttemptHTTP2 = false
	tr.DisableKeepAlives = true
	hc := &http.Client{Timeout: r.hc.Timeout, Transport: tr}
	if hc.Timeout <= 0 {
		hc.Timeout = r.poll
	}
	if r.pinned == nil {
		r.pinned = map[string]*http.Client{}
	}
	r.pinned[spki] = hc
	return hc
}

// ErrNoHeadroom is returned by Pick when no relay can take a listener.
var ErrNoHeadroom = errors.New("router: no relay has headroom")

// Route is the answer to GET /route (package relay/wire defines it).
type Route = wire.Route

// Pick chooses the relay for one new listener: among those with polled
// headroom, the one with the most left after this poll period's answers
// (its capacity less its sessions, as the relay reports, less the answers
// given since). The answer reserves one listener there for the ranking
// until the next poll, at most its headroom: answers alone never make a
// relay full. A relay marked last_resort is picked only when no other
// has headroom left (polled, less this period's answers). Relays in avoid (URLs as /route answers them) are
// picked only when no other relay has polled headroom: a listener whose
// only relay went silent (its origin away, the relay up) is better sent
// back there than refused.
func (r *Router) Pick(avoid ...string) (Route, error) {
	return r.PickIn("", avoid...)
}

// PickIn is Pick for a listener of region ("" for none): among relays
// alike otherwise (avoided or not, with headroom left after this poll
// period's answers or not, last resort or not, in that order), those of
// region come first. The answer's RegionFallback says that region was
// given and the relay is another region's.
func (r *Router) PickIn(region string, avoid ...string) (Route, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var best *relayState
	bestTier := 0
	for _, s := range r.relays {
		if s.Draining || !s.Healthy || s.Headroom <= 0 {
			continue
		}
		tier := pickTier(s, region)
		if avoided(s.URL, avoid) {
			tier += 8 // after every relay not avoided
		}
		if best == nil || tier < bestTier || (tier == bestTier && s.Headroom-s.Routed > best.Headroom-best.Routed) {
			best, bestTier = s, tier
		}
	}
	if best == nil {
		return Route{}, ErrNoHeadroom
	}
	best.Routed = min(best.Routed+1, best.Headroom)
	return Route{URL: best.URL, CertificateSHA256: best.CertHash, Region: best.Region,
		RegionFallback: region != "" && best.Region != region}, nil
}

// pickTier orders the relays Pick may choose: those with headroom left
// after this poll period's answers before those without; within each,
// the others before last-resort relays (so a region's last-resort relay
// comes after another region's steady one); within each, the relays of
// region (when one is given) before the others.
func pickTier(s *relayState, region string) int {
	tier := 0
	if s.Headroom-s.Routed <= 0 {
		tier = 4
	}
	if s.LastResort {
		tier += 2
	}
	if region != "" && s.Region != region {
		tier++
	}
	return tier
}

// listenerRegion is the region a /route is for: its region= hint, else
// the region of the client's address, else "". The label is the name
// for the per-region counts: "unknown" for a hint the relays file does
// not know.
func (r *Router) listenerRegion(hint, remote string) (region, label string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if hint != "" {
		if r.knownRegion[hint] {
			return hint, hint
		}
		return hint, "unknown"
	}
	rg := regionOf(r.prefixes, remote)
	return rg, rg
}

// ServeHTTP serves /route, /relays and /healthz.
func (r *Router) ServeHTTP(w http.ResponseWriter, req *http.Request) { r.mux.ServeHTTP(w, req) }

func (r *Router) route(w http.ResponseWriter, req *http.Request) {
	q := req.URL.Query()
	if q.Get("broadcast") == "" {
		http.Error(w, "broadcast parameter required", http.StatusBadRequest)
		return
	}
	avoid := q["avoid"]
	if len(avoid) > maxAvoid {
		http.Error(w, fmt.Sprintf("at most %d avoid parameters", maxAvoid), http.StatusBadRequest)
		return
	}
	if r.limit != nil {
		if ok, retry := r.limit.take(time.Now()); !ok {
			r.counts.limited.Add(1)
			w.Header().Set("Retry-After", strconv.Itoa(int(retry/time.Second)))
			http.Error(w, "too many requests: come back after Retry-After", http.StatusServiceUnavailable)
			return
		}
	}
	hint := q.Get("region")
	if hint != "" {
		if err := checkRegionName(hint); err != nil {
			http.Error(w, "region parameter: "+err.Error(), http.StatusBadRequest)
			return
		}
	}
	if len(avoid) > 0 {
		r.repoll(avoid)
	}
	region, label := r.listenerRegion(hint, req.RemoteAddr)
	rt, err := r.PickIn(region, avoid...)
	if err != nil {
		r.counts.unavailable.Add(1)
		if label != "" {
			r.rcounts.add(label, "unavailable")
		}
		w.Header().Set("Retry-After", "1")
		http.Error(w, "no relay has headroom", http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if label != "" {
		result := "in_region"
		if rt.RegionFallback {
			result = "fallback"
			w.Header().Set("Relay-Region-Fallback", region+" -> "+orNone(rt.Region))
		}
		r.rcounts.add(label, result)
	}
	r.counts.routed.Add(1)
	_ = json.NewEncoder(w).Encode(rt)
}

func (r *Router) list(w http.ResponseWriter, _ *http.Request) {
	r.mu.Lock()
	out := wire.RelaysState{Relays: make([]wire.RelayState, len(r.relays)), Regions: r.regionList}
	for i, s := range r.relays {
		out.Relays[i] = s.RelayState
	}
	r.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(out)
}

// Limits of the router's HTTP server (HTTPServer, LimitListener).
type Limits struct {
	// Timeout bounds slow and idle connections: request headers must
	// arrive within it, a whole request within twice it, an idle
	// keep-alive connection is closed after three times it and a response
	// written within six times it. 0 means DefaultTimeout.
	Timeout time.Duration
	// MaxConns caps the connections open at once; past it new ones are
	// closed at once. 0 means DefaultMaxConns; negative means no cap.
	MaxConns int
}

// Defaults of Limits.
const (
	DefaultTimeout  = 10 * time.Second
	DefaultMaxConns = 10000
)

// HTTPServer returns an http.Server for r with lim's timeouts; serve it on
// LimitListener for the connection cap.
func (r *Router) HTTPServer(lim Limits) *http.Server {
	t := lim.Timeout
	if t <= 0 {
		t = DefaultTimeout
	}
	return &http.Server{
		Handler:           r,
		ReadHeaderTimeout: t,
		ReadTimeout:       2 * t,
		IdleTimeout:       3 * t,
		WriteTimeout:      6 * t,
		ErrorLog:          slog.NewLogLogger(r.logger.Handler(), slog.LevelDebug),
	}
}

// LimitListener caps the connections l holds open at lim.MaxConns.
func LimitListener(l net.Listener, lim Limits) net.Listener {
	n := lim.MaxConns
	if n == 0 {
		n = DefaultMaxConns
	}
	return connlimit.New(l, n)
}

// orNone is s, or "none" for "".
func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
