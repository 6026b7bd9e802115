package relay

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/relayfleet/relayfleet/relay/internal/bpath"
)

// Authenticator checks HS256 JSON Web Tokens that clients pass as ?jwt=TOKEN
// in the URL they connect to, as moq-relay does. A nil *Authenticator lets
// everyone publish and subscribe everything.
//
// It holds one or more keys: the first whose Until has not passed signs,
// and every key whose Until has not passed verifies, so a key file can
// carry the old and the new key while a rotation overlaps. Expiry is
// checked against the clock at each verification: an old key stops
// working at its Until without a restart.
type Authenticator struct {
	keys   []Key
	public []string // broadcast path prefixes anyone may subscribe under
	now    func() time.Time
}

// Key is one signing key. Until, when not zero, is when the key stops
// signing and verifying.
type Key struct {
	Secret []byte
	Until  time.Time
}

// MinKeyLen is the shortest signing key accepted.
const MinKeyLen = 16

// NewAuthenticator returns an Authenticator that verifies with key.
func NewAuthenticator(key []byte) (*Authenticator, error) {
	return NewAuthenticatorKeys([]Key{{Secret: key}})
}

// NewAuthenticatorKeys returns an Authenticator that signs with the first
// of keys still valid and verifies with every key still valid.
func NewAuthenticatorKeys(keys []Key) (*Authenticator, error) {
	if len(keys) == 0 {
		return nil, errors.New("auth key: none given")
	}
	a := &Authenticator{now: time.Now}
	for i, k := range keys {
		if len(k.Secret) < MinKeyLen {
			return nil, fmt.Errorf("auth key %d: %d bytes, want at least %d", i+1, len(k.Secret), MinKeyLen)
		}
		a.keys = append(a.keys, Key{Secret: bytes.Clone(k.Secret), Until: k.Until})
	}
	return a, nil
}

// WithPublicListen returns a copy of a that admits sessions without a
// token and lets every session subscribe (and watch announcements) under
// prefixes, on top of what its token grants. Publishing always needs a
// token.
func (a *Authenticator) WithPublicListen(prefixes []string) *Authenticator {
	b := *a
	b.public = nil
	for _, p := range prefixes {
		b.public = append(b.public, bpath.Clean(p))
	}
	return &b
}

// WithClock returns a copy of a that reads the time from now (tests move
// it forward).
func (a *Authenticator) WithClock(now func() time.Time) *Authenticator {
	b := *a
	b.now = now
	return &b
}

// PublicListen returns the prefixes anyone may subscribe under.
func (a *Authenticator) PublicListen() []string {
	if a == nil {
		return nil
	}
	return append([]string(nil), a.public...)
}

// valid reports whether k may be used at now.
func (k Key) valid(now time.Time) bool { return k.Until.IsZero() || now.Before(k.Until) }

// signingKey is the first key still valid.
func (a *Authenticator) signingKey() ([]byte, error) {
	now := a.now()
	for _, k := range a.keys {
		if k.valid(now) {
			return k.Secret, nil
		}
	}
	return nil, errAllKeysExpired
}

var errAllKeysExpired = errors.New("every auth key is past its until time")

// LoadAuthKeys reads a key file: one key per line, as `KEY` or
// `KEY until=RFC3339`; blank lines and lines starting with '#' are
// ignored. KEY is the text itself (surrounding whitespace removed), at
// least MinKeyLen bytes. A file holding one plain line is one key that
// never expires.
func LoadAuthKeys(file string) ([]Key, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("auth key: %w", err)
	}
	var keys []Key
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		var k Key
		if j := strings.LastIndexAny(line, " \t"); j >= 0 && strings.HasPrefix(line[j+1:], "until=") {
			v := strings.TrimPrefix(line[j+1:], "until=")
			k.Until, err = time.Parse(time.RFC3339, v)
			if err != nil {
				return nil, fmt.Errorf("auth key %s:%d: until=%q is not an RFC 3339 time such as 2026-12-07T12:00:00Z", file, i+1, v)
			}
			line = strings.TrimSpace(line[:j])
		}
		if len(line) < MinKeyLen {
			return nil, fmt.Errorf("auth key %s:%d: key is %d bytes, want at least %d", file, i+1, len(line), MinKeyLen)
		}
		k.Secret = []byte(line)
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("auth key %s: no key in the file", file)
	}
	return keys, nil
}

// LoadAuthKey reads a key file (see LoadAuthKeys) and returns the key that
// signs now: the first whose until has not passed.
func LoadAuthKey(file string) ([]byte, error) {
	keys, err := LoadAuthKeys(file)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	for _, k := range keys {
		if k.valid(now) {
			return k.Secret, nil
		}
	}
	return nil, fmt.Errorf("auth key %s: %w", file, errAllKeysExpired)
}

// Claims are the token's claims: broadcast path prefixes the bearer may
// publish (put) and subscribe to (get), the token's id (jti, which
// revocation names: revoke.go), when it was issued, and the expiry.
type Claims struct {
	ID       string   `json:"jti,omitempty"`
	Put      []string `json:"put,omitempty"`
	Get      []string `json:"get,omitempty"`
	IssuedAt int64    `json:"iat"`
	Expires  int64    `json:"exp"`
}

// Permissions is what one session may do.
type Permissions struct {
	all       bool
	publish   []string
	subscribe []string
	// token is the verified token's claims, nil without a token: its
	// expiry and revocation end the session (expiry.go, revoke.go).
	token *Claims
}

// CanPublish reports whether the session may publish broadcast path;
// nobody may under ReservedPrefix.
func (p Permissions) CanPublish(path string) bool {
	return !Reserved(path) && (p.all || anyPrefix(p.publish, path))
}

// CanSubscribe reports whether the session may subscribe to broadcast
// path; everyone may to HeartbeatPath.
func (p Permissions) CanSubscribe(path string) bool {
	return p.all || path == HeartbeatPath || anyPrefix(p.subscribe, path)
}

// CanPublishAny reports whether the session may publish anything.
func (p Permissions) CanPublishAny() bool { return p.all || len(p.publish) > 0 }

func anyPrefix(prefixes []string, path string) bool {
	for _, pre := range prefixes {
		if bpath.HasPrefix(pre, path) {
			return true
		}
	}
	return false
}

// Authorize returns the permissions granted by the ?jwt= token in u, plus
// the public listen prefixes. Without a token a session gets the public
// prefixes alone, or ErrUnauthorized when there are none; a token that is
// present but does not verify is refused, never downgraded to public.
// A session without a token whose root (u's path) is under ReservedPrefix
// is admitted too, to subscribe to HeartbeatPath (CanSubscribe).
func (a *Authenticator) Authorize(u *url.URL) (Permissions, error) {
	if a == nil {
		return Permissions{all: true}, nil
	}
	p := Permissions{subscribe: append([]string(nil), a.public...)}
	tok := u.Query().Get("jwt")
	if tok == "" {
		if !u.Query().Has("jwt") && (len(a.public) > 0 || Reserved(u.Path)) {
			return p, nil
		}
		return Permissions{}, fmt.Errorf("%w: no token", ErrUnauthorized)
	}
	c, err := a.Verify(tok)
	if err != nil {
		return Permissions{}, err
	}
	for _, s := range c.Put {
		p.publish = append(p.publish, bpath.Clean(s))
	}
	for _, s := range c.Get {
		p.subscribe = append(p.subscribe, bpath.Clean(s))
	}
	p.token = &c
	return p, nil
}

var b64 = base64.RawURLEncoding

const jwtHeader = `{"alg":"HS256","typ":"JWT"}`

// Sign returns a compact HS256 token for c, signed with the signing key
// (the first key still valid).
func (a *Authenticator) Sign(c Claims) (string, error) {
	key, err := a.signingKey()
	if err != nil {
		return "", fmt.Errorf("sign token: %w", err)
	}
	payload, err := json.Marshal(c)
	if err != nil {
		return "", fmt.Errorf("sign token: %w", err)
	}
	signing := b64.EncodeToString([]byte(jwtHeader)) + "." + b64.EncodeToString(payload)
	return signing + "." + b64.EncodeToString(mac(key, signing)), nil
}

func mac(key []byte, s string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(s))
	return m.Sum(nil)
}

// checkSignature finds the key that made sig: an error names a key past
// its until apart from a signature no key made.
func (a *Authenticator) checkSignature(signing string, sig []byte) error {
	now := a.now()
	retired := false
	for _, k := range a.keys {
		if !hmac.Equal(sig, mac(k.Secret, signing)) {
			continue
		}
		if k.valid(now) {
			return nil
		}
		retired = true
	}
	if retired {
		return fmt.Errorf("%w: signed with a key past its until time", ErrUnauthorized)
	}
	return fmt.Errorf("%w: bad signature", ErrUnauthorized)
}

// Verify checks a token's signature (against every key still valid),
// algorithm and expiry.
func (a *Authenticator) Verify(tok string) (Claims, error) {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return Claims{}, fmt.Errorf("%w: malformed token", ErrUnauthorized)
	}
	sig, err := b64.DecodeString(parts[2])
	if err != nil {
		return Claims{}, fmt.Errorf("%w: bad signature", ErrUnauthorized)
	}
	if err := a.checkSignature(parts[0]+"."+parts[1], sig); err != nil {
		return Claims{}, err
	}
	hb, err := b64.DecodeString(parts[0])
	if err != nil {
		return Claims{}, fmt.Errorf("%w: malformed header", ErrUnauthorized)
	}
	var h struct {
		Alg string `json:"alg"`
	}
	if err := json.Unmarshal(hb, &h); err != nil || h.Alg != "HS256" {
		return Claims{}, fmt.Errorf("%w: algorithm must be HS256", ErrUnauthorized)
	}
	pb, err := b64.DecodeString(parts[1])
	if err != nil {
		return Claims{}, fmt.Errorf("%w: malformed claims", ErrUnauthorized)
	}
	var c Claims
	if err := json.Unmarshal(pb, &c); err != nil {
		return Claims{}, fmt.Errorf("%w: malformed claims", ErrUnauthorized)
	}
	if c.Expires == 0 || a.now().Unix() >= c.Expires {
		return Claims{}, fmt.Errorf("%w: token expired", ErrUnauthorized)
	}
	return c, nil
}

// ErrNoPermission is returned by NewToken when neither prefix is given.
var ErrNoPermission = errors.New("token grants nothing")

// NewToken signs a token valid for ttl that lets its bearer publish under
// publish and subscribe under subscribe (either may be empty, not both).
func NewToken(key []byte, publish, subscribe string, hasPublish, hasSubscribe bool, ttl time.Duration) (string, error) {
	a, err := NewAuthenticator(key)
	if err != nil {
		return "", err
	}
	return a.NewToken(publish, subscribe, hasPublish, hasSubscribe, ttl)
}

// NewToken is the package's NewToken signed with a's signing key.
func (a *Authenticator) NewToken(publish, subscribe string, hasPublish, hasSubscribe bool, ttl time.Duration) (string, error) {
	if !hasPublish && !hasSubscribe {
		return "", ErrNoPermission
	}
	now := a.now()
	id, err := NewTokenID()
	if err != nil {
		return "", err
	}
	c := Claims{ID: id, IssuedAt: now.Unix(), Expires: now.Add(ttl).Unix()}
	if hasPublish {
		c.Put = []string{bpath.Clean(publish)}
	}
	if hasSubscribe {
		c.Get = []string{bpath.Clean(subscribe)}
	}
	return a.Sign(c)
}
