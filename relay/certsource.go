package relay

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"
)

// DefaultCertReloadInterval is how often a relay serving certificate files
// looks for new ones.
const DefaultCertReloadInterval = 5 * time.Second

// certInfo is a serving certificate and what /stats tells of it.
type certInfo struct {
	cert     *tls.Certificate
	hash     string // SHA-256 of the leaf DER
	spki     string // SHA-256 of the leaf's SubjectPublicKeyInfo
	notAfter time.Time
}

func newCertInfo(c tls.Certificate) (*certInfo, error) {
	if len(c.Certificate) == 0 {
		return nil, errors.New("no certificate")
	}
	if c.Leaf == nil {
		leaf, err := x509.ParseCertificate(c.Certificate[0])
		if err != nil {
			return nil, fmt.Errorf("parse certificate: %w", err)
		}
		c.Leaf = leaf
	}
	return &certInfo{
		cert:     &c,
		hash:     CertificateHash(c),
		spki:     spkiOf(c.Leaf),
		notAfter: c.Leaf.NotAfter,
	}, nil
}

func spkiOf(leaf *x509.Certificate) string {
	h, err := SPKIHash(leaf.PublicKey)
	if err != nil {
		return ""
	}
	return h
}

type certMode int

const (
	certStatic     certMode = iota // Config.Certificate, never replaced
	certSelfSigned                 // made here, replaced before expiry
	certFiles                      // Config.CertFile and KeyFile, re-read on change
	certACME                       // Config.ACME, through certmagic
)

// certSource hands each TLS handshake (QUIC and TCP) the certificate to
// serve now. Sessions already open keep the one they started with.
type certSource struct {
	mode   certMode
	logger *slog.Logger
	now    func() time.Time

	mu  sync.Mutex
	cur *certInfo

	// self-signed
	key     *ecdsa.PrivateKey
	hosts   []string
	renewAt time.Time

	// files
	certFile, keyFile string
	interval          time.Duration
	stamp             fileStamp

	acme *acmeSource
}

// newCertSource picks the certificate mode from cfg. host is the listen
// host, added to self-signed certificates. In ACME mode nothing is served
// until obtainACME, called once the listeners are up to answer the CA's
// challenges.
func newCertSource(cfg *Config, host string, logger *slog.Logger) (*certSource, error) {
	s := &certSource{logger: logger, now: cfg.Now}
	if s.now == nil {
		s.now = time.Now
	}
	n := 0
	for _, set := range []bool{len(cfg.Certificate.Certificate) > 0, cfg.CertFile != "" || cfg.KeyFile != "", cfg.ACME != nil, cfg.TLSKey != nil} {
		if set {
			n++
		}
	}
	if n > 1 {
		return nil, errors.New("certificate: give at most one of Certificate, CertFile and KeyFile, ACME, TLSKey")
	}
	switch {
	case len(cfg.Certificate.Certificate) > 0:
		s.mode = certStatic
		ci, err := newCertInfo(cfg.Certificate)
		if err != nil {
			return nil, fmt.Errorf("certificate: %w", err)
		}
		s.cur = ci
	case cfg.CertFile != "" || cfg.KeyFile != "":
		if cfg.CertFile == "" || cfg.KeyFile == "" {
			return nil, errors.New("certificate: CertFile and KeyFile go together")
		}
		s.mode = certFiles
		s.certFile, s.keyFile = cfg.CertFile, cfg.KeyFile
		s.interval = cfg.CertReloadInterval
		if s.interval <= 0 {
			s.interval = DefaultCertReloadInterval
		}
		s.stamp = stampFiles(s.certFile, s.keyFile)
		ci, err := s.loadFiles()
		if err != nil {
			return nil, err
		}
		s.cur = ci
	case cfg.ACME != nil:
		s.mode = certACME
		a, err := newACME(*cfg.ACME, logger)
		if err != nil {
			return nil, err
		}
		s.acme = a
	default:
		s.mode = certSelfSigned
		s.key, s.hosts = cfg.TLSKey, []string{host}
		if s.key == nil {
			k, err := NewTLSKey()
			if err != nil {
				return nil, err
			}
			s.key = k
		}
		if err := s.rotate(s.now()); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// obtainACME gets (or loads) the ACME certificate; certmagic renews it
// from then on. Other modes have nothing to do.
func (s *certSource) obtainACME(ctx context.Context) error {
	if s.mode != certACME {
		return nil
	}
	if err := s.acme.obtain(ctx); err != nil {
		return err
	}
	_, err := s.current()
	return err
}

// rotate makes a new self-signed certificate valid from now; s.mu is held
// or s is not shared yet.
func (s *certSource) rotate(now time.Time) error {
	c, err := selfSigned(s.key, now, s.hosts)
	if err != nil {
		return fmt.Errorf("self-signed certificate: %w", err)
	}
	ci, err := newCertInfo(c)
	if err != nil {
		return err
	}
	s.cur, s.renewAt = ci, ci.notAfter.Add(-SelfSignedRenewBefore)
	return nil
}

// current returns the certificate to serve now. A self-signed one past its
// renewal time (or not valid yet, if the clock went back) is replaced
// first.
func (s *certSource) current() (*certInfo, error) {
	switch s.mode {
	case certACME:
		c, err := s.acme.certificate()
		if err != nil {
			return nil, err
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.cur == nil || !bytes.Equal(s.cur.cert.Certificate[0], c.Certificate[0]) {
			ci, err := newCertInfo(*c)
			if err != nil {
				return nil, err
			}
			s.cur = ci
		}
		return s.cur, nil
	case certSelfSigned:
		s.mu.Lock()
		defer s.mu.Unlock()
		now := s.now()
		if !now.Before(s.renewAt) || now.Before(s.cur.cert.Leaf.NotBefore) {
			old := s.cur.hash
			if err := s.rotate(now); err != nil {
				// The old one is valid for SelfSignedRenewBefore yet.
				s.logger.Error("rotate certificate; serving the old one", "err", err)
				return s.cur, nil
			}
			s.logger.Info("certificate rotated", "certificate_sha256", s.cur.hash, "previous", old,
				"not_after", s.cur.notAfter.Format(time.RFC3339), "spki_sha256", s.cur.spki)
		}
		return s.cur, nil
	default:
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.cur, nil
	}
}

// info is current for callers that cannot fail: /stats, /metrics and
// /certificate.sha256. It is nil only in ACME mode when certmagic has
// nothing to serve.
func (s *certSource) info() *certInfo {
	ci, err := s.current()
	if err != nil {
		s.logger.Debug("no certificate", "err", err)
		return nil
	}
	return ci
}

// getCertificate is tls.Config.GetCertificate.
func (s *certSource) getCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	if s.mode == certACME {
		// certmagic also answers TLS-ALPN-01 challenges here.
		return s.acme.cfg.GetCertificate(hello)
	}
	ci, err := s.current()
	if err != nil {
		return nil, err
	}
	return ci.cert, nil
}

// run keeps the certificate fresh in the background until ctx ends:
// certificate files are re-read when they change.
func (s *certSource) run(ctx context.Context) {
	if s.mode != certFiles {
		return
	}
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		st := stampFiles(s.certFile, s.keyFile)
		s.mu.Lock()
		changed := st != s.stamp
		s.stamp = st
		s.mu.Unlock()
		if changed {
			_ = s.reload()
		}
	}
}

// reload re-reads the certificate files, now; other modes have nothing to
// reload. On error the old certificate stays.
func (s *certSource) reload() error {
	if s.mode != certFiles {
		return nil
	}
	ci, err := s.loadFiles()
	if err != nil {
		s.logger.Error("reload certificate; serving the old one", "err", err)
		return err
	}
	s.mu.Lock()
	old := s.cur.hash
	s.cur = ci
	s.mu.Unlock()
	if ci.hash != old {
		s.logger.Info("certificate reloaded", "certificate_sha256", ci.hash, "previous", old,
			"not_after", ci.notAfter.Format(time.RFC3339), "spki_sha256", ci.spki)
	}
	return nil
}

func (s *certSource) loadFiles() (*certInfo, error) {
	c, err := tls.LoadX509KeyPair(s.certFile, s.keyFile)
	if err != nil {
		return nil, fmt.Errorf("certificate %s, key %s: %w", s.certFile, s.keyFile, err)
	}
	ci, err := newCertInfo(c)
	if err != nil {
		return nil, fmt.Errorf("certificate %s: %w", s.certFile, err)
	}
	if now := s.now(); now.After(ci.notAfter) {
		return nil, fmt.Errorf("certificate %s expired at %s", s.certFile, ci.notAfter.Format(time.RFC3339))
	}
	return ci, nil
}

func (s *certSource) stop() {
	if s.acme != nil {
		s.acme.stop()
	}
}

// fileStamp is what tells that a file changed: size and modification time
// of the certificate and key files (zero for one that cannot be read).
type fileStamp struct {
	certSize, keySize int64
	certMod, keyMod   int64 // UnixNano
}

func stampFiles(certFile, keyFile string) fileStamp {
	var st fileStamp
	if fi, err := os.Stat(certFile); err == nil {
		st.certSize, st.certMod = fi.Size(), fi.ModTime().UnixNano()
	}
	if fi, err := os.Stat(keyFile); err == nil {
		st.keySize, st.keyMod = fi.Size(), fi.ModTime().UnixNano()
	}
	return st
}

// acmeTLS1 is the ALPN protocol of ACME TLS-ALPN-01 challenges.
const acmeTLS1 = "acme-tls/1"

// tcpProtos is the ALPN list of the TCP port's TLS: HTTP/1.1, and the
// ACME challenge protocol when the QUIC side offers it.
func tcpProtos(quicProtos []string) []string {
	if slices.Contains(quicProtos, acmeTLS1) {
		return []string{"http/1.1", acmeTLS1}
	}
	return []string{"http/1.1"}
}
