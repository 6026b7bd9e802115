package digitalocean

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"reflect"
	"slices"
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
	return backendtest.Spec(t, name, "s-2vcpu-4gb", "fra1", labels)
}

func TestLifecycle(t *testing.T) {
	b, f := newTestBackend(t)
	c := backendtest.Ctx(t)
	burst := map[string]string{"fleet": "demo", "tier": "burst", "event": "nye"}
	steady := f.addDroplet("relay-steady-1", "fleet:demo", "tier:steady", "unrelated")
	f.addDroplet("relay-steady-2", "fleet:demo", "tier:steady")
	f.addDroplet("other-1", "fleet:other", "tier:burst", "event:nye")

	spec := testSpec(t, "relay-burst-1", burst)
	box, err := b.Create(c, spec)
	if err != nil {
		t.Fatal(err)
	}
	want := backend.Box{
		ID: box.ID, Name: "relay-burst-1", Labels: burst, Status: backend.StatusRunning, Shape: "s-2vcpu-4gb", Location: "fra1",
		IPv4: netip.MustParseAddr("192.241.165.154"), IPv6: netip.MustParseAddr("2604:a880:0:1010::18a:a001"),
	}
	if !reflect.DeepEqual(box, want) {
		t.Errorf("box\n got %+v\nwant %+v", box, want)
	}
	id, _ := strconv.Atoi(box.ID)
	if img := f.droplets[id]["image"].(map[string]any)["slug"]; img != DefaultImage {
		t.Errorf("image %v, want the default %s", img, DefaultImage)
	}
	wantUD, _ := backend.CloudInit(spec)
	if f.userData["relay-burst-1"] != string(wantUD) {
		t.Errorf("user_data is not CloudInit(spec):\n%s", f.userData["relay-burst-1"])
	}
	if n := len(f.Requests("GET /v2/actions/")); n < 2 {
		t.Errorf("%d action polls, want at least 2 (in-progress, completed)", n)
	}
	if p := f.Requests("POST /v2/droplets"); len(p) != 1 {
		t.Errorf("POSTs %v", p)
	}

	got, err := b.Get(c, box.ID)
	if err != nil || !reflect.DeepEqual(got, box) {
		t.Errorf("Get = %+v, %v; want %+v", got, err, box)
	}

	for _, tc := range []struct {
		labels map[string]string
		query  string
		want   []string
	}{
		{map[string]string{"fleet": "demo"}, "tag_name=fleet:demo", []string{"relay-burst-1", "relay-steady-1", "relay-steady-2"}},
		{map[string]string{"fleet": "demo", "tier": "burst"}, "tag_name=fleet:demo", []string{"relay-burst-1"}},
		{map[string]string{"event": "nye", "tier": "burst"}, "tag_name=event:nye", []string{"other-1", "relay-burst-1"}},
		{map[string]string{"fleet": "nope"}, "tag_name=fleet:nope", nil},
		{nil, "page=1", []string{"other-1", "relay-burst-1", "relay-steady-1", "relay-steady-2"}},
	} {
		n := len(f.Requests("GET /v2/droplets?"))
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
		if q := f.Requests("GET /v2/droplets?")[n:]; len(q) == 0 || !strings.Contains(unescape(q[0]), tc.query) {
			t.Errorf("List(%v) asked %v, want %s", tc.labels, q, tc.query)
		}
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
	left, err := b.List(c, map[string]string{"fleet": "demo", "event": "nye"})
	if err != nil || len(left) != 0 {
		t.Errorf("left after delete: %v, %v", left, err)
	}
	if _, err := b.Get(c, strconv.Itoa(steady)); err != nil {
		t.Errorf("steady box: %v", err)
	}
}

func TestCreateIdempotentByName(t *testing.T) {
	b, f := newTestBackend(t)
	c := backendtest.Ctx(t)
	f.addDroplet("relay-1", "fleet:other")
	id := f.addDroplet("relay-1", "fleet:demo", "tier:steady")
	f.addDroplet("relay-1", "fleet:demo", "tier:steady") // a duplicate: the lower id wins
	box, err := b.Create(c, testSpec(t, "relay-1", map[string]string{"fleet": "demo", "tier": "steady"}))
	if err != nil {
		t.Fatal(err)
	}
	if box.ID != strconv.Itoa(id) {
		t.Errorf("Create returned %s, want the existing %d", box.ID, id)
	}
	if p := f.Requests("POST /v2/droplets"); len(p) != 0 {
		t.Errorf("Create posted %v for an existing droplet", p)
	}
	// The same name in another fleet is another droplet.
	box, err = b.Create(c, testSpec(t, "relay-1", map[string]string{"fleet": "prod"}))
	if err != nil {
		t.Fatal(err)
	}
	if p := f.Requests("POST /v2/droplets"); len(p) != 1 || box.Labels["fleet"] != "prod" {
		t.Errorf("Create in fleet prod: posts %v, box %+v", p, box)
	}
}

// TestNamed: the droplet of a name in the fleet, listed by name, in one
// request however many droplets the account has (the fake serves two a
// page); another fleet's droplet of the name is not found.
func TestNamed(t *testing.T) {
	b, f := newTestBackend(t)
	c := backendtest.Ctx(t)
	for i := range 60 {
		f.addDroplet(fmt.Sprintf("relay-%d", i+2), "fleet:demo")
	}
	f.addDroplet("relay-1", "fleet:other")
	id := f.addDroplet("relay-1", "fleet:demo", "event:gig")
	before := len(f.Requests("GET /v2/droplets"))
	box, ok, err := b.Named(c, "relay-1", "demo")
	if err != nil || !ok || box.ID != strconv.Itoa(id) || box.Labels["event"] != "gig" {
		t.Fatalf("Named(relay-1, demo) = %+v, %v, %v; want droplet %d", box, ok, err, id)
	}
	if n := len(f.Requests("GET /v2/droplets")) - before; n != 1 {
		t.Errorf("Named made %d list requests, want 1", n)
	}
	if _, ok, err := b.Named(c, "relay-1", "prod"); ok || err != nil {
		t.Errorf("Named(relay-1, prod) found %v (%v)", ok, err)
	}
}

// TestCreateRefusesAnotherTiersDroplet: an event's box named like a steady
// droplet of the same fleet is not adopted: Create refuses, naming the
// droplet and the tag, posts nothing and deletes nothing.
func TestCreateRefusesAnotherTiersDroplet(t *testing.T) {
	b, f := newTestBackend(t)
	c := backendtest.Ctx(t)
	id := f.addDroplet("demo-fsn-1", "fleet:demo", "tier:steady", "event:none")
	_, err := b.Create(c, testSpec(t, "demo-fsn-1", map[string]string{"fleet": "demo", "tier": "burst", "event": "fsn"}))
	if err == nil || !strings.Contains(err.Error(), "demo-fsn-1") || !strings.Contains(err.Error(), `label tier "steady", not "burst"`) || strings.Contains(err.Error(), "\n") {
		t.Errorf("Create over the steady droplet: %v; want one line naming demo-fsn-1 and its tier", err)
	}
	if p := f.Requests("POST /v2/droplets"); len(p) != 0 {
		t.Errorf("Create posted %v over another tier's droplet", p)
	}
	if d := f.Requests("DELETE"); len(d) != 0 {
		t.Errorf("deletes: %v", d)
	}
	if _, err := b.Get(c, strconv.Itoa(id)); err != nil {
		t.Errorf("steady droplet: %v", err)
	}
	box, err := b.Create(c, testSpec(t, "demo-fsn-1", map[string]string{"fleet": "demo", "tier": "steady", "event": "none"}))
	if err != nil || box.ID != strconv.Itoa(id) {
		t.Errorf("Create with the droplet's labels: %+v, %v; want it adopted", box, err)
	}
}

func TestRetries(t *testing.T) {
	backendtest.CreateRetries(t, cloud, []backendtest.CreateRetry{
		{Name: "429 on lookup", Faults: []backendtest.Fault{{Method: "GET", Path: "/v2/droplets", Status: 429, Fixture: "error_rate_limit.json", Header: http.Header{"Retry-After": {"0"}}}}, Posts: 1},
		{Name: "429 on create", Faults: []backendtest.Fault{{Method: "POST", Path: "/v2/droplets", Status: 429, Fixture: "error_rate_limit.json"}}, Posts: 2},
		{Name: "503 on action poll", Faults: []backendtest.Fault{{Method: "GET", Path: "/v2/actions/3164402", Status: 503, Fixture: "error_unavailable.json"}}, Posts: 1},
		{Name: "500 then 502 on lookup", Faults: []backendtest.Fault{
			{Method: "GET", Path: "/v2/droplets", Status: 500, Fixture: "error_unavailable.json"},
			{Method: "GET", Path: "/v2/droplets", Status: 502, Fixture: "error_unavailable.json"},
		}, Posts: 1},
		{Name: "503 on create, nothing made", Faults: []backendtest.Fault{{Method: "POST", Path: "/v2/droplets", Status: 503, Fixture: "error_unavailable.json"}}, Posts: 2},
		// The create took effect but its answer was lost: the backend
		// finds the droplet instead of making a second one.
		{Name: "503 on create that was made", Faults: []backendtest.Fault{{Method: "POST", Path: "/v2/droplets", Status: 503, Fixture: "error_unavailable.json", After: true}}, Posts: 1},
	})
}

func TestErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		call func(*Backend, context.Context) error
		want string
	}{
		{
			name: "invalid size",
			call: func(b *Backend, c context.Context) error {
				s := testSpec(t, "relay-1", map[string]string{"fleet": "demo"})
				s.Shape = "s-99"
				_, err := b.Create(c, s)
				return err
			},
			want: "digitalocean create droplet relay-1: 422 unprocessable_entity: You specified an invalid size for Droplet creation. (request 4d9d8375-3c56-4925-a3e7-eceeefbe9ad8)",
		},
		{
			name: "bad id",
			call: func(b *Backend, c context.Context) error { return b.Delete(c, "relay-1") },
			want: `digitalocean delete droplet: droplet id "relay-1": want a positive integer`,
		},
		{
			name: "label DigitalOcean cannot tag",
			call: func(b *Backend, c context.Context) error {
				_, err := b.Create(c, testSpec(t, "relay-1", map[string]string{"fleet": "demo", "tier": "a.b"}))
				return err
			},
			want: `digitalocean create droplet relay-1: label tier value "a.b": character '.': want letters, digits, '-' and '_'`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, f := newTestBackend(t)
			backendtest.CheckError(t, &f.API, tc.call(b, backendtest.Ctx(t)), tc.want, 0)
		})
	}
}

// TestCreateCapacity: a 422 that says the size or the region is not
// available fails Create at once, one POST, with an error that is
// backend.ErrCapacity; a 422 for an invalid size is not.
func TestCreateCapacity(t *testing.T) {
	for _, tc := range []struct {
		name, fixture string
		want          string
		capacity      bool
	}{
		{"size not available", "error_capacity.json",
			"digitalocean create droplet relay-1: 422 unprocessable_entity: Size is not available in this region. (request 94739105-b2bb-4bf4-90f3-e23974f4a74d)", true},
		{"region not available", "error_region_unavailable.json",
			"digitalocean create droplet relay-1: 422 unprocessable_entity: Region is not available", true},
		{"invalid size", "error_invalid_size.json",
			"digitalocean create droplet relay-1: 422 unprocessable_entity: You specified an invalid size for Droplet creation. (request 4d9d8375-3c56-4925-a3e7-eceeefbe9ad8)", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, f := newTestBackend(t)
			f.AddFault(backendtest.Fault{Method: "POST", Path: "/v2/droplets", Status: http.StatusUnprocessableEntity, Fixture: tc.fixture})
			_, err := b.Create(backendtest.Ctx(t), testSpec(t, "relay-1", map[string]string{"fleet": "demo"}))
			backendtest.CheckError(t, &f.API, err, tc.want, 0)
			if errors.Is(err, backend.ErrCapacity) != tc.capacity {
				t.Errorf("errors.Is(%v, ErrCapacity) = %v, want %v", err, !tc.capacity, tc.capacity)
			}
			if p := f.Requests("POST /v2/droplets"); len(p) != 1 {
				t.Errorf("%d POSTs, want 1: a refused create is not retried", len(p))
			}
		})
	}
}

func TestTagsAndLabels(t *testing.T) {
	labels := map[string]string{"fleet": "demo", "tier": "burst", "event": "nye-2026"}
	tags := Tags(labels)
	if want := []string{"event:nye-2026", "fleet:demo", "tier:burst", "relayfleet:event:nye-2026:fleet:demo:tier:burst"}; !reflect.DeepEqual(tags, want) {
		t.Errorf("Tags = %v, want %v", tags, want)
	}
	if got := Labels(append(tags, "web", ":x")); !reflect.DeepEqual(got, labels) {
		t.Errorf("Labels = %v, want %v", got, labels)
	}
}

func TestNew(t *testing.T) {
	if _, err := New(Config{Token: "  "}); err == nil || !strings.Contains(err.Error(), "no API token") {
		t.Errorf("New without a token: %v", err)
	}
}

func unescape(s string) string {
	u, err := url.QueryUnescape(s)
	if err != nil {
		return s
	}
	return u
}

// TestSetLabels: a droplet's "key:value" tags follow the labels in place
// (tags made when missing, stale ones taken off), its other tags are
// left alone, and the droplet is kept.
func TestSetLabels(t *testing.T) {
	b, f := newTestBackend(t)
	c := backendtest.Ctx(t)
	id := strconv.Itoa(f.addDroplet("demo-nyc-1", "fleet:demo", "tier:steady", "group:nyc", "team:audio", "billing"))
	want := map[string]string{"fleet": "demo", "tier": "steady", "group": "nyc", "owner": "ops"}
	if err := b.SetLabels(c, id, want); err != nil {
		t.Fatal(err)
	}
	box, err := b.Get(c, id)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(box.Labels, want) {
		t.Fatalf("labels %v, want %v", box.Labels, want)
	}
	f.Mu.Lock()
	tags := f.droplets[mustAtoi(t, id)]["tags"].([]string)
	made := f.tags["owner:ops"]
	f.Mu.Unlock()
	if !slices.Contains(tags, "billing") || !made {
		t.Fatalf("tags %v (tag owner:ops made: %v): the plain tag must stay, the new one be made", tags, made)
	}
	for _, w := range f.Writes() {
		if strings.HasPrefix(w, "DELETE /v2/droplets") || strings.HasPrefix(w, "POST /v2/droplets") {
			t.Fatalf("the droplet was touched: %v", f.Writes())
		}
	}
	if err := b.SetLabels(c, "999999", want); !errors.Is(err, backend.ErrNotFound) {
		t.Fatalf("labels of a missing droplet: %v, want ErrNotFound", err)
	}
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestAPIErrors(t *testing.T) {
	backendtest.APIErrors(t, cloud, backendtest.APIErrorWants{
		Unauthorized: "digitalocean get droplet 7: 401 Unauthorized: Unable to authenticate you",
		Forbidden:    "digitalocean delete droplet 7: 403 forbidden: You do not have access for the attempted action.",
		Unavailable:  "digitalocean get droplet 7: 503 service_unavailable: Service Unavailable. Please try again later.",
		RateLimited:  "digitalocean get droplet 7: 429 too_many_requests: API Rate limit exceeded.",
	})
}
