package program

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/relayfleet/relayfleet/infra/provider"
	"github.com/relayfleet/relayfleet/inventories"
	"github.com/relayfleet/relayfleet/provision"
	"github.com/relayfleet/relayfleet/relay"
	"github.com/relayfleet/relayfleet/relay/client"
	"github.com/relayfleet/relayfleet/relay/router"
)

const testTLSSeed = "cHJvZ3JhbS10ZXN0LXRscy1zZWVkLXByb2dyYW0tdGVzdA"

// deployedHosts runs deploy under the mocks and reads its "hosts" output
// back as fleet up does (HostsFromOutputs).
func deployedHosts(t *testing.T, stack string, deploy func(*pulumi.Context) (*Deployed, error)) (*mocks, []HostEntry) {
	t.Helper()
	m := &mocks{}
	var (
		mu   sync.Mutex
		out  []any
		done = make(chan struct{})
	)
	err := pulumi.RunErr(func(ctx *pulumi.Context) error {
		d, err := deploy(ctx)
		if err != nil {
			return err
		}
		d.HostsOutput.ToArrayOutput().ApplyT(func(v []any) error {
			mu.Lock()
			out = v
			mu.Unlock()
			close(done)
			return nil
		})
		return nil
	}, pulumi.WithMocks("relayfleet", stack, m))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the hosts output never resolved")
	}
	mu.Lock()
	defer mu.Unlock()
	hosts, err := HostsFromOutputs(auto.OutputMap{"hosts": {Value: out}})
	if err != nil {
		t.Fatal(err)
	}
	return m, hosts
}

// checkPinned: every relays-file entry made from hosts pins its box's
// key (the SPKI of the key derived from the seed and the box's name),
// polled over https://, and every Host got its key as a secret.
func checkPinned(t *testing.T, m *mocks, hosts []HostEntry, wantHosts int) {
	t.Helper()
	if len(hosts) != wantHosts {
		t.Fatalf("%d hosts in the output, want %d", len(hosts), wantHosts)
	}
	spkiOf := map[string]string{}
	for _, h := range hosts {
		_, want, err := provision.BoxTLSKey(testTLSSeed, h.Name)
		if err != nil {
			t.Fatal(err)
		}
		if h.SPKI != want {
			t.Errorf("host %s: spki %q in the hosts output, want its key's %s", h.Name, h.SPKI, want)
		}
		spkiOf[h.Address] = want
	}
	relays := Relays(hosts)
	if len(relays) != 2*wantHosts {
		t.Fatalf("%d relays, want two per host", len(relays))
	}
	for _, r := range relays {
		addr := strings.Trim(strings.Split(strings.TrimPrefix(r.URL, "http://"), "]:")[0], "[")
		addr = strings.Split(addr, ":")[0]
		if r.SPKI == "" || r.SPKI != spkiOf[addr] {
			t.Errorf("relay %s: spki_sha256 %q, want its box's %q", r.URL, r.SPKI, spkiOf[addr])
		}
		if !strings.HasPrefix(r.Stats, "https://") {
			t.Errorf("relay %s: stats %s, want https:// (polled over TLS, the pin checked)", r.URL, r.Stats)
		}
	}
	for _, h := range m.ofType(provider.HostType) {
		v, ok := h.Inputs["tlsKey"]
		if !ok || !v.IsSecret() {
			t.Errorf("host %s: tlsKey %v, want the box's key as a secret", h.Name, v)
			continue
		}
		for k, o := range h.Inputs {
			if k != "tlsKey" && strings.Contains(o.String(), "PRIVATE KEY") {
				t.Errorf("host %s: the TLS key shows in %s", h.Name, k)
			}
		}
	}
}

// TestRelaysFilePinsEveryBox: fleet up's relays file carries each box's
// SPKI, steady boxes (Deploy) and an event's burst boxes (DeployBurst,
// what fleet events reconcile runs) alike; the program refuses to run
// without the fleet's TLS seed.
func TestRelaysFilePinsEveryBox(t *testing.T) {
	f, cat := loadFleet(t, "testdata/mixed.yaml")
	o := Options{RelayBinary: "/opt/relay", Release: strings.Repeat("ab", 32), AuthKeys: testAuthKeys, TLSSeed: testTLSSeed}
	m, hosts := deployedHosts(t, "test", func(ctx *pulumi.Context) (*Deployed, error) { return Deploy(ctx, f, cat, o) })
	checkPinned(t, m, hosts, 4)

	pool := inventories.Pool{Name: "final", Box: inventories.Box{Provider: "hcloud", Shape: "ccx43", Location: "hel1", BasePort: 4443}}
	m, hosts = deployedHosts(t, "final", func(ctx *pulumi.Context) (*Deployed, error) {
		return DeployBurst(ctx, f, cat, Burst{Event: "final", Pool: pool, Boxes: 3}, o)
	})
	checkPinned(t, m, hosts, 3)

	o.TLSSeed = ""
	err := pulumi.RunErr(func(ctx *pulumi.Context) error {
		_, err := Deploy(ctx, f, cat, o)
		return err
	}, pulumi.WithMocks("relayfleet", "test", &mocks{}))
	if err == nil || !strings.Contains(err.Error(), "TLS seed") {
		t.Errorf("deploy without a TLS seed: %v", err)
	}
}

// TestTargetTLSKeys: fleet converge and fleet auth rotate give each box
// the key fleet up gave it (by the box's name), so the pin holds.
func TestTargetTLSKeys(t *testing.T) {
	targets := []provision.Target{{Host: provision.Host{Name: "f-s-a-1"}}, {Host: provision.Host{Name: "f-s-a-2"}}}
	if err := TargetTLSKeys(targets, testTLSSeed); err != nil {
		t.Fatal(err)
	}
	for _, tg := range targets {
		want, _, _ := provision.BoxTLSKey(testTLSSeed, tg.Host.Name)
		if string(tg.TLSKey) != string(want) {
			t.Errorf("%s: not the key fleet up gives the box", tg.Host.Name)
		}
	}
	if string(targets[0].TLSKey) == string(targets[1].TLSKey) {
		t.Error("two boxes, one key")
	}
}

// TestPinnedRelayRoutedEndToEnd: the path fleet up sets up, in one
// process: a relay serving certificates for its box's derived key (what
// relay serve --tls-key does with the credential), the relays-file
// entry Relays makes for it, and a router on that file: the relay is
// polled over TLS with the pin, routed with the certificate hash it
// serves, and a listener dials it with that hash. A man in the middle
// that terminates TLS with a key of its own in front of the same relay
// is never routed.
func TestPinnedRelayRoutedEndToEnd(t *testing.T) {
	pemKey, spki, err := provision.BoxTLSKey(testTLSSeed, "f-s-a-1")
	if err != nil {
		t.Fatal(err)
	}
	key, err := relay.ParseTLSKey("key", pemKey)
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.DiscardHandler)
	rl, err := relay.Start(context.Background(), relay.Config{Listen: "127.0.0.1:0", MaxSessions: 10, MemoryBudget: -1, TLSKey: key, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rl.Close() })
	_, port, _ := net.SplitHostPort(rl.Addr().String())
	p, _ := strconv.Atoi(port)

	routeVia := func(entries []Relay) (router.Route, error) {
		path := filepath.Join(t.TempDir(), "relays.json")
		if err := writeRelayList(path, entries); err != nil {
			t.Fatal(err)
		}
		r, err := router.New(router.Options{File: path, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		r.PollOnce(context.Background())
		return r.Pick()
	}
	entries := Relays([]HostEntry{{Name: "f-s-a-1", Address: "127.0.0.1", Ports: []int{p}, SPKI: spki}})
	rt, err := routeVia(entries)
	if err != nil || rt.CertificateSHA256 != rl.CertificateHash() {
		t.Fatalf("route %+v, %v; want the relay with its certificate hash %s", rt, err, rl.CertificateHash())
	}
	s, err := client.DialRoute(context.Background(), client.Destination{URL: rt.URL, CertificateHash: rt.CertificateSHA256}, &client.Options{Logger: quiet})
	if err != nil {
		t.Fatalf("DialRoute: %v", err)
	}
	s.Close()

	// The man in the middle: TLS with its own key, /stats passed on
	// from the real relay (its certificate hash included).
	mitm := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		resp, err := http.Get(fmt.Sprintf("http://%s/stats", rl.Addr()))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		io.Copy(w, resp.Body)
	}))
	t.Cleanup(mitm.Close)
	_, mport, _ := net.SplitHostPort(mitm.Listener.Addr().String())
	mp, _ := strconv.Atoi(mport)
	entries = Relays([]HostEntry{{Name: "f-s-a-1", Address: "127.0.0.1", Ports: []int{mp}, SPKI: spki}})
	if rt, err := routeVia(entries); err == nil {
		t.Fatalf("a man in the middle was routed: %+v", rt)
	}
}
