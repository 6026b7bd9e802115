package relay

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/relayfleet/relayfleet/internal/cli"
)

// ServeFlags are the values of relay serve's flags, as given: Config
// checks them and makes the Config they ask for, Run serves it.
type ServeFlags struct {
	Listen                                             string        // --listen HOST:PORT
	CertFile, KeyFile                                  string        // --cert, --key
	TLSKeyFile                                         string        // --tls-key
	ACMEDomain, ACMEEmail, ACMECA, ACMECARoot, ACMEDir string        // --acme-*
	AuthKeyFile                                        string        // --auth-key
	NoAuth                                             bool          // --no-auth: no tokens, on any address
	RevocationFile                                     string        // --revocation-file
	MaxTokenLifetime                                   time.Duration // --max-token-lifetime: 0 means DefaultMaxTokenLifetime
	PublicListen                                       PrefixList
	UDPBuffer                                          string // --udp-buffer: bytes, suffixes KiB, MiB, GiB
	MemoryBudget                                       string // --memory-budget: "" means the cgroup's limit
	LogLevel                                           string
	ResetSecretFile                                    string // --stateless-reset-secret
	Upstream                                           string // --upstream: comma-separated relay URLs

	SendBatch, AckThreshold, ListenerAckThreshold, MaxListeners int
	MaxSessionsPerAddress                                       int    // --max-sessions-per-address: 0 means no cap
	UncappedAddresses                                           string // --uncapped-addresses: comma-separated addresses or prefixes
	PTOAckDelay, AckDelay, ListenerAckDelay                     time.Duration
	ReapAfter, ShutdownGrace, NoticeGrace                       time.Duration
	HeartbeatInterval                                           time.Duration // --heartbeat-interval: 0 means none
	ShedRate                                                    float64
	PTOWaitsForReads, SendQueue, Pprof                          bool
}

// Config checks the flags, in the order relay serve always has, and makes
// the relay's Config, its Logger writing to stderr: bad flag values are
// cli usage errors naming the flag; files that cannot be used (--tls-key,
// --acme-ca-root, --auth-key) are errors.
func (f *ServeFlags) Config(stderr io.Writer) (Config, error) {
	var upstreams []string
	if f.Upstream != "" {
		for _, u := range strings.Split(f.Upstream, ",") {
			if !strings.HasPrefix(u, "https://") && !strings.HasPrefix(u, "http://") {
				return Config{}, cli.Usagef("--upstream %q: want http:// or https:// URLs, comma-separated", f.Upstream)
			}
			if err := CheckUpstream(u); err != nil {
				return Config{}, cli.Usagef("--upstream: %v", err)
			}
			upstreams = append(upstreams, u)
		}
	}
	if f.Listen == "" {
		return Config{}, cli.Usagef("--listen is required (HOST:PORT)")
	}
	host, port, err := net.SplitHostPort(f.Listen)
	if err != nil {
		return Config{}, cli.Usagef("--listen %q: want HOST:PORT", f.Listen)
	} else if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return Config{}, cli.Usagef("--listen %q: port must be a number from 0 to 65535", f.Listen)
	}
	if f.NoAuth && f.AuthKeyFile != "" {
		return Config{}, cli.Usagef("--no-auth and --auth-key exclude each other")
	}
	if f.AuthKeyFile == "" && !f.NoAuth && !loopbackHost(host) {
		return Config{}, cli.Usagef("--listen %q is not a loopback address: without --auth-key any client that reaches it may publish; "+
			"give --auth-key FILE (a token key file: docs/relay.md, Tokens), or --no-auth to accept every publisher", f.Listen)
	}
	if f.RevocationFile != "" && f.AuthKeyFile == "" {
		return Config{}, cli.Usagef("--revocation-file needs --auth-key (without a key there are no tokens to revoke)")
	}
	if len(f.PublicListen) > 0 && f.AuthKeyFile == "" {
		return Config{}, cli.Usagef("--public-listen needs --auth-key (without a key everything is public)")
	}
	if err := f.checkCert(); err != nil {
		return Config{}, err
	}
	buf, err := cli.ParseBytes(f.UDPBuffer, 1<<31-1)
	if err != nil || buf <= 0 {
		return Config{}, cli.Usagef("--udp-buffer %q: want a positive number of bytes", f.UDPBuffer)
	}
	var budget int64
	if f.MemoryBudget != "" {
		b, err := cli.ParseBytes(f.MemoryBudget, 1<<62)
		if err != nil || b <= 0 {
			return Config{}, cli.Usagef("--memory-budget %q: want a positive number of bytes", f.MemoryBudget)
		}
		budget = b
	}
	logger, err := cli.NewLogger(stderr, f.LogLevel)
	if err != nil {
		return Config{}, err
	}
	cfg := Config{
		Listen: f.Listen, UDPBuffer: int(buf), Upstreams: upstreams, Logger: logger,
		MemoryBudget: budget, MaxSessions: f.MaxListeners, MaxSessionsPerAddress: f.MaxSessionsPerAddress, ReapAfter: f.ReapAfter, Pprof: f.Pprof,
		ShedRate: f.ShedRate, ShutdownGrace: f.ShutdownGrace, NoticeGrace: f.NoticeGrace, SendBatch: f.SendBatch,
		AckDelay: f.AckDelay, AckThreshold: f.AckThreshold, PTOAckDelay: f.PTOAckDelay, PTOIgnoresReads: !f.PTOWaitsForReads, SendQueue: f.SendQueue,
		ListenerAckDelay: f.ListenerAckDelay, ListenerAckThreshold: f.ListenerAckThreshold,
		CertFile: f.CertFile, KeyFile: f.KeyFile, HeartbeatInterval: f.HeartbeatInterval,
	}
	// Config: negative asks nothing, or means none; the flags' 0 does.
	if f.ListenerAckDelay == 0 {
		cfg.ListenerAckDelay = -1
	}
	if f.NoticeGrace == 0 {
		cfg.NoticeGrace = -1
	}
	switch hb := f.HeartbeatInterval; {
	case hb == 0:
		cfg.HeartbeatInterval = -1
	case hb < MinHeartbeatInterval:
		return Config{}, cli.Usagef("--heartbeat-interval %s: want 0 (none) or at least %s", hb, MinHeartbeatInterval)
	}
	if f.ShutdownGrace == 0 {
		cfg.ShutdownGrace = -1
	}
	if f.MaxSessionsPerAddress == 0 {
		cfg.MaxSessionsPerAddress = -1
	}
	if cfg.UncappedAddresses, err = ParseAddressList(f.UncappedAddresses); err != nil {
		return Config{}, cli.Usagef("--uncapped-addresses: %v", err)
	}
	if f.ResetSecretFile != "" {
		if cfg.ResetSecret, err = LoadResetSecret(f.ResetSecretFile); err != nil {
			return Config{}, cli.Usagef("--stateless-reset-secret: %v", err)
		}
	}
	if f.TLSKeyFile != "" {
		if cfg.TLSKey, err = LoadTLSKey(f.TLSKeyFile); err != nil {
			return Config{}, fmt.Errorf("--tls-key: %w", err)
		}
	}
	if f.ACMEDomain != "" {
		cfg.ACME = &ACMEConfig{Domain: f.ACMEDomain, Email: f.ACMEEmail, CA: f.ACMECA, Dir: f.ACMEDir}
		if f.ACMECARoot != "" {
			if cfg.ACME.CARoots, err = LoadCertPool(f.ACMECARoot); err != nil {
				return Config{}, fmt.Errorf("--acme-ca-root: %w", err)
			}
		}
	}
	if f.AuthKeyFile != "" {
		auth, err := LoadAuthenticator(f.AuthKeyFile)
		if err != nil {
			return Config{}, err
		}
		maxLife := f.MaxTokenLifetime
		switch {
		case maxLife == 0:
			maxLife = DefaultMaxTokenLifetime
		case maxLife < time.Minute:
			return Config{}, cli.Usagef("--max-token-lifetime %s: want at least 1m", maxLife)
		}
		cfg.Auth = auth.WithPublicListen(f.PublicListen).WithMaxLifetime(maxLife)
	}
	if f.RevocationFile != "" {
		if _, err := LoadRevocations(f.RevocationFile); err != nil {
			return Config{}, fmt.Errorf("--revocation-file: %w", err)
		}
		cfg.RevocationFile = f.RevocationFile
	}
	return cfg, nil
}

// loopbackHost says a --listen host reaches only this machine: a
// loopback address, or localhost. An empty host, an unspecified address
// or any other name may be reached from elsewhere.
func loopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// checkCert checks the certificate flags: --cert with --key; --tls-key
// and --acme-domain exclude each other and them; the other --acme- flags
// need --acme-domain.
func (f *ServeFlags) checkCert() error {
	if (f.CertFile == "") != (f.KeyFile == "") {
		return cli.Usagef("--cert and --key must be given together")
	}
	var modes []string
	if f.CertFile != "" {
		modes = append(modes, "--cert/--key")
	}
	if f.TLSKeyFile != "" {
		modes = append(modes, "--tls-key")
	}
	if f.ACMEDomain != "" {
		modes = append(modes, "--acme-domain")
	}
	if len(modes) > 1 {
		return cli.Usagef("%s exclude each other: give certificate files, a key for self-signed certificates, or an ACME domain", strings.Join(modes, " and "))
	}
	for _, a := range []struct{ name, val string }{
		{"acme-email", f.ACMEEmail}, {"acme-ca", f.ACMECA}, {"acme-ca-root", f.ACMECARoot}, {"acme-dir", f.ACMEDir},
	} {
		if a.val != "" && f.ACMEDomain == "" {
			return cli.Usagef("--%s needs --acme-domain", a.name)
		}
	}
	if d := f.ACMEDomain; d != "" {
		if strings.ContainsAny(d, "/:*@ ") || strings.HasPrefix(d, ".") || strings.HasSuffix(d, ".") || !strings.Contains(d, ".") {
			return cli.Usagef("--acme-domain %q: want a DNS name such as relay.example.com", d)
		}
	}
	if ca := f.ACMECA; ca != "" {
		if u, err := url.Parse(ca); err != nil || u.Scheme != "https" || u.Host == "" {
			return cli.Usagef("--acme-ca %q: want the https:// URL of an ACME directory", ca)
		}
	}
	return nil
}

// Run is relay serve: the relay of f.Config, logging to stderr, until ctx
// ends; SIGHUP re-reads the certificate files.
func (f *ServeFlags) Run(ctx context.Context, stderr io.Writer) error {
	cfg, err := f.Config(stderr)
	if err != nil {
		return err
	}
	logger := cfg.Logger
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	return Run(ctx, cfg, func(r *Relay) {
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-hup:
					if cfg.CertFile == "" {
						logger.Info("SIGHUP: no certificate files to re-read")
						continue
					}
					if err := r.ReloadCertificate(); err == nil {
						logger.Info("SIGHUP: certificate files re-read", "certificate_sha256", r.CertificateHash())
					}
				}
			}
		}()
	})
}

// PrefixList is the value of a repeatable flag of comma-separated
// broadcast path prefixes (relay serve --public-listen): a pflag.Value.
type PrefixList []string

func (p *PrefixList) String() string { return strings.Join(*p, ",") }

// Type names the value in help text.
func (p *PrefixList) Type() string { return "prefixes" }

// Set adds the comma-separated prefixes of v; an empty one is an error.
func (p *PrefixList) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			return errors.New("empty prefix (to make everything public, give \"/\")")
		}
		*p = append(*p, s)
	}
	return nil
}

// LoadAuthenticator reads a key file (LoadAuthKeys) into an
// Authenticator with the default lifetime limit; a file whose every key
// is past its until is an error, since no token could then verify.
func LoadAuthenticator(file string) (*Authenticator, error) {
	keys, err := LoadAuthKeys(file)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	live := false
	for _, k := range keys {
		live = live || k.Until.IsZero() || now.Before(k.Until)
	}
	if !live {
		return nil, fmt.Errorf("auth key %s: every key is past its until time", file)
	}
	return NewAuthenticatorKeys(keys)
}

// LoadCertPool reads the PEM certificates of a file into a pool; a file
// without any is an error.
func LoadCertPool(path string) (*x509.CertPool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("%s: no PEM certificates in it", path)
	}
	return pool, nil
}

// TokenFlags are the values of relay token's flags; Changed says which
// were given (pflag.FlagSet.Changed).
type TokenFlags struct {
	KeyFile, Publish, Subscribe string
	TTL                         time.Duration
	Changed                     func(flag string) bool
}

// Run is relay token: it prints to w a token signed with the first live
// key of KeyFile that may publish under Publish or subscribe under
// Subscribe, whichever was given.
func (f *TokenFlags) Run(w io.Writer) error {
	if f.KeyFile == "" {
		return cli.Usagef("--key is required")
	}
	pub, sub := f.Changed("publish"), f.Changed("subscribe")
	if pub == sub {
		return cli.Usagef("give exactly one of --publish PREFIX or --subscribe PREFIX")
	}
	auth, err := LoadAuthenticator(f.KeyFile)
	if err != nil {
		return err
	}
	if _, err := auth.signingKey(false); err != nil {
		return fmt.Errorf("--key %s: %w", f.KeyFile, err)
	}
	tok, err := auth.NewToken(f.Publish, f.Subscribe, pub, sub, f.TTL)
	if err != nil {
		return err
	}
	fmt.Fprintln(w, tok)
	return nil
}

// Keygen is relay keygen --out FILE: it writes a new ECDSA P-256 key to
// out (WriteTLSKey) and prints its SPKI pin to w; with auth, a new
// Ed25519 token key file instead (WriteAuthKey), and its public line.
func Keygen(out string, auth bool, w io.Writer) error {
	if out == "" {
		return cli.Usagef("--out is required (the FILE to write the key to)")
	}
	if auth {
		pub, err := WriteAuthKey(out)
		if err != nil {
			return fmt.Errorf("--out: %w", err)
		}
		fmt.Fprintln(w, pub)
		return nil
	}
	key, err := WriteTLSKey(out)
	if err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	return WritePin(w, key)
}

// PrintPin is relay pin --tls-key FILE: it prints to w the SPKI pin of
// the key in keyFile.
func PrintPin(keyFile string, w io.Writer) error {
	if keyFile == "" {
		return cli.Usagef("--tls-key is required (the key FILE)")
	}
	key, err := LoadTLSKey(keyFile)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("--tls-key: %s does not exist", keyFile)
		}
		return fmt.Errorf("--tls-key: %w", err)
	}
	return WritePin(w, key)
}

// WritePin writes the SPKI pin of key (SPKIHash), as serve logs it
// (spki_sha256), on a line to w.
func WritePin(w io.Writer, key *ecdsa.PrivateKey) error {
	spki, err := SPKIHash(&key.PublicKey)
	if err != nil {
		return err
	}
	fmt.Fprintln(w, spki)
	return nil
}

// WriteAuthKey writes a new token key file to path (mode 0600, never over
// an existing file): one ed25519-private line, which relay serve
// --auth-key verifies with and relay token signs with. It returns the
// key's ed25519-public line, for a key file that verifies only.
func WriteAuthKey(path string) (string, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return "", err
	}
	k := Key{Private: priv, Public: priv.Public().(ed25519.PublicKey)}
	text := KeyFileFormatLine + "\n# relay token key (relay serve --auth-key, relay token --key): keep it secret\n" + FormatKey(k) + "\n"
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return "", fmt.Errorf("%s already exists; not overwriting it", path)
		}
		return "", err
	}
	if _, err := f.WriteString(text); err != nil {
		f.Close()
		os.Remove(path)
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		os.Remove(path)
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	k.Private = nil
	return FormatKey(k), nil
}

// ParseAddressList reads a comma-separated list of IP addresses and CIDR
// prefixes (--uncapped-addresses): an address is its own /32 or /128.
// Empty means none.
func ParseAddressList(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if a, err := netip.ParseAddr(f); err == nil && a.Zone() == "" {
			a = a.Unmap()
			out = append(out, netip.PrefixFrom(a, a.BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(f)
		if err != nil {
			return nil, fmt.Errorf("%q is not an IP address or CIDR prefix", f)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}
