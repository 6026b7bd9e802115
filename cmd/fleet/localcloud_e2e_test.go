//go:build e2e

// The end-to-end test of the local Hetzner Cloud (make e2e-localcloud;
// root): the local hcloud API runs in process over lab boxes (its own lab:
// /var/lib/relayfleet/lab-lchc, bridge rflc0, subnet 10.231.109.0/24,
// sharing the default lab's image cache), and the real fleet up and fleet
// destroy, through the real Pulumi CLI and our hcloud backend (hcloud-go),
// make and remove a fleet of two hcloud boxes on it; every request they
// send and every answer is checked against Hetzner's API description.
package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/relayfleet/relayfleet/infra/lab"
	"github.com/relayfleet/relayfleet/infra/localcloud"
	"github.com/relayfleet/relayfleet/infra/localcloud/apicheck"
	lchcloud "github.com/relayfleet/relayfleet/infra/localcloud/hcloud"
	"github.com/relayfleet/relayfleet/infra/program"
)

const (
	lcLabDir = "/var/lib/relayfleet/lab-lchc"
	lcBridge = "rflc0"
	lcSubnet = "10.231.109.0/24"
)

func TestE2ELocalHcloud(t *testing.T) {
	cli, images, work, fleetBin, relayBin := e2eSetup(t)
	state := filepath.Join(work, "state")
	inv := filepath.Join(work, "fleet.yaml")
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()

	l, err := lab.New(lab.Config{Dir: lcLabDir, ImageDir: images, Bridge: lcBridge, Subnet: netip.MustParsePrefix(lcSubnet), Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	l.Cleanup(ctx)
	labBoxes := func() []lab.Box {
		t.Helper()
		bs, err := l.List(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		return bs
	}
	t.Cleanup(func() {
		for _, b := range labBoxes() {
			l.Delete(context.Background(), b.Name)
		}
		l.Cleanup(context.Background())
	})
	if bs := labBoxes(); len(bs) != 0 {
		t.Fatalf("lab %s has boxes before the test: %v", lcLabDir, bs)
	}

	// The local cloud, on loopback.
	token := "e2e-" + fmt.Sprint(time.Now().UnixNano())
	lm := &localcloud.LabMachines{Lab: l, RAMScale: 0.125, Logf: t.Logf}
	api, err := lchcloud.New(lm, localcloud.Config{StateFile: filepath.Join(work, "hcloud.json"), Token: token, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	endpoint := "http://" + ln.Addr().String() + "/v1"
	// Every exchange is checked against Hetzner's API description.
	spec, err := apicheck.Load("../../infra/localcloud/hcloud/testdata/hcloud.openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	check, err := apicheck.New(spec, endpoint)
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: check.Wrap(http.StripPrefix("/v1", api))}
	go hs.Serve(ln)
	defer hs.Close()
	t.Cleanup(func() {
		for _, f := range check.Failures() {
			t.Errorf("OpenAPI: %s", f)
		}
	})
	apiList := func(kind string) []map[string]any {
		t.Helper()
		req, _ := http.NewRequest("GET", endpoint+"/"+kind, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body map[string]json.RawMessage
		data, _ := io.ReadAll(resp.Body)
		if err := json.Unmarshal(data, &body); err != nil || resp.StatusCode != 200 {
			t.Fatalf("GET /%s: %d %s", kind, resp.StatusCode, data)
		}
		var items []map[string]any
		json.Unmarshal(body[kind], &items)
		return items
	}

	// The admin's key: in the fleet file, and the key fleet logs in with.
	_, adminPriv, _ := ed25519.GenerateKey(rand.Reader)
	block, err := ssh.MarshalPrivateKey(adminPriv, "lchc-e2e")
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(work, "id_ed25519")
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	signer, _ := ssh.NewSignerFromKey(adminPriv)
	adminLine := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(signer.PublicKey())))
	fleetFile := `version: 1
name: lchc
admin:
  ranges: [` + lcSubnet + `]
  ssh_keys: ["` + adminLine + `"]
access:
  public_listen: [live/]
steady:
  - name: lchc
    provider: hcloud
    shape: cx23
    location: fsn1
    count: 2
    processes: auto
    base_port: 4443
`
	if err := os.WriteFile(inv, []byte(fleetFile), 0o644); err != nil {
		t.Fatal(err)
	}

	fleet := func(args ...string) (string, int) {
		t.Helper()
		args = append(args, "--inventory", inv, "--state-dir", state, "--pulumi", cli, "--ssh-key", keyFile)
		if args[0] != "destroy" {
			args = append(args, "--relay-binary", relayBin)
		}
		cctx, cancel := context.WithTimeout(ctx, 12*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(cctx, fleetBin, args...)
		cmd.Env = append(os.Environ(), "PULUMI_CONFIG_PASSPHRASE=", "HCLOUD_ENDPOINT="+endpoint, "HCLOUD_TOKEN="+token)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		start := time.Now()
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		t.Logf("fleet %s: exit %d after %.1fs\n%s", args[0], code, time.Since(start).Seconds(), out.String())
		if strings.Contains(out.String(), token) {
			t.Errorf("fleet %s printed the API token", args[0])
		}
		return out.String(), code
	}

	// fleet up: two servers, two lab boxes behind them, converged.
	if out, code := fleet("up"); code != 0 {
		t.Fatalf("fleet up: exit %d: %s", code, lastLine(out))
	}
	servers := apiList("servers")
	if len(servers) != 2 {
		t.Fatalf("%d servers after up, want 2", len(servers))
	}
	subnet := netip.MustParsePrefix(lcSubnet)
	for _, s := range servers {
		ip, _ := netip.ParseAddr(fmt.Sprint(s["public_net"].(map[string]any)["ipv4"].(map[string]any)["ip"]))
		if s["status"] != "running" || !subnet.Contains(ip) || s["labels"].(map[string]any)["fleet"] != "lchc" {
			t.Errorf("server %v: status %v, ip %v, labels %v", s["name"], s["status"], ip, s["labels"])
		}
	}
	if bs := labBoxes(); len(bs) != 2 {
		t.Fatalf("%d lab boxes after up, want 2", len(bs))
	}
	if fws := apiList("firewalls"); len(fws) != 1 {
		t.Errorf("%d firewalls after up, want 1", len(fws))
	}
	// Converged: every relay process the stack lists answers /stats.
	data, err := os.ReadFile(filepath.Join(state, program.RelaysFile))
	if err != nil {
		t.Fatal(err)
	}
	var rf struct{ Relays []program.Relay }
	if err := json.Unmarshal(data, &rf); err != nil || len(rf.Relays) < 2 {
		t.Fatalf("relays file: %v %s", err, data)
	}
	for _, r := range rf.Relays {
		resp, err := http.Get(r.Stats)
		if err != nil {
			t.Errorf("relay %s: %v", r.Stats, err)
			continue
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(r.Stats, "10.231.109.") {
			t.Errorf("relay %s: %d", r.Stats, resp.StatusCode)
		}
	}

	// fleet destroy: no server, no firewall, no lab box left.
	if out, code := fleet("destroy", "--yes"); code != 0 {
		t.Fatalf("fleet destroy: exit %d: %s", code, lastLine(out))
	}
	api.Wait()
	if s := apiList("servers"); len(s) != 0 {
		t.Errorf("servers after destroy: %v", s)
	}
	if fws := apiList("firewalls"); len(fws) != 0 {
		t.Errorf("firewalls after destroy: %v", fws)
	}
	if bs := labBoxes(); len(bs) != 0 {
		t.Errorf("lab boxes after destroy: %v", bs)
	}
	for _, route := range []string{"POST /servers", "GET /servers/{id}", "DELETE /servers/{id}", "GET /actions", "POST /firewalls", "DELETE /firewalls/{id}"} {
		if check.Seen(route) == 0 {
			t.Errorf("fleet never sent %s: the check did not cover it", route)
		}
	}
}
