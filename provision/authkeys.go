package provision

import (
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

// AuthKey is one line of the fleet's relay auth key file (relay serve
// --auth-key): a signing key and, for an old key kept through a rotation,
// the time it stops verifying.
type AuthKey struct {
	// Secret is the key: the line's text bytes (base64url of 32 random
	// bytes for keys the fleet makes).
	Secret string
	// Until is when the key stops verifying; zero means it does not
	// expire.
	Until time.Time
}

// ID is the key's public name: the first 12 hex digits of its SHA-256.
// It tells keys apart in output without saying anything about them.
func (k AuthKey) ID() string {
	sum := sha256.Sum256([]byte(k.Secret))
	return hex.EncodeToString(sum[:])[:12]
}

// Expired reports whether the key has stopped verifying at now.
func (k AuthKey) Expired(now time.Time) bool {
	return !k.Until.IsZero() && !now.Before(k.Until)
}

// MinAuthKeyLen is the shortest key the relay accepts (relay.MinKeyLen).
const MinAuthKeyLen = 16

// ErrNoAuthKey says the fleet has no relay auth key yet.
var ErrNoAuthKey = errors.New("the fleet has no relay auth key yet: run fleet up (or fleet auth rotate) first")

// NewAuthKey returns a fresh key: 32 random bytes as base64url text.
func NewAuthKey() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("auth key: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// ParseAuthKeys reads key file text: one key per line, "KEY" or
// "KEY until=RFC3339"; blank lines and lines starting with '#' are
// skipped. Errors name the line but never print a key.
func ParseAuthKeys(text string) ([]AuthKey, error) {
	var keys []AuthKey
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		k := AuthKey{Secret: f[0]}
		if len(k.Secret) < MinAuthKeyLen {
			return nil, fmt.Errorf("auth keys line %d: the key is %d bytes, want at least %d", i+1, len(k.Secret), MinAuthKeyLen)
		}
		for _, attr := range f[1:] {
			v, ok := strings.CutPrefix(attr, "until=")
			if !ok {
				return nil, fmt.Errorf("auth keys line %d: unknown attribute %q (want until=RFC3339)", i+1, strings.SplitN(attr, "=", 2)[0])
			}
			t, err := time.Parse(time.RFC3339, v)
			if err != nil {
				return nil, fmt.Errorf("auth keys line %d: until=%q is not an RFC 3339 time", i+1, v)
			}
			k.Until = t.UTC()
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// FormatAuthKeys writes keys as key file text, one line each.
func FormatAuthKeys(keys []AuthKey) string {
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k.Secret)
		if !k.Until.IsZero() {
			b.WriteString(" until=" + k.Until.UTC().Format(time.RFC3339))
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// ActiveAuthKeys parses text and drops the keys expired at now; the
// first key left is the one that signs. No key left is ErrNoAuthKey.
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
	if len(live) == 0 {
		return nil, ErrNoAuthKey
	}
	return live, nil
}

// RotateAuthKeys puts a new signing key first and keeps the current
// signing key verifying until now+overlap; keys expired at now are
// dropped, and older keys keep their own until (capped at the same time).
// With no current key it returns the new key alone.
func RotateAuthKeys(text string, now time.Time, overlap time.Duration) (keys []AuthKey, until time.Time, err error) {
	fresh, err := NewAuthKey()
	if err != nil {
		return nil, time.Time{}, err
	}
	old, err := ActiveAuthKeys(text, now)
	if err != nil && !errors.Is(err, ErrNoAuthKey) {
		return nil, time.Time{}, err
	}
	until = now.Add(overlap).UTC().Truncate(time.Second)
	keys = []AuthKey{{Secret: fresh}}
	for _, k := range old {
		if !until.After(now) {
			break // no overlap: the old keys stop now
		}
		if k.Until.IsZero() || k.Until.After(until) {
			k.Until = until
		}
		keys = append(keys, k)
	}
	return keys, until, nil
}

// WriteKeys writes one line per key, never the key itself: its ID, what
// it does (the first signs), and until when it verifies.
func WriteKeys(w io.Writer, keys []AuthKey) {
	for i, k := range keys {
		role := "verifies"
		if i == 0 {
			role = "signs and verifies"
		}
		until := "until rotated"
		if !k.Until.IsZero() {
			until = "until " + k.Until.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(w, "key %s  %s, %s\n", k.ID(), role, until)
	}
}
