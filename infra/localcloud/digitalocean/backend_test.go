package digitalocean

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/infra/backend"
	"github.com/relayfleet/relayfleet/infra/backend/backendtest"
	dobackend "github.com/relayfleet/relayfleet/infra/digitalocean"
	"github.com/relayfleet/relayfleet/infra/localcloud"
	"github.com/relayfleet/relayfleet/internal/testutil"
)

const testToken = "dop_v1_local-cloud-test-token"

// localCloud is a Server over MemMachines behind httptest, every request
// and response checked against DigitalOcean's description.
type localCloud struct {
	srv *Server
	m   *localcloud.MemMachines
	v   *validator
	url string
	log *logLines
}

type logLines struct {
	lines chan string
}

func startCloud(t *testing.T, stateFile string, m *localcloud.MemMachines) *localCloud {
	t.Helper()
	return startCloudConfig(t, localcloud.Config{StateFile: stateFile}, m, nil)
}

// startCloudConfig is startCloud with cfg (its Token and Logf set here),
// and front, when set, between the validator and the server.
func startCloudConfig(t *testing.T, cfg localcloud.Config, m *localcloud.MemMachines, front func(http.Handler) http.Handler) *localCloud {
	t.Helper()
	if m == nil {
		m = localcloud.NewMemMachines()
	}
	logs := &logLines{lines: make(chan string, 10000)}
	cfg.Token = testToken
	cfg.Logf = func(f string, a ...any) {
		select {
		case logs.lines <- strings.TrimSpace(fmt.Sprintf(f, a...)):
		default:
		}
	}
	srv, err := New(m, cfg)
	if err != nil {
		t.Fatal(err)
	}
	v := newValidator(t, true)
	var h http.Handler = srv
	if front != nil {
		h = front(srv)
	}
	hs := httptest.NewServer(v.wrap(h))
	t.Cleanup(func() { hs.Close(); srv.Close() })
	return &localCloud{srv: srv, m: m, v: v, url: hs.URL, log: logs}
}

func (c *localCloud) backend(t *testing.T) *dobackend.Backend {
	t.Helper()
	b, err := dobackend.New(dobackend.Config{
		Token: testToken, Endpoint: c.url,
		Retry:        backend.Retry{Attempts: 3, Base: time.Millisecond, Max: 10 * time.Millisecond},
		PollInterval: 5 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func testCtx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return c
}

func testSpec(t *testing.T, name, shape string, labels map[string]string) backend.Spec {
	return backendtest.Spec(t, name, shape, "fra1", labels)
}

// TestBackendAgainstLocalCloud runs our DigitalOcean backend (godo) against
// the local cloud: every request it sends and every answer it gets is
// checked against DigitalOcean's published description, and what it sees
// is what the machines behind the droplets are.
func TestBackendAgainstLocalCloud(t *testing.T) {
	testutil.NoLeaks(t)
	cloud := startCloud(t, filepath.Join(t.TempDir(), "do.json"), nil)
	b := cloud.backend(t)
	c := testCtx(t)
	steady := map[string]string{"fleet": "demo", "tier": "steady", "group": "eu"}
	specA := testSpec(t, "demo-s-eu-1", "s-2vcpu-4gb", steady)
	specB := testSpec(t, "demo-s-eu-2", "c-4", steady)

	boxA, err := b.Create(c, specA)
	if err != nil {
		t.Fatal(err)
	}
	boxB, err := b.Create(c, specB)
	if err != nil {
		t.Fatal(err)
	}
	machines := cloud.m.Machines()
	if len(machines) != 2 {
		t.Fatalf("machines %+v, want 2", machines)
	}
	for _, tc := range []struct {
		box   backend.Box
		spec  backend.Spec
		cores int
		ram   int64
	}{{boxA, specA, 2, 4 << 30}, {boxB, specB, 4, 8 << 30}} {
		ms, found := cloud.m.Spec(tc.spec.Name)
		if !found {
			t.Fatalf("no machine %s", tc.spec.Name)
		}
		i := slices.IndexFunc(machines, func(m localcloud.Machine) bool { return m.Name == tc.spec.Name })
		if tc.box.IPv4 != machines[i].IPv4 || !tc.box.IPv4.IsValid() || tc.box.IPv6.IsValid() {
			t.Errorf("%s: box IPv4 %v IPv6 %v, want the machine's IPv4 %v and no IPv6", tc.spec.Name, tc.box.IPv4, tc.box.IPv6, machines[i].IPv4)
		}
		if ms.Cores != tc.cores || ms.RAM != tc.ram {
			t.Errorf("%s (%s): machine of %d cores, %d bytes; want %d, %d", tc.spec.Name, tc.spec.Shape, ms.Cores, ms.RAM, tc.cores, tc.ram)
		}
		ud, _ := backend.CloudInit(tc.spec)
		if string(ms.UserData) != string(ud) {
			t.Errorf("%s: the machine's user data is not what the backend sent", tc.spec.Name)
		}
		if !mapsEqual(ms.Labels, steady) {
			t.Errorf("%s: machine labels %v, want %v", tc.spec.Name, ms.Labels, steady)
		}
		if tc.box.Status != backend.StatusRunning || tc.box.Shape != tc.spec.Shape || tc.box.Location != "fra1" || !mapsEqual(tc.box.Labels, steady) {
			t.Errorf("box %+v", tc.box)
		}
	}

	// Creating again adopts the droplet: no second machine.
	again, err := b.Create(c, specA)
	if err != nil || again.ID != boxA.ID {
		t.Fatalf("create again: %+v %v, want droplet %s", again, err, boxA.ID)
	}
	if got, err := b.Get(c, boxA.ID); err != nil || got.IPv4 != boxA.IPv4 || got.Name != specA.Name {
		t.Fatalf("get: %+v %v", got, err)
	}
	if _, err := b.Get(c, "99"); !errors.Is(err, backend.ErrNotFound) {
		t.Fatalf("get a missing droplet: %v", err)
	}

	// Labels: tier changes, a label comes; List by labels follows.
	if err := b.SetLabels(c, boxB.ID, map[string]string{"fleet": "demo", "tier": "burst", "event": "nye"}); err != nil {
		t.Fatal(err)
	}
	burst, err := b.List(c, map[string]string{"fleet": "demo", "tier": "burst"})
	if err != nil || len(burst) != 1 || burst[0].ID != boxB.ID || burst[0].Labels["event"] != "nye" || burst[0].Labels["group"] != "" {
		t.Fatalf("burst boxes %+v %v", burst, err)
	}
	all, err := b.List(c, nil)
	if err != nil || len(all) != 2 {
		t.Fatalf("all boxes %+v %v", all, err)
	}

	// Firewall: created, left alone when as wanted, updated when not.
	admin := []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")}
	fwID, err := b.EnsureFirewall(c, "demo-s-eu", map[string]string{"tier": "steady"}, [2]uint16{4443, 4443}, admin)
	if err != nil {
		t.Fatal(err)
	}
	writes := cloud.v.Ops()
	if id, err := b.EnsureFirewall(c, "demo-s-eu", map[string]string{"tier": "steady"}, [2]uint16{4443, 4443}, admin); err != nil || id != fwID {
		t.Fatalf("ensure again: %s %v", id, err)
	}
	if n := cloud.v.Ops()["PUT /v2/firewalls/{firewall_id} 200"] - writes["PUT /v2/firewalls/{firewall_id} 200"]; n != 0 {
		t.Errorf("an unchanged firewall was updated %d times: the local cloud reads rules back differently from DigitalOcean", n)
	}
	if id, err := b.EnsureFirewall(c, "demo-s-eu", map[string]string{"tier": "steady"}, [2]uint16{4443, 4444}, admin); err != nil || id != fwID {
		t.Fatalf("ensure with new ports: %s %v", id, err)
	}
	if n := cloud.v.Ops()["PUT /v2/firewalls/{firewall_id} 200"]; n != 1 {
		t.Errorf("%d firewall updates, want 1", n)
	}
	cloud.srv.mu.Lock()
	fw := cloud.srv.st.Firewalls[fwID]
	if fw == nil || !slices.Equal(fw.Tags, []string{dobackend.SetTag(map[string]string{"tier": "steady"})}) || !slices.ContainsFunc(fw.Inbound, func(r rule) bool { return r.Protocol == "udp" && r.Ports == "4443-4444" }) {
		t.Errorf("firewall %+v", fw)
	}
	cloud.srv.mu.Unlock()
	if err := b.DeleteFirewall(c, fwID); err != nil {
		t.Fatal(err)
	}
	if err := b.DeleteFirewall(c, fwID); err != nil {
		t.Fatalf("delete a deleted firewall: %v", err)
	}

	for _, box := range []backend.Box{boxA, boxB} {
		if err := b.Delete(c, box.ID); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Delete(c, boxA.ID); err != nil {
		t.Fatalf("delete a deleted droplet: %v", err)
	}
	if left, err := b.List(c, nil); err != nil || len(left) != 0 {
		t.Fatalf("droplets after delete: %+v %v", left, err)
	}
	if m := cloud.m.Machines(); len(m) != 0 {
		t.Fatalf("machines after delete: %+v", m)
	}
	// The operations the backend used, each validated.
	ops := cloud.v.Ops()
	for _, want := range []string{
		"POST /v2/droplets 202", "GET /v2/actions/{action_id} 200", "GET /v2/droplets/{droplet_id} 200",
		"GET /v2/droplets 200", "DELETE /v2/droplets/{droplet_id} 204", "GET /v2/droplets/{droplet_id} 404",
		"GET /v2/tags/{tag_id} 404", "POST /v2/tags 201", "POST /v2/tags/{tag_id}/resources 204",
		"DELETE /v2/tags/{tag_id}/resources 204", "GET /v2/firewalls 200", "POST /v2/firewalls 202",
		"PUT /v2/firewalls/{firewall_id} 200", "DELETE /v2/firewalls/{firewall_id} 204",
	} {
		if ops[want] == 0 {
			t.Errorf("no %s validated; seen %v", want, ops)
		}
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, found := b[k]; !found || w != v {
			return false
		}
	}
	return true
}

// TestCreateRequestsPerBox: one droplet's create costs the same few
// requests whatever the fleet's size (issue 31: a create is O(1) API
// calls): its lookup by name, the POST, its action's polls while it boots
// (one per poll interval; here the machine boots at once) and a read of
// the droplet; never a list of the fleet. 250 other droplets (more than the
// 200 a page) change nothing.
func TestCreateRequestsPerBox(t *testing.T) {
	cloud := startCloud(t, "", nil)
	b, err := dobackend.New(dobackend.Config{
		Token: testToken, Endpoint: cloud.url,
		Retry:        backend.Retry{Attempts: 3, Base: time.Millisecond, Max: 10 * time.Millisecond},
		PollInterval: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	c := testCtx(t)
	labels := map[string]string{"fleet": "demo", "tier": "burst", "event": "gig"}
	create := func(name string) localcloud.RequestCounts {
		t.Helper()
		before := cloud.srv.Requests()
		if _, err := b.Create(c, testSpec(t, name, "c-2", labels)); err != nil {
			t.Fatal(err)
		}
		after := cloud.srv.Requests()
		d := localcloud.RequestCounts{Total: after.Total - before.Total, Routes: map[string]int{}}
		for r, n := range after.Routes {
			if n -= before.Routes[r]; n != 0 {
				d.Routes[r] = n
			}
		}
		return d
	}
	alone := create("demo-gig-1")
	for i := range 250 {
		if status, _, body := cloud.call(t, http.MethodPost, "/v2/droplets", fmt.Sprintf(`{"name":"demo-s-%d","size":"c-2","region":"fra1","image":"debian-12-x64","tags":["fleet:demo"]}`, i), false); status != http.StatusAccepted {
			t.Fatalf("droplet %d: %d %s", i, status, body)
		}
	}
	inFleet := create("demo-gig-2")
	t.Logf("CREATE_REQUESTS digitalocean: alone %d %v; beside 250 droplets %d %v", alone.Total, alone.Routes, inFleet.Total, inFleet.Routes)
	for _, d := range []localcloud.RequestCounts{alone, inFleet} {
		if d.Total > maxCreateRequests || d.Routes["GET /v2/droplets"] != 1 || d.Routes["POST /v2/droplets"] != 1 {
			t.Errorf("one create sent %d requests %v; want at most %d: one lookup by name, one POST", d.Total, d.Routes, maxCreateRequests)
		}
	}
}

// maxCreateRequests is what a create may cost when its machine boots at
// once (docs/operations.md states it): the lookup by name, the POST, two
// polls of its action, two reads of the droplet.
const maxCreateRequests = 6
