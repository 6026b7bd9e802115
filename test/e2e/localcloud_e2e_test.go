//go:build e2e

// The end-to-end test of the local clouds (make e2e-localcloud; root),
// issue 15.2's story on each: the local Hetzner Cloud API, then the local
// DigitalOcean API, run in process over lab boxes (one lab for both:
// /var/lib/relayfleet/lab-lcx, bridge rflcx0, subnet 10.231.117.0/24,
// sharing the default lab's image cache), and the real fleet binary,
// through the real Pulumi CLI and our cloud backends (hcloud-go, godo),
// walks a two-box fleet through fleet up, status, rollout under
// listeners, an event's burst box up (events reconcile) and down (burst
// down), and destroy. Every request the backends send and every answer
// is checked against the vendor's published API description.
package e2e

import (
	"bytes"
	"cmp"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"github.com/relayfleet/relayfleet/internal/text"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"golang.org/x/crypto/ssh"

	"github.com/relayfleet/relayfleet/infra/fleethosts"
	"github.com/relayfleet/relayfleet/infra/lab"
	"github.com/relayfleet/relayfleet/infra/localcloud"
	"github.com/relayfleet/relayfleet/infra/localcloud/apicheck"
	"github.com/relayfleet/relayfleet/infra/localcloud/faults"
	"github.com/relayfleet/relayfleet/infra/localcloud/providers"
	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/infra/provider"
	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/provision"
	"github.com/relayfleet/relayfleet/test/systest"
)

const (
	lcxListen = 8 // listeners through the router during the rollout
	// lcxCreateTimeout is the encore's create timeout: long enough for a box
	// on a loaded machine to come up (more than 40 s with make e2e's
	// other tests beside it), short enough for the hung one not to cost much.
	lcxCreateTimeout = 90 * time.Second
	lcxEvent         = "rehearsal" // brought up and removed by fleet events reconcile
	lcxEncore        = "encore"    // by fleet burst up and down
	// lcxSilence is the listeners' silence timer: a listener that hears
	// nothing this long presumes its relay dead and reconnects ("silent").
	// Everything the story does to the listeners is planned (they attach,
	// the rollout and the rebalancing move them make before break), so
	// none may get there: the longest audible gap stays under it and no
	// reconnect is silent. A relay whose link to the origin still waits on
	// a dial started before the origin listened kept its first listener
	// silent up to that dial's 3 s handshake timeout (a 964-1,072 ms gap
	// and one silent reconnect in most runs before the link dialled again
	// beside a stuck dial).
	lcxSilence  = 960 * time.Millisecond
	lcxGapBound = lcxSilence
)

// lcServer is a server as a local cloud's API lists it.
type lcServer struct {
	ID     string
	Name   string
	IP     netip.Addr
	Status string
	Labels map[string]string
}

// lcCloud is what differs between the local clouds: the rest of the story
// is lcStory's, the same for both.
type lcCloud struct {
	provider, shape, location string
	// fallbacks are two more locations of the shape: the encore's second
	// and third candidates.
	fallbacks [2]string
	// spec loads the vendor's API description.
	spec func() (*openapi3.T, error)
	// base is where the API's paths start (the checker's base), from the
	// listen address; endpoint the value of envURL that points our
	// backend at it.
	base, endpoint   func(addr string) string
	envURL, envToken string
	// servers and firewalls are the list paths under base, with the JSON
	// key holding the list.
	servers, firewalls [2]string
	server             func(map[string]any) lcServer
	// routes are the operations the story must send (a check that never
	// saw them covered nothing).
	routes []string
	// The cloud's own lab: the two stories run side by side, each on its
	// boxes, bridge and subnet; originIP is this machine's address on
	// the bridge.
	labDir, bridge, subnet, originIP string
}

var lcClouds = []lcCloud{
	{
		provider: "hcloud", shape: "cx23", location: "fsn1", fallbacks: [2]string{"nbg1", "hel1"},
		spec: func() (*openapi3.T, error) {
			return apicheck.Load("../../infra/localcloud/hcloud/testdata/hcloud.openapi.json")
		},
		base:     func(addr string) string { return "http://" + addr + "/v1" },
		endpoint: func(addr string) string { return "http://" + addr + "/v1" },
		envURL:   "HCLOUD_ENDPOINT", envToken: "HCLOUD_TOKEN",
		servers: [2]string{"/servers", "servers"}, firewalls: [2]string{"/firewalls", "firewalls"},
		server: func(s map[string]any) lcServer {
			ip, _ := netip.ParseAddr(fmt.Sprint(dig(s, "public_net", "ipv4", "ip")))
			labels := map[string]string{}
			if m, ok := s["labels"].(map[string]any); ok {
				for k, v := range m {
					labels[k] = fmt.Sprint(v)
				}
			}
			return lcServer{ID: fmt.Sprint(s["id"]), Name: fmt.Sprint(s["name"]), IP: ip, Status: fmt.Sprint(s["status"]), Labels: labels}
		},
		routes: []string{"POST /servers", "GET /servers/{id}", "DELETE /servers/{id}", "GET /actions", "POST /firewalls", "DELETE /firewalls/{id}"},
		labDir: "/var/lib/relayfleet/lab-lcx", bridge: "rflcx0", subnet: "10.231.117.0/24", originIP: "10.231.117.1",
	},
	{
		provider: "digitalocean", shape: "c-2", location: "fra1", fallbacks: [2]string{"ams3", "lon1"},
		spec: func() (*openapi3.T, error) {
			return apicheck.LoadBundled("../../infra/localcloud/digitalocean/testdata/openapi/DigitalOcean-public.v2.yaml",
				[]string{"/v2/droplets", "/v2/actions", "/v2/tags", "/v2/firewalls", "/v2/sizes", "/v2/account/keys"})
		},
		base:     func(addr string) string { return "http://" + addr },
		endpoint: func(addr string) string { return "http://" + addr + "/" },
		envURL:   "DIGITALOCEAN_API_URL", envToken: "DIGITALOCEAN_TOKEN",
		servers: [2]string{"/v2/droplets", "droplets"}, firewalls: [2]string{"/v2/firewalls", "firewalls"},
		server: func(s map[string]any) lcServer {
			var ip netip.Addr
			v4, _ := dig(s, "networks", "v4").([]any)
			for _, n := range v4 {
				if m, ok := n.(map[string]any); ok && m["type"] == "public" {
					ip, _ = netip.ParseAddr(fmt.Sprint(m["ip_address"]))
				}
			}
			labels := map[string]string{}
			tags, _ := s["tags"].([]any)
			for _, t := range tags {
				if k, v, ok := strings.Cut(fmt.Sprint(t), ":"); ok && !strings.Contains(v, ":") {
					labels[k] = v
				}
			}
			status := fmt.Sprint(s["status"])
			if status == "active" {
				status = "running"
			}
			return lcServer{ID: fmt.Sprint(s["id"]), Name: fmt.Sprint(s["name"]), IP: ip, Status: status, Labels: labels}
		},
		routes: []string{"POST /v2/droplets", "GET /v2/droplets/{droplet_id}", "DELETE /v2/droplets/{droplet_id}", "GET /v2/actions/{action_id}", "POST /v2/firewalls", "DELETE /v2/firewalls/{firewall_id}"},
		labDir: "/var/lib/relayfleet/lab-lcx-do", bridge: "rflcx1", subnet: "10.231.127.0/24", originIP: "10.231.127.1",
	},
}

// dig follows keys through nested JSON objects; nil where one is missing.
func dig(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

// lcEnv is what the clouds' stories share: the builds, the Pulumi CLI;
// and each story's own lab.
type lcEnv struct {
	cli, images, work   string
	fleetBin            string
	relayV1, relayV2    string // the release fleet up installs, the rollout's
	digestV1, digestV2  string
	lab                 *lab.Lab
	adminKey, adminLine string // the fleet's admin key: the file fleet logs in with, and its public line
}

// TestE2ELocalCloud runs lcStory on the local hcloud and the local
// DigitalOcean side by side, each in its own lab (CI's time: about four
// minutes each), and prints each cloud's LOCALCLOUD line.
func TestE2ELocalCloud(t *testing.T) {
	t.Parallel() // its own lab and fleet: see e2eLab
	cli, images, work, fleetBin, relayBin := e2eSetup(t)
	e := &lcEnv{cli: cli, images: images, work: work, fleetBin: fleetBin, relayV1: relayBin}
	// The rollout's release: the same relay with another version stamp.
	e.relayV2 = filepath.Join(work, "relay-v2")
	build := exec.Command("go", "build", "-ldflags", "-X github.com/relayfleet/relayfleet/internal/version.stamp=lcx-v2", "-o", e.relayV2, "github.com/relayfleet/relayfleet/cmd/relay")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		t.Fatalf("build the second relay: %v", err)
	}
	for _, b := range []struct{ path, want string }{{e.relayV1, ""}, {e.relayV2, "lcx-v2"}} {
		out, err := exec.Command(b.path, "--version").CombinedOutput()
		if err != nil || (b.want != "" && !strings.Contains(string(out), b.want)) || (b.want == "" && strings.Contains(string(out), "lcx-v2")) {
			t.Fatalf("%s --version: %v %q", b.path, err, out)
		}
	}
	for _, b := range []struct {
		path string
		d    *string
	}{{e.relayV1, &e.digestV1}, {e.relayV2, &e.digestV2}} {
		data, err := os.ReadFile(b.path)
		if err != nil {
			t.Fatal(err)
		}
		*b.d = provision.Digest(data)
	}
	if e.digestV1 == e.digestV2 {
		t.Fatal("the two relay builds have one digest")
	}

	// The admin's key: in the fleet file, and the key fleet logs in with.
	_, adminPriv, _ := ed25519.GenerateKey(rand.Reader)
	block, err := ssh.MarshalPrivateKey(adminPriv, "lcx-e2e")
	if err != nil {
		t.Fatal(err)
	}
	e.adminKey = filepath.Join(work, "id_ed25519")
	if err := os.WriteFile(e.adminKey, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	signer, _ := ssh.NewSignerFromKey(adminPriv)
	e.adminLine = strings.TrimSpace(string(ssh.MarshalAuthorizedKey(signer.PublicKey())))

	summaries := make([]string, len(lcClouds))
	t.Run("clouds", func(t *testing.T) {
		for i, c := range lcClouds {
			t.Run(c.provider, func(t *testing.T) {
				t.Parallel()
				ce := *e
				ce.lab = lcLab(t, ce.images, c)
				summaries[i] = lcStory(t, &ce, c)
			})
		}
	})
	for _, s := range summaries {
		if s != "" {
			fmt.Println(s)
		}
	}
}

// lcLab is c's own lab, emptied of what an interrupted run left; its
// boxes are deleted when the test ends.
func lcLab(t *testing.T, images string, c lcCloud) *lab.Lab {
	l, err := lab.New(lab.Config{Dir: c.labDir, ImageDir: images, Bridge: c.bridge, Subnet: netip.MustParsePrefix(c.subnet), Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	bs, err := l.List(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bs { // left by an interrupted run
		l.Delete(ctx, b.Name)
	}
	t.Cleanup(func() {
		bs, _ := l.List(context.Background(), nil)
		for _, b := range bs {
			l.Delete(context.Background(), b.Name)
		}
		l.Cleanup(context.Background())
	})
	return l
}

func (e *lcEnv) labBoxes(t *testing.T) []lab.Box {
	t.Helper()
	bs, err := e.lab.List(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return bs
}

// lcStory is issue 15.2's story on one local cloud; it returns the
// summary line with its figures.
func lcStory(t *testing.T, e *lcEnv, c lcCloud) string {
	work := filepath.Join(e.work, c.provider)
	if err := os.MkdirAll(work, 0o755); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(work, "state")
	inv := filepath.Join(work, "fleet.yaml")
	evPath := filepath.Join(work, "events.yaml")
	name := "lcx-" + c.provider[:2]
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	if bs := e.labBoxes(t); len(bs) != 0 {
		t.Fatalf("lab %s has boxes before the story: %v", c.labDir, bs)
	}

	// The local cloud, on loopback, checked against the vendor's
	// description.
	token := "e2e-" + fmt.Sprint(time.Now().UnixNano())
	api := providers.APIs[c.provider]
	// Its faults, set by the story as it goes, and its request counts.
	faultsPath, requestsPath := filepath.Join(work, "faults.json"), filepath.Join(work, "requests.json")
	setFaults := func(f faults.Faults) {
		t.Helper()
		if err := faults.Write(faultsPath, f); err != nil {
			t.Fatal(err)
		}
	}
	setFaults(faults.Faults{})
	ff, err := faults.Open(faultsPath, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	requests := func() int {
		t.Helper()
		rc, err := localcloud.ReadRequests(requestsPath)
		if err != nil {
			t.Fatal(err)
		}
		return rc.Total
	}
	// limited is the 429s the cloud answered so far.
	limited := func() int {
		t.Helper()
		rc, err := localcloud.ReadRequests(requestsPath)
		if err != nil {
			t.Fatal(err)
		}
		return rc.Statuses["429"]
	}
	h, closer, err := api.New(&localcloud.LabMachines{Lab: e.lab, RAMScale: 0.125, Logf: t.Logf},
		localcloud.Config{StateFile: filepath.Join(work, "cloud.json"), Token: token, Logf: t.Logf, Faults: ff, RequestsFile: requestsPath})
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	spec, err := c.spec()
	if err != nil {
		t.Fatal(err)
	}
	check, err := apicheck.New(spec, c.base(addr))
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(api.Mount+"/", http.StripPrefix(api.Mount, h)) // as fleet lab cloud serves it
	hs := &http.Server{Handler: check.Wrap(mux)}
	go hs.Serve(ln)
	defer hs.Close()
	apiList := func(what [2]string) []map[string]any {
		t.Helper()
		req, _ := http.NewRequest("GET", c.base(addr)+what[0]+"?per_page=50", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		var body map[string]json.RawMessage
		if err := json.Unmarshal(data, &body); err != nil || resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d %s", what[0], resp.StatusCode, data)
		}
		var items []map[string]any
		if err := json.Unmarshal(body[what[1]], &items); err != nil {
			t.Fatalf("GET %s: %v", what[0], err)
		}
		return items
	}
	servers := func() []lcServer {
		t.Helper()
		var out []lcServer
		for _, s := range apiList(c.servers) {
			out = append(out, c.server(s))
		}
		return out
	}

	// The origin's key: the boxes pull the broadcast from an origin on
	// this machine's address on the bridge, pinned by it.
	originKey := filepath.Join(work, "origin.key")
	spki, err := exec.Command(e.relayV1, "keygen", "--out", originKey).Output()
	if err != nil {
		t.Fatalf("relay keygen: %v", err)
	}
	originURL := fmt.Sprintf("http://%s:4443/#spki=%s", c.originIP, strings.TrimSpace(string(spki)))
	fleetFile := fmt.Sprintf(`version: 1
name: %s
origin: [%q]
admin:
  ranges: [%s]
  ssh_keys: [%q]
access:
  public_listen: [live/]
steady:
  - name: %s
    provider: %s
    shape: %s
    location: %s
    count: 2
    processes: auto
    base_port: 4443
`, name, originURL, c.subnet, e.adminLine, name, c.provider, c.shape, c.location)
	if err := os.WriteFile(inv, []byte(fleetFile), 0o644); err != nil {
		t.Fatal(err)
	}

	type fleetRun struct {
		out  string
		code int
		took time.Duration
	}
	// extraEnv goes to every fleet command while set.
	var extraEnv []string
	// fleetIn runs fleet with stateDir as its state dir; fleet with the
	// story's.
	fleetCmd := func(cctx context.Context, stateDir string, args ...string) *exec.Cmd {
		args = append(args, "--state-dir", stateDir, "--pulumi", e.cli, "--ssh-key", e.adminKey)
		cmd := exec.CommandContext(cctx, e.fleetBin, args...)
		cmd.Env = append(os.Environ(), "PULUMI_CONFIG_PASSPHRASE=", c.envURL+"="+c.endpoint(addr), c.envToken+"="+token)
		cmd.Env = append(cmd.Env, extraEnv...)
		return cmd
	}
	fleetIn := func(stateDir string, args ...string) fleetRun {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, 12*time.Minute)
		defer cancel()
		cmd := fleetCmd(cctx, stateDir, args...)
		start := time.Now()
		var r fleetRun
		r.out, r.code = systest.Combined(t, cmd)
		r.took = time.Since(start)
		t.Logf("fleet %s: exit %d after %.1fs\n%s", strings.Join(args[:min(3, len(args))], " "), r.code, r.took.Seconds(), r.out)
		if strings.Contains(r.out, token) {
			t.Errorf("fleet %s printed the API token", args[0])
		}
		return r
	}
	fleet := func(args ...string) fleetRun { t.Helper(); return fleetIn(state, args...) }
	must := func(r fleetRun, what string) fleetRun {
		t.Helper()
		if r.code != 0 {
			t.Fatalf("fleet %s: exit %d: %s", what, r.code, lastLine(r.out))
		}
		return r
	}

	// 1. fleet up: two servers, two lab boxes behind them, converged.
	up := must(fleet("up", "--inventory", inv, "--relay-binary", e.relayV1), "up")
	steady := servers()
	if len(steady) != 2 {
		t.Fatalf("%d servers after up, want 2", len(steady))
	}
	subnet := netip.MustParsePrefix(c.subnet)
	for _, s := range steady {
		if s.Status != "running" || !subnet.Contains(s.IP) || s.Labels["fleet"] != name {
			t.Errorf("server %s: status %s, ip %v, labels %v", s.Name, s.Status, s.IP, s.Labels)
		}
	}
	if bs := e.labBoxes(t); len(bs) != 2 {
		t.Fatalf("%d lab boxes after up, want 2", len(bs))
	}
	if fws := apiList(c.firewalls); len(fws) != 1 {
		t.Errorf("%d firewalls after up, want 1", len(fws))
	}
	// Converged: every relay process the stack lists answers /stats, on
	// the servers' addresses.
	relays := readRelays(t, state)
	for _, r := range relays {
		if !slices.ContainsFunc(steady, func(s lcServer) bool { return strings.Contains(r.Stats, "//"+s.IP.String()+":") }) {
			t.Errorf("relay %s is on none of the servers %v", r.Stats, steady)
		}
		if code := httpStatus(r.Stats); code != 200 {
			t.Errorf("relay %s: %d", r.Stats, code)
		}
	}

	// 2. fleet status: both boxes, their processes, the release fleet up
	// installed.
	hostFlags := []string{"--inventory", inv}
	st := must(fleet(append([]string{"status"}, hostFlags...)...), "status")
	// Each box's rows: one per relay process the stack lists on its
	// address, all active.
	for _, s := range steady {
		rows, want := 0, 0
		for _, line := range strings.Split(st.out, "\n") {
			if f := strings.Fields(line); len(f) > 2 && f[0] == s.Name && strings.HasPrefix(f[1], "relay@") && f[2] == "active" {
				rows++
			}
		}
		for _, r := range relays {
			if strings.Contains(r.Stats, "//"+s.IP.String()+":") {
				want++
			}
		}
		if rows != want || want == 0 {
			t.Errorf("fleet status shows %d active relay processes of %s, the stack lists %d", rows, s.Name, want)
		}
	}
	if n := strings.Count(st.out, "release "+e.digestV1[:12]); n != 2 {
		t.Errorf("fleet status shows release %s on %d boxes, want 2", e.digestV1[:12], n)
	}
	statusJSON := func() []provision.BoxReport {
		t.Helper()
		r := must(fleet(append([]string{"status", "--json"}, hostFlags...)...), "status --json")
		var doc struct{ Boxes []provision.BoxReport }
		if err := json.Unmarshal([]byte(r.out), &doc); err != nil {
			t.Fatalf("fleet status --json: %v", err)
		}
		return doc.Boxes
	}
	procs := 0
	for _, b := range statusJSON() {
		if b.Error != "" || len(b.Processes) == 0 {
			t.Errorf("status of %s: %d processes, error %q", b.Host, len(b.Processes), b.Error)
		}
		for _, p := range b.Processes {
			procs++
			if p.Active != "active" || p.Release != e.digestV1 {
				t.Errorf("status of %s %s: %s, release %s; want active on %s", b.Host, p.Unit, p.Active, text.ShortSHA(p.Release), text.ShortSHA(e.digestV1))
			}
		}
	}
	if procs != len(relays) {
		t.Errorf("fleet status --json lists %d processes, the stack %d", procs, len(relays))
	}

	// 3. Listeners: the origin, a publisher, the router on the relays
	// file, and a load generator's listeners through it.
	lctx, stopListen := context.WithCancel(ctx)
	defer stopListen()
	bg := func(name string, args ...string) *testutil.Proc {
		t.Helper()
		return testutil.StartLog(t, filepath.Join(work, name+".log"), exec.CommandContext(lctx, e.relayV1, args...))
	}
	bg("origin", "serve", "--listen", c.originIP+":4443", "--tls-key", originKey, "--no-auth", "--log-level", "warn")
	testutil.WaitFor(t, 20*time.Second, "the origin", func() bool { return httpStatus("http://"+c.originIP+":4443/healthz") == 200 })
	bg("publisher", "publish", "--paced", "--name", "live/show", originURL)
	port := freePort(t)
	routerURL := fmt.Sprintf("http://127.0.0.1:%d/", port)
	bg("router", "router", "--listen", fmt.Sprintf("127.0.0.1:%d", port),
		"--relays", filepath.Join(state, program.RelaysFile), "--poll", "200ms", "--log-level", "warn")
	testutil.WaitFor(t, 30*time.Second, "the router to list every relay healthy", func() bool {
		rs := routedRelays(routerURL)
		return len(rs) == len(relays) && !slices.ContainsFunc(rs, func(r routerRelay) bool { return !r.Healthy })
	})
	subscribed := func() int64 {
		var n int64
		for _, r := range readRelays(t, state) {
			n += subscribersAt(r.Stats)
		}
		return n
	}
	g := startLoadgen(t, e.relayV1, filepath.Join(work, "loadgen"), routerURL, lcxListen)
	testutil.WaitFor(t, 60*time.Second, "every listener subscribed", func() bool { return subscribed() == lcxListen })

	// 4. fleet rollout to the second build under the listeners, with the
	// router asked when it stops routing to a draining process. A
	// watcher counts the listeners subscribed across the fleet meanwhile.
	var (
		mu     sync.Mutex
		fewest = int64(lcxListen)
	)
	watch, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for watch.Err() == nil {
			n := subscribed()
			mu.Lock()
			fewest = min(fewest, n)
			mu.Unlock()
			time.Sleep(300 * time.Millisecond)
		}
	}()
	ro := fleet(append([]string{"rollout", "--relay-binary", e.relayV2, "--router", routerURL, "--router-poll", "200ms", "--listener-wait", "45s", "--canary-bake", "10s"}, hostFlags...)...)
	stopWatch()
	<-watched
	if ro.code != 0 {
		g.stop(t)
		t.Fatalf("fleet rollout: exit %d: %s", ro.code, lastLine(ro.out))
	}
	// Every listener is back, on the new release everywhere.
	testutil.WaitFor(t, 60*time.Second, "every listener subscribed after the rollout", func() bool { return subscribed() == lcxListen })
	time.Sleep(2 * time.Second) // a stretch of listening on the new release, measured
	lg := g.stop(t)
	keepRolloutLogs(t, e, work, c.provider, ro.out)
	for _, b := range statusJSON() {
		if b.Release != e.digestV2 {
			t.Errorf("after the rollout %s is on release %s, want %s", b.Host, text.ShortSHA(b.Release), text.ShortSHA(e.digestV2))
		}
		for _, p := range b.Processes {
			if p.Active != "active" || p.Release != e.digestV2 || p.Draining {
				t.Errorf("after the rollout %s %s: %s, release %s, draining %v", b.Host, p.Unit, p.Active, text.ShortSHA(p.Release), p.Draining)
			}
		}
	}
	t.Logf("rollout under %d listeners: fewest subscribed at once %d; loadgen %+v", lcxListen, fewest, lg)
	if lg.SilentAtEnd != 0 || lg.ListenersLost != 0 || lg.Connected != lcxListen {
		t.Errorf("rollout: %d listeners silent at the end, %d lost, %d of %d connected", lg.SilentAtEnd, lg.ListenersLost, lg.Connected, lcxListen)
	}
	gap := time.Duration(lg.GapMs.Max * float64(time.Millisecond))
	if gap >= lcxGapBound {
		t.Errorf("rollout: longest audible gap %v, want under the listeners' %v silence timer (the loadgen's debug log has each listener's moves and gap: RELAYFLEET_LCX_LOGS=DIR keeps it)", gap, lcxGapBound)
	}
	if n := lg.ByReason["silent"]; n != 0 {
		t.Errorf("rollout: %d listeners reconnected on the %v silence timer, want 0: attaching, the rollout and the rebalancing are planned, make before break (reconnects %v)", n, lcxSilence, lg.ByReason)
	}
	stopListen()

	// The rollout's build is the fleet's release now: a preview and an
	// up (both with refresh) plan no Host update and leave every process
	// on it, although the fleet binary has the first build beside it;
	// the first build given by hand is refused, pointing to fleet
	// rollout; and another machine (an empty state dir on the same
	// backend) reads the same release.
	noUpdate := func(r fleetRun, prefix string) {
		t.Helper()
		sum := summary(r.out, prefix)
		if sum == "" || strings.Contains(sum, "update") || strings.Contains(sum, "replace") || strings.Contains(sum, "create") || strings.Contains(sum, "delete") {
			t.Errorf("%s after the rollout plans %q, want no change", strings.TrimSuffix(prefix, ": "), sum)
		}
	}
	noUpdate(must(fleet("preview", "--inventory", inv), "preview after the rollout"), "preview: stack "+name+": ")
	noUpdate(must(fleet("up", "--inventory", inv), "up after the rollout"), "up: stack "+name+": ")
	for _, b := range statusJSON() {
		for _, p := range b.Processes {
			if p.Release != e.digestV2 {
				t.Errorf("after rollout then up, %s %s runs %s, want the rollout's %s", b.Host, p.Unit, text.ShortSHA(p.Release), text.ShortSHA(e.digestV2))
			}
		}
	}
	if r := fleet("preview", "--inventory", inv, "--relay-binary", e.relayV1); r.code != 2 || !strings.Contains(lastLine(r.out), "fleet rollout") {
		t.Errorf("preview with the old build by hand: exit %d, %q; want exit 2 and a line pointing to fleet rollout", r.code, lastLine(r.out))
	}
	// Another machine: its own state dir, the backend and the passphrase
	// shared (as a team shares them).
	backend := "file://" + filepath.Join(state, "backend")
	other := filepath.Join(work, "state-elsewhere")
	pass, err := os.ReadFile(filepath.Join(state, "passphrase"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(other, 0o700); err != nil {
		t.Fatal(err)
	}
	testutil.WriteFile(t, filepath.Join(other, "passphrase"), pass, 0o600)
	elsewhere := must(fleetIn(other, "releases", "--inventory", inv, "--backend", backend), "releases from another state dir")
	if !releaseListed(elsewhere.out, e.digestV2, true) || !releaseListed(elsewhere.out, e.digestV1, false) {
		t.Errorf("fleet releases from another state dir on the same backend does not show %s as the release and %s before it:\n%s", text.ShortSHA(e.digestV2), text.ShortSHA(e.digestV1), elsewhere.out)
	}

	// 5. Two events: one whose window starts now, one later in the day.
	// fleet events reconcile brings the first's burst box up on the
	// cloud, converged and serving; a reconcile after its end drains it
	// (no listener) and removes it.
	// Its start is nine minutes off, inside its ten-minute lead time: the
	// killed reconcile's bring-up must be finished by the next run before
	// it.
	start := time.Now().UTC().Add(9 * time.Minute).Truncate(time.Second)
	end := start.Add(time.Hour)
	evFile := fmt.Sprintf(`version: 1
fleet: fleet.yaml
events:
  - name: %[1]s
    start: %[2]s
    end: %[3]s
    peak_listeners: 100000
    broadcast: live/show
    burst: {provider: %[6]s, shape: %[7]s, location: %[8]s, max: 1}
    lead_time: 10m
    drain_time: 1m
  - name: %[9]s
    start: %[4]s
    end: %[5]s
    peak_listeners: 100000
    broadcast: live/show
    burst:
      max: 2
      candidates:
        - {provider: %[6]s, shape: %[7]s, location: %[8]s}
        - {provider: %[6]s, shape: %[7]s, location: %[10]s}
        - {provider: %[6]s, shape: %[7]s, location: %[11]s}
    lead_time: 10m
    drain_time: 1m
`, lcxEvent, start.Format(time.RFC3339), end.Format(time.RFC3339), start.Add(3*time.Hour).Format(time.RFC3339), start.Add(4*time.Hour).Format(time.RFC3339),
		c.provider, c.shape, c.location, lcxEncore, c.fallbacks[0], c.fallbacks[1])
	if err := os.WriteFile(evPath, []byte(evFile), 0o644); err != nil {
		t.Fatal(err)
	}
	// burstUp checks that event's burst box is up: a third server, with
	// the event's labels, its relay answering and in the relays file.
	eventServers := func(event string) []lcServer {
		t.Helper()
		var burst []lcServer
		for _, s := range servers() {
			if s.Labels["event"] == event {
				burst = append(burst, s)
			}
		}
		return burst
	}
	// burstUp checks that n burst boxes of the event are up, each
	// answering and in the relays file, and returns the first's stats.
	burstUpN := func(event string, n int) string {
		t.Helper()
		all, burst := servers(), eventServers(event)
		if len(all) != 2+n || len(burst) != n {
			t.Fatalf("%s up: %d servers, %d of the event; want %d and %d", event, len(all), len(burst), 2+n, n)
		}
		var first string
		for _, b := range burst {
			if b.Status != "running" || !subnet.Contains(b.IP) || b.Labels["tier"] != "burst" || b.Labels["fleet"] != name {
				t.Errorf("burst server %s: status %s, ip %v, labels %v", b.Name, b.Status, b.IP, b.Labels)
			}
			stats := fmt.Sprintf("https://%s:4443/stats", b.IP)
			if code := httpStatus(stats); code != 200 {
				t.Errorf("the burst box's relay %s: %d", stats, code)
			}
			if !slices.ContainsFunc(readRelays(t, state), func(r program.Relay) bool { return r.Stats == stats && r.SPKI != "" }) {
				t.Errorf("the relays file does not list the burst box's relay %s with its key's pin", stats)
			}
			first = cmp.Or(first, stats)
		}
		if bs := e.labBoxes(t); len(bs) != 2+n {
			t.Errorf("%d lab boxes with the burst boxes, want %d", len(bs), 2+n)
		}
		return first
	}
	burstUp := func(event string) string { t.Helper(); return burstUpN(event, 1) }
	// burstGone checks that the burst box is gone, its relay with it.
	burstGone := func(event, stats string) {
		t.Helper()
		if all := servers(); len(all) != 2 || slices.ContainsFunc(all, func(s lcServer) bool { return s.Labels["tier"] != "steady" }) {
			t.Fatalf("%s down: servers %v, want the two steady ones", event, all)
		}
		testutil.WaitFor(t, 2*time.Minute, "the burst box's lab box gone", func() bool { return len(e.labBoxes(t)) == 2 })
		if slices.ContainsFunc(readRelays(t, state), func(r program.Relay) bool { return r.Stats == stats }) {
			t.Errorf("the relays file still lists the burst box's relay %s", stats)
		}
	}
	// The first reconcile is killed (with Pulumi and its plugin, as a
	// reboot or the unit's timeout kills them) just after the cloud took
	// the burst server's create: its create action hangs (faults file).
	// The server exists, in no state, its host key with it.
	setFaults(faults.Faults{HangActions: []faults.Rule{{}}})
	killed := testutil.Start(t, "killed-reconcile", fleetCmd(ctx, state, "events", "reconcile", "--events", evPath))
	var left lcServer
	testutil.WaitFor(t, 3*time.Minute, "the burst server's create taken by the cloud", func() bool {
		if s := eventServers(lcxEvent); len(s) == 1 {
			left = s[0]
			return true
		}
		return killed.Exited()
	})
	if left.ID == "" {
		t.Fatalf("the reconcile ended before it asked for the burst server:\n%s", killed.Tail(20))
	}
	// As systemd kills a unit's cgroup: fleet, the Pulumi CLI and the
	// provider plugin (which Pulumi starts in a process group of its own).
	for _, pid := range descendants(killed.Cmd.Process.Pid) {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	killed.Kill()
	// The killed run's lease stays until it expires (the timer's next run
	// takes it over then); the operator clears it at once with fleet
	// unlock, which finds its holder dead.
	unlock := fleetCmd(ctx, state, "unlock", "--inventory", inv)
	unlock.Args = slices.DeleteFunc(unlock.Args, func(a string) bool { return a == "--ssh-key" || a == e.adminKey })
	if out, err := unlock.CombinedOutput(); err != nil {
		t.Fatalf("fleet unlock after the killed reconcile: %v\n%s", err, out)
	}
	// The next reconcile finds the server by name, its labels the box's,
	// deletes it and makes the box again. The create hangs until the left
	// server is gone (so that its machine is never made), then goes on.
	next := testutil.Start(t, "next-reconcile", fleetCmd(ctx, state, "events", "reconcile", "--events", evPath))
	started := time.Now()
	testutil.WaitFor(t, 5*time.Minute, "the left server deleted", func() bool {
		return !slices.ContainsFunc(servers(), func(s lcServer) bool { return s.ID == left.ID }) || next.Exited()
	})
	setFaults(faults.Faults{})
	if err := next.Wait(); err != nil {
		t.Fatalf("the reconcile after the kill: %v\n%s", err, next.Tail(30))
	}
	reconcileUp := fleetRun{out: next.Log(), took: time.Since(started)}
	if !strings.Contains(reconcileUp.out, "cut-off create") {
		t.Errorf("the reconcile after the kill did not say it replaced the left server:\n%s", next.Tail(30))
	}
	stats := burstUp(lcxEvent)
	if now := time.Now(); !now.Before(start) {
		t.Errorf("the event's bring-up after the killed reconcile finished at %s, not before its start %s", now.UTC().Format(time.RFC3339), start.Format(time.RFC3339))
	}
	if b := eventServers(lcxEvent); len(b) == 1 && b[0].ID == left.ID {
		t.Errorf("the burst server is the one the killed run left (%s): it should have been made again", left.ID)
	}

	// fleet hosts --release: the steady stack's boxes and the event's,
	// each read over SSH with the fleet's key, all on the second build.
	hr := must(fleet("hosts", "--release", "--json", "--inventory", inv), "hosts --release")
	var hosts struct{ Hosts []fleethosts.Row }
	if err := json.Unmarshal([]byte(hr.out), &hosts); err != nil {
		t.Fatalf("fleet hosts --json: %v", err)
	}
	tiers := map[string]int{}
	for _, h := range hosts.Hosts {
		tiers[h.Tier+"/"+h.Event]++
		if h.Backend != c.provider || h.Release != e.digestV2 || h.Error != "" {
			t.Errorf("fleet hosts: %s (%s): backend %s, release %s, error %q; want %s on %s", h.Name, h.Tier, h.Backend, text.ShortSHA(h.Release), h.Error, c.provider, text.ShortSHA(e.digestV2))
		}
	}
	if tiers["steady/"] != 2 || tiers["burst/"+lcxEvent] != 1 || len(hosts.Hosts) != 3 {
		t.Errorf("fleet hosts lists %v, want 2 steady and 1 burst host of %s", tiers, lcxEvent)
	}

	// After the event's end (and its drain time), reconcile removes it.
	var reconcileGone fleetRun
	for i := range 3 {
		at := end.Add(time.Duration(2+i) * time.Minute).Format(time.RFC3339)
		r := must(fleet("events", "reconcile", "--events", evPath, "--now", at), "events reconcile after the end")
		reconcileGone.took += r.took
		if !slices.ContainsFunc(servers(), func(s lcServer) bool { return s.Labels["event"] == lcxEvent }) {
			break
		}
	}
	burstGone(lcxEvent, stats)

	// 6. fleet burst up and down, by hand, for the later event: its box
	// comes now, then drains (no listener) and goes.
	// Its two boxes meet a cloud that says no, in every way it can, on
	// each of its three candidates (locations) in turn. The first: one
	// box's create action never finishes (past the create timeout it fails
	// and its server is deleted), the other's server never gets an
	// address; the second refuses both for capacity; the third refuses
	// one, and the first requests meet 429s with Retry-After. In one burst
	// up the plan moves to the second candidate, then the third, whose box
	// made is routed at once; burst up says 1 of 2 and exits non-zero,
	// status counts them and shows the plan by candidate; the next burst
	// up brings the second box on the third candidate.
	first := func(n int) string { return program.BurstBoxName(name, lcxEncore, c.provider, n) }
	setFaults(faults.Faults{
		HangActions: []faults.Rule{{Name: first(1)}},
		NoAddress:   []faults.Rule{{Name: first(2)}},
		Unavailable: []faults.Unavailable{{Rule: faults.Rule{Location: c.fallbacks[0]}}, {Rule: faults.Rule{Location: c.fallbacks[1]}, Count: 1}},
		RateLimited: &faults.RateLimited{Requests: 2, RetryAfterSeconds: 2},
	})
	// Long enough for a box on a loaded machine to come up (the third
	// candidate's took more than 20 s once under other work, and more than
	// 40 s with make e2e's other tests beside it), short enough for the
	// hung one not to cost much.
	extraEnv = []string{provider.CreateTimeoutEnv + "=" + lcxCreateTimeout.String()}
	before, limitedBefore := requests(), limited()
	partial := fleet("burst", "up", "--event", lcxEncore, "--events", evPath)
	extraEnv = nil
	// The requests the cloud answered for the event's own runs (each
	// command's), which its report must count.
	encoreRequests := requests() - before
	// The 429s were answered, and waited out (Retry-After): the box on
	// the third candidate was made all the same.
	limitedAnswers := limited() - limitedBefore
	if limitedAnswers == 0 {
		t.Errorf("the cloud answered no 429 during the burst up: the rate-limit fault was not met")
	}
	if partial.code == 0 || !strings.Contains(partial.out, "1 of 2 boxes routed") {
		t.Fatalf("burst up with every candidate saying no: exit %d, want non-zero saying 1 of 2 boxes routed:\n%s", partial.code, partial.out)
	}
	for _, want := range []string{"not running after " + lcxCreateTimeout.String(), "has no public IPv4 address", fmt.Sprintf("candidate %s/%s@%s made 0 of 2", c.provider, c.shape, c.location), fmt.Sprintf("candidate %s/%s@%s made 0 of 2", c.provider, c.shape, c.fallbacks[0])} {
		if !strings.Contains(partial.out, want) {
			t.Errorf("burst up does not say %q:\n%s", want, partial.out)
		}
	}
	if b := eventServers(lcxEncore); len(b) != 1 || !strings.HasSuffix(b[0].Name, "-c2") {
		t.Fatalf("after the fallbacks: servers %v; want one, on the third candidate (named -c2), the hung and the addressless one deleted", b)
	}
	if b := eventServers(lcxEncore); len(b) != 1 || !slices.ContainsFunc(readRelays(t, state), func(r program.Relay) bool { return strings.Contains(r.Stats, b[0].IP.String()) }) {
		t.Fatalf("after one of two boxes was refused: servers %v; want one, routed", b)
	}
	type evRec struct {
		Event      string
		Created    int
		Converged  int
		Hosts      []program.HostEntry
		Plan       *struct{ Boxes int }
		Candidates []struct {
			Ref     string
			Boxes   int
			Made    []int
			Refused string
		}
	}
	var recs []evRec
	stCmd := fleetCmd(ctx, state, "events", "status", "--json", "--fleet", name)
	stCmd.Args = stCmd.Args[:len(stCmd.Args)-2] // it reaches no box: no --ssh-key
	stOut, stCode := systest.Combined(t, stCmd)
	if err := json.Unmarshal([]byte(stOut), &recs); err != nil || stCode != 0 {
		t.Fatalf("events status --json: exit %d, %v\n%s", stCode, err, stOut)
	}
	if i := slices.IndexFunc(recs, func(r evRec) bool { return r.Event == lcxEncore }); i < 0 || recs[i].Plan == nil || recs[i].Plan.Boxes != 2 || recs[i].Created != 1 || recs[i].Converged != 1 || len(recs[i].Hosts) != 1 {
		t.Errorf("events status for %s: want 2 wanted, 1 made, 1 converged, 1 routed:\n%s", lcxEncore, stOut)
	} else if cs := recs[i].Candidates; len(cs) != 3 || cs[0].Refused == "" || cs[1].Refused == "" || cs[2].Refused != "" || cs[2].Boxes != 2 || len(cs[2].Made) != 1 {
		t.Errorf("events status for %s: want the first two candidates refused, the third asked for 2 and holding 1:\n%s", lcxEncore, stOut)
	}
	setFaults(faults.Faults{})
	atUp := requests()
	manualUp := must(fleet("burst", "up", "--event", lcxEncore, "--events", evPath), "burst up")
	// The second box, with no fault: what one box created costs when the
	// cloud says yes (its name lookup, the POST, its action's polls while
	// it boots, the stack's reads of the other box and the firewall).
	plainPerBox := requests() - atUp
	encoreRequests += plainPerBox
	manualUp.took += partial.took
	// Both burst ups, the six refused creates, the 429s, the hung
	// action's polls and the three candidates' firewalls included, over
	// the two boxes made: each create looks its name up once (not the
	// fleet's list), then posts and polls its action; the rest is the
	// firewalls and the routing's reads.
	// The hung action is polled until the create timeout (Hetzner's
	// client every second, DigitalOcean's every 2 s): its polls grow with
	// the timeout, the rest does not (measured with 90 s: hcloud 82-86,
	// DigitalOcean 49; with 40 s: 43 and 39).
	reqPerBox := float64(requests()-before) / 2
	if bound := 60 + lcxCreateTimeout.Seconds()/2; reqPerBox > bound {
		t.Errorf("%.0f API requests per burst box, want at most %.0f (60, and the hung create's polls over %s)", reqPerBox, bound, lcxCreateTimeout)
	}
	stats = burstUpN(lcxEncore, 2)
	atDown := requests()
	burstDown := must(fleet("burst", "down", "--event", lcxEncore, "--events", evPath, "--drain-time", "10s"), "burst down")
	encoreRequests += requests() - atDown
	burstGone(lcxEncore, stats)
	// Its report counts every request its runs sent (the provider
	// plugin's and the sweep's, retries and the refused create included):
	// as many as the cloud answered for them.
	repCmd := fleetCmd(ctx, state, "events", "report", "--event", lcxEncore, "--json", "--fleet", name)
	repCmd.Args = repCmd.Args[:len(repCmd.Args)-2] // it reaches no box: no --ssh-key
	repOut, repCode := systest.Combined(t, repCmd)
	var rep struct{ Requests struct{ Total int } }
	if err := json.Unmarshal([]byte(repOut), &rep); err != nil || repCode != 0 {
		t.Errorf("events report --json: exit %d, %v\n%s", repCode, err, repOut)
	} else if rep.Requests.Total != encoreRequests || encoreRequests == 0 {
		t.Errorf("events report: %s spent %d API requests; the cloud answered %d for its burst up, up and down", lcxEncore, rep.Requests.Total, encoreRequests)
	}

	// 7. fleet rollback: the steady boxes back on the first build, its
	// bytes from the backend; fleet releases lists both with the
	// processes on each.
	rb := must(fleet(append([]string{"rollback", "--router", routerURL, "--router-poll", "200ms", "--listener-wait", "45s", "--canary-bake", "5s"}, hostFlags...)...), "rollback")
	steadyProcs := 0
	for _, b := range statusJSON() {
		for _, p := range b.Processes {
			steadyProcs++
			if p.Release != e.digestV1 {
				t.Errorf("after the rollback %s %s runs %s, want %s", b.Host, p.Unit, text.ShortSHA(p.Release), text.ShortSHA(e.digestV1))
			}
		}
	}
	rels := must(fleet(append([]string{"releases"}, hostFlags...)...), "releases")
	if !releaseListed(rels.out, e.digestV1, true) || !releaseListed(rels.out, e.digestV2, false) || releaseProcs(rels.out, e.digestV1) != steadyProcs || releaseProcs(rels.out, e.digestV2) != 0 {
		t.Errorf("fleet releases after the rollback: want %s current on %d processes and %s on none:\n%s", text.ShortSHA(e.digestV1), steadyProcs, text.ShortSHA(e.digestV2), rels.out)
	}

	// 8. fleet destroy: no server, no firewall, no lab box left.
	destroy := must(fleet("destroy", "--inventory", inv, "--yes"), "destroy")
	if s := servers(); len(s) != 0 {
		t.Errorf("servers after destroy: %v", s)
	}
	if fws := apiList(c.firewalls); len(fws) != 0 {
		t.Errorf("firewalls after destroy: %v", fws)
	}
	testutil.WaitFor(t, 2*time.Minute, "no lab box left", func() bool { return len(e.labBoxes(t)) == 0 })

	// Every exchange was checked, and the ones that matter were there.
	fails := check.Failures()
	for _, f := range fails {
		t.Errorf("OpenAPI: %s", f)
	}
	for _, route := range c.routes {
		if check.Seen(route) == 0 {
			t.Errorf("fleet never sent %s: the check did not cover it", route)
		}
	}
	return fmt.Sprintf("LOCALCLOUD %s: fleet_up_s=%.1f rollout_s=%.1f rollback_s=%.1f listeners=%d listeners_max_gap_ms=%.0f silent_reconnects=%d silent_at_end=%d fewest_subscribed=%d reconcile_after_kill_burst_up_s=%.1f reconcile_burst_gone_s=%.1f burst_up_partial_then_full_s=%.1f burst_requests_per_box=%.0f burst_requests_plain_box=%d burst_429s=%d burst_down_s=%.1f destroy_s=%.1f requests_validated=%d openapi_failures=%d",
		c.provider, up.took.Seconds(), ro.took.Seconds(), rb.took.Seconds(), lcxListen, lg.GapMs.Max, lg.ByReason["silent"], lg.SilentAtEnd, fewest,
		reconcileUp.took.Seconds(), reconcileGone.took.Seconds(), manualUp.took.Seconds(), reqPerBox, plainPerBox, limitedAnswers, burstDown.took.Seconds(), destroy.took.Seconds(), check.Checked(), len(fails))
}

// releaseListed says fleet releases' table lists digest, marked as the
// fleet's release (current) or not.
func releaseListed(out, digest string, current bool) bool {
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && f[0] == text.ShortSHA(digest) {
			return (len(f) > 1 && f[1] == "*") == current
		}
	}
	return false
}

// releaseProcs is the process count fleet releases gives digest (-1: not
// listed).
func releaseProcs(out, digest string) int {
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && f[0] == text.ShortSHA(digest) {
			n, err := strconv.Atoi(f[len(f)-1])
			if err != nil {
				return -1
			}
			return n
		}
	}
	return -1
}

// readRelays is the relays file fleet keeps in state.
func readRelays(t *testing.T, state string) []program.Relay {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(state, program.RelaysFile))
	if err != nil {
		t.Fatal(err)
	}
	var rf struct{ Relays []program.Relay }
	if err := json.Unmarshal(data, &rf); err != nil {
		t.Fatalf("relays file: %v %s", err, data)
	}
	return rf.Relays
}

// httpStatus is the status of a GET of u, 0 when it fails.
func httpStatus(u string) int {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(plainHTTP(u))
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// plainHTTP is u over plain HTTP: the relays file's stats URLs are
// https:// (the router checks the pin there); a relay's TCP port answers
// both, and these probes only read figures.
func plainHTTP(u string) string { return strings.Replace(u, "https://", "http://", 1) }

// subscribersAt is the subscribers a relay's /stats (u) reports, 0 when
// it does not answer.
func subscribersAt(u string) int64 {
	var st struct{ Subscribers int64 }
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(plainHTTP(u))
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	json.NewDecoder(resp.Body).Decode(&st)
	return st.Subscribers
}

// routedRelays is a router's GET /relays.
func routedRelays(routerURL string) []routerRelay {
	var doc struct{ Relays []routerRelay }
	c := http.Client{Timeout: 2 * time.Second}
	if resp, err := c.Get(routerURL + "relays"); err == nil {
		json.NewDecoder(resp.Body).Decode(&doc)
		resp.Body.Close()
	}
	return doc.Relays
}

// lcLoadgen is a running relay loadgen.
type lcLoadgen struct {
	p      *testutil.Proc
	stdout bytes.Buffer
}

// lcLoadgenReport is what the story reads of relay loadgen --json.
type lcLoadgenReport struct {
	Listeners     int `json:"listeners"`
	Connected     int `json:"connected"`
	ListenersLost int `json:"listeners_lost"`
	GapMs         struct {
		P50 float64 `json:"p50"`
		Max float64 `json:"max"`
	} `json:"gap_ms"`
	SilentAtEnd int              `json:"silent_at_end"`
	Reconnects  int64            `json:"reconnects"`
	ByReason    map[string]int64 `json:"reconnects_by_reason"`
}

// startLoadgen attaches n listeners through the router, reconnecting
// when their relay goes; they listen until stop.
func startLoadgen(t *testing.T, relayBin, logBase, routerURL string, n int) *lcLoadgen {
	t.Helper()
	g := &lcLoadgen{}
	cmd := exec.Command(relayBin, "loadgen", "--router", routerURL, "--broadcast", "live/show",
		"--listeners", fmt.Sprint(n), "--ramp", "4", "--duration", "30m", "--reconnect", "--json", "--silence", lcxSilence.String(), "--log-level", "debug")
	cmd.Stdout = &g.stdout
	g.p = testutil.StartLog(t, logBase+".log", cmd)
	return g
}

// stop interrupts the load generator and reads its report.
func (g *lcLoadgen) stop(t *testing.T) lcLoadgenReport {
	t.Helper()
	g.p.Cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-g.p.Done():
	case <-time.After(60 * time.Second):
		g.p.Kill()
		t.Fatal("relay loadgen did not end within 60s of SIGINT")
	}
	out := g.stdout.Bytes()
	i := bytes.LastIndex(out, []byte("\n{"))
	if i < 0 {
		i = bytes.Index(out, []byte("{"))
	}
	var r lcLoadgenReport
	if i < 0 || json.Unmarshal(bytes.TrimSpace(out[i:]), &r) != nil {
		t.Fatalf("relay loadgen: no JSON report\nstdout: %s\nstderr: %s", out, g.p.Tail(30))
	}
	return r
}

// keepRolloutLogs copies, when RELAYFLEET_LCX_LOGS names a folder, the
// rollout's evidence there under the provider's name: the fleet rollout
// output, the load generator's, origin's and router's logs and each box's
// relay journal.
func keepRolloutLogs(t *testing.T, e *lcEnv, work, provider, rollout string) {
	t.Helper()
	dir := os.Getenv("RELAYFLEET_LCX_LOGS")
	if dir == "" {
		return
	}
	dir = filepath.Join(dir, provider)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "rollout.out"), []byte(rollout), 0o644)
	for _, n := range []string{"loadgen", "origin", "router", "publisher"} {
		if data, err := os.ReadFile(filepath.Join(work, n+".log")); err == nil {
			os.WriteFile(filepath.Join(dir, n+".log"), data, 0o644)
		}
	}
	for _, b := range e.labBoxes(t) {
		// The box's init is its launcher's child; its journal is read in
		// its mount namespace (the cloud gave the box its own host key, so
		// the lab's SSH would not do).
		kids, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", b.PID, b.PID))
		init, _, _ := strings.Cut(strings.TrimSpace(string(kids)), " ")
		out, err := exec.Command("nsenter", "-t", init, "-m", "journalctl", "--no-pager", "-o", "short-iso-precise", "-u", "relay@*").CombinedOutput()
		if err != nil {
			out = fmt.Appendf(out, "nsenter -t %q journalctl: %v\n", init, err)
		}
		os.WriteFile(filepath.Join(dir, b.Name+"-"+b.Address.String()+".journal"), out, 0o644)
	}
	t.Logf("rollout logs kept in %s", dir)
}

// descendants lists the processes below pid (children, theirs, ...), read
// from /proc.
func descendants(pid int) []int {
	ents, _ := os.ReadDir("/proc")
	children := map[int][]int{}
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parens.
		rest := string(data[bytes.LastIndexByte(data, ')')+1:])
		f := strings.Fields(rest)
		if len(f) < 2 {
			continue
		}
		if ppid, err := strconv.Atoi(f[1]); err == nil {
			children[ppid] = append(children[ppid], n)
		}
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}
