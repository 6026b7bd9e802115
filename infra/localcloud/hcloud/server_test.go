package hcloud

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/infra/backend"
	hcloudbackend "github.com/relayfleet/relayfleet/infra/hcloud"
	"github.com/relayfleet/relayfleet/infra/localcloud"
	"github.com/relayfleet/relayfleet/infra/localcloud/apicheck"
	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/inventories"
	"github.com/relayfleet/relayfleet/inventories/pricing"
)

const testToken = "local-t0ken-for-tests"

func compact(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func newTestServer(t *testing.T) (*Server, *localcloud.MemoryMachines) {
	t.Helper()
	mm := &localcloud.MemoryMachines{}
	s, err := New(mm, localcloud.Config{Token: testToken})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, mm
}

// serve mounts s at /v1 of a test server whose every exchange is checked
// against the API description; the check's failures fail the test.
func serve(t *testing.T, s *Server) (base string, v *apicheck.Checker) {
	t.Helper()
	return serveHandler(t, s)
}

// serveHandler is serve for a handler in front of a Server.
func serveHandler(t *testing.T, s http.Handler) (base string, v *apicheck.Checker) {
	t.Helper()
	mux := http.NewServeMux()
	var h http.Handler = http.StripPrefix("/v1", s)
	ts := httptest.NewUnstartedServer(nil)
	ts.Start()
	t.Cleanup(ts.Close)
	base = ts.URL + "/v1"
	v = newValidator(t, base)
	mux.Handle("/v1/", v.Wrap(h))
	ts.Config.Handler = mux
	t.Cleanup(func() {
		for _, f := range v.Failures() {
			t.Errorf("OpenAPI: %s", f)
		}
	})
	return base, v
}

func testKeys(t *testing.T) ([]byte, string) {
	t.Helper()
	hk, err := os.ReadFile(filepath.Join("..", "..", "backend", "testdata", "hostkey_ed25519"))
	if err != nil {
		t.Fatal(err)
	}
	admin, err := os.ReadFile(filepath.Join("..", "..", "backend", "testdata", "admin_ed25519.pub"))
	if err != nil {
		t.Fatal(err)
	}
	return hk, strings.TrimSpace(string(admin))
}

func testCtx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return c
}

func newBackend(t *testing.T, base, token string) *hcloudbackend.Backend {
	t.Helper()
	b, err := hcloudbackend.New(hcloudbackend.Config{Token: token, Endpoint: base, PollInterval: 5 * time.Millisecond,
		Retry: backend.Retry{Attempts: 2, Base: time.Millisecond, Max: 5 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestBackendLifecycle runs our hcloud backend (hcloud-go) against the
// local API: firewall, two servers, adoption, labels, listing by
// selector, deletion; every request and answer checked against Hetzner's
// API description.
func TestBackendLifecycle(t *testing.T) {
	testutil.NoLeaks(t)
	s, mm := newTestServer(t)
	base, v := serve(t, s)
	b := newBackend(t, base, testToken)
	c := testCtx(t)
	hk, admin := testKeys(t)
	labels := map[string]string{"fleet": "demo", "tier": "steady"}

	fwID, err := b.EnsureFirewall(c, "demo-steady", labels, [2]uint16{4443, 4443}, []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")})
	if err != nil {
		t.Fatal(err)
	}
	var boxes []backend.Box
	for _, name := range []string{"demo-fsn-1", "demo-fsn-2"} {
		box, err := b.Create(c, backend.Spec{Name: name, Shape: "cx23", Location: "fsn1", Labels: labels, HostKey: hk, AuthorizedKeys: []string{admin}})
		if err != nil {
			t.Fatal(err)
		}
		if box.Status != backend.StatusRunning || box.Shape != "cx23" || box.Location != "fsn1" || !box.IPv4.IsValid() {
			t.Errorf("box %+v", box)
		}
		spec, ok := mm.Spec(name)
		if !ok || spec.Cores != 2 || spec.RAM != 4<<30 || !strings.HasPrefix(string(spec.UserData), "#cloud-config\n") {
			t.Errorf("machine %s: %+v", name, spec)
		}
		boxes = append(boxes, box)
	}
	if got, _ := mm.Spec("demo-fsn-1"); got.Labels["tier"] != "steady" {
		t.Errorf("machine labels %v", got.Labels)
	}
	// The same spec again adopts the server.
	again, err := b.Create(c, backend.Spec{Name: "demo-fsn-1", Shape: "cx23", Location: "fsn1", Labels: labels, HostKey: hk, AuthorizedKeys: []string{admin}})
	if err != nil || again.ID != boxes[0].ID || again.IPv4 != boxes[0].IPv4 {
		t.Errorf("adopt: %+v %v, want %+v", again, err, boxes[0])
	}
	// Another tier's spec of the name is refused.
	if _, err := b.Create(c, backend.Spec{Name: "demo-fsn-1", Shape: "cx23", Location: "fsn1", Labels: map[string]string{"fleet": "demo", "tier": "burst"}, HostKey: hk, AuthorizedKeys: []string{admin}}); err == nil {
		t.Error("another tier's box of the name was adopted")
	}
	got, err := b.Get(c, boxes[1].ID)
	if err != nil || got.Name != "demo-fsn-2" || got.IPv4 != boxes[1].IPv4 {
		t.Errorf("get: %+v %v", got, err)
	}
	if _, err := b.Get(c, "999999"); !errors.Is(err, backend.ErrNotFound) {
		t.Errorf("get missing: %v", err)
	}
	if err := b.SetLabels(c, boxes[1].ID, map[string]string{"fleet": "demo", "tier": "steady", "drain": "yes"}); err != nil {
		t.Fatal(err)
	}
	list, err := b.List(c, map[string]string{"fleet": "demo", "drain": "yes"})
	if err != nil || len(list) != 1 || list[0].Name != "demo-fsn-2" {
		t.Errorf("list by drain: %+v %v", list, err)
	}
	list, err = b.List(c, labels)
	if err != nil || len(list) != 2 {
		t.Errorf("list: %+v %v", list, err)
	}
	// The firewall, applied by selector, covers both servers.
	fw := get(t, base, "/firewalls/"+fwID)
	if !strings.Contains(fw, `"selector":"fleet=demo,tier=steady"`) || strings.Count(fw, `"type":"server"`) != 2 {
		t.Errorf("firewall %s", fw)
	}
	// Changing the admin ranges sets the rules again.
	if _, err := b.EnsureFirewall(c, "demo-steady", labels, [2]uint16{4443, 4443}, []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")}); err != nil {
		t.Fatal(err)
	}
	if fw := get(t, base, "/firewalls/"+fwID); !strings.Contains(fw, "203.0.113.0/24") || strings.Contains(fw, "198.51.100.0/24") {
		t.Errorf("firewall rules after set_rules: %s", fw)
	}
	// Another selector (one more label): the firewall's labels are
	// updated, the old selector removed and the new one applied.
	wider := map[string]string{"fleet": "demo", "tier": "steady", "group": "fsn"}
	if id, err := b.EnsureFirewall(c, "demo-steady", wider, [2]uint16{4443, 4443}, []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")}); err != nil || id != fwID {
		t.Fatalf("ensure with a new selector: %s %v", id, err)
	}
	if fw := get(t, base, "/firewalls/"+fwID); !strings.Contains(fw, `"selector":"fleet=demo,group=fsn,tier=steady"`) || strings.Contains(fw, `"selector":"fleet=demo,tier=steady"`) || !strings.Contains(fw, `"group":"fsn"`) {
		t.Errorf("firewall after a new selector: %s", fw)
	}
	for _, box := range boxes {
		if err := b.Delete(c, box.ID); err != nil {
			t.Fatal(err)
		}
		if err := b.Delete(c, box.ID); err != nil {
			t.Errorf("delete twice: %v", err)
		}
	}
	if err := b.DeleteFirewall(c, fwID); err != nil {
		t.Fatal(err)
	}
	if list, _ := b.List(c, nil); len(list) != 0 || len(mm.Names()) != 0 || s.ServerCount() != 0 {
		t.Errorf("after delete: servers %v, machines %v", list, mm.Names())
	}
	for _, route := range []string{"POST /servers", "GET /servers", "GET /servers/{id}", "PUT /servers/{id}", "DELETE /servers/{id}",
		"GET /actions", "POST /firewalls", "GET /firewalls", "GET /firewalls/{id}", "DELETE /firewalls/{id}",
		"PUT /firewalls/{id}", "POST /firewalls/{id}/actions/set_rules", "POST /firewalls/{id}/actions/apply_to_resources",
		"POST /firewalls/{id}/actions/remove_from_resources"} {
		if v.Seen(route) == 0 {
			t.Errorf("the backend never sent %s: the check did not cover it", route)
		}
	}
}

func get(t *testing.T, base, path string) string {
	t.Helper()
	code, body := do(t, http.MethodGet, base+path, testToken, "")
	if code != 200 {
		t.Fatalf("GET %s: %d %s", path, code, body)
	}
	return body
}

func do(t *testing.T, method, url, token, body string) (int, string) {
	t.Helper()
	code, _, b := testutil.Request(t, method, url, token, body)
	return code, string(b)
}

func createBody(name, typ string) string {
	return fmt.Sprintf(`{"name":%q,"server_type":%q,"image":"debian-12","location":"fsn1","labels":{"fleet":"t"},"user_data":"#cloud-config\n"}`, name, typ)
}

func TestErrors(t *testing.T) {
	s, _ := newTestServer(t)
	base, _ := serve(t, s)
	for _, tc := range []struct {
		name, method, path, token, body string
		status                          int
		code                            string
	}{
		{"no token", "GET", "/servers", "", "", 401, "unauthorized"},
		{"wrong token", "GET", "/servers", "nope", "", 401, "unauthorized"},
		{"missing server", "GET", "/servers/77", testToken, "", 404, "not_found"},
		{"missing action", "GET", "/actions/77", testToken, "", 404, "not_found"},
		{"bad server type", "POST", "/servers", testToken, createBody("a-1", "cx99"), 400, "invalid_input"},
		{"bad name", "POST", "/servers", testToken, createBody("-a", "cx23"), 400, "invalid_input"},
		{"bad selector", "GET", "/servers?label_selector=a%20in%20b", testToken, "", 400, "invalid_input"},
		{"bad user data", "POST", "/servers", testToken, strings.Replace(createBody("a-2", "cx23"), `#cloud-config\n`, `#!/bin/sh\n`, 1), 400, "invalid_input"},
	} {
		code, body := do(t, tc.method, base+tc.path, tc.token, tc.body)
		var e struct {
			Error struct{ Code, Message string }
		}
		json.Unmarshal([]byte(body), &e)
		if code != tc.status || e.Error.Code != tc.code {
			t.Errorf("%s: %d %s, want %d %s", tc.name, code, body, tc.status, tc.code)
		}
		if strings.Contains(body, testToken) {
			t.Errorf("%s: the answer quotes the token", tc.name)
		}
	}
	// A body that is not JSON (sent around the check, which would
	// rightly call the request invalid): 400 json_error.
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("POST", "/servers", strings.NewReader("{"))
	req.Header.Set("Authorization", "Bearer "+testToken)
	s.ServeHTTP(rec, req)
	if rec.Code != 400 || !strings.Contains(rec.Body.String(), `"json_error"`) {
		t.Errorf("not JSON: %d %s", rec.Code, rec.Body)
	}
	// A taken name: 409 uniqueness_error.
	if code, body := do(t, "POST", base+"/servers", testToken, createBody("dup-1", "cx23")); code != 201 {
		t.Fatalf("create: %d %s", code, body)
	}
	if code, body := do(t, "POST", base+"/servers", testToken, createBody("dup-1", "cx23")); code != 409 || !strings.Contains(body, `"uniqueness_error"`) {
		t.Errorf("second create: %d %s", code, body)
	}
	s.Wait()
}

// TestRateLimit: past the limit, 429 rate_limit_exceeded with the
// RateLimit headers, and the backend's retry waits it out.
func TestRateLimit(t *testing.T) {
	s, _ := newTestServer(t)
	base, _ := serve(t, s)
	s.SetRateLimit(2, 200*time.Millisecond)
	var code int
	var header http.Header
	for range 3 {
		code, header, _ = testutil.Request(t, http.MethodGet, base+"/servers", testToken, "")
	}
	if code != 429 || header.Get("RateLimit-Limit") != "2" || header.Get("RateLimit-Remaining") != "0" || header.Get("RateLimit-Reset") == "" {
		t.Errorf("third request: %d %v", code, header)
	}
	b := newBackend(t, base, testToken)
	b2, err := hcloudbackend.New(hcloudbackend.Config{Token: testToken, Endpoint: base, PollInterval: 5 * time.Millisecond,
		Retry: backend.Retry{Attempts: 8, Base: 100 * time.Millisecond, Max: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	_ = b
	if _, err := b2.List(testCtx(t), nil); err != nil {
		t.Errorf("list after the limit, with retries: %v", err)
	}
}

// TestPagination lists more servers than a page holds.
func TestPagination(t *testing.T) {
	s, _ := newTestServer(t)
	base, _ := serve(t, s)
	for i := range 30 {
		if code, body := do(t, "POST", base+"/servers", testToken, createBody(fmt.Sprintf("p-%d", i), "cx23")); code != 201 {
			t.Fatalf("create: %d %s", code, body)
		}
	}
	s.Wait()
	body := get(t, base, "/servers?page=2&per_page=25")
	var page struct {
		Servers []struct{ Name string }
		Meta    struct {
			Pagination struct {
				Page         int  `json:"page"`
				PerPage      int  `json:"per_page"`
				LastPage     int  `json:"last_page"`
				TotalEntries int  `json:"total_entries"`
				PreviousPage *int `json:"previous_page"`
				NextPage     *int `json:"next_page"`
			}
		}
	}
	if err := json.Unmarshal([]byte(body), &page); err != nil {
		t.Fatal(err)
	}
	p := page.Meta.Pagination
	if len(page.Servers) != 5 || p.Page != 2 || p.LastPage != 2 || p.TotalEntries != 30 || p.NextPage != nil || p.PreviousPage == nil || *p.PreviousPage != 1 {
		t.Errorf("page 2: %d servers, %+v", len(page.Servers), p)
	}
	all, err := newBackend(t, base, testToken).List(testCtx(t), map[string]string{"fleet": "t"})
	if err != nil || len(all) != 30 {
		t.Errorf("backend list over pages: %d %v", len(all), err)
	}
}

// TestCreateFails: a machine that does not boot fails the create action,
// the backend's Create returns the error, and no server is left.
func TestCreateFails(t *testing.T) {
	s, mm := newTestServer(t)
	mm.CreateErr = func(spec localcloud.MachineSpec) error { return errors.New("box would not boot") }
	base, _ := serve(t, s)
	hk, admin := testKeys(t)
	_, err := newBackend(t, base, testToken).Create(testCtx(t), backend.Spec{Name: "bad-1", Shape: "cx23", Location: "fsn1",
		Labels: map[string]string{"fleet": "demo"}, HostKey: hk, AuthorizedKeys: []string{admin}})
	if err == nil || !strings.Contains(err.Error(), "box would not boot") {
		t.Errorf("create: %v", err)
	}
	if s.ServerCount() != 0 || len(mm.Names()) != 0 {
		t.Errorf("left behind: %d servers, machines %v", s.ServerCount(), mm.Names())
	}
}

// TestStateFile: the records outlive the process, in a 0600 file.
func TestStateFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "hcloud.json")
	mm := &localcloud.MemoryMachines{}
	s, err := New(mm, localcloud.Config{Token: testToken, StateFile: file})
	if err != nil {
		t.Fatal(err)
	}
	base, _ := serve(t, s)
	if code, body := do(t, "POST", base+"/servers", testToken, createBody("keep-1", "cx23")); code != 201 {
		t.Fatalf("create: %d %s", code, body)
	}
	s.Wait()
	s.Close()
	if st, err := os.Stat(file); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("state file: %v %v", st, err)
	}
	data, _ := os.ReadFile(file)
	if strings.Contains(string(data), testToken) || strings.Contains(string(data), "cloud-config") {
		t.Error("the state file keeps the token or the user data")
	}
	s2, err := New(mm, localcloud.Config{Token: testToken, StateFile: file})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	base2, _ := serve(t, s2)
	if body := get(t, base2, "/servers?name=keep-1"); !strings.Contains(body, `"status":"running"`) || !strings.Contains(body, `"ip":"192.0.2.`) {
		t.Errorf("after restart: %s", body)
	}
	if err := os.WriteFile(file, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := New(mm, localcloud.Config{Token: testToken, StateFile: file}); err == nil || !strings.Contains(err.Error(), file) {
		t.Errorf("a broken state file: %v", err)
	}
}

func TestSelectors(t *testing.T) {
	l := map[string]string{"fleet": "demo", "tier": "burst", "event": "nye"}
	for sel, want := range map[string]bool{
		"fleet=demo": true, "fleet==demo,tier=burst": true, "fleet!=demo": false, "fleet": true, "!drain": true,
		"!fleet": false, "tier in (steady,burst)": true, "tier notin (burst)": false, "event in (a, nye),fleet=demo": true,
		"fleet=other": false, "": true,
	} {
		s, err := parseSelector(sel)
		if err != nil {
			t.Errorf("%q: %v", sel, err)
			continue
		}
		if got := s.matches(l); got != want {
			t.Errorf("%q: %v, want %v", sel, got, want)
		}
	}
	for _, bad := range []string{"a in b", "=x", "k=v v"} {
		if _, err := parseSelector(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestServerTypesFromCatalogue(t *testing.T) {
	s, _ := newTestServer(t)
	base, _ := serve(t, s)
	body := get(t, base, "/server_types?name=cx23")
	if !strings.Contains(body, `"cores":2`) || !strings.Contains(body, `"memory":4`) {
		t.Errorf("cx23: %s", body)
	}
	for _, p := range []string{"/locations", "/images?name=debian-12", "/server_types"} {
		get(t, base, p)
	}
	if !slices.ContainsFunc(s.types, func(t serverType) bool { return t.Name == "ccx13" && t.Cores == 2 && t.RAM == 8<<30 }) {
		t.Error("ccx13 is not 2 cores and 8 GiB")
	}
}

// TestLivePricesMatchTheCatalogue: `fleet providers` pointed at the local
// API (pricing.FetchHcloud, hcloud-go) finds every shipped hcloud row, at
// its region's price, and nothing else.
func TestLivePricesMatchTheCatalogue(t *testing.T) {
	s, _ := newTestServer(t)
	base, _ := serve(t, s)
	live, err := pricing.FetchHcloud(testCtx(t), testToken, base, nil)
	if err != nil {
		t.Fatal(err)
	}
	cat, err := inventories.LoadCatalogue(inventories.Embedded(inventories.ProvidersFile))
	if err != nil {
		t.Fatal(err)
	}
	if len(live) == 0 {
		t.Fatal("no live rows")
	}
	for _, d := range pricing.Compare(cat, live) {
		t.Errorf("%s %s: shipped %q, local API %q", d.Ref, d.Field, d.Shipped, d.Live)
	}
}

// TestFirewallOnADeletedServer: a firewall applied to a server by id
// leaves it when the server is deleted, and can then be deleted itself.
func TestFirewallOnADeletedServer(t *testing.T) {
	s, _ := newTestServer(t)
	base, _ := serve(t, s)
	code, body := do(t, "POST", base+"/servers", testToken, createBody("fw-1", "cx23"))
	if code != 201 {
		t.Fatalf("create: %d %s", code, body)
	}
	s.Wait()
	var created struct {
		Server struct {
			ID int64 `json:"id"`
		} `json:"server"`
	}
	json.Unmarshal([]byte(body), &created)
	id := created.Server.ID
	fwBody := fmt.Sprintf(`{"name":"fw","rules":[{"direction":"in","protocol":"udp","port":"4443","source_ips":["0.0.0.0/0"]}],"apply_to":[{"type":"server","server":{"id":%d}}]}`, id)
	code, body = do(t, "POST", base+"/firewalls", testToken, fwBody)
	if code != 201 {
		t.Fatalf("firewall: %d %s", code, body)
	}
	var fw struct {
		Firewall struct {
			ID int64 `json:"id"`
		} `json:"firewall"`
	}
	json.Unmarshal([]byte(body), &fw)
	path := fmt.Sprintf("/firewalls/%d", fw.Firewall.ID)
	if code, body := do(t, "DELETE", base+path, testToken, ""); code != 422 || !strings.Contains(body, "resource_in_use") {
		t.Errorf("delete while applied: %d %s", code, body)
	}
	if code, body := do(t, "DELETE", fmt.Sprintf("%s/servers/%d", base, id), testToken, ""); code != 200 {
		t.Fatalf("delete server: %d %s", code, body)
	}
	s.Wait()
	if got := get(t, base, path); !strings.Contains(got, `"applied_to":[]`) {
		t.Errorf("firewall after its server went: %s", got)
	}
	if code, body := do(t, "DELETE", base+path, testToken, ""); code != 204 {
		t.Errorf("delete firewall: %d %s", code, body)
	}
}

// TestCreateRequestsPerBox: one server's create costs the same few
// requests whatever the fleet's size (issue 31: a create is O(1) API
// calls): its lookup by name, the POST, its actions' polls while it boots
// (one per poll interval; here the machine boots at once) and a read of
// the server; never a list of the fleet. 120 other servers of the fleet
// change nothing.
func TestCreateRequestsPerBox(t *testing.T) {
	s, _ := newTestServer(t)
	base, _ := serve(t, s)
	b, err := hcloudbackend.New(hcloudbackend.Config{Token: testToken, Endpoint: base, PollInterval: 200 * time.Millisecond,
		Retry: backend.Retry{Attempts: 2, Base: time.Millisecond, Max: 5 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	c := testCtx(t)
	hk, admin := testKeys(t)
	labels := map[string]string{"fleet": "demo", "tier": "burst", "event": "gig"}
	create := func(name string) localcloud.RequestCounts {
		t.Helper()
		before := s.Requests()
		if _, err := b.Create(c, backend.Spec{Name: name, Shape: "cx23", Location: "fsn1", Labels: labels, HostKey: hk, AuthorizedKeys: []string{admin}}); err != nil {
			t.Fatal(err)
		}
		after := s.Requests()
		d := localcloud.RequestCounts{Total: after.Total - before.Total, Routes: map[string]int{}}
		for r, n := range after.Routes {
			if n -= before.Routes[r]; n != 0 {
				d.Routes[r] = n
			}
		}
		return d
	}
	alone := create("demo-gig-1")
	for i := range 120 {
		if code, body := do(t, http.MethodPost, base+"/servers", testToken, createBody(fmt.Sprintf("demo-s-%d", i), "cx23")); code != http.StatusCreated {
			t.Fatalf("server %d: %d %s", i, code, body)
		}
	}
	inFleet := create("demo-gig-2")
	t.Logf("CREATE_REQUESTS hcloud: alone %d %v; beside 120 servers %d %v", alone.Total, alone.Routes, inFleet.Total, inFleet.Routes)
	for _, d := range []localcloud.RequestCounts{alone, inFleet} {
		if d.Total > maxCreateRequests || d.Routes["GET /servers"] != 1 || d.Routes["POST /servers"] != 1 {
			t.Errorf("one create sent %d requests %v; want at most %d: one lookup by name, one POST", d.Total, d.Routes, maxCreateRequests)
		}
	}
}

// maxCreateRequests is what a create may cost when its machine boots at
// once (docs/operations.md states it): the lookup by name, the POST, two
// polls of its actions, two reads of the server.
const maxCreateRequests = 6
