package router

import (
	"crypto"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"os"
	"sync"
	"time"
)

// The router is served over TLS (relay router --cert/--key or --tls-key)
// so that its answers, relay certificate hashes included, reach clients
// unchanged. With --cert/--key clients verify it against their CAs; with
// --tls-key it serves self-signed certificates for one stable key, and
// clients pin that key (client.RouterOptions.SPKI, relay listen
// --router-spki): the certificates may change, the pin does not.

// selfSignedValidity is how long the router's self-signed certificates
// are valid; a new one is made selfSignedRenew before expiry. Clients pin
// the key, so expiry only matters to tools that look at it.
const (
	selfSignedValidity = 30 * 24 * time.Hour
	selfSignedRenew    = 24 * time.Hour
)

// SelfSignedTLS is a server TLS configuration presenting self-signed
// certificates for key, valid for the loopback addresses, localhost and
// hosts (names or IPs), made anew before they expire. now nil means
// time.Now.
func SelfSignedTLS(key crypto.Signer, hosts []string, now func() time.Time) (*tls.Config, error) {
	if now == nil {
		now = time.Now
	}
	var (
		mu  sync.Mutex
		cur *tls.Certificate
	)
	get := func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
		mu.Lock()
		defer mu.Unlock()
		t := now()
		if cur == nil || t.Add(selfSignedRenew).After(cur.Leaf.NotAfter) {
			c, err := selfSigned(key, hosts, t)
			if err != nil {
				return nil, err
			}
			cur = c
		}
		return cur, nil
	}
	if _, err := get(nil); err != nil {
		return nil, err
	}
	return &tls.Config{GetCertificate: get, MinVersion: tls.VersionTLS12}, nil
}

func selfSigned(key crypto.Signer, hosts []string, now time.Time) (*tls.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("router certificate: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "relayfleet router"},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(selfSignedValidity),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		DNSNames:              []string{"localhost"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			if !ip.IsUnspecified() {
				tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			}
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("router certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("router certificate: %w", err)
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}

// CertFilesTLS is a server TLS configuration presenting the certificate
// chain and key in certFile and keyFile (PEM), read again when either
// file changes (checked at most every few seconds), so a renewed
// certificate needs no restart. A change that fails to load keeps the
// previous certificate.
func CertFilesTLS(certFile, keyFile string) (*tls.Config, error) {
	load := func() (*tls.Certificate, error) {
		c, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("router certificate: %w", err)
		}
		return &c, nil
	}
	stamp := func() [2]time.Time {
		var s [2]time.Time
		for i, f := range []string{certFile, keyFile} {
			if st, err := os.Stat(f); err == nil {
				s[i] = st.ModTime()
			}
		}
		return s
	}
	cur, err := load()
	if err != nil {
		return nil, err
	}
	var (
		mu      sync.Mutex
		seen    = stamp()
		checked = time.Now()
	)
	get := func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
		mu.Lock()
		defer mu.Unlock()
		if time.Since(checked) > 5*time.Second {
			checked = time.Now()
			if s := stamp(); s != seen {
				seen = s
				if c, err := load(); err == nil {
					cur = c
				}
			}
		}
		return cur, nil
	}
	return &tls.Config{GetCertificate: get, MinVersion: tls.VersionTLS12}, nil
}
