//go:build lab || e2e

package main

import (
	"net/netip"
	"os"
	"testing"

	"golang.org/x/crypto/ssh"
)

func mustPrefix(t *testing.T, s string) netip.Prefix {
	t.Helper()
	return netip.MustParsePrefix(s)
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

func sshPublic(s ssh.Signer) []byte { return ssh.MarshalAuthorizedKey(s.PublicKey()) }

// labImages is the lab image cache the tests share: $RELAYFLEET_LAB_IMAGES,
// else the default lab's.
func labImages() string {
	if d := os.Getenv("RELAYFLEET_LAB_IMAGES"); d != "" {
		return d
	}
	return "/var/lib/relayfleet/lab/images"
}
