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

	"github.com/caddyserver/certmagic"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// ACMEConfig has the relay get and renew its certificate from an ACME CA
// (through certmagic). The CA checks the relay controls Domain with a
// TLS-ALPN-01 challenge on TCP port 443 or an HTTP-01 one on port 80: the
// relay answers either on its own TCP port, so one of them has to reach
// it (listen on :443, or forward port 80 to the relay's port).
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
}

type acmeSource struct {
	domain string
	cache  *certmagic.Cache
	cfg    *certmagic.Config
	issuer *certmagic.ACMEIssuer
}

// startACME obtains the certificate for ac.Domain (or loads it from
// ac.Dir) and keeps it renewed in the background until stop.
func startACME(ctx context.Context, ac ACMEConfig, logger *slog.Logger) (*acmeSource, error) {
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
	})
	cfg.Issuers = []certmagic.Issuer{issuer}
	if err := cfg.ManageSync(ctx, []string{ac.Domain}); err != nil {
		cache.Stop()
		return nil, fmt.Errorf("acme certificate for %s from %s: %w", ac.Domain, ca, err)
	}
	return &acmeSource{domain: ac.Domain, cache: cache, cfg: cfg, issuer: issuer}, nil
}

// certificate is the certificate certmagic serves for the domain now.
func (a *acmeSource) certificate() (*tls.Certificate, error) {
	c, err := a.cfg.GetCertificate(&tls.ClientHelloInfo{ServerName: a.domain})
	if err != nil {
		return nil, fmt.Errorf("acme certificate for %s: %w", a.domain, err)
	}
	return c, nil
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
