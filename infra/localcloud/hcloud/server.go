// Package hcloud serves the part of the Hetzner Cloud API
// (https://docs.hetzner.cloud) that relayfleet's hcloud backend
// (infra/hcloud, on hcloud-go) uses, backed by localcloud.Machines:
// servers (create with user data, labels, server type, location and image;
// get; list by name and label selector; update labels; delete), actions and
// their polling, server types, locations and images, and firewalls (create,
// set rules, apply to and remove from label selectors and servers, update,
// delete), with the API's pagination, error bodies, bearer token and rate
// limit.
//
// Creating a server boots a machine (a lab box under `fleet lab cloud
// hcloud`) and reports its address as the server's public IPv4; the
// server runs once the machine's sshd answers with the user data's host
// key. Not implemented: IPv6 (public_net.ipv6 is null), power actions,
// rebuilds, volumes, networks, primary IPs, SSH keys, placement groups;
// firewalls are recorded and listed but not enforced on the boxes.
//
// With localcloud.Config.Faults it gets wrong what the faults file says
// (package localcloud/faults), as Hetzner does: a create refused for
// capacity is 412 resource_unavailable "error during placement"; a
// request rate limited is 429 rate_limit_exceeded with Retry-After and
// RateLimit-Remaining 0; a hung create leaves its create_server and
// start_server actions running and the server initializing; a server
// without an address runs with public_net.ipv4 null. It counts the
// requests it answers (Requests; localcloud.Config.RequestsFile).
//
// Requests and responses are checked against Hetzner's published OpenAPI
// description (testdata/, see SOURCE) in the tests.
package hcloud

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/relayfleet/relayfleet/infra/localcloud"
	"github.com/relayfleet/relayfleet/infra/localcloud/faults"
	"github.com/relayfleet/relayfleet/internal/atomicfile"
)

// MaxUserData is the most user data a server takes (Hetzner's limit).
const MaxUserData = 32 << 10

// Server is the local Hetzner Cloud API: an http.Handler to mount at /v1.
type Server struct {
	m        localcloud.Machines
	cfg      localcloud.Config
	types    []serverType
	requests *localcloud.Requests

	ctx    context.Context // cancelled by Close: boots and deletions in flight stop
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu    sync.Mutex
	st    state
	limit rateLimit
	now   func() time.Time
}

// state is what the state file keeps.
type state struct {
	Version   int                 `json:"version"`
	NextID    int64               `json:"next_id"`
	Servers   map[int64]*server   `json:"servers"`
	Actions   map[int64]*action   `json:"actions"`
	Firewalls map[int64]*firewall `json:"firewalls"`
}

const stateVersion = 1

type server struct {
	ID         int64             `json:"id"`
	Name       string            `json:"name"`
	Status     string            `json:"status"`
	Created    time.Time         `json:"created"`
	Labels     map[string]string `json:"labels"`
	ServerType string            `json:"server_type"`
	Location   string            `json:"location"`
	Image      string            `json:"image"`
	IPv4       string            `json:"ipv4,omitempty"`
	// NoIPv4: the faults file said the server gets no address; IPv4 is
	// its machine's, not shown.
	NoIPv4 bool `json:"no_ipv4,omitempty"`
}

type action struct {
	ID        int64      `json:"id"`
	Command   string     `json:"command"`
	Status    string     `json:"status"` // running, success, error
	Started   time.Time  `json:"started"`
	Finished  *time.Time `json:"finished,omitempty"`
	ErrCode   string     `json:"error_code,omitempty"`
	ErrMsg    string     `json:"error_message,omitempty"`
	Resources []resRef   `json:"resources"`
}

type resRef struct {
	ID   int64  `json:"id"`
	Type string `json:"type"`
}

type firewall struct {
	ID        int64             `json:"id"`
	Name      string            `json:"name"`
	Labels    map[string]string `json:"labels"`
	Created   time.Time         `json:"created"`
	Rules     []rule            `json:"rules"`
	AppliedTo []applied         `json:"applied_to"`
}

type rule struct {
	Direction      string   `json:"direction"`
	Protocol       string   `json:"protocol"`
	Port           *string  `json:"port"`
	SourceIPs      []string `json:"source_ips"`
	DestinationIPs []string `json:"destination_ips"`
	Description    *string  `json:"description"`
}

type applied struct {
	Type          string `json:"type"` // server or label_selector
	ServerID      int64  `json:"server_id,omitempty"`
	LabelSelector string `json:"label_selector,omitempty"`
}

// New returns the API over m, with the records of cfg.StateFile when it
// exists. Servers a previous run left booting or deleting are deleted.
func New(m localcloud.Machines, cfg localcloud.Config) (*Server, error) {
	if m == nil {
		return nil, errors.New("hcloud: no machines")
	}
	if cfg.Token == "" {
		return nil, errors.New("hcloud: no token: every request must carry one")
	}
	types, err := catalog()
	if err != nil {
		return nil, fmt.Errorf("hcloud: %w", err)
	}
	requests, err := localcloud.NewRequests(cfg.RequestsFile, cfg.Logf)
	if err != nil {
		return nil, fmt.Errorf("hcloud: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		m: m, cfg: cfg, types: types, requests: requests, ctx: ctx, cancel: cancel, now: time.Now,
		st:    state{Version: stateVersion, NextID: 1000, Servers: map[int64]*server{}, Actions: map[int64]*action{}, Firewalls: map[int64]*firewall{}},
		limit: rateLimit{limit: 3600, every: time.Second},
	}
	s.limit.left = s.limit.limit
	if cfg.StateFile != "" {
		data, err := os.ReadFile(cfg.StateFile)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			cancel()
			return nil, fmt.Errorf("hcloud: state file: %w", err)
		default:
			var st state
			if err := json.Unmarshal(data, &st); err != nil || st.Version != stateVersion {
				cancel()
				return nil, fmt.Errorf("hcloud: state file %s: not a version %d local hcloud state (%v)", cfg.StateFile, stateVersion, err)
			}
			st.Servers = orEmpty(st.Servers)
			st.Actions = orEmpty(st.Actions)
			st.Firewalls = orEmpty(st.Firewalls)
			s.st = st
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range s.st.Actions {
		if a.Status == "running" {
			s.finish(a, "action_failed", "the local cloud restarted while the action ran")
		}
	}
	for _, srv := range s.st.Servers {
		if srv.Status != "running" {
			s.startDelete(srv)
		}
	}
	if err := s.saveLocked(); err != nil {
		cancel()
		return nil, err
	}
	return s, nil
}

func orEmpty[T any](m map[int64]T) map[int64]T {
	if m == nil {
		return map[int64]T{}
	}
	return m
}

// Close stops the boots and deletions in flight (a boot stopped so leaves
// no machine) and waits for them.
func (s *Server) Close() error {
	s.cancel()
	s.wg.Wait()
	return nil
}

// Wait waits until no boot or deletion is in flight.
func (s *Server) Wait() { s.wg.Wait() }

// SetRateLimit sets the rate limit: limit requests, one more allowed per
// every (Hetzner: 3600, one a second).
func (s *Server) SetRateLimit(limit int, every time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.limit = rateLimit{limit: limit, left: limit, every: every}
}

// Requests are the counts of the requests answered so far.
func (s *Server) Requests() localcloud.RequestCounts { return s.requests.Counts() }

// ServerCount is the number of servers the API lists.
func (s *Server) ServerCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.st.Servers)
}

func (s *Server) saveLocked() error {
	if s.cfg.StateFile == "" {
		return nil
	}
	data, err := json.MarshalIndent(s.st, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.Write(s.cfg.StateFile, data, 0o600); err != nil {
		return fmt.Errorf("hcloud: state file: %w", err)
	}
	return nil
}

func (s *Server) logf(format string, args ...any) {
	if s.cfg.Logf != nil {
		s.cfg.Logf(format, args...)
	}
}

// apiError is an error answer in the API's shape.
type apiError struct {
	status  int
	code    string
	message string
	details any
}

func errInvalid(field, msg string) *apiError {
	return &apiError{http.StatusBadRequest, "invalid_input", "invalid input in field '" + field + "'",
		map[string]any{"fields": []any{map[string]any{"name": field, "messages": []string{msg}}}}}
}

func errNotFound(kind string, id int64) *apiError {
	return &apiError{http.StatusNotFound, "not_found", fmt.Sprintf("%s with ID '%d' not found", kind, id), nil}
}

func errUnique(kind, field string) *apiError {
	return &apiError{http.StatusConflict, "uniqueness_error", kind + " " + field + " is already used",
		map[string]any{"fields": []any{map[string]any{"name": field}}}}
}

// statusWriter records the status for the request log.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

// ServeHTTP serves the API; paths are relative to /v1.
func (s *Server) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	w := &statusWriter{ResponseWriter: rw, status: http.StatusOK}
	defer func() {
		s.logf("hcloud: %s %s %d", r.Method, r.URL.Path, w.status)
		s.requests.Add(localcloud.Route(r.Method, r.URL.Path, 1), w.status)
	}()
	const prefix = "Bearer "
	auth := r.Header.Get("Authorization")
	if !strings.HasPrefix(auth, prefix) || subtle.ConstantTimeCompare([]byte(auth[len(prefix):]), []byte(s.cfg.Token)) != 1 {
		writeError(w, &apiError{http.StatusUnauthorized, "unauthorized", "unable to authenticate", nil})
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if wait, limited := s.cfg.Faults.RateLimited(); limited {
		// As the limit spent: none remaining, back in full after the wait.
		h := w.Header()
		h.Set("RateLimit-Limit", strconv.Itoa(s.limit.limit))
		h.Set("RateLimit-Remaining", "0")
		h.Set("RateLimit-Reset", strconv.FormatInt(s.now().Add(wait).Unix(), 10))
		h.Set("Retry-After", strconv.Itoa(int(wait/time.Second)))
		writeError(w, &apiError{http.StatusTooManyRequests, "rate_limit_exceeded", fmt.Sprintf("limit of %d requests per hour reached", s.limit.limit), nil})
		return
	}
	ok := s.limit.take(s.now(), w.Header())
	if !ok {
		writeError(w, &apiError{http.StatusTooManyRequests, "rate_limit_exceeded", fmt.Sprintf("limit of %d requests per hour reached", s.limit.limit), nil})
		return
	}
	var body []byte
	if r.Body != nil {
		var err error
		if body, err = io.ReadAll(io.LimitReader(r.Body, 1<<20)); err != nil {
			writeError(w, &apiError{http.StatusBadRequest, "json_error", "request body could not be read", nil})
			return
		}
	}
	status, v, aerr := s.route(r, body)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	if err := s.saveLocked(); err != nil {
		s.logf("%v", err)
		writeError(w, &apiError{http.StatusInternalServerError, "server_error", "the local cloud could not save its state", nil})
		return
	}
	if v == nil {
		w.WriteHeader(status)
		return
	}
	writeJSON(w, status, v)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, e *apiError) {
	writeJSON(w, e.status, map[string]any{"error": map[string]any{"code": e.code, "message": e.message, "details": e.details}})
}

// rateLimit is Hetzner's token bucket: limit requests, refilled one per
// every.
type rateLimit struct {
	limit, left int
	every       time.Duration
	last        time.Time
}

func (l *rateLimit) take(now time.Time, h http.Header) bool {
	if !l.last.IsZero() && l.every > 0 {
		n := int(now.Sub(l.last) / l.every)
		if n > 0 {
			l.left = min(l.limit, l.left+n)
			l.last = l.last.Add(time.Duration(n) * l.every)
		}
	} else {
		l.last = now
	}
	if l.left >= l.limit {
		l.last = now
	}
	ok := l.left > 0
	if ok {
		l.left--
	}
	reset := now.Add(time.Duration(l.limit-l.left) * l.every)
	h.Set("RateLimit-Limit", strconv.Itoa(l.limit))
	h.Set("RateLimit-Remaining", strconv.Itoa(l.left))
	h.Set("RateLimit-Reset", strconv.FormatInt(reset.Unix(), 10))
	return ok
}

// route dispatches a request, with s.mu held.
func (s *Server) route(r *http.Request, body []byte) (int, any, *apiError) {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	var id int64
	if len(parts) > 1 {
		n, err := strconv.ParseInt(parts[1], 10, 64)
		if err != nil || n <= 0 {
			return 0, nil, &apiError{http.StatusBadRequest, "invalid_input", "invalid ID " + strconv.Quote(parts[1]), nil}
		}
		id = n
	}
	m := r.Method
	q := r.URL.Query()
	switch {
	case len(parts) == 1 && parts[0] == "servers" && m == http.MethodGet:
		return s.listServers(q)
	case len(parts) == 1 && parts[0] == "servers" && m == http.MethodPost:
		return s.createServer(body)
	case len(parts) == 2 && parts[0] == "servers":
		srv, ok := s.st.Servers[id]
		if !ok {
			return 0, nil, errNotFound("server", id)
		}
		switch m {
		case http.MethodGet:
			return 200, map[string]any{"server": s.serverJSON(srv)}, nil
		case http.MethodPut:
			return s.updateServer(srv, body)
		case http.MethodDelete:
			a := s.startDelete(srv)
			return 200, map[string]any{"action": a.json()}, nil
		}
	case len(parts) == 1 && parts[0] == "actions" && m == http.MethodGet:
		return s.listActions(q)
	case len(parts) == 2 && parts[0] == "actions" && m == http.MethodGet:
		a, ok := s.st.Actions[id]
		if !ok {
			return 0, nil, errNotFound("action", id)
		}
		return 200, map[string]any{"action": a.json()}, nil
	case len(parts) == 1 && parts[0] == "server_types" && m == http.MethodGet:
		var out []map[string]any
		for _, t := range s.types {
			if q.Get("name") == "" || q.Get("name") == t.Name {
				out = append(out, t.json())
			}
		}
		return paged(q, "server_types", out)
	case len(parts) == 2 && parts[0] == "server_types" && m == http.MethodGet:
		for _, t := range s.types {
			if t.ID == id {
				return 200, map[string]any{"server_type": t.json()}, nil
			}
		}
		return 0, nil, errNotFound("server_type", id)
	case len(parts) == 1 && parts[0] == "locations" && m == http.MethodGet:
		var out []map[string]any
		for _, l := range knownLocations {
			if q.Get("name") == "" || q.Get("name") == l.Name {
				out = append(out, l.json())
			}
		}
		return paged(q, "locations", out)
	case len(parts) == 2 && parts[0] == "locations" && m == http.MethodGet:
		for _, l := range knownLocations {
			if l.ID == id {
				return 200, map[string]any{"location": l.json()}, nil
			}
		}
		return 0, nil, errNotFound("location", id)
	case len(parts) == 1 && parts[0] == "images" && m == http.MethodGet:
		var out []map[string]any
		for _, i := range images {
			if (q.Get("name") == "" || q.Get("name") == i.Name) && (len(q["type"]) == 0 || slices.Contains(q["type"], "system")) {
				out = append(out, i.json())
			}
		}
		return paged(q, "images", out)
	case len(parts) == 2 && parts[0] == "images" && m == http.MethodGet:
		for _, i := range images {
			if i.ID == id {
				return 200, map[string]any{"image": i.json()}, nil
			}
		}
		return 0, nil, errNotFound("image", id)
	case len(parts) == 1 && parts[0] == "firewalls" && m == http.MethodGet:
		return s.listFirewalls(q)
	case len(parts) == 1 && parts[0] == "firewalls" && m == http.MethodPost:
		return s.createFirewall(body)
	case len(parts) >= 2 && parts[0] == "firewalls":
		fw, ok := s.st.Firewalls[id]
		if !ok {
			return 0, nil, errNotFound("firewall", id)
		}
		switch {
		case len(parts) == 2 && m == http.MethodGet:
			return 200, map[string]any{"firewall": s.firewallJSON(fw)}, nil
		case len(parts) == 2 && m == http.MethodPut:
			return s.updateFirewall(fw, body)
		case len(parts) == 2 && m == http.MethodDelete:
			if len(fw.AppliedTo) > 0 {
				return 0, nil, &apiError{http.StatusUnprocessableEntity, "resource_in_use", "firewall is still applied to resources", nil}
			}
			delete(s.st.Firewalls, id)
			return http.StatusNoContent, nil, nil
		case len(parts) == 4 && parts[2] == "actions" && m == http.MethodPost:
			return s.firewallAction(fw, parts[3], body)
		}
	}
	return 0, nil, &apiError{http.StatusNotFound, "not_found", "no such route: " + m + " /" + strings.Join(parts, "/"), nil}
}

// paged answers a list with the API's pagination (page, per_page: default
// 25, at most 50).
func paged(q map[string][]string, key string, items []map[string]any) (int, any, *apiError) {
	page, perPage := 1, 25
	for name, p := range map[string]*int{"page": &page, "per_page": &perPage} {
		if v := first(q[name]); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return 0, nil, errInvalid(name, "must be a positive integer")
			}
			*p = n
		}
	}
	perPage = min(perPage, 50)
	total := len(items)
	last := max(1, (total+perPage-1)/perPage)
	lo := min(total, (page-1)*perPage)
	hi := min(total, lo+perPage)
	out := items[lo:hi]
	if out == nil {
		out = []map[string]any{}
	}
	var prev, next any
	if page > 1 {
		prev = page - 1
	}
	if page < last {
		next = page + 1
	}
	return 200, map[string]any{key: out, "meta": map[string]any{"pagination": map[string]any{
		"page": page, "per_page": perPage, "previous_page": prev, "next_page": next, "last_page": last, "total_entries": total,
	}}}, nil
}

func first(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

func decode(body []byte, v any) *apiError {
	if err := json.Unmarshal(body, v); err != nil {
		return &apiError{http.StatusBadRequest, "json_error", "invalid JSON: " + strings.Join(strings.Fields(err.Error()), " "), nil}
	}
	return nil
}

func (s *Server) newID() int64 { s.st.NextID++; return s.st.NextID }

func (s *Server) newAction(command string, done bool, res ...resRef) *action {
	now := s.now().UTC().Truncate(time.Second)
	a := &action{ID: s.newID(), Command: command, Status: "running", Started: now, Resources: res}
	if done {
		a.Status, a.Finished = "success", &now
	}
	s.st.Actions[a.ID] = a
	return a
}

// finish ends a running action: with success when code is "", else with
// the error.
func (s *Server) finish(a *action, code, msg string) {
	now := s.now().UTC().Truncate(time.Second)
	a.Finished = &now
	a.Status = "success"
	if code != "" {
		a.Status, a.ErrCode, a.ErrMsg = "error", code, msg
	}
}

func (a *action) json() map[string]any {
	progress := 0
	if a.Status != "running" {
		progress = 100
	}
	var errObj any
	if a.Status == "error" {
		errObj = map[string]any{"code": a.ErrCode, "message": a.ErrMsg}
	}
	var fin any
	if a.Finished != nil {
		fin = a.Finished.Format(time.RFC3339)
	}
	res := []any{}
	for _, r := range a.Resources {
		res = append(res, map[string]any{"id": r.ID, "type": r.Type})
	}
	return map[string]any{
		"id": a.ID, "command": a.Command, "status": a.Status, "progress": progress,
		"started": a.Started.Format(time.RFC3339), "finished": fin, "resources": res, "error": errObj,
	}
}

func (s *Server) listActions(q map[string][]string) (int, any, *apiError) {
	var out []map[string]any
	for _, a := range sortedByID(s.st.Actions) {
		if ids := q["id"]; len(ids) > 0 && !slices.Contains(ids, strconv.FormatInt(a.ID, 10)) {
			continue
		}
		if st := q["status"]; len(st) > 0 && !slices.Contains(st, a.Status) {
			continue
		}
		out = append(out, a.json())
	}
	return paged(q, "actions", out)
}

func sortedByID[T any](m map[int64]T) []T {
	ids := slices.Sorted(maps.Keys(m))
	out := make([]T, 0, len(ids))
	for _, id := range ids {
		out = append(out, m[id])
	}
	return out
}

func (s *Server) serverType(name string) (serverType, bool) {
	i := slices.IndexFunc(s.types, func(t serverType) bool { return t.Name == name })
	if i < 0 {
		return serverType{}, false
	}
	return s.types[i], true
}

func (s *Server) serverJSON(srv *server) map[string]any {
	t, _ := s.serverType(srv.ServerType)
	loc, _ := locationNamed(srv.Location)
	var ipv4 any
	if srv.IPv4 != "" && !srv.NoIPv4 {
		ipv4 = map[string]any{"id": srv.ID, "ip": srv.IPv4, "blocked": false, "dns_ptr": "static." + srv.IPv4 + ".clients.your-server.de"}
	}
	var img any
	for _, i := range images {
		if i.Name == srv.Image {
			img = i.json()
		}
	}
	fws := []any{}
	for _, fw := range sortedByID(s.st.Firewalls) {
		if s.appliesTo(fw, srv) {
			fws = append(fws, map[string]any{"id": fw.ID, "status": "applied"})
		}
	}
	return map[string]any{
		"id": srv.ID, "name": srv.Name, "status": srv.Status, "created": srv.Created.Format(time.RFC3339),
		"public_net":  map[string]any{"ipv4": ipv4, "ipv6": nil, "floating_ips": []int64{}, "firewalls": fws},
		"private_net": []any{}, "server_type": t.json(), "datacenter": loc.datacenter(s.types), "location": loc.json(),
		"image": img, "iso": nil, "rescue_enabled": false, "locked": false, "backup_window": nil,
		"outgoing_traffic": 0, "ingoing_traffic": 0, "included_traffic": t.Prices[srv.Location].Included,
		"protection": map[string]any{"delete": false, "rebuild": false}, "labels": orNoLabels(srv.Labels),
		"volumes": []int64{}, "load_balancers": []int64{}, "primary_disk_size": 40, "placement_group": nil,
	}
}

func orNoLabels(l map[string]string) map[string]string {
	if l == nil {
		return map[string]string{}
	}
	return l
}

func (s *Server) listServers(q map[string][]string) (int, any, *apiError) {
	sel, err := parseSelector(first(q["label_selector"]))
	if err != nil {
		return 0, nil, errInvalid("label_selector", err.Error())
	}
	var out []map[string]any
	for _, srv := range sortedByID(s.st.Servers) {
		if name := first(q["name"]); name != "" && srv.Name != name {
			continue
		}
		if st := q["status"]; len(st) > 0 && !slices.Contains(st, srv.Status) {
			continue
		}
		if sel.matches(srv.Labels) {
			out = append(out, s.serverJSON(srv))
		}
	}
	return paged(q, "servers", out)
}

// serverName is what Hetzner takes as a server name: a hostname.
var serverName = regexp.MustCompile(`^[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?(\.[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?)*$`)

// nameOrID is a request's reference to a type, image or location: a name,
// or an id as a number or a string.
type nameOrID string

func (n *nameOrID) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*n = nameOrID(s)
		return nil
	}
	var i int64
	if err := json.Unmarshal(b, &i); err != nil {
		return fmt.Errorf("want a name or an ID")
	}
	*n = nameOrID(strconv.FormatInt(i, 10))
	return nil
}

func (s *Server) createServer(body []byte) (int, any, *apiError) {
	var req struct {
		Name             string             `json:"name"`
		ServerType       nameOrID           `json:"server_type"`
		Image            nameOrID           `json:"image"`
		Location         nameOrID           `json:"location"`
		Datacenter       nameOrID           `json:"datacenter"`
		UserData         string             `json:"user_data"`
		Labels           *map[string]string `json:"labels"`
		StartAfterCreate *bool              `json:"start_after_create"`
		SSHKeys          []json.RawMessage  `json:"ssh_keys"`
		Networks         []int64            `json:"networks"`
		Volumes          []int64            `json:"volumes"`
		Firewalls        []json.RawMessage  `json:"firewalls"`
	}
	if e := decode(body, &req); e != nil {
		return 0, nil, e
	}
	if !serverName.MatchString(req.Name) || len(req.Name) > 63 {
		return 0, nil, errInvalid("name", "must be a valid hostname of at most 63 characters")
	}
	t, ok := s.serverType(string(req.ServerType))
	if !ok {
		for _, x := range s.types {
			if strconv.FormatInt(x.ID, 10) == string(req.ServerType) {
				t, ok = x, true
			}
		}
	}
	if !ok {
		return 0, nil, errInvalid("server_type", fmt.Sprintf("server type %s not found", req.ServerType))
	}
	img := string(req.Image)
	if i := slices.IndexFunc(images, func(i image) bool { return i.Name == img || strconv.FormatInt(i.ID, 10) == img }); i < 0 {
		return 0, nil, errInvalid("image", fmt.Sprintf("image %q not found (the local cloud boots debian-12)", img))
	} else {
		img = images[i].Name
	}
	locName := string(req.Location)
	if locName == "" && req.Datacenter != "" {
		locName, _, _ = strings.Cut(string(req.Datacenter), "-")
	}
	if locName == "" {
		locName = t.Locations[0]
	}
	loc, ok := locationNamed(locName)
	if !ok {
		return 0, nil, errInvalid("location", fmt.Sprintf("location %q not found", locName))
	}
	if !slices.Contains(t.Locations, loc.Name) {
		return 0, nil, errInvalid("server_type", fmt.Sprintf("server type %s is not available in %s", t.Name, loc.Name))
	}
	if len(req.UserData) > MaxUserData {
		return 0, nil, errInvalid("user_data", fmt.Sprintf("at most %d bytes", MaxUserData))
	}
	if _, err := localcloud.ParseCloudInit([]byte(req.UserData)); err != nil {
		return 0, nil, errInvalid("user_data", err.Error())
	}
	labels := map[string]string{}
	if req.Labels != nil && *req.Labels != nil {
		labels = *req.Labels
	}
	if err := validLabels(labels); err != nil {
		return 0, nil, errInvalid("labels", err.Error())
	}
	if len(req.SSHKeys)+len(req.Networks)+len(req.Volumes)+len(req.Firewalls) > 0 {
		return 0, nil, errInvalid("ssh_keys", "ssh_keys, networks, volumes and firewalls at create are not implemented by the local cloud: pass keys in user_data, apply firewalls by label selector")
	}
	if req.StartAfterCreate != nil && !*req.StartAfterCreate {
		return 0, nil, errInvalid("start_after_create", "the local cloud starts every server it creates")
	}
	for _, o := range s.st.Servers {
		if o.Name == req.Name {
			return 0, nil, errUnique("server", "name")
		}
	}
	fc := faults.Create{Name: req.Name, Shape: t.Name, Location: loc.Name}
	if _, refused := s.cfg.Faults.Unavailable(fc); refused {
		s.logf("hcloud: server %s: %s in %s refused as unavailable (faults file)", req.Name, t.Name, loc.Name)
		// Hetzner's answer when it cannot place the server type there.
		return 0, nil, &apiError{http.StatusPreconditionFailed, "resource_unavailable", "error during placement", nil}
	}
	srv := &server{
		ID: s.newID(), Name: req.Name, Status: "initializing", Created: s.now().UTC().Truncate(time.Second),
		Labels: maps.Clone(labels), ServerType: t.Name, Location: loc.Name, Image: img,
		NoIPv4: s.cfg.Faults.NoAddress(fc),
	}
	s.st.Servers[srv.ID] = srv
	ref := resRef{srv.ID, "server"}
	create := s.newAction("create_server", false, ref)
	start := s.newAction("start_server", false, ref)
	spec := localcloud.MachineSpec{Name: srv.Name, Cores: t.Cores, RAM: t.RAM, Labels: maps.Clone(labels), UserData: []byte(req.UserData)}
	s.wg.Add(1)
	go s.boot(srv.ID, spec, fc, create, start)
	return http.StatusCreated, map[string]any{
		"server": s.serverJSON(srv), "action": create.json(), "next_actions": []any{start.json()}, "root_password": nil,
	}, nil
}

// boot creates the machine behind a new server and ends its actions;
// first, while the faults file says the create hangs, it waits.
func (s *Server) boot(id int64, spec localcloud.MachineSpec, fc faults.Create, create, start *action) {
	defer s.wg.Done()
	gone := func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		_, ok := s.st.Servers[id]
		return !ok
	}
	var m localcloud.Machine
	err := s.cfg.Faults.Hold(s.ctx, fc, gone)
	if err == nil {
		m, err = s.m.Create(s.ctx, spec)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	defer func() {
		if err := s.saveLocked(); err != nil {
			s.logf("%v", err)
		}
	}()
	srv, ok := s.st.Servers[id]
	if err != nil || !ok {
		if err == nil { // deleted while it booted
			if derr := s.m.Delete(context.WithoutCancel(s.ctx), spec.Name); derr != nil {
				s.logf("hcloud: server %s: delete after boot: %v", spec.Name, derr)
			}
			err = errors.New("server deleted while it booted")
		}
		s.logf("hcloud: server %s (%d): create failed: %v", spec.Name, id, err)
		msg := strings.Join(strings.Fields(err.Error()), " ")
		s.finish(create, "server_create_failed", msg)
		s.finish(start, "server_create_failed", msg)
		if ok && srv.Status == "initializing" {
			delete(s.st.Servers, id)
		}
		return
	}
	srv.IPv4 = m.IPv4.String()
	srv.Status = "running"
	s.finish(create, "", "")
	s.finish(start, "", "")
	hidden := ""
	if srv.NoIPv4 {
		hidden = " (not shown: faults file)"
	}
	s.logf("hcloud: server %s (%d): running at %s%s", srv.Name, id, srv.IPv4, hidden)
}

// startDelete marks the server deleting and removes its machine in the
// background; the returned action ends when it is gone.
func (s *Server) startDelete(srv *server) *action {
	a := s.newAction("delete_server", false, resRef{srv.ID, "server"})
	if srv.Status == "initializing" {
		// The boot in flight finds the server gone and removes its machine.
		delete(s.st.Servers, srv.ID)
		s.finish(a, "", "")
		return a
	}
	srv.Status = "deleting"
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		err := s.m.Delete(context.WithoutCancel(s.ctx), srv.Name)
		s.mu.Lock()
		defer s.mu.Unlock()
		if err != nil {
			s.logf("hcloud: server %s (%d): delete failed: %v", srv.Name, srv.ID, err)
			srv.Status = "unknown"
			s.finish(a, "server_delete_failed", strings.Join(strings.Fields(err.Error()), " "))
		} else {
			delete(s.st.Servers, srv.ID)
			// As at Hetzner, a deleted server leaves the firewalls
			// applied to it directly.
			for _, fw := range s.st.Firewalls {
				fw.AppliedTo = slices.DeleteFunc(fw.AppliedTo, func(x applied) bool { return x.Type == "server" && x.ServerID == srv.ID })
			}
			s.finish(a, "", "")
			s.logf("hcloud: server %s (%d): deleted", srv.Name, srv.ID)
		}
		if err := s.saveLocked(); err != nil {
			s.logf("%v", err)
		}
	}()
	return a
}

func (s *Server) updateServer(srv *server, body []byte) (int, any, *apiError) {
	var req struct {
		Name   *string            `json:"name"`
		Labels *map[string]string `json:"labels"`
	}
	if e := decode(body, &req); e != nil {
		return 0, nil, e
	}
	if req.Name != nil && *req.Name != srv.Name {
		return 0, nil, errInvalid("name", "renaming servers is not implemented by the local cloud")
	}
	if req.Labels != nil {
		l := orNoLabels(*req.Labels)
		if err := validLabels(l); err != nil {
			return 0, nil, errInvalid("labels", err.Error())
		}
		srv.Labels = maps.Clone(l)
	}
	return 200, map[string]any{"server": s.serverJSON(srv)}, nil
}
