package provision

import (
	"strings"
	"testing"

	"github.com/relayfleet/relayfleet/relay"
	"github.com/relayfleet/relayfleet/units"
)

// TestBoxTLSKey: a box's key follows from the fleet's seed and the box's
// name alone (fleet up and fleet converge make the same one), differs
// between boxes and seeds, is what relay serve --tls-key reads, and its
// SPKI is the pin reported.
func TestBoxTLSKey(t *testing.T) {
	seed, err := NewTLSSeed()
	if err != nil {
		t.Fatal(err)
	}
	other, _ := NewTLSSeed()
	a, spkiA, err := BoxTLSKey(seed, "relay-1")
	if err != nil {
		t.Fatal(err)
	}
	again, spkiAgain, _ := BoxTLSKey(seed, "relay-1")
	_, spkiB, _ := BoxTLSKey(seed, "relay-2")
	_, spkiC, _ := BoxTLSKey(other, "relay-1")
	if string(a) != string(again) || spkiA != spkiAgain {
		t.Fatal("the same seed and box gave two keys")
	}
	if spkiA == spkiB || spkiA == spkiC {
		t.Fatalf("keys repeat across boxes or seeds: %s %s %s", spkiA, spkiB, spkiC)
	}
	key, err := relay.ParseTLSKey("key", a)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := relay.SPKIHash(&key.PublicKey); got != spkiA {
		t.Fatalf("SPKI %s, the key's is %s", spkiA, got)
	}
	if got, err := TLSKeySPKI(a); err != nil || got != spkiA {
		t.Fatalf("TLSKeySPKI = %s, %v; want %s", got, err, spkiA)
	}
	if _, _, err := BoxTLSKey("short", "relay-1"); err == nil || !strings.Contains(err.Error(), "seed") {
		t.Fatalf("a short seed: %v", err)
	}
}

// TestDesiredRelayTLSKey: the box's TLS key is installed beside the auth
// key (root's alone) and the relays run with it; a key that is not one
// is refused before anything is written.
func TestDesiredRelayTLSKey(t *testing.T) {
	seed, _ := NewTLSSeed()
	key, _, err := BoxTLSKey(seed, "b")
	if err != nil {
		t.Fatal(err)
	}
	l := units.Layout{Cores: 1, RAM: 1 << 30, BasePort: 4443, Binary: "/opt/relay"}
	auth := testBoxKeys()
	p, err := DesiredRelay(l, strings.Repeat("a", 64), auth, key)
	if err != nil {
		t.Fatal(err)
	}
	if string(p.Content[units.TLSKeyFile]) != string(key) || p.State.Files[units.TLSKeyFile] != Digest(key) || !private(units.TLSKeyFile) {
		t.Fatalf("plan does not install the key privately at %s", units.TLSKeyFile)
	}
	if !strings.Contains(string(p.Content["/etc/systemd/system/"+units.TemplateName]), "--tls-key %d/relay-tls-key") {
		t.Fatal("the relays do not run with the key")
	}
	if _, err := DesiredRelay(l, strings.Repeat("a", 64), auth, []byte("not a key")); err == nil || !strings.Contains(err.Error(), "TLS key") {
		t.Fatalf("a bad key: %v", err)
	}
	p, err = DesiredRelay(l, strings.Repeat("a", 64), auth, nil)
	if err != nil || p.Content[units.TLSKeyFile] != nil {
		t.Fatalf("no key: %v, file %q", err, p.Content[units.TLSKeyFile])
	}
}

// TestNewTLSKeyRestartsRelays: systemd copies the key at start, so a box
// whose key changed (and nothing else) restarts its running relays:
// until then they would serve certificates the pin refuses.
func TestNewTLSKeyRestartsRelays(t *testing.T) {
	desired := HostState{Files: map[string]string{units.TLSKeyFile: "new"}, Instances: []string{"relay@4443.service"}}
	actual := HostState{Files: map[string]string{units.TLSKeyFile: "old"}, Instances: []string{"relay@4443.service"}}
	restarted := false
	for _, c := range Diff(desired, actual) {
		if c.Kind == ChangeRestart && c.What == "relay@4443.service" {
			restarted = true
		}
	}
	if !restarted {
		t.Fatalf("changes %v, want relay@4443.service restarted", Diff(desired, actual))
	}
}
