package client

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/relayfleet/relayfleet/relay/wire"
)

// Where the client's trust in a relay's certificate comes from, strongest
// first:
//
//   - a pin given by something already trusted: Options.CertificateHash
//     (a router's /route answer, fetched over TLS) or a URL fragment
//     #spki=HEX (the SHA-256 of the certificate's public key, from the
//     fleet's stack or `relay pin`), checked instead of any CA;
//   - an https:// URL: the certificate is verified against the CAs;
//   - an http:// URL: the hash is fetched from /certificate.sha256 over
//     plain HTTP and pinned. Anyone on the path can swap it, so this is
//     done only for loopback hosts, or with Options.TrustHTTPHash.

// ErrHashOverHTTP is returned for an http:// URL to a host that is not
// loopback when no pin is given and Options.TrustHTTPHash is not set.
var ErrHashOverHTTP = errors.New("the certificate hash would come over plain HTTP from a host that is not loopback, so anyone on the path could swap it; pin it (#spki=HEX, a router's answer) or opt in to trusting the network")

// SPKIHash is the lower-case hex SHA-256 of a certificate's
// SubjectPublicKeyInfo: a pin that survives certificate rotation as long
// as the key stays.
func SPKIHash(c *x509.Certificate) string {
	sum := sha256.Sum256(c.RawSubjectPublicKeyInfo)
	return hex.EncodeToString(sum[:])
}

// CheckHash reports whether s is a hex SHA-256 (64 hex digits).
func CheckHash(s string) error {
	if d, err := hex.DecodeString(s); err != nil || len(d) != sha256.Size {
		return fmt.Errorf("want 64 hex digits (a SHA-256), got %.70q", s)
	}
	return nil
}

// URLPin returns the SPKI pin a relay URL carries as its fragment
// (#spki=HEX), or "" without a fragment. Any other fragment is an error.
func URLPin(u *url.URL) (string, error) {
	if u.Fragment == "" {
		return "", nil
	}
	pin, ok := strings.CutPrefix(u.Fragment, "spki=")
	if !ok {
		return "", fmt.Errorf("url fragment #%.40s: want #spki=HEX (the SHA-256 of the certificate's public key)", u.Fragment)
	}
	if err := CheckHash(pin); err != nil {
		return "", fmt.Errorf("url fragment #spki: %w", err)
	}
	return strings.ToLower(pin), nil
}

// IsLoopback reports whether host (a name or an IP, without port) is this
// machine: "localhost" or a loopback address. Names are not resolved.
func IsLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(strings.Trim(host, "[]"))
	return err == nil && ip.Unmap().IsLoopback()
}

// CheckHashFetch returns nil when fetching u's certificate hash over plain
// HTTP is acceptable: u's host is loopback, or trust is set. Otherwise it
// returns an error wrapping ErrHashOverHTTP.
func CheckHashFetch(u *url.URL, trust bool) error {
	if trust || IsLoopback(u.Hostname()) {
		return nil
	}
	return fmt.Errorf("%s://%s: %w", u.Scheme, u.Host, ErrHashOverHTTP)
}

// Pin makes tc accept only a peer whose leaf certificate has the SHA-256
// certHash, or whose public key has the SHA-256 spki (both hex; at least
// one set; with both, both must match), in place of CA verification.
func Pin(tc *tls.Config, certHash, spki string) {
	tc.InsecureSkipVerify = true // replaced by the check below
	tc.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("no certificate")
		}
		leaf := cs.PeerCertificates[0]
		if certHash != "" {
			sum := sha256.Sum256(leaf.Raw)
			if !equalHex(sum[:], certHash) {
				return fmt.Errorf("certificate hash %x does not match the pinned %s", sum, certHash)
			}
		}
		if spki != "" {
			sum := sha256.Sum256(leaf.RawSubjectPublicKeyInfo)
			if !equalHex(sum[:], spki) {
				return fmt.Errorf("certificate public key SHA-256 %x does not match the pinned spki %s", sum, spki)
			}
		}
		if certHash == "" && spki == "" {
			return errors.New("no pin to check the certificate against")
		}
		return nil
	}
}

func equalHex(sum []byte, pin string) bool {
	want, err := hex.DecodeString(pin)
	return err == nil && subtle.ConstantTimeCompare(sum, want) == 1
}

// FetchCertificateHash gets GET http://HOST:PORT/certificate.sha256 for u's
// host, over plain HTTP. Check CheckHashFetch first. hc nil means a client
// with a 10 second timeout.
func FetchCertificateHash(ctx context.Context, u *url.URL, hc *http.Client) (string, error) {
	if hc == nil {
		hc = &http.Client{Timeout: 10 * time.Second}
	}
	cu := url.URL{Scheme: "http", Host: u.Host, Path: "/certificate.sha256"}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, cu.String(), nil)
	if err != nil {
		return "", fmt.Errorf("certificate hash: %w", err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", fmt.Errorf("certificate hash: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if err != nil {
		return "", fmt.Errorf("certificate hash: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("certificate hash: %s", resp.Status)
	}
	h := strings.TrimSpace(string(b))
	if err := CheckHash(h); err != nil {
		return "", fmt.Errorf("certificate hash: not a hex sha-256: %q", h)
	}
	return h, nil
}

// Destination is a router's answer (wire.Route): the relay URL to dial and the SHA-256
// of the relay's current certificate (hex; empty when the router does not
// know it, for an https:// relay with a CA-signed certificate).
type Destination struct {
	URL             string `json:"url"`
	CertificateHash string `json:"certificate_sha256,omitempty"`
	// Region is the relay's region and RegionFallback whether it is not
	// the listener's (wire.Route).
	Region         string `json:"region,omitempty"`
	RegionFallback bool   `json:"region_fallback,omitempty"`
}

// RouterOptions configures a RouterClient.
type RouterOptions struct {
	// SPKI pins the router's TLS certificate by the SHA-256 of its public
	// key (hex; `relay router --tls-key` logs it) in place of CA
	// verification. Only for https:// router URLs.
	SPKI string
	// RootCAs verifies an https:// router without SPKI; nil means the
	// system roots.
	RootCAs *x509.CertPool
	// Insecure allows an http:// router that is not on loopback: its
	// answers, certificate hashes included, then come in clear text and
	// anyone on the path can change them.
	Insecure bool
	// Timeout bounds one request; 0 means 10 seconds.
	Timeout time.Duration
	// Region, optional, is the listener's region, sent as the region=
	// hint: the router prefers that region's relays (else it goes by the
	// client's address).
	Region string
}

// RouterClient asks a router (`relay router`) where a new listener goes.
type RouterClient struct {
	base   string
	region string
	hc     *http.Client
}

// ErrClearTextRouter is returned for an http:// router URL that is not on
// loopback without RouterOptions.Insecure.
var ErrClearTextRouter = errors.New("an http:// router that is not on loopback answers in clear text, so anyone on the path could swap the relay's certificate hash; use https:// or opt in to trusting the network")

// NewRouterClient checks the router's base URL against opts.
func NewRouterClient(routerURL string, opts RouterOptions) (*RouterClient, error) {
	u, err := url.Parse(routerURL)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("router url %q: want http(s)://HOST:PORT", routerURL)
	}
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	tc := &tls.Config{RootCAs: opts.RootCAs, MinVersion: tls.VersionTLS12}
	switch u.Scheme {
	case "https":
		if opts.SPKI != "" {
			if err := CheckHash(opts.SPKI); err != nil {
				return nil, fmt.Errorf("router spki: %w", err)
			}
			Pin(tc, "", strings.ToLower(opts.SPKI))
		}
	case "http":
		if opts.SPKI != "" {
			return nil, fmt.Errorf("router %s: an spki pin needs an https:// router URL", routerURL)
		}
		if !opts.Insecure && !IsLoopback(u.Hostname()) {
			return nil, fmt.Errorf("router %s: %w", routerURL, ErrClearTextRouter)
		}
	default:
		return nil, fmt.Errorf("router url %q: scheme must be https or http", routerURL)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = tc
	return &RouterClient{
		base:   strings.TrimSuffix(routerURL, "/"),
		region: opts.Region,
		hc:     &http.Client{Timeout: timeout, Transport: tr},
	}, nil
}

// Route asks the router for the relay a listener of broadcast should dial.
func (rc *RouterClient) Route(ctx context.Context, broadcast string) (Destination, error) {
	return rc.RouteAvoiding(ctx, broadcast)
}

// RouteAvoiding is Route asking the router not to answer the relays in
// avoid (their URLs as it answered them before, /route?avoid=URL): they
// just failed this listener.
func (rc *RouterClient) RouteAvoiding(ctx context.Context, broadcast string, avoid ...string) (Destination, error) {
	q := url.Values{"broadcast": {broadcast}}
	if rc.region != "" {
		q.Set("region", rc.region)
	}
	for _, a := range avoid {
		q.Add("avoid", a)
	}
	ru := rc.base + "/route?" + q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, ru, nil)
	if err != nil {
		return Destination{}, fmt.Errorf("route: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := rc.hc.Do(req)
	if err != nil {
		return Destination{}, fmt.Errorf("route: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return Destination{}, fmt.Errorf("route: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		err := fmt.Errorf("route: %s: %s", resp.Status, strings.TrimSpace(string(b)))
		if d := retryAfter(resp); d > 0 {
			err = &RetryAfterError{After: d, Err: err}
		}
		return Destination{}, err
	}
	d, err := parseDestination(b)
	if err != nil {
		return Destination{}, fmt.Errorf("route: %w", err)
	}
	return d, nil
}

// RetryAfterError is a router's 503 (or 429) that said when to come
// back: a listener waits After (plus jitter, Backoff.Next) before it asks
// again, in place of a shorter wait of its own.
type RetryAfterError struct {
	After time.Duration
	Err   error
}

func (e *RetryAfterError) Error() string { return e.Err.Error() }
func (e *RetryAfterError) Unwrap() error { return e.Err }

// maxRetryAfter caps the Retry-After a client honours.
const maxRetryAfter = 5 * time.Minute

// retryAfter is a 503 or 429 answer's Retry-After in seconds (an
// HTTP-date is not honoured: a router sends seconds), 0 without one.
func retryAfter(resp *http.Response) time.Duration {
	if resp.StatusCode != http.StatusServiceUnavailable && resp.StatusCode != http.StatusTooManyRequests {
		return 0
	}
	n, err := strconv.Atoi(strings.TrimSpace(resp.Header.Get("Retry-After")))
	if err != nil || n <= 0 {
		return 0
	}
	return min(time.Duration(n)*time.Second, maxRetryAfter)
}

// RetryAfter is the wait err asks for (a RetryAfterError in its chain),
// or 0.
func RetryAfter(err error) time.Duration {
	var ra *RetryAfterError
	if errors.As(err, &ra) {
		return ra.After
	}
	return 0
}

func parseDestination(b []byte) (Destination, error) {
	var rt wire.Route
	if err := json.Unmarshal(b, &rt); err != nil {
		return Destination{}, fmt.Errorf("router answer: %w", err)
	}
	d := Destination{URL: rt.URL, CertificateHash: rt.CertificateSHA256, Region: rt.Region, RegionFallback: rt.RegionFallback}
	u, err := url.Parse(d.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return d, fmt.Errorf("router answer: url %.100q: want an http:// or https:// relay URL", d.URL)
	}
	if d.CertificateHash != "" {
		if err := CheckHash(d.CertificateHash); err != nil {
			return d, fmt.Errorf("router answer: certificate_sha256: %w", err)
		}
	}
	return d, nil
}

// Route asks the router at routerURL for the relay a listener of
// broadcast should dial (see NewRouterClient for opts). Dial the answer
// with DialRoute, or with Dial and Options.CertificateHash set to it.
func Route(ctx context.Context, routerURL, broadcast string, opts RouterOptions) (Destination, error) {
	rc, err := NewRouterClient(routerURL, opts)
	if err != nil {
		return Destination{}, err
	}
	return rc.Route(ctx, broadcast)
}

// DialRoute dials a router's answer: its URL, pinning its certificate hash
// when the router gave one.
func DialRoute(ctx context.Context, d Destination, opts *Options) (*Session, error) {
	o := Options{}
	if opts != nil {
		o = *opts
	}
	if d.CertificateHash != "" {
		o.CertificateHash = d.CertificateHash
	}
	return Dial(ctx, d.URL, &o)
}

// WithToken returns rawURL with ?jwt=tok set, its other query parameters
// and its #fragment (a pin) kept; an empty tok leaves it as it is.
func WithToken(rawURL, tok string) (string, error) {
	if tok == "" {
		return rawURL, nil
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", fmt.Errorf("relay url: %w", err)
	}
	q := u.Query()
	q.Set("jwt", tok)
	u.RawQuery = q.Encode()
	return u.String(), nil
}
