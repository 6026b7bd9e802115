//go:build lab

package main

import (
	"net/netip"
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
