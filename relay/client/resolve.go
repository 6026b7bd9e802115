package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/relayfleet/relayfleet/relay/moqlite"
)

// ResolverOptions configures a Resolver: a relay URL, or a router to ask.
type ResolverOptions struct {
	// URL is the relay: #spki=HEX or CertificateHash pins it; otherwise
	// https:// verifies against RootCAs, and http:// pins the hash
	// fetched from the relay (loopback only, unless TrustHTTPHash).
	// Ignored when Router is set.
	URL string
	// Router, if set, is a router base URL: Resolve asks its /route for
	// Broadcast's relay and pins the certificate hash it answers.
	Router        string
	RouterOptions RouterOptions
	// Broadcast is what the router is asked about.
	Broadcast string
	// Token, if set, is presented as ?jwt= on the relay URL.
	Token string
	// TokenSource, if set, is asked for the token at every Resolve, that
	// is at every connection and reconnection, in place of Token: a
	// listener whose token expired (the relay closes it with
	// ReasonTokenExpired) comes back with a fresh one. It may return ""
	// for no token; an error fails the Resolve.
	TokenSource func(ctx context.Context) (string, error)
	// CertificateHash, if set, is the hex SHA-256 URL's certificate
	// must have.
	CertificateHash string
	RootCAs         *x509.CertPool
	TrustHTTPHash   bool
	// HTTPClient fetches certificate hashes; nil means a client with a
	// 10 second timeout.
	HTTPClient *http.Client
}

// Target is where to connect: a resolved relay.
type Target struct {
	// Relay is the relay's URL as given or as the router answered it,
	// without the token: what a reconnect passes as avoid=.
	Relay string
	// URL is Relay with the token, to dial.
	URL string
	// Addr is the relay's UDP address.
	Addr *net.UDPAddr
	// Path is the SETUP path parameter for raw QUIC (path and query).
	Path string
	// TLS verifies the relay (pinned or CA-verified); NextProtos is
	// moq-lite's ALPN.
	TLS *tls.Config
}

// Resolver turns the relay URL, or the router's answer, into a Target. A
// relay is pinned by what the router says (its certificate hash), by the
// URL's #spki= or by CertificateHash; failing those, an https:// relay
// is verified against RootCAs, and an http:// relay's hash is fetched
// from it over plain HTTP (loopback or TrustHTTPHash only), once per
// host, or again for callers that reconnect after it was fetched. It is
// safe for concurrent use, and meant to be shared by many listeners.
type Resolver struct {
	o  ResolverOptions
	hc *http.Client
	rc *RouterClient // nil without a router

	mu     sync.Mutex
	hashes map[string]hashEntry // by host
}

// hashEntry is the outcome of the last certificate hash fetch from a host.
type hashEntry struct {
	hash string
	err  error
	at   time.Time
}

// NewResolver checks o.
func NewResolver(o ResolverOptions) (*Resolver, error) {
	hc := o.HTTPClient
	if hc == nil {
		hc = &http.Client{Timeout: 10 * time.Second}
	}
	r := &Resolver{o: o, hc: hc, hashes: make(map[string]hashEntry)}
	if o.CertificateHash != "" {
		if err := CheckHash(o.CertificateHash); err != nil {
			return nil, fmt.Errorf("certificate hash: %w", err)
		}
	}
	if o.Router != "" {
		rc, err := NewRouterClient(o.Router, o.RouterOptions)
		if err != nil {
			return nil, err
		}
		r.rc = rc
		return r, nil
	}
	u, err := url.Parse(o.URL)
	if err != nil {
		return nil, fmt.Errorf("relay url: %w", err)
	}
	spki, err := URLPin(u)
	if err != nil {
		return nil, fmt.Errorf("relay url: %w", err)
	}
	if u.Scheme == "http" && spki == "" && o.CertificateHash == "" {
		if err := CheckHashFetch(u, o.TrustHTTPHash); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Routed reports whether the resolver asks a router.
func (r *Resolver) Routed() bool { return r.rc != nil }

// Resolve finds the relay; a certificate hash fetch (or failure) from
// before since is not trusted. avoid names relays (Target.Relay) that
// just failed: the router is asked not to answer them; without a router
// it is ignored.
func (r *Resolver) Resolve(ctx context.Context, since time.Time, avoid ...string) (Target, error) {
	raw, hash := r.o.URL, r.o.CertificateHash
	if r.rc != nil {
		d, err := r.rc.RouteAvoiding(ctx, r.o.Broadcast, avoid...)
		if err != nil {
			return Target{}, err
		}
		raw, hash = d.URL, d.CertificateHash
	}
	relayURL := raw
	tok := r.o.Token
	if r.o.TokenSource != nil {
		var err error
		if tok, err = r.o.TokenSource(ctx); err != nil {
			return Target{}, fmt.Errorf("token source: %w", err)
		}
	}
	raw, err := WithToken(raw, tok)
	if err != nil {
		return Target{}, err
	}
	u, err := url.Parse(raw)
	if err != nil {
		return Target{}, fmt.Errorf("relay url: %w", err)
	}
	if u.Port() == "" {
		return Target{}, fmt.Errorf("relay url %s: needs a port", redact(u))
	}
	spki, err := URLPin(u)
	if err != nil {
		return Target{}, fmt.Errorf("relay url: %w", err)
	}
	addr, err := net.ResolveUDPAddr("udp", u.Host)
	if err != nil {
		return Target{}, fmt.Errorf("relay url: %w", err)
	}
	tc := &tls.Config{ServerName: u.Hostname(), RootCAs: r.o.RootCAs, NextProtos: []string{moqlite.ALPN}, MinVersion: tls.VersionTLS13}
	switch u.Scheme {
	case "https":
	case "http":
		if hash == "" && spki == "" {
			if err := CheckHashFetch(u, r.o.TrustHTTPHash); err != nil {
				return Target{}, err
			}
			if hash, err = r.hash(ctx, u, since); err != nil {
				return Target{}, err
			}
		}
	default:
		return Target{}, fmt.Errorf("relay url %s: scheme must be http or https", redact(u))
	}
	if hash != "" || spki != "" {
		Pin(tc, hash, spki)
	}
	path := u.EscapedPath()
	if path == "" {
		path = "/"
	}
	if u.RawQuery != "" {
		path += "?" + u.RawQuery
	}
	return Target{Relay: relayURL, URL: raw, Addr: addr, Path: path, TLS: tc}, nil
}

// hash returns u's host's certificate hash, fetched at or after since: one
// fetch per host, not one per listener, and after a relay restart one per
// crowd of listeners reconnecting to it (a failed fetch is shared too).
func (r *Resolver) hash(ctx context.Context, u *url.URL, since time.Time) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e, ok := r.hashes[u.Host]; ok && (e.err == nil || !since.IsZero()) && !e.at.Before(since) {
		return e.hash, e.err
	}
	at := time.Now()
	h, err := FetchCertificateHash(ctx, u, r.hc)
	if err == nil || ctx.Err() == nil { // not an error of this caller's own
		r.hashes[u.Host] = hashEntry{hash: h, err: err, at: at}
	}
	return h, err
}
