package relay

import (
	"bytes"
	"crypto/ed25519"
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
	"unicode/utf8"

	"github.com/relayfleet/relayfleet/relay/internal/bpath"
)

// Authenticator checks EdDSA (Ed25519) JSON Web Tokens that clients pass
// as ?jwt=TOKEN in the URL they connect to, as moq-relay does. A nil
// *Authenticator lets everyone publish and subscribe everything.
//
// It holds one or more keys. A relay needs public keys only: it verifies
// and cannot sign. A private key (a key file run by hand, the fleet's
// state) signs too: the first private key whose Until has not passed
// signs, and every key whose Until has not passed verifies, so a key file
// can carry the old and the new key while a rotation overlaps. Expiry is
// checked against the clock at each verification: an old key stops
// working at its Until without a restart.
//
// A link key (Key.Link) is an edge's credential towards its origins: the
// tokens it signs may subscribe and nothing else; a token it signed that
// asks to publish is refused. A link key's private half signs only; its
// public half (a Key with Link and no Private: an ed25519-link-public
// line) verifies. The fleet gives the public half to its origins alone,
// which edges pull from, so an edge refuses link tokens and a link key
// taken off a box lets one listen on the origins only, never on an edge.
//
// Every token's lifetime is bounded (WithMaxLifetime, default
// DefaultMaxTokenLifetime): a token whose exp is further than that from
// its iat, or from now, is refused, so no key can hand out a token that
// outlives a rotation by much.
type Authenticator struct {
	keys        []Key
	public      []string // broadcast path prefixes anyone may subscribe under
	now         func() time.Time
	maxLifetime time.Duration
}

// DefaultMaxTokenLifetime is the longest token lifetime (exp - iat) a
// relay accepts unless told otherwise (relay serve --max-token-lifetime).
const DefaultMaxTokenLifetime = 24 * time.Hour

// Key is one Ed25519 key of a key file. Public verifies; Private, when
// set, signs. Until, when not zero, is when the key stops signing and
// verifying.
type Key struct {
	Public  ed25519.PublicKey
	Private ed25519.PrivateKey
	// Link marks a link key: tokens it signs grant subscribing only.
	Link bool
	// HS256, when set, is a shared HS256 secret from a key file of an
	// earlier relayfleet (see ParseKeyFile), in place of an Ed25519 key:
	// it signs and verifies HS256 tokens, so whoever holds it can mint
	// them. Only for moving a fleet to Ed25519.
	HS256 []byte
	Until time.Time
}

// NewAuthenticator returns an Authenticator that signs and verifies with
// the Ed25519 private key priv: its seed (ed25519.SeedSize bytes) or the
// whole key (ed25519.PrivateKeySize bytes).
func NewAuthenticator(priv []byte) (*Authenticator, error) {
	k, err := privateKey(priv)
	if err != nil {
		return nil, err
	}
	return NewAuthenticatorKeys([]Key{{Private: k}})
}

// privateKey is the Ed25519 private key of a seed or a whole key.
func privateKey(b []byte) (ed25519.PrivateKey, error) {
	switch len(b) {
	case ed25519.SeedSize:
		return ed25519.NewKeyFromSeed(b), nil
	case ed25519.PrivateKeySize:
		k := ed25519.NewKeyFromSeed(b[:ed25519.SeedSize])
		if !bytes.Equal(k, b) {
			return nil, errors.New("auth key: the Ed25519 private key's public half does not match its seed")
		}
		return k, nil
	}
	return nil, fmt.Errorf("auth key: %d bytes, want an Ed25519 seed (%d bytes) or private key (%d bytes)", len(b), ed25519.SeedSize, ed25519.PrivateKeySize)
}

// NewAuthenticatorKeys returns an Authenticator that signs with the first
// private key of keys still valid and verifies with every key still
// valid. A key with Private set and no Public gets its public half.
func NewAuthenticatorKeys(keys []Key) (*Authenticator, error) {
	if len(keys) == 0 {
		return nil, errors.New("auth key: none given")
	}
	a := &Authenticator{now: time.Now, maxLifetime: DefaultMaxTokenLifetime}
	for i, k := range keys {
		if k.HS256 != nil {
			if len(k.HS256) < legacyKeyLen || k.Private != nil || k.Public != nil || k.Link {
				return nil, fmt.Errorf("auth key %d: an HS256 key is a secret of at least %d bytes, and nothing else", i+1, legacyKeyLen)
			}
			k.HS256 = bytes.Clone(k.HS256)
			a.keys = append(a.keys, k)
			continue
		}
		if k.Private != nil {
			priv, err := privateKey(k.Private)
			if err != nil {
				return nil, fmt.Errorf("auth key %d: %w", i+1, err)
			}
			pub := priv.Public().(ed25519.PublicKey)
			if k.Public != nil && !bytes.Equal(k.Public, pub) {
				return nil, fmt.Errorf("auth key %d: public key does not match the private key", i+1)
			}
			k.Private, k.Public = priv, pub
		}
		if len(k.Public) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("auth key %d: public key is %d bytes, want %d", i+1, len(k.Public), ed25519.PublicKeySize)
		}
		k.Public = bytes.Clone(k.Public)
		a.keys = append(a.keys, k)
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

// WithMaxLifetime returns a copy of a that refuses tokens whose lifetime
// (exp - iat, and exp - now) exceeds d.
func (a *Authenticator) WithMaxLifetime(d time.Duration) *Authenticator {
	b := *a
	b.maxLifetime = d
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

// signingKey is the first key still valid that signs (a private key or
// an HS256 secret) and is a link key (link) or not.
func (a *Authenticator) signingKey(link bool) (Key, error) {
	now := a.now()
	some := false
	for _, k := range a.keys {
		if k.Private == nil && k.HS256 == nil || k.Link != link {
			continue
		}
		some = true
		if k.valid(now) {
			return k, nil
		}
	}
	if !some {
		return Key{}, ErrNoPrivateKey
	}
	return Key{}, errAllKeysExpired
}

// HasHS256 reports whether a holds an HS256 key of an earlier relayfleet,
// which lets whoever reads the key file mint tokens.
func (a *Authenticator) HasHS256() bool {
	if a == nil {
		return false
	}
	for _, k := range a.keys {
		if k.HS256 != nil {
			return true
		}
	}
	return false
}

// CanSign reports whether a holds a private key that signs now.
func (a *Authenticator) CanSign() bool {
	_, err := a.signingKey(false)
	return err == nil
}

var errAllKeysExpired = errors.New("every auth key is past its until time")

// ErrNoPrivateKey says a key file holds public keys only: it verifies
// tokens and cannot sign them.
var ErrNoPrivateKey = errors.New("no private key: a key file of public keys verifies tokens and cannot sign them (sign with the file that holds the ed25519-private line, or fleet token)")

// Key file lines. Each is PREFIX:BASE64 (standard base64 of 32 bytes:
// the public key, or the private key's seed), optionally followed by
// until=RFC3339.
const (
	KeyLinePublic      = "ed25519-public"
	KeyLinePrivate     = "ed25519-private"
	KeyLineLinkPublic  = "ed25519-link-public"
	KeyLineLinkPrivate = "ed25519-link-private"
)

// KeyFileFormatLine may open a key file (fleet files do). It is shorter
// than the 16 bytes relays before Ed25519 wanted of a key, so they refuse
// such a file instead of taking its lines for HMAC secrets.
const KeyFileFormatLine = "format:ed25519"

// keyFileHelp says how to make a key file; errors about one end with it.
const keyFileHelp = "want lines ed25519-public:BASE64 or ed25519-private:BASE64, each optionally followed by until=RFC3339 (make one with relay keygen --auth --out FILE, or fleet auth export)"

// FormatKey is k as a key file line: its private half when it has one.
func FormatKey(k Key) string {
	var s string
	switch {
	case k.Private != nil && k.Link:
		s = KeyLineLinkPrivate + ":" + base64.StdEncoding.EncodeToString(k.Private.Seed())
	case k.Private != nil:
		s = KeyLinePrivate + ":" + base64.StdEncoding.EncodeToString(k.Private.Seed())
	case k.Link:
		s = KeyLineLinkPublic + ":" + base64.StdEncoding.EncodeToString(k.Public)
	default:
		s = KeyLinePublic + ":" + base64.StdEncoding.EncodeToString(k.Public)
	}
	if !k.Until.IsZero() {
		s += " until=" + k.Until.UTC().Format(time.RFC3339)
	}
	return s
}

// ParseKeyLine reads one key file line (not blank, not a comment). Its
// errors never quote the key.
func ParseKeyLine(line string) (Key, error) {
	f := strings.Fields(line)
	if len(f) == 0 {
		return Key{}, errors.New("empty line")
	}
	kind, enc, ok := strings.Cut(f[0], ":")
	if !ok {
		return Key{}, errors.New("not a key line")
	}
	var k Key
	switch kind {
	case KeyLinePublic, KeyLinePrivate, KeyLineLinkPublic, KeyLineLinkPrivate:
	default:
		return Key{}, fmt.Errorf("unknown key type %q", truncate(kind, 32))
	}
	raw, err := base64.StdEncoding.Strict().DecodeString(enc)
	if err != nil {
		return Key{}, fmt.Errorf("%s: the key is not standard base64", kind)
	}
	if len(raw) != 32 {
		return Key{}, fmt.Errorf("%s: the key is %d bytes, want 32", kind, len(raw))
	}
	k.Link = kind == KeyLineLinkPublic || kind == KeyLineLinkPrivate
	if kind == KeyLinePrivate || kind == KeyLineLinkPrivate {
		k.Private = ed25519.NewKeyFromSeed(raw)
		k.Public = k.Private.Public().(ed25519.PublicKey)
	} else {
		k.Public = ed25519.PublicKey(raw)
	}
	for _, attr := range f[1:] {
		v, ok := strings.CutPrefix(attr, "until=")
		if !ok {
			return Key{}, fmt.Errorf("unknown attribute %q (want until=RFC3339)", truncate(strings.SplitN(attr, "=", 2)[0], 32))
		}
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return Key{}, fmt.Errorf("until=%q is not an RFC 3339 time such as 2026-12-07T12:00:00Z", truncate(v, 40))
		}
		k.Until = t.UTC()
	}
	return k, nil
}

// truncate is s cut to n bytes, for quoting input in errors.
func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// ParseKeyFile reads key file text (see LoadAuthKeys); name is the file
// for errors.
func ParseKeyFile(name string, b []byte) ([]Key, error) {
	if !utf8.Valid(b) {
		return nil, fmt.Errorf("auth key %s: not a text key file (raw bytes?); %s", name, keyFileHelp)
	}
	if keys, ok := parseLegacyKeyFile(string(b)); ok {
		return keys, nil
	}
	var keys []Key
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") || line == KeyFileFormatLine {
			continue
		}
		k, err := ParseKeyLine(line)
		if err != nil {
			return nil, fmt.Errorf("auth key %s:%d: %v; %s", name, i+1, err, keyFileHelp)
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("auth key %s: no key in the file; %s", name, keyFileHelp)
	}
	return keys, nil
}

// legacyKeyLen is the shortest HS256 secret earlier relayfleets took.
const legacyKeyLen = 16

// parseLegacyKeyFile reads a key file exactly as earlier fleets wrote
// it: every key line `SECRET` or `SECRET until=RFC3339`, SECRET at least
// legacyKeyLen characters of base64url (A-Z a-z 0-9 - _). Such a file is
// HS256 keys (Key.HS256), read so that a fleet can roll this build out
// before it moves to Ed25519 keys; anything else is not one.
func parseLegacyKeyFile(text string) ([]Key, bool) {
	var keys []Key
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) > 2 || len(f[0]) < legacyKeyLen || strings.Trim(f[0], "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") != "" {
			return nil, false
		}
		k := Key{HS256: []byte(f[0])}
		if len(f) == 2 {
			v, ok := strings.CutPrefix(f[1], "until=")
			t, err := time.Parse(time.RFC3339, v)
			if !ok || err != nil {
				return nil, false
			}
			k.Until = t.UTC()
		}
		keys = append(keys, k)
	}
	return keys, len(keys) > 0
}

// LoadAuthKeys reads a key file: one key per line,
//
//	ed25519-public:BASE64 [until=RFC3339]        verifies tokens
//	ed25519-private:BASE64 [until=RFC3339]       signs and verifies them
//	ed25519-link-public:BASE64 [until=RFC3339]   verifies link tokens (subscribe only)
//	ed25519-link-private:BASE64 [until=RFC3339]  signs this relay's link tokens, verifies none
//
// where BASE64 is the standard base64 of 32 bytes (the public key, or the
// private key's seed); blank lines, lines starting with '#' and the line
// KeyFileFormatLine are ignored. Anything else is refused with an error that names the file
// and line (never the key) and says how to make one.
func LoadAuthKeys(file string) ([]Key, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("auth key: %w", err)
	}
	return ParseKeyFile(file, b)
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
	// Link marks an upstream link's token (signLink): one that a link
	// key verified, or that the relay's signing key made for its own link.
	// Its session outlives the token's expiry (it was checked when the
	// link was dialled; the next dial signs a fresh one), so that an edge
	// does not drop every broadcast it pulls once an hour.
	Link bool `json:"lnk,omitempty"`
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

const jwtHeader = `{"alg":"EdDSA","typ":"JWT"}`

// Sign returns a compact EdDSA token for c, signed with the signing key
// (the first private key still valid that is not a link key).
func (a *Authenticator) Sign(c Claims) (string, error) {
	key, err := a.signingKey(false)
	if err != nil {
		return "", fmt.Errorf("sign token: %w", err)
	}
	return sign(key, c)
}

// signLink returns a token for c signed with the first link key still
// valid, else with the signing key; a relay's upstream links use it.
func (a *Authenticator) signLink(c Claims) (string, error) {
	key, err := a.linkKey()
	if err != nil {
		return "", fmt.Errorf("sign link token: %w", err)
	}
	return sign(key, c)
}

// linkKey is the key that signs upstream links' tokens: the first link
// key still valid, else the signing key.
func (a *Authenticator) linkKey() (Key, error) {
	key, err := a.signingKey(true)
	if err != nil {
		key, err = a.signingKey(false)
	}
	return key, err
}

// sign makes the token for c with key: EdDSA, or HS256 with an HS256
// key.
func sign(key Key, c Claims) (string, error) {
	payload, err := json.Marshal(c)
	if err != nil {
		return "", fmt.Errorf("sign token: %w", err)
	}
	if key.HS256 != nil {
		signing := b64.EncodeToString([]byte(hs256Header)) + "." + b64.EncodeToString(payload)
		return signing + "." + b64.EncodeToString(hs256(key.HS256, signing)), nil
	}
	signing := b64.EncodeToString([]byte(jwtHeader)) + "." + b64.EncodeToString(payload)
	return signing + "." + b64.EncodeToString(ed25519.Sign(key.Private, []byte(signing))), nil
}

const hs256Header = `{"alg":"HS256","typ":"JWT"}`

func hs256(key []byte, s string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(s))
	return m.Sum(nil)
}

// checkSignature finds the key that made sig: an error names a key past
// its until, and a link key whose public half a lacks (a relay that is
// no origin), apart from a signature no key made.
func (a *Authenticator) checkSignature(signing string, sig []byte) (Key, error) {
	now := a.now()
	retired := false
	for _, k := range a.keys {
		switch {
		case k.HS256 != nil:
			if !hmac.Equal(sig, hs256(k.HS256, signing)) {
				continue
			}
		case len(sig) != ed25519.SignatureSize || !ed25519.Verify(k.Public, []byte(signing), sig):
			continue
		}
		if k.Link && k.Private != nil {
			// A link key's private half signs the relay's own links
			// and verifies nothing: without its public half beside it
			// (an origin's), this relay takes no link token.
			if !a.verifiesLink(k.Public) {
				return Key{}, fmt.Errorf("%w: %s", ErrUnauthorized, errLinkRefused)
			}
			continue
		}
		if k.valid(now) {
			return k, nil
		}
		retired = true
	}
	if retired {
		return Key{}, fmt.Errorf("%w: signed with a key past its until time", ErrUnauthorized)
	}
	return Key{}, fmt.Errorf("%w: bad signature", ErrUnauthorized)
}

// errLinkRefused says why a relay that is no origin refused a link
// key's token.
const errLinkRefused = "signed with a link key, which only origins take (their key file has its ed25519-link-public line)"

// verifiesLink reports whether a holds pub as a link key's public half,
// which verifies link tokens.
func (a *Authenticator) verifiesLink(pub ed25519.PublicKey) bool {
	for _, k := range a.keys {
		if k.Link && k.Private == nil && bytes.Equal(k.Public, pub) {
			return true
		}
	}
	return false
}

// Verify checks a token's signature (against every key still valid)
// before it reads anything else, then its algorithm, expiry and lifetime;
// a token signed with a link key may subscribe only, and only where the
// relay holds the link key's public half (an origin).
func (a *Authenticator) Verify(tok string) (Claims, error) {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return Claims{}, fmt.Errorf("%w: malformed token", ErrUnauthorized)
	}
	sig, err := b64.DecodeString(parts[2])
	if err != nil {
		return Claims{}, fmt.Errorf("%w: bad signature", ErrUnauthorized)
	}
	key, err := a.checkSignature(parts[0]+"."+parts[1], sig)
	if err != nil {
		return Claims{}, err
	}
	hb, err := b64.DecodeString(parts[0])
	if err != nil {
		return Claims{}, fmt.Errorf("%w: malformed header", ErrUnauthorized)
	}
	var h struct {
		Alg string `json:"alg"`
	}
	alg := "EdDSA"
	if key.HS256 != nil {
		alg = "HS256"
	}
	if err := json.Unmarshal(hb, &h); err != nil || h.Alg != alg {
		return Claims{}, fmt.Errorf("%w: algorithm must be %s", ErrUnauthorized, alg)
	}
	pb, err := b64.DecodeString(parts[1])
	if err != nil {
		return Claims{}, fmt.Errorf("%w: malformed claims", ErrUnauthorized)
	}
	var c Claims
	if err := json.Unmarshal(pb, &c); err != nil {
		return Claims{}, fmt.Errorf("%w: malformed claims", ErrUnauthorized)
	}
	now := a.now().Unix()
	if c.Expires == 0 || now >= c.Expires {
		return Claims{}, fmt.Errorf("%w: token expired", ErrUnauthorized)
	}
	if err := a.checkLifetime(c, now); err != nil {
		return Claims{}, err
	}
	if key.Link && len(c.Put) > 0 {
		return Claims{}, fmt.Errorf("%w: a link key's token may only subscribe", ErrUnauthorized)
	}
	if c.Link && len(c.Put) > 0 {
		return Claims{}, fmt.Errorf("%w: a link token may only subscribe", ErrUnauthorized)
	}
	c.Link = c.Link || key.Link
	return c, nil
}

// checkLifetime refuses claims that stay valid longer than the maximum:
// from their iat, and from now (an iat in the future does not stretch
// it).
func (a *Authenticator) checkLifetime(c Claims, now int64) error {
	maxSec := int64(a.maxLifetime / time.Second)
	if a.maxLifetime <= 0 {
		return nil
	}
	if c.Expires-now > maxSec || (c.IssuedAt != 0 && c.Expires-c.IssuedAt > maxSec) {
		return fmt.Errorf("%w: token lifetime exceeds the relay's maximum of %s", ErrUnauthorized, a.maxLifetime)
	}
	return nil
}

// ErrNoPermission is returned by NewToken when neither prefix is given.
var ErrNoPermission = errors.New("token grants nothing")

// NewToken signs, with the Ed25519 private key key (a seed or a whole
// key), a token valid for ttl that lets its bearer publish under publish
// and subscribe under subscribe (either may be empty, not both).
func NewToken(key []byte, publish, subscribe string, hasPublish, hasSubscribe bool, ttl time.Duration) (string, error) {
	a, err := NewAuthenticator(key)
	if err != nil {
		return "", err
	}
	return a.NewToken(publish, subscribe, hasPublish, hasSubscribe, ttl)
}

// NewToken is the package's NewToken signed with a's signing key; the
// token gets a random id (jti).
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
