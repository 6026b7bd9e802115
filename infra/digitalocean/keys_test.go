package digitalocean

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"net/netip"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
)

// testKeys returns a fresh host private key (OpenSSH PEM) and an admin
// authorized_keys line.
func testKeys(t *testing.T) (hostKey []byte, admin string) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sp, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(block), strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sp))) + " admin@example"
}

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }
