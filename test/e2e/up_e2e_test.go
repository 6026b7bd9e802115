//go:build e2e

// The end-to-end test of fleet up, preview and destroy on lab boxes
// through the real Pulumi CLI (make e2e builds it; root is needed for the
// lab). It uses its own state directory and its own lab (bridge rfpul0,
// subnet 10.231.81.0/24), sharing the default lab's image cache, and
// leaves no box behind.
//
//	RELAYFLEET_PULUMI      the Pulumi CLI (default: the make pulumi build)
//	RELAYFLEET_LAB_IMAGES  image cache (default /var/lib/relayfleet/lab/images)
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/infra/lab"
	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/relay/router"
	"github.com/relayfleet/relayfleet/relay/wire"
	"github.com/relayfleet/relayfleet/sysctl"
)

const (
	e2eLabDir = "/var/lib/relayfleet/lab-e2e"
	e2eBridge = "rfpul0"
	e2eSubnet = "10.231.81.0/24"
)

func TestE2EUpChangeUpDestroy(t *testing.T) {
	t.Parallel() // its own lab and fleet: see e2eLab
	e := newE2ELab(t, e2eLabDir, e2eBridge, e2eSubnet, map[string]string{"fleet": "lab"})
	state, inv := e.state, filepath.Join(e.work, "lab.yaml")
	e.inv = inv
	l, ctx := e.lab, context.Background()
	boxes := func() []lab.Box { return e.boxes(e.owned) }
	fleet := func(args ...string) (string, int) { return e.run(nil, args...) }
	relays := func() []program.Relay {
		t.Helper()
		data, err := os.ReadFile(filepath.Join(state, program.RelaysFile))
		if err != nil {
			t.Fatal(err)
		}
		var f struct{ Relays []program.Relay }
		if err := json.Unmarshal(data, &f); err != nil {
			t.Fatalf("relays file: %v\n%s", err, data)
		}
		return f.Relays
	}

	// 1. Two lab boxes, converged.
	writeInventory(t, inv, 2, "small")
	if out, code := fleet("up"); code != 0 {
		t.Fatalf("fleet up: exit %d: %s", code, lastLine(out))
	}
	if bs := boxes(); len(bs) != 2 {
		t.Fatalf("%d lab boxes after up, want 2", len(bs))
	}
	for _, b := range boxes() {
		if b.Labels["tier"] != "steady" || b.Labels["event"] == "" {
			t.Errorf("box %s labels %v", b.Name, b.Labels)
		}
	}
	if rs := relays(); len(rs) != 2 {
		t.Fatalf("relays %v, want one per box (1 core each)", rs)
	}
	routedPinned(t, filepath.Join(state, program.RelaysFile), 2)
	// The host private key output is a secret: ciphertext in the state.
	ckpt, err := os.ReadFile(filepath.Join(state, "backend", ".pulumi", "stacks", program.Project, "lab.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Checkpoint struct {
			Latest struct {
				Resources []struct {
					Type    string
					Outputs map[string]any
				}
			}
		}
	}
	if err := json.Unmarshal(ckpt, &doc); err != nil {
		t.Fatal(err)
	}
	for _, r := range doc.Checkpoint.Latest.Resources {
		if r.Type != "relayfleet:index:Box" {
			continue
		}
		if m, ok := r.Outputs["hostPrivateKey"].(map[string]any); !ok || m["ciphertext"] == nil {
			t.Errorf("hostPrivateKey in the state is %v, want ciphertext", r.Outputs["hostPrivateKey"])
		}
	}
	pass, err := os.Stat(filepath.Join(state, "passphrase"))
	if err != nil || pass.Mode().Perm() != 0o600 {
		t.Fatalf("passphrase file: %v %v", err, pass)
	}

	// 2. Nothing to do: a second up changes nothing.
	out, code := fleet("up")
	if sum := summary(out, "up: stack lab: "); code != 0 || sum == "" || strings.Contains(sum, "create") || strings.Contains(sum, "update") || strings.Contains(sum, "delete") {
		t.Fatalf("second up: exit %d, summary %q, want nothing changed", code, sum)
	}

	// 3. A hand-edited sysctl file shows in preview (with refresh) and up repairs it.
	first := boxes()[0]
	if err := l.Run(ctx, first.Name, "echo '# by hand' >> "+sysctl.Relay().File, nil, nil, os.Stderr); err != nil {
		t.Fatal(err)
	}
	out, code = fleet("preview")
	if sum := summary(out, "preview: stack lab: "); code != 0 || !strings.Contains(sum, "1 update") {
		t.Fatalf("preview after a hand edit: exit %d, summary %q, want 1 update", code, sum)
	}
	out, code = fleet("up")
	if sum := summary(out, "up: stack lab: "); code != 0 || !strings.Contains(sum, "1 update") {
		t.Fatalf("up after a hand edit: exit %d, summary %q, want 1 update", code, sum)
	}
	var buf bytes.Buffer
	l.Run(ctx, first.Name, "cat "+sysctl.Relay().File, nil, &buf, os.Stderr)
	if strings.Contains(buf.String(), "# by hand") {
		t.Fatal("up did not repair the hand-edited sysctl file")
	}

	// 4. Count 2 -> 3.
	writeInventory(t, inv, 3, "small")
	if out, code := fleet("up"); code != 0 {
		t.Fatalf("fleet up with count 3: exit %d: %s", code, lastLine(out))
	}
	if bs := boxes(); len(bs) != 3 {
		t.Fatalf("%d lab boxes after count 3, want 3", len(bs))
	}
	if rs := relays(); len(rs) != 3 {
		t.Fatalf("relays %v, want 3", rs)
	}

	// 4b. An origin group of two: fleet up makes two origin boxes beside
	// the three steady ones, every edge's unit pulls from both, each
	// pinned to the key its stack reports, the router's list stays the
	// edges', and fleet status shows the origins apart.
	withOrigins := func(count int, shape string) {
		t.Helper()
		writeInventory(t, inv, count, shape)
		f, err := os.OpenFile(inv, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteString("origins:\n  provider: lab\n  shape: small\n  count: 2\n"); err != nil {
			t.Fatal(err)
		}
	}
	withOrigins(3, "small")
	if out, code := fleet("up"); code != 0 {
		t.Fatalf("fleet up with origins: exit %d: %s", code, lastLine(out))
	}
	var origins, edges []lab.Box
	for _, b := range boxes() {
		switch b.Labels["tier"] {
		case "origin":
			origins = append(origins, b)
		case "steady":
			edges = append(edges, b)
		}
	}
	if len(origins) != 2 || len(edges) != 3 {
		t.Fatalf("%d origin boxes and %d steady boxes after up with origins, want 2 and 3", len(origins), len(edges))
	}
	if rs := relays(); len(rs) != 3 {
		t.Fatalf("relays %v, want the 3 edges' only", rs)
	}
	// fleet hosts and status read the stack and reach the boxes: no lab
	// or relay flags.
	onHosts := func(args ...string) string {
		t.Helper()
		cmd := e.cmd(ctx, append(args, "--inventory", inv, "--state-dir", state, "--pulumi", e.cli, "--lab-dir", e.labDir)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		t.Logf("fleet %s: %v\n%s%s", args[0], err, out, stderr.String())
		if err != nil {
			t.Fatalf("fleet %s: %v: %s", args[0], err, lastLine(stderr.String()))
		}
		return string(out)
	}
	var hosts struct {
		Hosts []struct {
			Name, Tier, Address string
			Ports               []int
			SPKI                string `json:"spki_sha256"`
		}
	}
	if err := json.Unmarshal([]byte(onHosts("hosts", "--json")), &hosts); err != nil {
		t.Fatal(err)
	}
	var pinned []string
	for _, h := range hosts.Hosts {
		if h.Tier == "origin" {
			if h.SPKI == "" || len(h.Ports) != 1 {
				t.Fatalf("origin %s: spki %q, ports %v; want its pin and one relay", h.Name, h.SPKI, h.Ports)
			}
			pinned = append(pinned, program.OriginURL(h.Address, h.Ports[0], h.SPKI))
		}
	}
	if len(pinned) != 2 {
		t.Fatalf("fleet hosts --json lists origins %v, want 2", pinned)
	}
	for _, b := range edges {
		var unit bytes.Buffer
		if err := l.Run(ctx, b.Name, "cat /etc/systemd/system/relay@.service", nil, &unit, os.Stderr); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(unit.String(), "--upstream "+strings.Join(pinned, ",")) {
			t.Errorf("edge %s: unit does not pull from both pinned origins %v:\n%s", b.Name, pinned, unit.String())
		}
	}
	for _, b := range origins {
		var unit bytes.Buffer
		if err := l.Run(ctx, b.Name, "cat /etc/systemd/system/relay@.service", nil, &unit, os.Stderr); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(unit.String(), "--upstream") {
			t.Errorf("origin %s: its unit pulls from an upstream:\n%s", b.Name, unit.String())
		}
	}
	if out := onHosts("status"); !strings.Contains(out, "ORIGINS") || !strings.Contains(out, origins[0].Name) || !strings.Contains(out, origins[1].Name) {
		t.Fatalf("fleet status: want an ORIGINS section with %s and %s:\n%s", origins[0].Name, origins[1].Name, out)
	}

	// 5. A new shape replaces the boxes (the new one first, on a name of
	// its own; the old one is drained, then deleted), and the hosts are
	// converged onto them; the origins stay.
	withOrigins(3, "medium")
	out, code = fleet("up")
	if sum := summary(out, "up: stack lab: "); code != 0 || !strings.Contains(sum, "3 replace") {
		t.Fatalf("up with shape medium: exit %d, summary %q, want 3 replace", code, sum)
	}
	for _, b := range boxes() {
		if b.Labels["tier"] == "origin" {
			continue
		}
		if b.Cores != lab.Medium.Cores || b.RAM != lab.Medium.RAM {
			t.Errorf("box %s: %d cores, %d bytes after the shape change, want medium", b.Name, b.Cores, b.RAM)
		}
	}
	if rs := relays(); len(rs) != 3*lab.Medium.Cores {
		t.Fatalf("relays %v, want one per core of 3 medium boxes", rs)
	}
	routedPinned(t, filepath.Join(state, program.RelaysFile), 3*lab.Medium.Cores)

	// 6. Destroy: zero boxes left, an empty relay list.
	if out, code := fleet("destroy", "--yes"); code != 0 {
		t.Fatalf("fleet destroy: exit %d: %s", code, lastLine(out))
	}
	if bs := boxes(); len(bs) != 0 {
		t.Fatalf("%d lab boxes after destroy, want 0", len(bs))
	}
	if rs := relays(); len(rs) != 0 {
		t.Fatalf("relays after destroy: %v", rs)
	}
	// The state holds no private key or passphrase in clear text. A
	// private key is a PEM block with its body: the relay builds the
	// backend keeps (.relayfleet/releases) hold the words "PRIVATE KEY"
	// as code.
	secret, _ := os.ReadFile(filepath.Join(state, "passphrase"))
	pemKey := regexp.MustCompile(`-----BEGIN [A-Z ]*PRIVATE KEY-----(\\r)?(\\n|\r?\n)[A-Za-z0-9+/=]{20,}`) // raw, or in JSON
	filepath.Walk(filepath.Join(state, "backend"), func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return nil
		}
		data, _ := os.ReadFile(p)
		if pemKey.Match(data) || (len(bytes.TrimSpace(secret)) > 0 && bytes.Contains(data, bytes.TrimSpace(secret))) {
			t.Errorf("%s holds a secret in clear text", p)
		}
		return nil
	})
}

// summary is the rest of the output line that starts with prefix.
func summary(out, prefix string) string {
	for _, line := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(line, prefix); ok {
			return rest
		}
	}
	return ""
}

// routedPinned: every relay in the relays file is pinned to its box's
// key, and a router on that file polls each over TLS with the pin, finds
// every one healthy, and routes a listener with a certificate hash that
// a TLS handshake with the relay presents.
func routedPinned(t *testing.T, file string, want int) {
	t.Helper()
	f, err := router.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range f.Relays {
		if r.SPKI == "" || !strings.HasPrefix(r.Stats, "https://") {
			t.Errorf("relay %s: spki_sha256 %q, stats %s; want its box's pin, polled over https://", r.URL, r.SPKI, r.Stats)
		}
	}
	rt, err := router.New(router.Options{File: file, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		rt.PollOnce(context.Background())
		rec := httptest.NewRecorder()
		rt.ServeHTTP(rec, httptest.NewRequest("GET", "/relays", nil))
		var st wire.RelaysState
		if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil {
			t.Fatal(err)
		}
		healthy := 0
		for _, r := range st.Relays {
			if r.Healthy && r.CertHash != "" {
				healthy++
			}
		}
		if healthy == want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d relays healthy with a pinned certificate hash after 60 s: %s", healthy, want, rec.Body.Bytes())
		}
		time.Sleep(time.Second)
	}
	route, err := rt.Pick()
	if err != nil || route.CertificateSHA256 == "" {
		t.Fatalf("route %+v, %v; want a relay with its certificate hash", route, err)
	}
}
