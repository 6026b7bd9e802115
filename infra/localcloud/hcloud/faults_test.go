package hcloud

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
	hcloudbackend "github.com/relayfleet/relayfleet/infra/hcloud"
	"github.com/relayfleet/relayfleet/infra/localcloud"
	"github.com/relayfleet/relayfleet/infra/localcloud/faults"
	"github.com/relayfleet/relayfleet/internal/testutil"
)

// faultyCloud is the local API over MemMachines with a faults file and a
// requests file, served behind the OpenAPI check, and a log of the
// answers as the client got them.
type faultyCloud struct {
	s                    *Server
	mm                   *localcloud.MemMachines
	base                 string
	faultsFile, requests string
	answers              *answerLog
}

// answer is one exchange as the client saw it.
type answer struct {
	at     time.Time
	route  string
	status int
	header http.Header
}

type answerLog struct {
	mu      sync.Mutex
	answers []answer
}

func (l *answerLog) all() []answer {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.answers)
}

// startFaulty starts the cloud with the faults f.
func startFaulty(t *testing.T, f faults.Faults) *faultyCloud {
	t.Helper()
	dir := t.TempDir()
	c := &faultyCloud{mm: &localcloud.MemMachines{}, faultsFile: filepath.Join(dir, "faults.json"), requests: filepath.Join(dir, "requests.json"), answers: &answerLog{}}
	c.setFaults(t, f)
	ff, err := faults.Open(c.faultsFile, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	c.s, err = New(c.mm, localcloud.Config{Token: testToken, Faults: ff, RequestsFile: c.requests})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.s.Close() })
	c.base, _ = serveHandler(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		c.s.ServeHTTP(sw, r)
		c.answers.mu.Lock()
		c.answers.answers = append(c.answers.answers, answer{time.Now(), localcloud.Route(r.Method, r.URL.Path, 1), sw.status, w.Header().Clone()})
		c.answers.mu.Unlock()
	}))
	return c
}

func (c *faultyCloud) setFaults(t *testing.T, f faults.Faults) {
	t.Helper()
	if err := faults.Write(c.faultsFile, f); err != nil {
		t.Fatal(err)
	}
}

func (c *faultyCloud) spec(t *testing.T, name, shape, loc string) backend.Spec {
	hk, admin := testKeys(t)
	return backend.Spec{Name: name, Shape: shape, Location: loc, Labels: map[string]string{"fleet": "demo"}, HostKey: hk, AuthorizedKeys: []string{admin}}
}

// posts is the number of server creates answered so far, read from the
// requests file as a test of fleet lab cloud would.
func (c *faultyCloud) posts(t *testing.T) int {
	t.Helper()
	n, err := localcloud.ReadRequests(c.requests)
	if err != nil {
		t.Fatal(err)
	}
	return n.Routes["POST /servers"]
}

// TestFaultUnavailable: a create the faults file marks unavailable is
// refused as Hetzner refuses it (412 resource_unavailable), once, not
// retried, and the backend's error is backend.ErrCapacity; other shapes
// and locations are made; with the fault cleared the create succeeds; a
// rule with a count refuses that many creates.
func TestFaultUnavailable(t *testing.T) {
	c := startFaulty(t, faults.Faults{Unavailable: []faults.Unavailable{{Rule: faults.Rule{Shape: "cx23", Location: "fsn1"}}}})
	b := newBackend(t, c.base, testToken)
	ctx := testCtx(t)
	_, err := b.Create(ctx, c.spec(t, "demo-fsn-1", "cx23", "fsn1"))
	if !errors.Is(err, backend.ErrCapacity) || err.Error() != "hcloud create server demo-fsn-1: 412 resource_unavailable: error during placement" {
		t.Fatalf("create of cx23 in fsn1: %v, want the capacity refusal", err)
	}
	var he *hcloudbackend.Error
	if !errors.As(err, &he) || he.Code != "resource_unavailable" {
		t.Errorf("error %v: want an hcloud.Error with code resource_unavailable", err)
	}
	if n := c.posts(t); n != 1 {
		t.Errorf("%d POST /servers, want 1: a capacity refusal is not retried", n)
	}
	if len(c.mm.Names()) != 0 || c.s.ServerCount() != 0 {
		t.Errorf("a refused create left machines %v, %d servers", c.mm.Names(), c.s.ServerCount())
	}
	for _, sp := range []backend.Spec{c.spec(t, "demo-nbg-1", "cx23", "nbg1"), c.spec(t, "demo-fsn-2", "cx33", "fsn1")} {
		if box, err := b.Create(ctx, sp); err != nil || !box.IPv4.IsValid() {
			t.Errorf("create of %s in %s, which the rule does not name: %+v %v", sp.Shape, sp.Location, box, err)
		}
	}
	c.setFaults(t, faults.Faults{Unavailable: []faults.Unavailable{{Rule: faults.Rule{Shape: "cx23"}, Count: 1}}})
	if _, err := b.Create(ctx, c.spec(t, "demo-fsn-1", "cx23", "fsn1")); !errors.Is(err, backend.ErrCapacity) {
		t.Fatalf("the first create under count 1: %v, want refused", err)
	}
	if _, err := b.Create(ctx, c.spec(t, "demo-fsn-1", "cx23", "fsn1")); err != nil {
		t.Fatalf("the second create under count 1: %v", err)
	}
	c.setFaults(t, faults.Faults{Unavailable: []faults.Unavailable{{}}})
	if _, err := b.Create(ctx, c.spec(t, "demo-hel-1", "cx23", "hel1")); !errors.Is(err, backend.ErrCapacity) {
		t.Fatalf("create under a rule for every create: %v, want refused", err)
	}
	c.setFaults(t, faults.Faults{})
	if box, err := b.Create(ctx, c.spec(t, "demo-hel-1", "cx23", "hel1")); err != nil || !box.IPv4.IsValid() {
		t.Fatalf("create with the faults cleared: %+v %v", box, err)
	}
}

// TestFaultRateLimited: answers 429 rate_limit_exceeded with Retry-After
// and RateLimit-Remaining 0; the backend waits at least Retry-After
// before it tries again, and gets through; while every request is
// limited it gives up after its attempts; cleared, it goes on.
func TestFaultRateLimited(t *testing.T) {
	c := startFaulty(t, faults.Faults{RateLimited: &faults.RateLimited{Requests: 1, RetryAfterSeconds: 1}})
	b, err := hcloudbackend.New(hcloudbackend.Config{Token: testToken, Endpoint: c.base, PollInterval: 5 * time.Millisecond,
		Retry: backend.Retry{Attempts: 3, Base: time.Millisecond, Max: 5 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.List(testCtx(t), map[string]string{"fleet": "demo"}); err != nil {
		t.Fatal(err)
	}
	a := c.answers.all()
	if len(a) != 2 || a[0].status != http.StatusTooManyRequests || a[1].status != http.StatusOK {
		t.Fatalf("answers %+v, want a 429 then a 200", a)
	}
	h := a[0].header
	if h.Get("Retry-After") != "1" || h.Get("RateLimit-Remaining") != "0" || h.Get("RateLimit-Limit") != "3600" || h.Get("RateLimit-Reset") == "" {
		t.Errorf("429's headers %v", h)
	}
	if gap := a[1].at.Sub(a[0].at); gap < time.Second {
		t.Errorf("retried %v after a 429 with Retry-After: 1, want at least 1s", gap)
	}
	code, _, body := testutil.Request(t, http.MethodGet, c.base+"/servers", testToken, "")
	if code != http.StatusOK {
		t.Errorf("a request past the limited ones: %d %s", code, body)
	}

	c.setFaults(t, faults.Faults{RateLimited: &faults.RateLimited{RetryAfterSeconds: 1}})
	fast := newBackend(t, c.base, testToken) // Max 5ms: does not wait the second out
	_, err = fast.List(testCtx(t), nil)
	if err == nil || !strings.Contains(err.Error(), "429 rate_limit_exceeded: limit of 3600 requests per hour reached") {
		t.Fatalf("list with every request limited: %v", err)
	}
	var e struct {
		Error struct{ Code, Message string }
	}
	code, _, body = testutil.Request(t, http.MethodGet, c.base+"/servers", testToken, "")
	if json.Unmarshal(body, &e); code != http.StatusTooManyRequests || e.Error.Code != "rate_limit_exceeded" {
		t.Errorf("with every request limited: %d %s", code, body)
	}
	c.setFaults(t, faults.Faults{})
	if _, err := fast.List(testCtx(t), nil); err != nil {
		t.Fatalf("list with the fault cleared: %v", err)
	}
}

// TestFaultHangActions: a create the faults file hangs leaves its actions
// running and the server initializing, with no machine: the backend's
// Create waits until its context ends. Another server is made meanwhile.
// With the fault cleared the server boots, and Create again adopts it.
// A held server deleted ends its create action in error, machine never
// made.
func TestFaultHangActions(t *testing.T) {
	c := startFaulty(t, faults.Faults{HangActions: []faults.Rule{{Name: "demo-fsn-1"}}})
	b := newBackend(t, c.base, testToken)
	start := time.Now()
	short, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err := b.Create(short, c.spec(t, "demo-fsn-1", "cx23", "fsn1"))
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) < 500*time.Millisecond {
		t.Fatalf("create that hangs: %v after %v, want its context's end", err, time.Since(start))
	}
	c.s.mu.Lock()
	var running []string
	for _, a := range sortedByID(c.s.st.Actions) {
		if a.Status == "running" {
			running = append(running, a.Command)
		}
	}
	c.s.mu.Unlock()
	if !slices.Equal(running, []string{"create_server", "start_server"}) {
		t.Errorf("running actions %v, want create_server and start_server", running)
	}
	if list, _ := b.List(testCtx(t), nil); len(list) != 1 || list[0].Status != "initializing" || len(c.mm.Names()) != 0 {
		t.Errorf("servers %+v, machines %v; want demo-fsn-1 initializing and no machine", list, c.mm.Names())
	}
	if box, err := b.Create(testCtx(t), c.spec(t, "demo-fsn-2", "cx23", "fsn1")); err != nil || !box.IPv4.IsValid() {
		t.Errorf("another server while demo-fsn-1 hangs: %+v %v", box, err)
	}

	c.setFaults(t, faults.Faults{})
	box, err := b.Create(testCtx(t), c.spec(t, "demo-fsn-1", "cx23", "fsn1"))
	if err != nil || box.Status != backend.StatusRunning || !box.IPv4.IsValid() {
		t.Fatalf("create with the fault cleared: %+v %v", box, err)
	}
	if n := c.posts(t); n != 2 {
		t.Errorf("%d POST /servers, want 2: demo-fsn-1 adopted, not made again", n)
	}

	c.setFaults(t, faults.Faults{HangActions: []faults.Rule{{}}})
	code, _, body := testutil.Request(t, http.MethodPost, c.base+"/servers", testToken, createBody("held-1", "cx23"))
	var created struct {
		Server struct{ ID int64 }
		Action struct{ ID int64 }
	}
	if json.Unmarshal(body, &created); code != http.StatusCreated {
		t.Fatalf("create held-1: %d %s", code, body)
	}
	if err := b.Delete(testCtx(t), strconv.FormatInt(created.Server.ID, 10)); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "held-1's create action to end", func() bool {
		_, _, body := testutil.Request(t, http.MethodGet, c.base+"/actions/"+strconv.FormatInt(created.Action.ID, 10), testToken, "")
		return strings.Contains(string(body), `"status":"error"`)
	})
	if slices.Contains(c.mm.Names(), "held-1") || slices.Contains(c.mm.Deleted(), "held-1") {
		t.Errorf("held-1's machine was made: machines %v, deleted %v", c.mm.Names(), c.mm.Deleted())
	}
}

// TestFaultNoAddress: a server the faults file names runs without a
// public IPv4 (public_net.ipv4 null), its machine booted; the backend's
// Create returns it running with no address and no error (the provider
// refuses such a box: infra/provider cloudMachine). It stays so when the
// fault is cleared, and across a restart; other servers have theirs.
func TestFaultNoAddress(t *testing.T) {
	c := startFaulty(t, faults.Faults{NoAddress: []faults.Rule{{Name: "demo-fsn-1"}}})
	b := newBackend(t, c.base, testToken)
	ctx := testCtx(t)
	box, err := b.Create(ctx, c.spec(t, "demo-fsn-1", "cx23", "fsn1"))
	if err != nil || box.Status != backend.StatusRunning || box.IPv4.IsValid() || !slices.Contains(c.mm.Names(), "demo-fsn-1") {
		t.Fatalf("create without an address: %+v %v, machines %v; want it running, no IPv4, machine booted", box, err, c.mm.Names())
	}
	other, err := b.Create(ctx, c.spec(t, "demo-fsn-2", "cx23", "fsn1"))
	if err != nil || !other.IPv4.IsValid() {
		t.Fatalf("another server: %+v %v", other, err)
	}
	c.setFaults(t, faults.Faults{})
	if got, err := b.Get(ctx, box.ID); err != nil || got.IPv4.IsValid() {
		t.Errorf("with the fault cleared: %+v %v, want still no address", got, err)
	}
	if body := get(t, c.base, "/servers/"+box.ID); !strings.Contains(body, `"ipv4":null`) {
		t.Errorf("server %s", body)
	}
}

// TestRequestsCounted: every answer is counted by route and status, the
// 401s and 429s too, in the requests file and by Requests; the one
// create of a box takes a handful of requests.
func TestRequestsCounted(t *testing.T) {
	c := startFaulty(t, faults.Faults{RateLimited: &faults.RateLimited{Requests: 1, RetryAfterSeconds: 1}})
	testutil.Request(t, http.MethodGet, c.base+"/servers", testToken, "")
	testutil.Request(t, http.MethodGet, c.base+"/servers/7", "wrong", "")
	b := newBackend(t, c.base, testToken)
	if _, err := b.Create(testCtx(t), c.spec(t, "demo-fsn-1", "cx23", "fsn1")); err != nil {
		t.Fatal(err)
	}
	file, err := localcloud.ReadRequests(c.requests)
	if err != nil {
		t.Fatal(err)
	}
	counts := c.s.Requests()
	answered := len(c.answers.all())
	if file.Total != answered || counts.Total != answered || file.Statuses["429"] != 1 || file.Statuses["401"] != 1 ||
		file.Routes["GET /servers/{id}"] < 1 || file.Routes["POST /servers"] != 1 {
		t.Errorf("counts %+v (file), %+v (Requests); want %d requests, one 429, one 401, one POST /servers", file, counts, answered)
	}
	sum := 0
	for _, n := range file.Routes {
		sum += n
	}
	if sum != file.Total {
		t.Errorf("routes add up to %d, total %d", sum, file.Total)
	}
	// One create: a lookup by name, the POST, the actions' polls and the
	// server's: with a 5ms poll against an instant machine, a few (20 leaves
	// room for a loaded machine; a loop that does not wait breaks it).
	if perBox := file.Total - 2; perBox > 20 {
		t.Errorf("%d requests for one box: %v", perBox, file.Routes)
	}
}
