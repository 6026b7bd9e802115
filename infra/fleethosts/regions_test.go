package fleethosts

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/relayfleet/relayfleet/inventories"
)

// TestUpstreamOfRegions: converge gives each host the upstream the stack
// gives it: the publishers' origins none (Targets clears it), another
// region's origins and burst boxes the publishers' origins, a region's
// steady boxes their region's origins.
func TestUpstreamOfRegions(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fleet.yaml")
	data := `version: 1
name: f
steady:
  - {name: eu-edge, provider: lab, shape: small, count: 1}
  - {name: us-edge, provider: lab, shape: small, count: 1}
regions:
  - {name: eu, origins: {provider: lab, shape: small, count: 2}, steady: [eu-edge]}
  - {name: us, origins: {provider: lab, shape: small, count: 2}, steady: [us-edge]}
`
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	f, _, err := inventories.LoadFleetFile(path)
	if err != nil {
		t.Fatal(err)
	}
	spki := strings.Repeat("ab", 32)
	origin := func(name, group, addr string) Host {
		return Host{Name: name, Group: group, Tier: TierOrigin, Address: addr, Ports: []int{4443}, SPKI: spki}
	}
	hosts := []Host{
		origin("origin-1", "origin", "10.0.0.1"), origin("origin-2", "origin", "10.0.0.2"),
		origin("origin-us-1", "origin-us", "10.0.1.1"), origin("origin-us-2", "origin-us", "10.0.1.2"),
		{Name: "eu-edge-1", Group: "eu-edge", Tier: TierSteady},
		{Name: "us-edge-1", Group: "us-edge", Tier: TierSteady},
		{Name: "final-1", Group: "final", Tier: TierBurst},
	}
	root := OriginURLs(hosts)
	us := OriginURLsOf(hosts, "origin-us")
	if len(root) != 2 || len(us) != 2 || !strings.Contains(root[0], "10.0.0.1") || !strings.Contains(us[0], "10.0.1.1") {
		t.Fatalf("root %v, us %v", root, us)
	}
	for i, want := range [][]string{root, root, root, root, root, us, root} {
		if got := upstreamOf(f, hosts, hosts[i], root); !slices.Equal(got, want) {
			t.Errorf("%s: upstream %v, want %v", hosts[i].Name, got, want)
		}
	}
	// Converge's targets: every origin takes link tokens, the us
	// origins too (us's edges pull from them); no edge or burst box does.
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	block, _ := ssh.MarshalPrivateKey(priv, "")
	keyFile := filepath.Join(t.TempDir(), "id")
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	for i := range hosts {
		hosts[i].Stack, hosts[i].Backend, hosts[i].User = "f", "static", "root"
		hosts[i].SSHAddress = fmt.Sprintf("10.0.9.%d:22", i+1)
		hosts[i].HostKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"
	}
	targets, closer, err := Targets(f, hosts, Access{SSHKey: keyFile})
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	for _, tg := range targets {
		if origin := strings.HasPrefix(tg.Host.Name, "origin-"); tg.AcceptLinkTokens != origin {
			t.Errorf("%s: takes link tokens %v, want %v", tg.Host.Name, tg.AcceptLinkTokens, origin)
		}
	}
}
