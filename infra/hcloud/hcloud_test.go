package hcloud

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/netip"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/infra/backend"
	"github.com/relayfleet/relayfleet/infra/backend/backendtest"
)

func newTestBackend(t *testing.T) (*Backend, *fakeAPI) {
	t.Helper()
	f, srv := newFakeAPI(t)
	b, err := New(Config{Token: testToken, Endpoint: srv.URL, HTTP: srv.Client(), Retry: backendtest.FastRetry, PollInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return b, f
}

func testSpec(t *testing.T, name string, labels map[string]string) backend.Spec {
	return backendtest.Spec(t, name, "cpx22", "fsn1", labels)
}

func TestLifecycle(t *testing.T) {
	b, f := newTestBackend(t)
	c := backendtest.Ctx(t)
	burst := map[string]string{"fleet": "demo", "tier": "burst", "event": "nye"}
	steady := f.addServer("relay-steady-1", map[string]string{"fleet": "demo", "tier": "steady"})
	f.addServer("other-1", map[string]string{"fleet": "other", "tier": "burst", "event": "nye"})

	spec := testSpec(t, "relay-burst-1", burst)
	box, err := b.Create(c, spec)
	if err != nil {
		t.Fatal(err)
	}
	if box.Status != backend.StatusRunning || box.Name != "relay-burst-1" || box.Shape != "cpx22" || box.Location != "fsn1" {
		t.Errorf("box %+v", box)
	}
	if !box.IPv4.IsValid() || !box.IPv4.Is4() || !box.IPv6.Is6() {
		t.Errorf("addresses %v %v", box.IPv4, box.IPv6)
	}
	// The fake gives server N the network 2001:db8:<N in hex>::/64.
	if want := netip.MustParseAddr(fmt.Sprintf("2001:db8:%x::1", mustID(t, box.ID))); box.IPv6 != want {
		t.Errorf("IPv6 %v, want the /64's ::1 %v", box.IPv6, want)
	}
	if !reflect.DeepEqual(box.Labels, burst) {
		t.Errorf("labels %v", box.Labels)
	}
	if img := f.servers[mustID(t, box.ID)]["image"].(map[string]any)["name"]; img != DefaultImage {
		t.Errorf("image %v, want the default %s", img, DefaultImage)
	}
	wantUD, _ := backend.CloudInit(spec)
	if f.userData["relay-burst-1"] != string(wantUD) {
		t.Errorf("user_data is not CloudInit(spec):\n%s", f.userData["relay-burst-1"])
	}
	// The create and start actions were polled until done, then the
	// server until it ran.
	if n := len(f.Requests("GET /actions?")); n < 2 {
		t.Errorf("%d action polls, want at least 2", n)
	}
	if n := len(f.Requests("GET /servers/" + box.ID)); n < 2 {
		t.Errorf("%d server polls, want at least 2 (starting, running)", n)
	}

	got, err := b.Get(c, box.ID)
	if err != nil || !reflect.DeepEqual(got, box) {
		t.Errorf("Get = %+v, %v; want %+v", got, err, box)
	}

	for _, tc := range []struct {
		labels map[string]string
		want   []string
	}{
		{map[string]string{"fleet": "demo"}, []string{"relay-burst-1", "relay-steady-1"}},
		{map[string]string{"fleet": "demo", "tier": "burst"}, []string{"relay-burst-1"}},
		{map[string]string{"fleet": "demo", "event": "nye"}, []string{"relay-burst-1"}},
		{map[string]string{"fleet": "nope"}, nil},
		{nil, []string{"other-1", "relay-burst-1", "relay-steady-1"}},
	} {
		boxes, err := b.List(c, tc.labels)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, x := range boxes {
			names = append(names, x.Name)
		}
		if !reflect.DeepEqual(names, tc.want) {
			t.Errorf("List(%v) = %v, want %v", tc.labels, names, tc.want)
		}
	}
	if q := f.Requests("GET /servers?label_selector=fleet%3Ddemo%2Ctier%3Dburst"); len(q) != 1 {
		t.Errorf("no label selector query: %v", f.Requests("GET /servers?"))
	}

	if err := b.Delete(c, box.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Get(c, box.ID); !errors.Is(err, backend.ErrNotFound) {
		t.Errorf("Get after Delete: %v, want ErrNotFound", err)
	}
	if err := b.Delete(c, box.ID); err != nil {
		t.Errorf("second Delete: %v", err)
	}
	// After the event: no burst box of the event is left.
	left, err := b.List(c, map[string]string{"fleet": "demo", "event": "nye"})
	if err != nil || len(left) != 0 {
		t.Errorf("left after delete: %v, %v", left, err)
	}
	if _, err := b.Get(c, strconv.FormatInt(steady, 10)); err != nil {
		t.Errorf("steady box: %v", err)
	}
}

func TestCreateIdempotentByName(t *testing.T) {
	b, f := newTestBackend(t)
	c := backendtest.Ctx(t)
	id := f.addServer("relay-1", map[string]string{"fleet": "demo", "tier": "steady"})
	box, err := b.Create(c, testSpec(t, "relay-1", map[string]string{"fleet": "demo", "tier": "steady"}))
	if err != nil {
		t.Fatal(err)
	}
	if box.ID != strconv.FormatInt(id, 10) {
		t.Errorf("Create returned %s, want the existing %d", box.ID, id)
	}
	if p := f.Requests("POST /servers"); len(p) != 0 {
		t.Errorf("Create posted %v for an existing server", p)
	}

	_, err = b.Create(c, testSpec(t, "relay-1", map[string]string{"fleet": "prod"}))
	if err == nil || !strings.Contains(err.Error(), `taken by server`) || !strings.Contains(err.Error(), `fleet "demo", not "prod"`) {
		t.Errorf("Create over another fleet's server: %v", err)
	}
	if p := f.Requests("POST /servers"); len(p) != 0 {
		t.Errorf("Create posted %v over another fleet's server", p)
	}
}

// TestNamed: the server of a name in the fleet, in one request however
// many servers the project has; another fleet's server of the name is
// not found.
func TestNamed(t *testing.T) {
	b, f := newTestBackend(t)
	c := backendtest.Ctx(t)
	for i := range 60 {
		f.addServer(fmt.Sprintf("relay-%d", i+2), map[string]string{"fleet": "demo"})
	}
	id := f.addServer("relay-1", map[string]string{"fleet": "demo", "event": "gig"})
	before := len(f.Requests("GET /servers"))
	box, ok, err := b.Named(c, "relay-1", "demo")
	if err != nil || !ok || box.ID != strconv.FormatInt(id, 10) || box.Labels["event"] != "gig" {
		t.Fatalf("Named(relay-1, demo) = %+v, %v, %v; want server %d", box, ok, err, id)
	}
	if n := len(f.Requests("GET /servers")) - before; n != 1 {
		t.Errorf("Named made %d list requests, want 1", n)
	}
	if _, ok, err := b.Named(c, "relay-1", "prod"); ok || err != nil {
		t.Errorf("Named(relay-1, prod) found %v (%v): the server is fleet demo's", ok, err)
	}
	if _, ok, err := b.Named(c, "relay-99", "demo"); ok || err != nil {
		t.Errorf("Named(relay-99) found %v (%v)", ok, err)
	}
}

// TestCreateRefusesAnotherTiersServer: an event's box named like a steady
// box of the same fleet is not adopted (its host key would fail and its
// clean-up delete the steady server): Create refuses, naming the server
// and the label, posts nothing and deletes nothing.
func TestCreateRefusesAnotherTiersServer(t *testing.T) {
	b, f := newTestBackend(t)
	c := backendtest.Ctx(t)
	id := f.addServer("demo-fsn-1", map[string]string{"fleet": "demo", "tier": "steady", "event": "none"})
	for _, tc := range []struct {
		labels map[string]string
		want   string
	}{
		{map[string]string{"fleet": "demo", "tier": "burst", "event": "fsn"}, `label tier "steady", not "burst"`},
		{map[string]string{"fleet": "demo", "tier": "steady", "event": "fsn"}, `label event "none", not "fsn"`},
	} {
		_, err := b.Create(c, testSpec(t, "demo-fsn-1", tc.labels))
		if err == nil || !strings.Contains(err.Error(), "demo-fsn-1") || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("Create over the steady server with %v: %v; want one line naming demo-fsn-1 and %s", tc.labels, err, tc.want)
		}
	}
	if p := f.Requests("POST /servers"); len(p) != 0 {
		t.Errorf("Create posted %v over another tier's server", p)
	}
	if d := f.Requests("DELETE"); len(d) != 0 {
		t.Errorf("deletes: %v", d)
	}
	if _, err := b.Get(c, strconv.FormatInt(id, 10)); err != nil {
		t.Errorf("steady server: %v", err)
	}
	// The same labels are the same box: adopted.
	box, err := b.Create(c, testSpec(t, "demo-fsn-1", map[string]string{"fleet": "demo", "tier": "steady", "event": "none"}))
	if err != nil || box.ID != strconv.FormatInt(id, 10) {
		t.Errorf("Create with the server's labels: %+v, %v; want it adopted", box, err)
	}
}

func TestRetries(t *testing.T) {
	backendtest.CreateRetries(t, cloud, []backendtest.CreateRetry{
		{Name: "429 on lookup", Faults: []backendtest.Fault{{Method: "GET", Path: "/servers", Status: 429, Fixture: "error_rate_limit.json", Header: http.Header{"Retry-After": {"0"}}}}, Posts: 1},
		{Name: "429 on create", Faults: []backendtest.Fault{{Method: "POST", Path: "/servers", Status: 429, Fixture: "error_rate_limit.json"}}, Posts: 2},
		{Name: "503 on action poll", Faults: []backendtest.Fault{{Method: "GET", Path: "/actions", Status: 503, Fixture: "error_unavailable.json"}}, Posts: 1},
		{Name: "502 without JSON on server poll", Faults: []backendtest.Fault{{Method: "GET", Path: "/servers/101", Status: 502, Fixture: "action.json"}}, Posts: 1},
		{Name: "503 on create, nothing made", Faults: []backendtest.Fault{{Method: "POST", Path: "/servers", Status: 503, Fixture: "error_unavailable.json"}}, Posts: 2},
		// The create took effect but its answer was lost: the backend
		// finds the server instead of making a second one.
		{Name: "503 on create that was made", Faults: []backendtest.Fault{{Method: "POST", Path: "/servers", Status: 503, Fixture: "error_unavailable.json", After: true}}, Posts: 1},
		// The name is taken (uniqueness_error) by a server of the same
		// fleet made meanwhile: that one is returned.
		{Name: "name taken meanwhile", Faults: []backendtest.Fault{{Method: "GET", Path: "/servers", Status: 200, Fixture: "servers_empty.json"}}, Posts: 1, Racing: true},
	})
}

func TestErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		call func(*Backend, context.Context) error
		want string
	}{
		{
			name: "invalid server type",
			call: func(b *Backend, c context.Context) error {
				s := testSpec(t, "relay-1", map[string]string{"fleet": "demo"})
				s.Shape = "cx99"
				_, err := b.Create(c, s)
				return err
			},
			want: "hcloud create server relay-1: 400 invalid_input: invalid input in field 'server_type'; server_type: server type cx99 not found",
		},
		{
			name: "bad id",
			call: func(b *Backend, c context.Context) error { _, err := b.Get(c, "relay-1"); return err },
			want: `hcloud get server: server id "relay-1": want a positive integer`,
		},
		{
			name: "bad spec",
			call: func(b *Backend, c context.Context) error {
				_, err := b.Create(c, testSpec(t, "relay-1", map[string]string{"tier": "burst"}))
				return err
			},
			want: `hcloud create server relay-1: no "fleet" label`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, f := newTestBackend(t)
			backendtest.CheckError(t, &f.API, tc.call(b, backendtest.Ctx(t)), tc.want, 0)
		})
	}
}

// TestCreateCapacity: a 412 resource_unavailable (the API's answer when
// the server type cannot be placed in the location) fails Create at once,
// one POST, with an error that is backend.ErrCapacity; other refusals of
// the create are not.
func TestCreateCapacity(t *testing.T) {
	for _, tc := range []struct {
		name     string
		fault    backendtest.Fault
		want     string
		capacity bool
	}{
		{"resource_unavailable", backendtest.Fault{Method: "POST", Path: "/servers", Status: 412, Fixture: "error_capacity.json"},
			"hcloud create server relay-1: 412 resource_unavailable: error during placement", true},
		{"forbidden", backendtest.Fault{Method: "POST", Path: "/servers", Status: 403, Fixture: "error_forbidden.json"},
			"hcloud create server relay-1: 403 forbidden: insufficient permissions for this request", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, f := newTestBackend(t)
			f.AddFault(tc.fault)
			_, err := b.Create(backendtest.Ctx(t), testSpec(t, "relay-1", map[string]string{"fleet": "demo"}))
			backendtest.CheckError(t, &f.API, err, tc.want, 0)
			if errors.Is(err, backend.ErrCapacity) != tc.capacity {
				t.Errorf("errors.Is(%v, ErrCapacity) = %v, want %v", err, !tc.capacity, tc.capacity)
			}
			if p := f.Requests("POST /servers"); len(p) != 1 {
				t.Errorf("%d POSTs, want 1: a refused create is not retried", len(p))
			}
		})
	}
}

func TestNew(t *testing.T) {
	if _, err := New(Config{}); err == nil || !strings.Contains(err.Error(), "no API token") {
		t.Errorf("New without a token: %v", err)
	}
}

// TestSetLabels: a server's labels change in place, one PUT, the server
// kept (a new label or a key rotation replaces no box).
func TestSetLabels(t *testing.T) {
	b, f := newTestBackend(t)
	c := backendtest.Ctx(t)
	id := f.addServer("demo-fsn-1", map[string]string{"fleet": "demo", "tier": "steady", "group": "fsn", "team": "audio"})
	sid := strconv.FormatInt(id, 10)
	want := map[string]string{"fleet": "demo", "tier": "steady", "group": "fsn", "owner": "ops"}
	if err := b.SetLabels(c, sid, want); err != nil {
		t.Fatal(err)
	}
	box, err := b.Get(c, sid)
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(box.Labels, want) {
		t.Fatalf("labels %v, want %v", box.Labels, want)
	}
	if w := f.Writes(); len(w) != 1 || w[0] != "PUT /servers/"+sid {
		t.Fatalf("writes %v, want one PUT of the server", w)
	}
	if err := b.SetLabels(c, "999999", want); !errors.Is(err, backend.ErrNotFound) {
		t.Fatalf("labels of a missing server: %v, want ErrNotFound", err)
	}
	if err := b.SetLabels(c, sid, map[string]string{"bad key": "x"}); err == nil || len(f.Writes()) != 2 {
		t.Fatalf("bad label: %v, writes %v; want a refusal before any call", err, f.Writes())
	}
}

// TestAPIErrors: with one retry layer (hcloud-go's own would multiply the
// tries), a 429 that does not stop is tried backendtest.FastRetry.Attempts times.
func TestAPIErrors(t *testing.T) {
	backendtest.APIErrors(t, cloud, backendtest.APIErrorWants{
		Unauthorized: "hcloud get server 7: 401 unauthorized: unable to authenticate",
		Forbidden:    "hcloud delete server 7: 403 forbidden: insufficient permissions for this request",
		Unavailable:  "hcloud get server 7: 503 unavailable: service temporarily unavailable",
		RateLimited:  "hcloud get server 7: 429 rate_limit_exceeded: limit of 3600 requests per hour reached",
	})
}
