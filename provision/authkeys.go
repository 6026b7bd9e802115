package provision

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// The fleet's relay token keys are Ed25519 keys. Only the fleet's state
// holds their private halves (the stack secret, FormatAuthKeys); relays
// get the key file BoxKeyFile writes: public keys, which verify tokens
// and cannot sign any, and the link key, which signs an edge's tokens
// towards its origins and which relays grant subscribing only. Only the
// origins' file keeps the link key's public half, which verifies those
// tokens: an edge's (RelayKeyFile) takes none. The line
// formats are relay serve --auth-key's (relay.LoadAuthKeys); this
// package writes and checks them without importing the relay.
const (
	lineFormat      = "format:ed25519" // relay.KeyFileFormatLine
	linePublic      = "ed25519-public"
	linePrivate     = "ed25519-private"
	lineLinkPublic  = "ed25519-link-public"
	lineLinkPrivate = "ed25519-link-private"
)

// AuthKey is one of the fleet's relay token keys, as the fleet's state
// keeps it: an Ed25519 private key and, for an old key kept through a
// rotation, the time it stops verifying.
type AuthKey struct {
	// Seed is the private key's seed (ed25519.SeedSize bytes).
	Seed []byte
	// Link marks the link key: edges sign their upstream tokens with it,
	// and relays let those tokens subscribe and nothing else.
	Link bool
	// Until is when the key stops verifying; zero means it does not
	// expire.
	Until time.Time
}

// Public is the key's public half.
func (k AuthKey) Public() ed25519.PublicKey {
	return ed25519.NewKeyFromSeed(k.Seed).Public().(ed25519.PublicKey)
}

// ID is the key's public name: the first 12 hex digits of the SHA-256 of
// its public key, the same for its private and public lines.
func (k AuthKey) ID() string {
	sum := sha256.Sum256(k.Public())
	return hex.EncodeToString(sum[:])[:12]
}

// Expired reports whether the key has stopped verifying at now.
func (k AuthKey) Expired(now time.Time) bool {
	return !k.Until.IsZero() && !now.Before(k.Until)
}

// ErrNoAuthKey says the fleet has no relay auth key yet.
var ErrNoAuthKey = errors.New("the fleet has no relay auth key yet: run fleet up (or fleet auth rotate) first")

// ErrLegacyAuthKeys says the fleet's state holds the shared HS256 key of
// an earlier relayfleet, which relays no longer take.
var ErrLegacyAuthKeys = errors.New("the fleet's relay auth key is an HS256 key of an earlier relayfleet, which lets every relay mint tokens: fleet up or fleet auth rotate moves the fleet to Ed25519 keys")

// NewAuthKey returns a fresh key (a link key with link).
func NewAuthKey(link bool) (AuthKey, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return AuthKey{}, fmt.Errorf("auth key: %w", err)
	}
	return AuthKey{Seed: priv.Seed(), Link: link}, nil
}

// legacyKeyLen is the shortest HS256 key earlier relayfleets kept: a
// line whose first word is that long and has no type prefix is one.
const legacyKeyLen = 16

// keyLine is one parsed key file line.
type keyLine struct {
	kind  string
	key   []byte
	until time.Time
}

// parseKeyLines reads key file text into its key lines, skipping blank
// lines, comments and the format line. A line whose first field has no
// type prefix and is at least legacyKeyLen bytes is ErrLegacyAuthKeys. Errors name the line, never a key.
func parseKeyLines(what, text string) ([]keyLine, error) {
	var out []keyLine
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") || line == lineFormat {
			continue
		}
		f := strings.Fields(line)
		kind, enc, ok := strings.Cut(f[0], ":")
		switch {
		case !ok && len(f[0]) >= legacyKeyLen:
			return nil, fmt.Errorf("%s line %d: %w", what, i+1, ErrLegacyAuthKeys)
		case !ok:
			return nil, fmt.Errorf("%s line %d: not a key line (want TYPE:BASE64, such as %s:BASE64)", what, i+1, linePrivate)
		}
		switch kind {
		case linePublic, linePrivate, lineLinkPublic, lineLinkPrivate:
		default:
			return nil, fmt.Errorf("%s line %d: unknown key type %q", what, i+1, kind)
		}
		raw, err := base64.StdEncoding.Strict().DecodeString(enc)
		if err != nil || len(raw) != 32 {
			return nil, fmt.Errorf("%s line %d: %s: want the standard base64 of 32 bytes", what, i+1, kind)
		}
		l := keyLine{kind: kind, key: raw}
		for _, attr := range f[1:] {
			v, ok := strings.CutPrefix(attr, "until=")
			if !ok {
				return nil, fmt.Errorf("%s line %d: unknown attribute %q (want until=RFC3339)", what, i+1, strings.SplitN(attr, "=", 2)[0])
			}
			t, err := time.Parse(time.RFC3339, v)
			if err != nil {
				return nil, fmt.Errorf("%s line %d: until=%q is not an RFC 3339 time", what, i+1, v)
			}
			l.until = t.UTC()
		}
		out = append(out, l)
	}
	return out, nil
}

// ParseAuthKeys reads the fleet's state text: one private key per line,
// "ed25519-private:BASE64" or "ed25519-link-private:BASE64", optionally
// followed by "until=RFC3339"; blank lines and lines starting with '#'
// are skipped. State holding the shared HS256 key of an earlier
// relayfleet is ErrLegacyAuthKeys. Errors name the line but never print a
// key.
func ParseAuthKeys(text string) ([]AuthKey, error) {
	lines, err := parseKeyLines("auth keys", text)
	if err != nil {
		return nil, err
	}
	var keys []AuthKey
	for i, l := range lines {
		if l.kind != linePrivate && l.kind != lineLinkPrivate {
			return nil, fmt.Errorf("auth keys: key %d is %s; the fleet's state keeps private keys", i+1, l.kind)
		}
		keys = append(keys, AuthKey{Seed: l.key, Link: l.kind == lineLinkPrivate, Until: l.until})
	}
	return keys, nil
}

// FormatAuthKeys writes keys as the fleet's state text, one private key
// a line.
func FormatAuthKeys(keys []AuthKey) string {
	var b strings.Builder
	for _, k := range keys {
		kind := linePrivate
		if k.Link {
			kind = lineLinkPrivate
		}
		writeLine(&b, kind, k.Seed, k.Until)
	}
	return b.String()
}

func writeLine(b *strings.Builder, kind string, key []byte, until time.Time) {
	b.WriteString(kind + ":" + base64.StdEncoding.EncodeToString(key))
	if !until.IsZero() {
		b.WriteString(" until=" + until.UTC().Format(time.RFC3339))
	}
	b.WriteByte('\n')
}

// PublicKeyFile is the key file of keys' public halves (relay serve
// --auth-key): it verifies the fleet's tokens and its link tokens, and
// signs nothing. fleet auth export writes it.
func PublicKeyFile(keys []AuthKey) string {
	var b strings.Builder
	b.WriteString(lineFormat + "\n# the fleet's relay token keys, public halves: they verify and cannot sign\n")
	for _, k := range keys {
		kind := linePublic
		if k.Link {
			kind = lineLinkPublic
		}
		writeLine(&b, kind, k.Public(), k.Until)
	}
	return b.String()
}

// BoxKeyFile is the key file every relay of the fleet gets: the public
// keys (PublicKeyFile) and the private half of the first link key not
// expired at now, which signs the relay's upstream link tokens. It holds
// no key that can sign a token to publish.
func BoxKeyFile(keys []AuthKey, now time.Time) string {
	var b strings.Builder
	b.WriteString(PublicKeyFile(keys))
	for _, k := range keys {
		if k.Link && !k.Expired(now) {
			writeLine(&b, lineLinkPrivate, k.Seed, k.Until)
			break
		}
	}
	return b.String()
}

// RelayKeyFile is the key file a box's relays get from the fleet's box
// key file (BoxKeyFile): unchanged for a box other relays pull from (an
// origin, origin true), which takes the edges' link tokens; for every
// other box (edges, burst boxes) without its ed25519-link-public lines,
// so its relays refuse link tokens and a link key taken off any box lets
// one listen on the origins only. The private link key stays: it signs
// the box's own tokens towards its upstream.
func RelayKeyFile(box []byte, origin bool) []byte {
	if origin {
		return box
	}
	var b bytes.Buffer
	for _, line := range strings.SplitAfter(string(box), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), lineLinkPublic+":") {
			continue
		}
		b.WriteString(line)
	}
	return b.Bytes()
}

// CheckBoxKeyFile checks a key file bound for a relay: relay key file
// lines with at least one public key, and never a private key that signs
// tokens to publish.
func CheckBoxKeyFile(text string) error {
	lines, err := parseKeyLines("relay key file", text)
	if err != nil {
		return err
	}
	public := false
	for i, l := range lines {
		switch l.kind {
		case linePrivate:
			return fmt.Errorf("relay key file: key %d is a private signing key (ed25519-private), which never goes to a relay", i+1)
		case linePublic:
			public = true
		}
	}
	if !public {
		return errors.New("relay key file: no ed25519-public key")
	}
	return nil
}

// ReadsEd25519KeyFiles reports whether the relay build binary reads the
// key files BoxKeyFile writes: builds before Ed25519 do not know their
// format line (and refuse such a file, as they should).
func ReadsEd25519KeyFiles(binary []byte) bool {
	return bytes.Contains(binary, []byte(lineFormat))
}

// SigningKey is the first key that is not a link key: fleet token signs
// with it. keys are live keys (ActiveAuthKeys), newest first.
func SigningKey(keys []AuthKey) (AuthKey, error) {
	for _, k := range keys {
		if !k.Link {
			return k, nil
		}
	}
	return AuthKey{}, ErrNoAuthKey
}

// ActiveAuthKeys parses text and drops the keys expired at now; the
// first key left that is not a link key is the one that signs. No
// signing key left is ErrNoAuthKey.
func ActiveAuthKeys(text string, now time.Time) ([]AuthKey, error) {
	keys, err := ParseAuthKeys(text)
	if err != nil {
		return nil, err
	}
	var live []AuthKey
	for _, k := range keys {
		if !k.Expired(now) {
			live = append(live, k)
		}
	}
	if _, err := SigningKey(live); err != nil {
		return nil, err
	}
	return live, nil
}

// RotateAuthKeys puts a new signing key and a new link key first and
// keeps the current ones verifying until now+overlap; keys expired at now
// are dropped, and older keys keep their own until (capped at the same
// time). With no current key it returns the new keys alone; so it does
// for state holding an earlier relayfleet's HS256 key, which no relay
// verifies any more (legacy reports it).
func RotateAuthKeys(text string, now time.Time, overlap time.Duration) (keys []AuthKey, until time.Time, legacy bool, err error) {
	sign, err := NewAuthKey(false)
	if err != nil {
		return nil, time.Time{}, false, err
	}
	link, err := NewAuthKey(true)
	if err != nil {
		return nil, time.Time{}, false, err
	}
	old, err := ActiveAuthKeys(text, now)
	switch {
	case errors.Is(err, ErrLegacyAuthKeys):
		old, legacy = nil, true
	case err != nil && !errors.Is(err, ErrNoAuthKey):
		return nil, time.Time{}, false, err
	}
	until = now.Add(overlap).UTC().Truncate(time.Second)
	keys = []AuthKey{sign, link}
	for _, k := range old {
		if !until.After(now) {
			break // no overlap: the old keys stop now
		}
		if k.Until.IsZero() || k.Until.After(until) {
			k.Until = until
		}
		keys = append(keys, k)
	}
	return keys, until, legacy, nil
}

// WriteKeys writes one line per key, never the key itself: its ID, what
// it does (the first signing key signs), and until when it verifies.
func WriteKeys(w io.Writer, keys []AuthKey) {
	signer := true
	for _, k := range keys {
		role := "verifies"
		switch {
		case k.Link:
			role = "link key (subscribe only)"
		case signer:
			role, signer = "signs and verifies", false
		}
		until := "until rotated"
		if !k.Until.IsZero() {
			until = "until " + k.Until.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(w, "key %s  %s, %s\n", k.ID(), role, until)
	}
}
