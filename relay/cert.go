package relay

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"time"
)

// SelfSignedValidity is how long a generated certificate is valid. Browsers
// accept serverCertificateHashes only for ECDSA certificates valid for at
// most 14 days.
const SelfSignedValidity = 10 * 24 * time.Hour

// SelfSignedRenewBefore is how long before its expiry a running relay
// replaces its self-signed certificate with a new one: a client that
// fetched /certificate.sha256 a little earlier still finds it valid.
const SelfSignedRenewBefore = 4 * 24 * time.Hour

// SelfSignedCertificate makes an ECDSA P-256 certificate with a new key,
// valid for SelfSignedValidity from now, for localhost, the loopback
// addresses, this machine's hostname and the given extra hosts (names or
// IPs).
func SelfSignedCertificate(hosts ...string) (tls.Certificate, error) {
	key, err := NewTLSKey()
	if err != nil {
		return tls.Certificate{}, err
	}
	return selfSigned(key, time.Now(), hosts)
}

// selfSigned makes an ECDSA certificate for key, valid from a minute before
// now for SelfSignedValidity.
func selfSigned(key *ecdsa.PrivateKey, now time.Time, hosts []string) (tls.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("generate serial: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "relayfleet relay"},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(SelfSignedValidity - time.Minute),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		DNSNames:              []string{"localhost"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	if h, err := os.Hostname(); err == nil && h != "" && h != "localhost" {
		tmpl.DNSNames = append(tmpl.DNSNames, h)
	}
	for _, h := range hosts {
		if h == "" {
			continue
		}
		if ip := net.ParseIP(h); ip != nil {
			if !ip.IsUnspecified() {
				tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			}
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("create certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("parse certificate: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}

// CertificateHash returns the lower-case hex SHA-256 of a certificate's
// leaf DER, as served on /certificate.sha256.
func CertificateHash(c tls.Certificate) string {
	if len(c.Certificate) == 0 {
		return ""
	}
	sum := sha256.Sum256(c.Certificate[0])
	return hex.EncodeToString(sum[:])
}

// SPKIHash returns the lower-case hex SHA-256 of a public key's DER
// SubjectPublicKeyInfo: the pin that stays the same across certificates
// made for one key.
func SPKIHash(pub crypto.PublicKey) (string, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", fmt.Errorf("marshal public key: %w", err)
	}
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:]), nil
}

// NewTLSKey generates an ECDSA P-256 key, the kind the self-signed
// certificates use.
func NewTLSKey() (*ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate key: %w", err)
	}
	return key, nil
}

// WriteTLSKey generates an ECDSA P-256 key and writes it to path as a PEM
// PKCS #8 "PRIVATE KEY", mode 0600. It refuses to overwrite an existing
// file.
func WriteTLSKey(path string) (*ecdsa.PrivateKey, error) {
	key, err := NewTLSKey()
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("marshal key: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("%s already exists; not overwriting it", path)
		}
		return nil, err
	}
	if err := pem.Encode(f, &pem.Block{Type: "PRIVATE KEY", Bytes: der}); err != nil {
		f.Close()
		os.Remove(path)
		return nil, fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		os.Remove(path)
		return nil, fmt.Errorf("write %s: %w", path, err)
	}
	return key, nil
}

// LoadTLSKey reads a PEM PKCS #8 ECDSA P-256 private key, as WriteTLSKey
// writes.
func LoadTLSKey(path string) (*ecdsa.PrivateKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseTLSKey(path, data)
}

// ParseTLSKey parses a PEM PKCS #8 ECDSA P-256 private key; name labels
// the errors.
func ParseTLSKey(name string, data []byte) (*ecdsa.PrivateKey, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, fmt.Errorf("%s: no PEM block; want a PEM PKCS #8 \"PRIVATE KEY\"", name)
	}
	if block.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("%s: PEM block is %q; want a PKCS #8 \"PRIVATE KEY\" (relay keygen writes one)", name, block.Type)
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	key, ok := k.(*ecdsa.PrivateKey)
	if !ok || key.Curve != elliptic.P256() {
		return nil, fmt.Errorf("%s: not an ECDSA P-256 key (browsers pin only those)", name)
	}
	return key, nil
}
