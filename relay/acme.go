package relay

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/certmagic"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// ACMEConfig has the relay get and renew its certificate from an ACME CA
// (through certmagic). The CA checks the relay controls Domain with a
// TLS-ALPN-01 challenge on TCP port 443 or an HTTP-01 one on port 80: the
// relay answers either on its own TCP port, so one of them has to reach
// it (listen on :443, or forward port 80 to the relay's port). Start
// returns once the certificate is there (obtained, or loaded from Dir);
// certmagic retries failures until its context ends.
type ACMEConfig struct {
	// Domain is the DNS name to get the certificate for.
	Domain string
	// Email is the ACME account's contact address; may be empty.
	Email string
	// CA is the ACME directory URL; empty means Let's Encrypt.
	CA string
	// CARoots verify the CA's HTTPS endpoint; nil means the system's.
	CARoots *x509.CertPool
	// Dir keeps the account, keys and certificates across restarts;
	// empty means certmagic's default (under $XDG_DATA_HOME or ~/.local/share).
	Dir string
	// HTTPPort and TLSALPNPort are where the CA connects for HTTP-01 and
	// TLS-ALPN-01 challenges; 0 means 80 and 443. Certmagic listens there
	// itself when the port is free; when it is taken (by the relay, or
	// something forwarding to it) the relay's TCP port answers.
	HTTPPort, TLSALPNPort int
}

type acmeSource struct {
	domain string
	ca     string
	cache  *certmagic.Cache
	cfg    *certmagic.Config
	issuer *certmagic.ACMEIssuer
}

// newACME sets certmagic up for ac.Domain; obtain gets the certificate.
func newACME(ac ACMEConfig, logger *slog.Logger) (*acmeSource, error) {
	if ac.Domain == "" {
		return nil, fmt.Errorf("acme: no domain")
	}
	zl := zapLogger(logger)
	var cfg *certmagic.Config
	cache := certmagic.NewCache(certmagic.CacheOptions{
		GetConfigForCert: func(certmagic.Certificate) (*certmagic.Config, error) { return cfg, nil },
		Logger:           zl,
	})
	tmpl := certmagic.Config{Logger: zl, OCSP: certmagic.OCSPConfig{DisableStapling: true}}
	if ac.Dir != "" {
		tmpl.Storage = &certmagic.FileStorage{Path: ac.Dir}
	}
	cfg = certmagic.New(cache, tmpl)
	ca := ac.CA
	if ca == "" {
		ca = certmagic.LetsEncryptProductionCA
	}
	issuer := certmagic.NewACMEIssuer(cfg, certmagic.ACMEIssuer{
		CA: ca, Email: ac.Email, Agreed: true, TrustedRoots: ac.CARoots, Logger: zl,
		AltHTTPPort: ac.HTTPPort, AltTLSALPNPort: ac.TLSALPNPort,
	})
	cfg.Issuers = []certmagic.Issuer{issuer}
	return &acmeSource{domain: ac.Domain, ca: ca, cache: cache, cfg: cfg, issuer: issuer}, nil
}

// obtain gets the certificate for the domain (or loads it from the store)
// and keeps it renewed in the background until stop. It waits until there
// is a certificate or ctx ends; certmagic retries failures meanwhile (and
// logs them), and never prompts on stdin as its interactive mode does.
func (a *acmeSource) obtain(ctx context.Context) error {
	if err := a.cfg.ManageAsync(ctx, []string{a.domain}); err != nil {
		return fmt.Errorf("acme certificate for %s from %s: %w", a.domain, a.ca, err)
	}
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		if _, err := a.certificate(); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("acme certificate for %s from %s: %w", a.domain, a.ca, ctx.Err())
		case <-t.C:
		}
	}
}

// certificate is the certificate in certmagic's cache for the domain that
// expires last: the one handshakes get.
func (a *acmeSource) certificate() (*tls.Certificate, error) {
	var best *tls.Certificate
	for _, c := range a.cache.AllMatchingCertificates(a.domain) {
		if c.Leaf == nil {
			continue
		}
		if best == nil || c.Leaf.NotAfter.After(best.Leaf.NotAfter) {
			best = &c.Certificate
		}
	}
	if best == nil {
		return nil, fmt.Errorf("no acme certificate for %s yet", a.domain)
	}
	return best, nil
}

// httpHandler answers HTTP-01 challenges ahead of h.
func (a *acmeSource) httpHandler(h http.Handler) http.Handler {
	return a.issuer.HTTPChallengeHandler(h)
}

func (a *acmeSource) stop() { a.cache.Stop() }

// zapLogger sends certmagic's logs to logger, one record a line.
func zapLogger(logger *slog.Logger) *zap.Logger {
	enc := zap.NewProductionEncoderConfig()
	enc.TimeKey = "" // slog adds its own
	return zap.New(zapcore.NewCore(zapcore.NewConsoleEncoder(enc), zapcore.AddSync(&slogWriter{logger: logger}), zap.InfoLevel))
}

// slogWriter logs each line written to it.
type slogWriter struct {
	mu     sync.Mutex
	logger *slog.Logger
	buf    bytes.Buffer
}

func (w *slogWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	for {
		line, err := w.buf.ReadString('\n')
		if err != nil {
			w.buf.WriteString(line) // incomplete: wait for the rest
			return len(p), nil
		}
		w.logger.Info("certmagic", "log", strings.TrimSpace(line))
	}
}
