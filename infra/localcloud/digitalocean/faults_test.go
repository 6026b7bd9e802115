package digitalocean

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/infra/backend"
	dobackend "github.com/relayfleet/relayfleet/infra/digitalocean"
	"github.com/relayfleet/relayfleet/infra/localcloud"
	"github.com/relayfleet/relayfleet/infra/localcloud/faults"
)

// faultyCloud is the local cloud with a faults file and a requests file,
// and the answers as the client got them.
type faultyCloud struct {
	*localCloud
	faultsFile, requests string

	mu      sync.Mutex
	answers []answer
}

// answer is one exchange as the client saw it.
type answer struct {
	at     time.Time
	route  string
	status int
	header http.Header
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

func startFaulty(t *testing.T, f faults.Faults) *faultyCloud {
	t.Helper()
	dir := t.TempDir()
	c := &faultyCloud{faultsFile: filepath.Join(dir, "faults.json"), requests: filepath.Join(dir, "requests.json")}
	c.setFaults(t, f)
	ff, err := faults.Open(c.faultsFile, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	c.localCloud = startCloudConfig(t, localcloud.Config{Faults: ff, RequestsFile: c.requests}, nil, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
			h.ServeHTTP(sw, r)
			c.mu.Lock()
			c.answers = append(c.answers, answer{time.Now(), localcloud.Route(r.Method, r.URL.Path, 2), sw.status, w.Header().Clone()})
			c.mu.Unlock()
		})
	})
	return c
}

func (c *faultyCloud) setFaults(t *testing.T, f faults.Faults) {
	t.Helper()
	if err := faults.Write(c.faultsFile, f); err != nil {
		t.Fatal(err)
	}
}

func (c *faultyCloud) all() []answer {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.answers)
}

// posts is the number of droplet creates answered, read from the requests
// file as a test of fleet lab cloud would.
func (c *faultyCloud) posts(t *testing.T) int {
	t.Helper()
	n, err := localcloud.ReadRequests(c.requests)
	if err != nil {
		t.Fatal(err)
	}
	return n.Routes["POST /v2/droplets"]
}

func dropletSpec(t *testing.T, name, size, region string) backend.Spec {
	s := testSpec(t, name, size, map[string]string{"fleet": "demo"})
	s.Location = region
	return s
}

// TestFaultUnavailable: a create the faults file marks unavailable is
// refused as DigitalOcean refuses it (422 unprocessable_entity "Size is
// not available in this region."; "Region is not available" for a rule
// without a size), once, not retried, and the backend's error is
// backend.ErrCapacity; other sizes and regions are made; a rule with a
// count refuses that many; with the faults cleared the create succeeds.
func TestFaultUnavailable(t *testing.T) {
	c := startFaulty(t, faults.Faults{Unavailable: []faults.Unavailable{{Rule: faults.Rule{Shape: "c-2", Location: "fra1"}}}})
	b := c.backend(t)
	ctx := testCtx(t)
	_, err := b.Create(ctx, dropletSpec(t, "demo-fra-1", "c-2", "fra1"))
	if !errors.Is(err, backend.ErrCapacity) || !strings.HasPrefix(err.Error(), "digitalocean create droplet demo-fra-1: 422 unprocessable_entity: Size is not available in this region. (request ") {
		t.Fatalf("create of c-2 in fra1: %v, want the capacity refusal", err)
	}
	var de *dobackend.Error
	if !errors.As(err, &de) || de.ID != "unprocessable_entity" || de.Status != http.StatusUnprocessableEntity {
		t.Errorf("error %v: want a digitalocean.Error 422 unprocessable_entity", err)
	}
	if n := c.posts(t); n != 1 {
		t.Errorf("%d POST /v2/droplets, want 1: a capacity refusal is not retried", n)
	}
	if len(c.m.Names()) != 0 {
		t.Errorf("a refused create left machines %v", c.m.Names())
	}
	for _, sp := range []backend.Spec{dropletSpec(t, "demo-ams-1", "c-2", "ams3"), dropletSpec(t, "demo-fra-2", "c-4", "fra1")} {
		if box, err := b.Create(ctx, sp); err != nil || !box.IPv4.IsValid() {
			t.Errorf("create of %s in %s, which the rule does not name: %+v %v", sp.Shape, sp.Location, box, err)
		}
	}
	c.setFaults(t, faults.Faults{Unavailable: []faults.Unavailable{{Rule: faults.Rule{Location: "fra1"}, Count: 1}}})
	if _, err := b.Create(ctx, dropletSpec(t, "demo-fra-1", "c-2", "fra1")); !errors.Is(err, backend.ErrCapacity) || !strings.Contains(err.Error(), ": Region is not available") {
		t.Fatalf("the first create under a region's rule of count 1: %v, want refused", err)
	}
	if _, err := b.Create(ctx, dropletSpec(t, "demo-fra-1", "c-2", "fra1")); err != nil {
		t.Fatalf("the second create under count 1: %v", err)
	}
	c.setFaults(t, faults.Faults{Unavailable: []faults.Unavailable{{}}})
	if _, err := b.Create(ctx, dropletSpec(t, "demo-lon-1", "c-2", "lon1")); !errors.Is(err, backend.ErrCapacity) {
		t.Fatalf("create under a rule for every create: %v, want refused", err)
	}
	c.setFaults(t, faults.Faults{})
	if box, err := b.Create(ctx, dropletSpec(t, "demo-lon-1", "c-2", "lon1")); err != nil || !box.IPv4.IsValid() {
		t.Fatalf("create with the faults cleared: %+v %v", box, err)
	}
}

// TestFaultRateLimited: answers 429 too_many_requests with Retry-After and
// ratelimit-remaining 0; the backend waits at least Retry-After before it
// tries again and gets through; while every request is limited it gives
// up after its attempts; cleared, it goes on.
func TestFaultRateLimited(t *testing.T) {
	c := startFaulty(t, faults.Faults{RateLimited: &faults.RateLimited{Requests: 1, RetryAfterSeconds: 1}})
	b, err := dobackend.New(dobackend.Config{Token: testToken, Endpoint: c.url, PollInterval: 5 * time.Millisecond,
		Retry: backend.Retry{Attempts: 3, Base: time.Millisecond, Max: 5 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.List(testCtx(t), map[string]string{"fleet": "demo"}); err != nil {
		t.Fatal(err)
	}
	a := c.all()
	if len(a) != 2 || a[0].status != http.StatusTooManyRequests || a[1].status != http.StatusOK {
		t.Fatalf("answers %+v, want a 429 then a 200", a)
	}
	h := a[0].header
	if h.Get("Retry-After") != "1" || h.Get("Ratelimit-Remaining") != "0" || h.Get("Ratelimit-Limit") != strconv.Itoa(defaultLimit) || h.Get("Ratelimit-Reset") == "" {
		t.Errorf("429's headers %v", h)
	}
	if gap := a[1].at.Sub(a[0].at); gap < time.Second {
		t.Errorf("retried %v after a 429 with Retry-After: 1, want at least 1s", gap)
	}

	c.setFaults(t, faults.Faults{RateLimited: &faults.RateLimited{RetryAfterSeconds: 1}})
	_, err = c.backend(t).List(testCtx(t), nil) // Max 10ms: does not wait the second out
	if err == nil || !strings.Contains(err.Error(), "429 too_many_requests: API Rate limit exceeded.") {
		t.Fatalf("list with every request limited: %v", err)
	}
	status, _, body := c.call(t, http.MethodGet, "/v2/droplets", "", false)
	if e := apiError(t, body); status != http.StatusTooManyRequests || e.ID != "too_many_requests" || e.RequestID == "" {
		t.Errorf("with every request limited: %d %s", status, body)
	}
	c.setFaults(t, faults.Faults{})
	if _, err := c.backend(t).List(testCtx(t), nil); err != nil {
		t.Fatalf("list with the fault cleared: %v", err)
	}
}

// TestFaultHangActions: a create the faults file hangs leaves the droplet
// new and its create action in progress, with no machine: the backend's
// Create waits until its context ends. Another droplet is made meanwhile.
// With the fault cleared the droplet boots, and Create again adopts it.
// A held droplet deleted errors its create action and goes, its machine
// never made.
func TestFaultHangActions(t *testing.T) {
	c := startFaulty(t, faults.Faults{HangActions: []faults.Rule{{Shape: "c-2", Location: "fra1"}}})
	b := c.backend(t)
	start := time.Now()
	short, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err := b.Create(short, dropletSpec(t, "demo-fra-1", "c-2", "fra1"))
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) < 500*time.Millisecond {
		t.Fatalf("create that hangs: %v after %v, want its context's end", err, time.Since(start))
	}
	if !strings.Contains(err.Error(), ": action ") {
		t.Errorf("error %v: want the create action's wait", err)
	}
	if list, _ := b.List(testCtx(t), nil); len(list) != 1 || list[0].Status != backend.StatusStarting || len(c.m.Names()) != 0 {
		t.Errorf("droplets %+v, machines %v; want demo-fra-1 new and no machine", list, c.m.Names())
	}
	if box, err := b.Create(testCtx(t), dropletSpec(t, "demo-fra-2", "c-4", "fra1")); err != nil || !box.IPv4.IsValid() {
		t.Errorf("another droplet while demo-fra-1 hangs: %+v %v", box, err)
	}

	c.setFaults(t, faults.Faults{})
	box, err := b.Create(testCtx(t), dropletSpec(t, "demo-fra-1", "c-2", "fra1"))
	if err != nil || box.Status != backend.StatusRunning || !box.IPv4.IsValid() {
		t.Fatalf("create with the fault cleared: %+v %v", box, err)
	}
	if n := c.posts(t); n != 2 {
		t.Errorf("%d POST /v2/droplets, want 2: demo-fra-1 adopted, not made again", n)
	}

	c.setFaults(t, faults.Faults{HangActions: []faults.Rule{{}}})
	status, _, body := c.call(t, http.MethodPost, "/v2/droplets", `{"name":"held-1","size":"c-2","region":"fra1","image":"debian-12-x64"}`, false)
	var created struct {
		Droplet struct{ ID int }
		Links   struct{ Actions []struct{ ID int } }
	}
	if json.Unmarshal(body, &created); status != http.StatusAccepted || len(created.Links.Actions) != 1 {
		t.Fatalf("create held-1: %d %s", status, body)
	}
	if err := b.Delete(testCtx(t), strconv.Itoa(created.Droplet.ID)); err != nil {
		t.Fatal(err)
	}
	_, _, body = c.call(t, http.MethodGet, "/v2/actions/"+strconv.Itoa(created.Links.Actions[0].ID), "", false)
	if !strings.Contains(string(body), `"status":"errored"`) {
		t.Errorf("held-1's create action after the delete: %s", body)
	}
	if slices.Contains(c.m.Names(), "held-1") {
		t.Errorf("held-1's machine was made: %v", c.m.Names())
	}
}

// TestFaultNoAddress: a droplet the faults file names is active without a
// public IPv4 (networks.v4 empty), its machine booted; the backend's
// Create returns it running with no address and no error (the provider
// refuses such a box: infra/provider cloudMachine). It stays so when the
// fault is cleared; other droplets have theirs.
func TestFaultNoAddress(t *testing.T) {
	c := startFaulty(t, faults.Faults{NoAddress: []faults.Rule{{Name: "demo-fra-1"}}})
	b := c.backend(t)
	ctx := testCtx(t)
	box, err := b.Create(ctx, dropletSpec(t, "demo-fra-1", "c-2", "fra1"))
	if err != nil || box.Status != backend.StatusRunning || box.IPv4.IsValid() || !slices.Contains(c.m.Names(), "demo-fra-1") {
		t.Fatalf("create without an address: %+v %v, machines %v; want it running, no IPv4, machine booted", box, err, c.m.Names())
	}
	if other, err := b.Create(ctx, dropletSpec(t, "demo-fra-2", "c-2", "fra1")); err != nil || !other.IPv4.IsValid() {
		t.Fatalf("another droplet: %+v %v", other, err)
	}
	c.setFaults(t, faults.Faults{})
	if got, err := b.Get(ctx, box.ID); err != nil || got.IPv4.IsValid() {
		t.Errorf("with the fault cleared: %+v %v, want still no address", got, err)
	}
	if _, _, body := c.call(t, http.MethodGet, "/v2/droplets/"+box.ID, "", false); !strings.Contains(string(body), `"v4":[]`) || !strings.Contains(string(body), `"status":"active"`) {
		t.Errorf("droplet %s", body)
	}
}

// TestRequestsCounted: every answer is counted by route and status, 429s
// too, in the requests file and by Requests; the one create of a box
// takes a handful of requests.
func TestRequestsCounted(t *testing.T) {
	c := startFaulty(t, faults.Faults{RateLimited: &faults.RateLimited{Requests: 1, RetryAfterSeconds: 1}})
	c.call(t, http.MethodGet, "/v2/droplets", "", false)
	if _, err := c.backend(t).Create(testCtx(t), dropletSpec(t, "demo-fra-1", "c-2", "fra1")); err != nil {
		t.Fatal(err)
	}
	file, err := localcloud.ReadRequests(c.requests)
	if err != nil {
		t.Fatal(err)
	}
	counts := c.srv.Requests()
	answered := len(c.all())
	if file.Total != answered || counts.Total != answered || file.Statuses["429"] != 1 ||
		file.Routes["GET /v2/actions/{id}"] < 1 || file.Routes["POST /v2/droplets"] != 1 {
		t.Errorf("counts %+v (file), %+v (Requests); want %d requests, one 429, one POST /v2/droplets", file, counts, answered)
	}
	sum := 0
	for _, n := range file.Routes {
		sum += n
	}
	if sum != file.Total {
		t.Errorf("routes add up to %d, total %d", sum, file.Total)
	}
	// One create: a lookup by name, the POST, the action's polls and the
	// droplet's: with a 5ms poll against an instant machine, a few (20 leaves
	// room for a loaded machine; a loop that does not wait breaks it).
	if perBox := file.Total - 1; perBox > 20 {
		t.Errorf("%d requests for one box: %v", perBox, file.Routes)
	}
}
