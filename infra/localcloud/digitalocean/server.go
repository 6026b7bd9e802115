package digitalocean

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/relayfleet/relayfleet/infra/localcloud"
)

// Rate limits as DigitalOcean states them: 5000 requests an hour.
const (
	defaultLimit  = 5000
	defaultWindow = time.Hour
	maxBody       = 1 << 20 // request bodies; user data alone may be 64 KiB
)

// Server is the local cloud's DigitalOcean API, an http.Handler. It
// serves the API's paths as DigitalOcean spells them, starting with /v2/
// (/v2/droplets, /v2/actions/ID, ...): mount it at "/v2/" without
// stripping the prefix, so that the pagination links it writes are the
// paths it serves. (Mounted under http.StripPrefix("/v2", s) it serves the
// same and still writes /v2 links.) Point godo, and so our backend, at the
// server's root: DIGITALOCEAN_API_URL=http://ADDR/.
type Server struct {
	m        localcloud.Machines
	cfg      localcloud.Config
	requests *localcloud.Requests

	ctx    context.Context // cancelled by Close: in-flight creates and deletes stop
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	st     state
	limit  int           // requests a window
	window time.Duration // the rate limit's window
	used   int           // requests in the current window
	reset  time.Time     // when the current window ends
	now    func() time.Time
}

// New returns a Server keeping its records in cfg.StateFile (when set),
// and booting droplets' machines with m. Droplets whose creation or
// deletion was under way when a previous server stopped are deleted
// (their user data is not kept: it holds the host key): the create action
// shows "errored", and the caller creates them again.
func New(m localcloud.Machines, cfg localcloud.Config) (*Server, error) {
	if m == nil {
		return nil, errors.New("digitalocean local cloud: no Machines")
	}
	if strings.TrimSpace(cfg.Token) == "" {
		return nil, errors.New("digitalocean local cloud: no token (Config.Token): every request must carry one")
	}
	requests, err := localcloud.NewRequests(cfg.RequestsFile, cfg.Logf)
	if err != nil {
		return nil, fmt.Errorf("digitalocean local cloud: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{m: m, cfg: cfg, requests: requests, ctx: ctx, cancel: cancel, limit: defaultLimit, window: defaultWindow, now: time.Now}
	s.st = newState()
	if cfg.StateFile != "" {
		if err := s.st.load(cfg.StateFile); err != nil {
			cancel()
			return nil, err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var unfinished []*droplet
	for _, d := range s.st.Droplets {
		if d.Status == statusNew || d.Deleting {
			unfinished = append(unfinished, d)
		}
	}
	for _, d := range unfinished {
		if d.Status == statusNew {
			s.failCreateLocked(d, "the local cloud restarted while the droplet was created")
		}
		s.deleteLocked(d)
	}
	if err := s.saveLocked(); err != nil {
		cancel()
		return nil, err
	}
	return s, nil
}

// Close stops the creations and deletions under way and waits for them.
// Their droplets are cleaned up by the next New on the same state file.
func (s *Server) Close() error {
	// Under the lock: boot and deleteLocked start work only while the
	// context is live, so none starts once Wait has begun.
	s.mu.Lock()
	s.cancel()
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

// Requests are the counts of the requests answered so far.
func (s *Server) Requests() localcloud.RequestCounts { return s.requests.Counts() }

// apiErr is DigitalOcean's error body.
type apiErr struct {
	ID        string `json:"id"`
	Message   string `json:"message"`
	RequestID string `json:"request_id,omitempty"`
}

// errorIDs are DigitalOcean's error ids by status.
var errorIDs = map[int]string{
	http.StatusBadRequest:          "bad_request",
	http.StatusUnauthorized:        "Unauthorized",
	http.StatusForbidden:           "forbidden",
	http.StatusNotFound:            "not_found",
	http.StatusMethodNotAllowed:    "method_not_allowed",
	http.StatusConflict:            "conflict",
	http.StatusUnprocessableEntity: "unprocessable_entity",
	http.StatusTooManyRequests:     "too_many_requests",
	http.StatusInternalServerError: "server_error",
}

// reply is one answer, written by ServeHTTP.
type reply struct {
	status int
	body   any // JSON; nil writes no body
}

func ok(status int, body any) reply { return reply{status: status, body: body} }

func fail(status int, format string, args ...any) reply {
	return reply{status: status, body: apiErr{ID: errorIDs[status], Message: fmt.Sprintf(format, args...)}}
}

func notFound() reply {
	return fail(http.StatusNotFound, "The resource you were accessing could not be found.")
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := r.URL.Path
	if !strings.HasPrefix(path, "/v2/") {
		path = "/v2" + path // mounted under http.StripPrefix("/v2", s)
	}
	rid := uuid()
	w.Header().Set("X-Request-Id", rid)
	status := s.serve(w, r, path, rid)
	if s.cfg.Logf != nil {
		s.cfg.Logf("digitalocean: %s %s %d", r.Method, path, status)
	}
	s.requests.Add(localcloud.Route(r.Method, path, 2), status)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request, path, rid string) int {
	write := func(rp reply) int {
		if e, ok := rp.body.(apiErr); ok {
			e.RequestID = rid
			rp.body = e
		}
		if rp.body == nil {
			w.WriteHeader(rp.status)
			return rp.status
		}
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.WriteHeader(rp.status)
		json.NewEncoder(w).Encode(rp.body)
		return rp.status
	}
	if !s.authorized(r) {
		return write(fail(http.StatusUnauthorized, "Unable to authenticate you"))
	}
	if wait, limited := s.cfg.Faults.RateLimited(); limited {
		return write(s.rateLimited(w, wait))
	}
	if rp, limited := s.rateLimit(w); limited {
		return write(rp)
	}
	var body []byte
	if r.Body != nil {
		b, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
		if err != nil {
			return write(fail(http.StatusBadRequest, "reading the request body: %v", err))
		}
		if len(b) > maxBody {
			return write(fail(http.StatusBadRequest, "the request body is over %d bytes", maxBody))
		}
		body = b
	}
	req := &request{r: r, path: path, parts: strings.Split(strings.Trim(path, "/"), "/")[1:], body: body}
	return write(s.route(req))
}

// authorized checks the bearer token in constant time.
func (s *Server) authorized(r *http.Request) bool {
	tok, found := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return found && subtle.ConstantTimeCompare([]byte(tok), []byte(s.cfg.Token)) == 1
}

// rateLimit counts the request and sets DigitalOcean's ratelimit headers;
// past the limit it answers 429 until the window resets.
func (s *Server) rateLimit(w http.ResponseWriter) (reply, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if !now.Before(s.reset) {
		s.used, s.reset = 0, now.Add(s.window)
	}
	s.used++
	remaining := max(s.limit-s.used, 0)
	h := w.Header()
	h.Set("Ratelimit-Limit", strconv.Itoa(s.limit))
	h.Set("Ratelimit-Remaining", strconv.Itoa(remaining))
	h.Set("Ratelimit-Reset", strconv.FormatInt(s.reset.Unix(), 10))
	if s.used > s.limit {
		h.Set("Retry-After", strconv.Itoa(int(s.reset.Sub(now).Round(time.Second)/time.Second)+1))
		return fail(http.StatusTooManyRequests, "API Rate limit exceeded."), true
	}
	return reply{}, false
}

// rateLimited is the 429 of a request the faults file limits: headers as
// if the hour's requests were spent, back in full after wait.
func (s *Server) rateLimited(w http.ResponseWriter, wait time.Duration) reply {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := w.Header()
	h.Set("Ratelimit-Limit", strconv.Itoa(s.limit))
	h.Set("Ratelimit-Remaining", "0")
	h.Set("Ratelimit-Reset", strconv.FormatInt(s.now().Add(wait).Unix(), 10))
	h.Set("Retry-After", strconv.Itoa(int(wait/time.Second)))
	return fail(http.StatusTooManyRequests, "API Rate limit exceeded.")
}

// request is one API request: parts is the path after /v2, split.
type request struct {
	r     *http.Request
	path  string
	parts []string
	body  []byte
}

func (q *request) is(method string, n int) bool { return q.r.Method == method && len(q.parts) == n }

// decode reads the JSON body into v; unknown fields are allowed, as the
// API allows them.
func (q *request) decode(v any) error {
	if len(q.body) == 0 {
		return errors.New("no request body: want a JSON object")
	}
	if err := json.Unmarshal(q.body, v); err != nil {
		return fmt.Errorf("the request body: %v", err)
	}
	return nil
}

func (s *Server) route(q *request) reply {
	if len(q.parts) == 0 {
		return notFound()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch q.parts[0] {
	case "droplets":
		return s.droplets(q)
	case "actions":
		return s.actions(q)
	case "tags":
		return s.tags(q)
	case "firewalls":
		return s.firewalls(q)
	case "sizes":
		if q.is(http.MethodGet, 1) {
			return ok(http.StatusOK, page(q, "sizes", sizeList(), len(sizes)))
		}
	}
	return notFound()
}

// page cuts items to the request's page (page, per_page: 20 by default,
// at most 200) with DigitalOcean's links.pages and meta.total.
func page[T any](q *request, key string, items []T, total int) map[string]any {
	query := q.r.URL.Query()
	per, err := strconv.Atoi(query.Get("per_page"))
	if err != nil || per < 1 {
		per = 20
	}
	per = min(per, 200)
	n, err := strconv.Atoi(query.Get("page"))
	if err != nil || n < 1 {
		n = 1
	}
	last := max((len(items)+per-1)/per, 1)
	lo, hi := min((n-1)*per, len(items)), min(n*per, len(items))
	if items == nil {
		items = []T{} // [], not null
	}
	link := func(p int) string {
		v := url.Values{}
		for k, vs := range query {
			v[k] = vs
		}
		v.Set("page", strconv.Itoa(p))
		scheme := "http"
		if q.r.TLS != nil {
			scheme = "https"
		}
		return scheme + "://" + q.r.Host + q.path + "?" + v.Encode()
	}
	pages := map[string]any{}
	if n < last {
		pages["next"], pages["last"] = link(n+1), link(last)
	}
	if n > 1 {
		pages["first"], pages["prev"] = link(1), link(min(n-1, last))
	}
	return map[string]any{key: items[lo:hi], "links": map[string]any{"pages": pages}, "meta": map[string]any{"total": total}}
}

// saveLocked writes the records to the state file, if any: a temporary
// file beside it, mode 0600, synced, then renamed over it.
func (s *Server) saveLocked() error {
	if s.cfg.StateFile == "" {
		return nil
	}
	data, err := json.MarshalIndent(&s.st, "", "  ")
	if err != nil {
		return err
	}
	if err := writeFileAtomic(s.cfg.StateFile, append(data, '\n')); err != nil {
		return fmt.Errorf("digitalocean local cloud state %s: %w", s.cfg.StateFile, err)
	}
	return nil
}

func writeFileAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	err = f.Chmod(0o600)
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	return err
}

// saved answers rp once the records are on disk, or 500 if they could
// not be written.
func (s *Server) saved(rp reply) reply {
	if err := s.saveLocked(); err != nil {
		s.logf("%v", err)
		return fail(http.StatusInternalServerError, "the local cloud could not save its state; see its log")
	}
	return rp
}

func (s *Server) logf(format string, args ...any) {
	if s.cfg.Logf != nil {
		s.cfg.Logf("digitalocean: "+format, args...)
	}
}
