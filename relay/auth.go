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
)

// Authenticator checks HS256 JSON Web Tokens that clients pass as ?jwt=TOKEN
// in the URL they connect to, as moq-relay does. A nil *Authenticator lets
// everyone publish and subscribe everything.
type Authenticator struct {
	key []byte
	now func() time.Time
}

// MinKeyLen is the shortest signing key accepted.
const MinKeyLen = 16

// NewAuthenticator returns an Authenticator that verifies with key.
func NewAuthenticator(key []byte) (*Authenticator, error) {
	if len(key) < MinKeyLen {
		return nil, fmt.Errorf("auth key: %d bytes, want at least %d", len(key), MinKeyLen)
	}
	return &Authenticator{key: bytes.Clone(key), now: time.Now}, nil
}

// LoadAuthKey reads a signing key file: its contents with surrounding
// whitespace removed are the key.
func LoadAuthKey(file string) ([]byte, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("auth key: %w", err)
	}
	key := bytes.TrimSpace(b)
	if len(key) < MinKeyLen {
		return nil, fmt.Errorf("auth key %s: %d bytes, want at least %d", file, len(key), MinKeyLen)
	}
	return key, nil
}

// Claims are the token's claims: broadcast path prefixes the bearer may
// publish (put) and subscribe to (get), and the expiry.
type Claims struct {
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
}

// CanPublish reports whether the session may publish broadcast path.
func (p Permissions) CanPublish(path string) bool { return p.all || anyPrefix(p.publish, path) }

// CanSubscribe reports whether the session may subscribe to broadcast path.
func (p Permissions) CanSubscribe(path string) bool { return p.all || anyPrefix(p.subscribe, path) }

// CanPublishAny reports whether the session may publish anything.
func (p Permissions) CanPublishAny() bool { return p.all || len(p.publish) > 0 }

func anyPrefix(prefixes []string, path string) bool {
	for _, pre := range prefixes {
		if hasPathPrefix(pre, path) {
			return true
		}
	}
	return false
}

// Authorize returns the permissions granted by the ?jwt= token in u.
func (a *Authenticator) Authorize(u *url.URL) (Permissions, error) {
	if a == nil {
		return Permissions{all: true}, nil
	}
	tok := u.Query().Get("jwt")
	if tok == "" {
		return Permissions{}, fmt.Errorf("%w: no token", ErrUnauthorized)
	}
	c, err := a.Verify(tok)
	if err != nil {
		return Permissions{}, err
	}
	p := Permissions{}
	for _, s := range c.Put {
		p.publish = append(p.publish, cleanPath(s))
	}
	for _, s := range c.Get {
		p.subscribe = append(p.subscribe, cleanPath(s))
	}
	return p, nil
}

var b64 = base64.RawURLEncoding

const jwtHeader = `{"alg":"HS256","typ":"JWT"}`

// Sign returns a compact HS256 token for c.
func (a *Authenticator) Sign(c Claims) (string, error) {
	payload, err := json.Marshal(c)
	if err != nil {
		return "", fmt.Errorf("sign token: %w", err)
	}
	signing := b64.EncodeToString([]byte(jwtHeader)) + "." + b64.EncodeToString(payload)
	return signing + "." + b64.EncodeToString(a.mac(signing)), nil
}

func (a *Authenticator) mac(s string) []byte {
	m := hmac.New(sha256.New, a.key)
	m.Write([]byte(s))
	return m.Sum(nil)
}

// Verify checks a token's signature, algorithm and expiry.
func (a *Authenticator) Verify(tok string) (Claims, error) {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return Claims{}, fmt.Errorf("%w: malformed token", ErrUnauthorized)
	}
	sig, err := b64.DecodeString(parts[2])
	if err != nil || !hmac.Equal(sig, a.mac(parts[0]+"."+parts[1])) {
		return Claims{}, fmt.Errorf("%w: bad signature", ErrUnauthorized)
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
	if !hasPublish && !hasSubscribe {
		return "", ErrNoPermission
	}
	now := a.now()
	c := Claims{IssuedAt: now.Unix(), Expires: now.Add(ttl).Unix()}
	if hasPublish {
		c.Put = []string{cleanPath(publish)}
	}
	if hasSubscribe {
		c.Get = []string{cleanPath(subscribe)}
	}
	return a.Sign(c)
}
