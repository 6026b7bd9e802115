package provision

import (
	"crypto/ed25519"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/relay"
	"github.com/relayfleet/relayfleet/units"
)

// TestRelayKeyFile: the key file a box's relays get is the fleet's box
// key file whole on an origin, and without the link keys' public halves
// on any other box (an edge, a burst box), during a rotation's overlap
// too. Loaded as the relay loads it (the credential DesiredRelay plans),
// the origin takes a subscribe token the link key signed and the edge
// refuses it, while the edge's file still signs its own link tokens and
// both verify the fleet's publish tokens.
func TestRelayKeyFile(t *testing.T) {
	now := time.Now()
	sign, link, oldSign, oldLink := fixedKey(1, false), fixedKey(2, true), fixedKey(3, false), fixedKey(4, true)
	oldSign.Until, oldLink.Until = now.Add(time.Hour), now.Add(time.Hour)
	box := []byte(BoxKeyFile([]AuthKey{sign, link, oldSign, oldLink}, now))

	planned := func(origin bool) *relay.Authenticator {
		t.Helper()
		plan, err := DesiredRelay(layout(1), "aaaa", RelayKeyFile(box, origin), nil)
		if err != nil {
			t.Fatal(err)
		}
		file := plan.Content[units.CredentialFile]
		if err := CheckBoxKeyFile(string(file)); err != nil {
			t.Fatalf("origin %v: %v", origin, err)
		}
		if got := strings.Count(string(file), lineLinkPublic+":"); origin && got != 2 || !origin && got != 0 {
			t.Errorf("origin %v: %d ed25519-link-public lines in\n%s", origin, got, file)
		}
		if !strings.Contains(string(file), lineLinkPrivate+":") || strings.Count(string(file), linePublic+":") != 2 {
			t.Errorf("origin %v: want both public keys and the private link key in\n%s", origin, file)
		}
		keys, err := relay.ParseKeyFile("relay-auth", file)
		if err != nil {
			t.Fatal(err)
		}
		a, err := relay.NewAuthenticatorKeys(keys)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	origin, edge := planned(true), planned(false)
	if string(RelayKeyFile(box, true)) != string(box) {
		t.Error("an origin's key file is not the box key file")
	}

	for _, k := range []AuthKey{link, oldLink} {
		signer, err := relay.NewAuthenticator(k.Seed)
		if err != nil {
			t.Fatal(err)
		}
		tok, err := signer.NewToken("", "", false, true, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if c, err := origin.Verify(tok); err != nil || !c.Link {
			t.Errorf("link key %s's token on the origin: %+v, %v; want a link token", k.ID(), c, err)
		}
		if _, err := edge.Verify(tok); !errors.Is(err, relay.ErrUnauthorized) {
			t.Errorf("link key %s's token on an edge: %v, want unauthorized", k.ID(), err)
		}
	}
	fleet, err := relay.NewAuthenticator(sign.Seed)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := fleet.NewToken("live", "", true, false, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for name, a := range map[string]*relay.Authenticator{"origin": origin, "edge": edge} {
		if _, err := a.Verify(pub); err != nil {
			t.Errorf("the fleet's publish token on the %s: %v", name, err)
		}
		if a.CanSign() {
			t.Errorf("the %s's key file signs", name)
		}
	}
	// The edge's file still signs its own link token (relay serve
	// --upstream needs it): the origin takes that token.
	edgeKeys, _ := relay.ParseKeyFile("relay-auth", RelayKeyFile(box, false))
	var linkPriv ed25519.PrivateKey
	for _, k := range edgeKeys {
		if k.Link && k.Private != nil {
			linkPriv = k.Private
		}
	}
	if linkPriv == nil {
		t.Fatal("the edge's file has no private link key")
	}
	own, _ := relay.NewAuthenticator(linkPriv.Seed())
	tok, _ := own.NewToken("", "", false, true, time.Hour)
	if _, err := origin.Verify(tok); err != nil {
		t.Errorf("the edge's own link token on the origin: %v", err)
	}
}
