package provision

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
)

// MinTLSSeedLen is the shortest fleet TLS seed BoxTLSKey takes.
const MinTLSSeedLen = 32

// NewTLSSeed returns a fresh fleet TLS seed: 32 random bytes as
// base64url text. The fleet keeps it in its stack as a secret; each box's
// relay TLS key derives from it (BoxTLSKey).
func NewTLSSeed() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("tls seed: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// BoxTLSKey derives the relay TLS key of the box called box from the
// fleet's seed: an ECDSA P-256 key (HKDF-SHA256 of the seed, the box's
// name as its info, reduced to a scalar), as PEM PKCS #8, the form relay
// serve --tls-key reads, and its SPKI sha256, the router's pin. fleet up
// and fleet converge derive the same key for a box; no box's key tells
// anything of another's or of the seed.
func BoxTLSKey(seed, box string) ([]byte, string, error) {
	if len(seed) < MinTLSSeedLen {
		return nil, "", fmt.Errorf("tls seed: %d bytes, want at least %d", len(seed), MinTLSSeedLen)
	}
	// 48 bytes reduced mod n-1, plus one: a scalar in [1, n-1] with a
	// negligible bias (FIPS 186-5 A.2.1).
	okm, err := hkdf.Key(sha256.New, []byte(seed), nil, "relayfleet relay tls key v1\x00"+box, 48)
	if err != nil {
		return nil, "", fmt.Errorf("tls key for %s: %w", box, err)
	}
	n := elliptic.P256().Params().N
	d := new(big.Int).SetBytes(okm)
	d.Mod(d, new(big.Int).Sub(n, big.NewInt(1)))
	d.Add(d, big.NewInt(1))
	key, err := ecdsa.ParseRawPrivateKey(elliptic.P256(), d.FillBytes(make([]byte, 32)))
	if err != nil {
		return nil, "", fmt.Errorf("tls key for %s: %w", box, err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, "", fmt.Errorf("tls key for %s: %w", box, err)
	}
	spki, err := spkiHash(&key.PublicKey)
	if err != nil {
		return nil, "", fmt.Errorf("tls key for %s: %w", box, err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), spki, nil
}

// TLSKeySPKI parses a relay TLS key (PEM PKCS #8 ECDSA P-256) and returns
// its SPKI sha256. Errors never print the key.
func TLSKeySPKI(data []byte) (string, error) {
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "PRIVATE KEY" {
		return "", errors.New("TLS key: not a PEM PKCS #8 \"PRIVATE KEY\"")
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return "", fmt.Errorf("TLS key: %w", err)
	}
	key, ok := k.(*ecdsa.PrivateKey)
	if !ok || key.Curve != elliptic.P256() {
		return "", errors.New("TLS key: not an ECDSA P-256 key")
	}
	return spkiHash(&key.PublicKey)
}

// spkiHash is the hex sha256 of a public key's DER SubjectPublicKeyInfo,
// as relay.SPKIHash computes it (provision may not import relay;
// infra/program's TestPinnedRelayRoutedEndToEnd checks the two agree).
func spkiHash(pub *ecdsa.PublicKey) (string, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", fmt.Errorf("marshal public key: %w", err)
	}
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:]), nil
}
