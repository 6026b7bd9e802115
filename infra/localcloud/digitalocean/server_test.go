package digitalocean

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/digitalocean/godo"
	"golang.org/x/oauth2"

	"github.com/relayfleet/relayfleet/infra/backend"
	dobackend "github.com/relayfleet/relayfleet/infra/digitalocean"
	"github.com/relayfleet/relayfleet/infra/localcloud"
	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/inventories"
	"github.com/relayfleet/relayfleet/inventories/pricing"
)

// call sends one request to the local cloud, with the token unless
// noAuth, and returns the status, headers and body.
func (c *localCloud) call(t *testing.T, method, path, body string, noAuth bool) (int, http.Header, []byte) {
	t.Helper()
	token := testToken
	if noAuth {
		token = ""
	}
	return testutil.Request(t, method, c.url+path, token, body)
}

func apiError(t *testing.T, body []byte) apiErr {
	t.Helper()
	var e apiErr
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("error body %s: %v", body, err)
	}
	return e
}

func (c *localCloud) godo(t *testing.T) *godo.Client {
	t.Helper()
	hc := &http.Client{Transport: &oauth2.Transport{Source: oauth2.StaticTokenSource(&oauth2.Token{AccessToken: testToken})}}
	g, err := godo.New(hc, godo.SetBaseURL(c.url+"/"))
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func (c *localCloud) logLines() []string {
	var out []string
	for {
		select {
		case l := <-c.log.lines:
			out = append(out, l)
		default:
			return out
		}
	}
}

// TestValidatorCatchesFaults: the validator the other tests lean on sees a
// response that breaks the description, a request that does, and a path
// the description does not have; the local cloud's own answer to the same
// request passes.
func TestValidatorCatchesFaults(t *testing.T) {
	cloud := startCloud(t, "", nil)
	status, _, body := cloud.call(t, http.MethodPost, "/v2/droplets", `{"name":"a-1","size":"s-1vcpu-1gb","region":"fra1","image":"debian-12-x64"}`, false)
	if status != http.StatusAccepted {
		t.Fatalf("create: %d %s", status, body)
	}
	var created struct{ Droplet map[string]any }
	json.Unmarshal(body, &created)
	id := int(created.Droplet["id"].(float64))

	v := newValidator(t, false)
	wrong := v.wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v2/droplets/"+strconv.Itoa(id) {
			// The real answer with networks gone and the id a string.
			d := cloneMap(created.Droplet)
			delete(d, "networks")
			d["id"] = strconv.Itoa(id)
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(map[string]any{"droplet": d})
			return
		}
		cloud.srv.ServeHTTP(w, r)
	}))
	hs := httptest.NewServer(wrong)
	defer hs.Close()
	send := func(method, path, body string) { testutil.Request(t, method, hs.URL+path, testToken, body) }
	send(http.MethodGet, "/v2/droplets/"+strconv.Itoa(id), "")
	f := v.Findings()
	if len(f) != 1 || !strings.Contains(f[0], "response 200 to GET /v2/droplets/") || !strings.Contains(f[0], "networks") || !strings.Contains(f[0], "/droplet/id") {
		t.Fatalf("a droplet without networks and with a string id: findings %q", f)
	}
	// A request: size a number, name missing.
	send(http.MethodPost, "/v2/droplets", `{"size":2,"region":"fra1","image":"debian-12-x64"}`)
	if f = v.Findings(); len(f) < 2 || !strings.Contains(f[1], "request POST /v2/droplets") {
		t.Fatalf("a create request without a name and a numeric size: findings %q", f)
	}
	// A path DigitalOcean does not have.
	send(http.MethodGet, "/v2/boxes", "")
	if f = v.Findings(); !strings.Contains(f[len(f)-1], "no operation in the description") {
		t.Fatalf("GET /v2/boxes: findings %q", f)
	}
	// The local cloud's own answer passes (the strict validator of
	// startCloud would have failed the test above otherwise; check again
	// here through the lenient one).
	n := len(v.Findings())
	direct := v.wrap(cloud.srv)
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/v2/droplets/"+strconv.Itoa(id), nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	direct.ServeHTTP(rec, req)
	if rec.Code != 200 || len(v.Findings()) != n {
		t.Fatalf("the local cloud's answer: %d, findings %q", rec.Code, v.Findings()[n:])
	}
}

func cloneMap(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// TestErrors: DigitalOcean's error bodies (id, message, request_id) for a
// missing token, a wrong one, a missing droplet and a bad create; each
// checked against the description by startCloud's validator.
func TestErrors(t *testing.T) {
	cloud := startCloud(t, "", nil)
	cloud.v.lenientRequests = true
	// Without a token the request breaks the description (bearer_auth):
	// call the server directly.
	for _, auth := range []string{"", "Bearer wrong", "Basic " + testToken} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, "/v2/droplets", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		cloud.srv.ServeHTTP(rec, req)
		e := apiError(t, rec.Body.Bytes())
		if rec.Code != http.StatusUnauthorized || e.ID != "Unauthorized" || e.Message != "Unable to authenticate you" || e.RequestID == "" {
			t.Errorf("Authorization %q: %d %+v", auth, rec.Code, e)
		}
	}
	status, _, body := cloud.call(t, http.MethodGet, "/v2/droplets/12345", "", false)
	if e := apiError(t, body); status != http.StatusNotFound || e.ID != "not_found" || e.RequestID == "" {
		t.Errorf("missing droplet: %d %+v", status, e)
	}
	for _, tc := range []struct{ body, want string }{
		{`{"name":"a","size":"s-99vcpu-1tb","image":"debian-12-x64"}`, "invalid size"},
		{`{"name":"a","size":"c-2","region":"mars1","image":"debian-12-x64"}`, "invalid region"},
		{`{"name":"a","size":"c-2","image":""}`, "invalid image"},
		{`{"name":"a_b","size":"c-2","image":"debian-12-x64"}`, "Name is invalid"},
		{`{"name":"a","size":"c-2","image":"debian-12-x64","tags":["bad tag"]}`, "tag \"bad tag\" is invalid"},
		{`{"name":"a","size":"c-2","image":"debian-12-x64","user_data":"` + strings.Repeat("x", 65<<10) + `"}`, "user_data"},
	} {
		status, _, body := cloud.call(t, http.MethodPost, "/v2/droplets", tc.body, false)
		if e := apiError(t, body); status != http.StatusUnprocessableEntity || e.ID != "unprocessable_entity" || !strings.Contains(e.Message, tc.want) {
			t.Errorf("create %.80s: %d %+v, want 422 %q", tc.body, status, e, tc.want)
		}
	}
	// The description refuses the bad name too, as the server does.
	if f := cloud.v.Findings(); !slices.ContainsFunc(f, func(s string) bool {
		return strings.HasPrefix(s, "request POST /v2/droplets") && strings.Contains(s, "/name")
	}) {
		t.Errorf("the validator did not refuse the name a_b: %q", f)
	}
	// Through the backend: the 422 reaches the operator as one line.
	b := cloud.backend(t)
	_, err := b.Create(testCtx(t), testSpec(t, "demo-s-eu-1", "s-99vcpu-1tb", map[string]string{"fleet": "demo"}))
	if err == nil || !strings.Contains(err.Error(), "422 unprocessable_entity: You specified an invalid size") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("backend create with a bad size: %v", err)
	}
	if len(cloud.m.Names()) != 0 {
		t.Fatalf("machines after refused creates: %v", cloud.m.Names())
	}
}

// TestRateLimit: the ratelimit headers count down; past the limit the
// answer is 429 too_many_requests until the window resets.
func TestRateLimit(t *testing.T) {
	cloud := startCloud(t, "", nil)
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	cloud.srv.mu.Lock()
	cloud.srv.limit, cloud.srv.window = 3, time.Hour
	cloud.srv.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	cloud.srv.mu.Unlock()
	for i := 1; i <= 4; i++ {
		status, h, body := cloud.call(t, http.MethodGet, "/v2/droplets", "", false)
		if h.Get("Ratelimit-Limit") != "3" || h.Get("Ratelimit-Remaining") != strconv.Itoa(max(3-i, 0)) || h.Get("Ratelimit-Reset") != strconv.FormatInt(now.Add(time.Hour).Unix(), 10) {
			t.Errorf("request %d: headers %v", i, h)
		}
		if i <= 3 && status != http.StatusOK {
			t.Errorf("request %d: %d %s", i, status, body)
		}
		if i == 4 {
			if e := apiError(t, body); status != http.StatusTooManyRequests || e.ID != "too_many_requests" || h.Get("Retry-After") == "" {
				t.Errorf("request past the limit: %d %+v %v", status, e, h)
			}
		}
	}
	mu.Lock()
	now = now.Add(time.Hour)
	mu.Unlock()
	if status, h, _ := cloud.call(t, http.MethodGet, "/v2/droplets", "", false); status != http.StatusOK || h.Get("Ratelimit-Remaining") != "2" {
		t.Fatalf("after the window: %d %v", status, h)
	}
}

// TestPagination: lists come in pages with links.pages and meta.total, and
// godo walks them.
func TestPagination(t *testing.T) {
	cloud := startCloud(t, "", nil)
	g := cloud.godo(t)
	c := testCtx(t)
	for i := range 5 {
		_, _, err := g.Droplets.Create(c, &godo.DropletCreateRequest{Name: "p-" + strconv.Itoa(i), Region: "ams3", Size: "s-1vcpu-1gb", Image: godo.DropletCreateImage{Slug: "debian-12-x64"}, Tags: []string{"fleet:p"}})
		if err != nil {
			t.Fatal(err)
		}
	}
	var names []string
	lo := &godo.ListOptions{Page: 1, PerPage: 2}
	pages := 0
	for {
		ds, resp, err := g.Droplets.ListByTag(c, "fleet:p", lo)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		if resp.Meta == nil || resp.Meta.Total != 5 {
			t.Fatalf("page %d: meta %+v", lo.Page, resp.Meta)
		}
		for _, d := range ds {
			names = append(names, d.Name)
		}
		if resp.Links.IsLastPage() {
			break
		}
		p, err := resp.Links.CurrentPage()
		if err != nil {
			t.Fatal(err)
		}
		lo.Page = p + 1
	}
	if pages != 3 || !slices.Equal(names, []string{"p-0", "p-1", "p-2", "p-3", "p-4"}) {
		t.Fatalf("%d pages of %v", pages, names)
	}
	_, _, body := cloud.call(t, http.MethodGet, "/v2/droplets?per_page=2&page=2", "", false)
	var pg struct {
		Links struct{ Pages map[string]string }
	}
	json.Unmarshal(body, &pg)
	for rel, want := range map[string]string{"first": "page=1", "prev": "page=1", "next": "page=3", "last": "page=3"} {
		if u := pg.Links.Pages[rel]; !strings.HasPrefix(u, cloud.url+"/v2/droplets?") || !strings.Contains(u, want) || !strings.Contains(u, "per_page=2") {
			t.Errorf("links.pages.%s = %q, want %s", rel, u, want)
		}
	}
}

// TestStateFile: the records outlive the server; the file is 0600 and
// holds neither the token nor the user data.
func TestStateFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "do.json")
	m := localcloud.NewMemMachines()
	cloud := startCloud(t, file, m)
	b := cloud.backend(t)
	c := testCtx(t)
	spec := testSpec(t, "demo-s-eu-1", "c-2", map[string]string{"fleet": "demo", "tier": "steady"})
	box, err := b.Create(c, spec)
	if err != nil {
		t.Fatal(err)
	}
	fw, err := b.EnsureFirewall(c, "demo-s-eu", map[string]string{"fleet": "demo"}, [2]uint16{4443, 4443}, []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")})
	if err != nil {
		t.Fatal(err)
	}
	cloud.srv.Close()
	st, err := os.Stat(file)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("state file: %v %v", st.Mode(), err)
	}
	data, _ := os.ReadFile(file)
	for _, secret := range []string{testToken, "PRIVATE KEY", spec.AuthorizedKeys[0][:40], "#cloud-config"} {
		if bytes.Contains(data, []byte(secret)) {
			t.Errorf("the state file holds %q", secret)
		}
	}
	again := startCloud(t, file, m)
	b2 := again.backend(t)
	if got, err := b2.Get(c, box.ID); err != nil || got.IPv4 != box.IPv4 || got.Status != backend.StatusRunning {
		t.Fatalf("droplet after restart: %+v %v", got, err)
	}
	if id, err := b2.EnsureFirewall(c, "demo-s-eu", map[string]string{"fleet": "demo"}, [2]uint16{4443, 4443}, []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")}); err != nil || id != fw {
		t.Fatalf("firewall after restart: %s %v, want %s", id, err, fw)
	}
	if n := again.v.Ops()["PUT /v2/firewalls/{firewall_id} 200"]; n != 0 {
		t.Errorf("the firewall read back after a restart differs: %d updates", n)
	}
	// A state file that is not the server's is refused by name.
	bad := filepath.Join(t.TempDir(), "bad.json")
	os.WriteFile(bad, []byte("{\"version\": 9}"), 0o600)
	if _, err := New(m, localcloud.Config{StateFile: bad, Token: testToken}); err == nil || !strings.Contains(err.Error(), bad) {
		t.Fatalf("a state file of version 9: %v", err)
	}
	if _, err := New(m, localcloud.Config{Token: " "}); err == nil || !strings.Contains(err.Error(), "token") {
		t.Fatalf("no token: %v", err)
	}
}

// TestRestartDuringCreate: a droplet whose machine was being created when
// the server stopped is errored and deleted by the next server; its user
// data was never kept, so it cannot be resumed.
func TestRestartDuringCreate(t *testing.T) {
	file := filepath.Join(t.TempDir(), "do.json")
	m1 := localcloud.NewMemMachines()
	started := make(chan struct{})
	m1.OnCreate = func(ctx context.Context, s localcloud.MachineSpec) error {
		close(started)
		<-ctx.Done() // the server stops first
		return ctx.Err()
	}
	first := startCloud(t, file, m1)
	status, _, body := first.call(t, http.MethodPost, "/v2/droplets", `{"name":"r-1","size":"c-2","region":"fra1","image":"debian-12-x64"}`, false)
	if status != http.StatusAccepted {
		t.Fatalf("create: %d %s", status, body)
	}
	var created struct {
		Droplet struct{ ID int }
		Links   struct{ Actions []struct{ ID int } }
	}
	json.Unmarshal(body, &created)
	<-started
	// The second server reads the state while the first still creates (as
	// after a crash).
	m2 := localcloud.NewMemMachines()
	second := startCloud(t, file, m2)
	testutil.WaitFor(t, 30*time.Second, "the second server to delete r-1's machine", func() bool { return slices.Contains(m2.Deleted(), "r-1") })
	g := second.godo(t)
	a, _, err := g.Actions.Get(testCtx(t), created.Links.Actions[0].ID)
	if err != nil || a.Status != "errored" {
		t.Fatalf("create action after the restart: %+v %v", a, err)
	}
	testutil.WaitFor(t, 30*time.Second, "r-1 to go", func() bool {
		_, _, err := g.Droplets.Get(testCtx(t), created.Droplet.ID)
		var er *godo.ErrorResponse
		return errors.As(err, &er) && er.Response.StatusCode == http.StatusNotFound
	})
	first.srv.Close()
}

// TestCreateFails: a machine that does not boot errors the create action;
// the backend reports it and the droplet goes. The log has a line a
// request, and never the token or the user data.
func TestCreateFails(t *testing.T) {
	m := localcloud.NewMemMachines()
	m.CreateErr = func(s localcloud.MachineSpec) error { return errors.New("no room for " + s.Name) }
	cloud := startCloud(t, "", m)
	b := cloud.backend(t)
	spec := testSpec(t, "demo-s-eu-1", "c-2", map[string]string{"fleet": "demo"})
	_, err := b.Create(testCtx(t), spec)
	if err == nil || !strings.Contains(err.Error(), "errored") {
		t.Fatalf("create with a machine that fails: %v", err)
	}
	testutil.WaitFor(t, 30*time.Second, "the droplet to go", func() bool {
		cloud.srv.mu.Lock()
		defer cloud.srv.mu.Unlock()
		return len(cloud.srv.st.Droplets) == 0
	})
	logs := strings.Join(cloud.logLines(), "\n")
	if !strings.Contains(logs, "digitalocean: POST /v2/droplets 202") || !strings.Contains(logs, "no room for demo-s-eu-1") {
		t.Errorf("log:\n%s", logs)
	}
	if strings.Contains(logs, testToken) || strings.Contains(logs, "PRIVATE KEY") || strings.Contains(logs, "cloud-config") {
		t.Errorf("the log holds a secret:\n%s", logs)
	}
}

// TestDeleteWhileCreating: a droplet deleted while its machine boots is
// removed, machine and all, once the boot ends.
func TestDeleteWhileCreating(t *testing.T) {
	m := localcloud.NewMemMachines()
	release := make(chan struct{})
	m.OnCreate = func(ctx context.Context, s localcloud.MachineSpec) error {
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	cloud := startCloud(t, "", m)
	status, _, body := cloud.call(t, http.MethodPost, "/v2/droplets", `{"name":"d-1","size":"c-2","region":"fra1","image":"debian-12-x64"}`, false)
	if status != http.StatusAccepted {
		t.Fatalf("create: %d %s", status, body)
	}
	var created struct{ Droplet struct{ ID int } }
	json.Unmarshal(body, &created)
	path := "/v2/droplets/" + strconv.Itoa(created.Droplet.ID)
	if status, _, body := cloud.call(t, http.MethodDelete, path, "", false); status != http.StatusNoContent {
		t.Fatalf("delete: %d %s", status, body)
	}
	// Its name stays taken until the machine is gone.
	if status, _, _ := cloud.call(t, http.MethodPost, "/v2/droplets", `{"name":"d-1","size":"c-2","region":"fra1","image":"debian-12-x64"}`, false); status != http.StatusUnprocessableEntity {
		t.Fatalf("a second d-1 while the first goes: %d", status)
	}
	close(release)
	testutil.WaitFor(t, 30*time.Second, "d-1 to go", func() bool {
		status, _, _ := cloud.call(t, http.MethodGet, path, "", false)
		return status == http.StatusNotFound
	})
	if !slices.Equal(m.Deleted(), []string{"d-1"}) || len(m.Names()) != 0 {
		t.Fatalf("machines %v, deleted %v", m.Names(), m.Deleted())
	}
}

// TestStripPrefixMount: mounted under http.StripPrefix("/v2", s) the
// server serves the same API, and its links still say /v2.
func TestStripPrefixMount(t *testing.T) {
	srv, err := New(localcloud.NewMemMachines(), localcloud.Config{Token: testToken})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	mux := http.NewServeMux()
	mux.Handle("/v2/", http.StripPrefix("/v2", srv))
	hs := httptest.NewServer(newValidator(t, true).wrap(mux))
	defer hs.Close()
	cloud := &localCloud{srv: srv, url: hs.URL}
	b := cloud.backend(t)
	box, err := b.Create(testCtx(t), testSpec(t, "demo-s-eu-1", "c-2", map[string]string{"fleet": "demo"}))
	if err != nil || !box.IPv4.IsValid() {
		t.Fatalf("create through StripPrefix: %+v %v", box, err)
	}
	_, _, body := cloud.call(t, http.MethodPost, "/v2/droplets", `{"name":"demo-s-eu-2","size":"c-2","image":"debian-12-x64"}`, false)
	if !strings.Contains(string(body), hs.URL+"/v2/actions/") {
		t.Fatalf("action link: %s", body)
	}
}

// TestMoreOperations: the rest of what the local cloud serves, each
// validated: tags listed and deleted, droplets deleted by tag, firewalls'
// droplets and tags, sizes, actions listed.
func TestMoreOperations(t *testing.T) {
	cloud := startCloud(t, "", nil)
	g := cloud.godo(t)
	c := testCtx(t)
	var ids []int
	for _, name := range []string{"m-1", "m-2"} {
		d, _, err := g.Droplets.Create(c, &godo.DropletCreateRequest{Name: name, Region: "nyc3", Size: "s-1vcpu-1gb", Image: godo.DropletCreateImage{Slug: "debian-12-x64"}, Tags: []string{"fleet:m"}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, d.ID)
	}
	if _, _, err := g.Tags.Create(c, &godo.TagCreateRequest{Name: "extra"}); err != nil {
		t.Fatal(err)
	}
	fw, _, err := g.Firewalls.Create(c, &godo.FirewallRequest{
		Name:         "m-fw",
		InboundRules: []godo.InboundRule{{Protocol: "tcp", PortRange: "22", Sources: &godo.Sources{Addresses: []string{"198.51.100.0/24"}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Firewalls.AddDroplets(c, fw.ID, ids...); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Firewalls.AddTags(c, fw.ID, "extra"); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Firewalls.RemoveDroplets(c, fw.ID, ids[0]); err != nil {
		t.Fatal(err)
	}
	got, _, err := g.Firewalls.Get(c, fw.ID)
	if err != nil || !slices.Equal(got.DropletIDs, ids[1:]) || !slices.Equal(got.Tags, []string{"extra"}) || got.InboundRules[0].PortRange != "22" {
		t.Fatalf("firewall %+v %v", got, err)
	}
	if _, err := g.Firewalls.RemoveTags(c, fw.ID, "extra"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := g.Firewalls.Create(c, &godo.FirewallRequest{Name: "m-fw2", Tags: []string{"nope"}, InboundRules: []godo.InboundRule{{Protocol: "tcp", PortRange: "22", Sources: &godo.Sources{Addresses: []string{"198.51.100.0/24"}}}}}); err == nil {
		t.Fatal("a firewall on a tag that does not exist was made")
	}
	tags, _, err := g.Tags.List(c, nil)
	if err != nil || len(tags) != 2 || tags[1].Name != "fleet:m" || tags[1].Resources.Count != 2 {
		t.Fatalf("tags %+v %v", tags, err)
	}
	if _, err := g.Tags.Delete(c, "extra"); err != nil {
		t.Fatal(err)
	}
	sizes, _, err := g.Sizes.List(c, &godo.ListOptions{PerPage: 200})
	if err != nil || !slices.ContainsFunc(sizes, func(s godo.Size) bool {
		return s.Slug == "s-4vcpu-8gb" && s.Vcpus == 4 && s.Memory == 8192 && s.PriceMonthly == 48
	}) {
		t.Fatalf("sizes %+v %v", sizes, err)
	}
	testutil.WaitFor(t, 30*time.Second, "the droplets to be active", func() bool {
		as, _, err := g.Actions.List(c, nil)
		return err == nil && len(as) == 2 && as[0].Status == "completed" && as[1].Status == "completed"
	})
	if _, err := g.Droplets.DeleteByTag(c, "fleet:m"); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 30*time.Second, "the tagged droplets to go", func() bool {
		ds, _, err := g.Droplets.List(c, nil)
		return err == nil && len(ds) == 0
	})
	if _, err := g.Firewalls.Delete(c, fw.ID); err != nil {
		t.Fatal(err)
	}
	ops := cloud.v.Ops()
	for _, want := range []string{
		"POST /v2/firewalls/{firewall_id}/droplets 204", "DELETE /v2/firewalls/{firewall_id}/droplets 204",
		"POST /v2/firewalls/{firewall_id}/tags 204", "DELETE /v2/firewalls/{firewall_id}/tags 204",
		"POST /v2/firewalls 422", "GET /v2/tags 200", "DELETE /v2/tags/{tag_id} 204", "GET /v2/sizes 200",
		"GET /v2/actions 200", "DELETE /v2/droplets 204",
	} {
		if ops[want] == 0 {
			t.Errorf("no %s validated; seen %v", want, ops)
		}
	}
}

// TestSizesMatchProviders: `fleet providers` pointed at the local cloud
// finds the DigitalOcean shapes of inventories/providers.yaml with their
// cores, RAM, prices and transfer; the only differences are the small
// sizes the local cloud adds (not in providers.yaml).
func TestSizesMatchProviders(t *testing.T) {
	cloud := startCloud(t, "", nil)
	cat, err := inventories.LoadCatalogue(filepath.Join("..", "..", "..", "inventories", "providers.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	live, err := pricing.FetchDigitalOcean(testCtx(t), testToken, cloud.url, nil)
	if err != nil {
		t.Fatal(err)
	}
	extra := []string{"s-1vcpu-1gb", "s-1vcpu-2gb", "s-2vcpu-2gb", "s-2vcpu-4gb"}
	var missing []string
	for _, d := range pricing.Compare(cat, live) {
		if d.Field == pricing.FieldMissing && slices.ContainsFunc(extra, func(s string) bool { return strings.HasPrefix(d.Ref, "digitalocean/"+s) }) {
			missing = append(missing, d.Ref)
			continue
		}
		t.Errorf("%s %s: providers.yaml %q, local cloud %q", d.Ref, d.Field, d.Shipped, d.Live)
	}
	if len(missing) != len(extra) {
		t.Errorf("extra sizes reported %v, want %v", missing, extra)
	}
}

// TestBackendWaitsOutRateLimit: past the limit our backend gets 429s and
// waits as their headers say, then goes on.
func TestBackendWaitsOutRateLimit(t *testing.T) {
	cloud := startCloud(t, "", nil)
	cloud.srv.mu.Lock()
	cloud.srv.limit, cloud.srv.window = 2, time.Second
	cloud.srv.mu.Unlock()
	b, err := dobackend.New(dobackend.Config{
		Token: testToken, Endpoint: cloud.url,
		Retry: backend.Retry{Attempts: 6, Base: time.Millisecond, Max: 3 * time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if _, err := b.List(testCtx(t), map[string]string{"fleet": "demo"}); err != nil {
			t.Fatalf("list %d: %v", i, err)
		}
	}
	if n := cloud.v.Ops()["GET /v2/droplets 429"]; n == 0 {
		t.Fatalf("no 429 answered; ops %v", cloud.v.Ops())
	}
}
