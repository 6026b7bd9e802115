package relay

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/relayfleet/relayfleet/relay/internal/bpath"
)

// Revocation: a relay run with a revocation file (Config.RevocationFile,
// relay serve --revocation-file) re-reads it when it changes (polled every
// second), closes the live sessions whose token it names with
// codeUnauthorized and reason "token revoked", and refuses new sessions
// with such a token. fleet token revoke writes the file onto every box of
// the fleet over SSH. The file is text, one entry a line ('#' starts a
// comment line):
//
//	jti=ID until=RFC3339
//	prefix=PATH issued-before=RFC3339 until=RFC3339
//
// jti= names one token by its id (Claims.ID). prefix= names every token
// issued at or before issued-before one of whose grants (put or get) lies
// at or below PATH: tokens minted after it work again. An entry stops
// counting at until, when the tokens it names can no longer verify
// anyway (their longest lifetime has passed), so the file never needs
// more than the revocations of the last token lifetime.

// DefaultRevocationPoll is how often a relay looks at its revocation file.
const DefaultRevocationPoll = time.Second

// reasonRevoked and reasonExpired are the close reasons of sessions whose
// token was revoked or expired.
const (
	reasonRevoked = "token revoked"
	reasonExpired = "token expired"
)

// Revocation is one entry of a revocation file: ID or Prefix.
type Revocation struct {
	// ID is a token id (jti); empty for a prefix entry.
	ID string
	// Prefix is a broadcast path prefix (without ID): tokens issued at or
	// before IssuedBefore granting anything at or below it are revoked.
	Prefix       string
	IssuedBefore time.Time
	// Until is when the entry stops counting.
	Until time.Time
}

// Revocations is a parsed revocation file. The zero value revokes
// nothing.
type Revocations struct {
	entries []Revocation
}

// Len is the number of entries.
func (r *Revocations) Len() int {
	if r == nil {
		return 0
	}
	return len(r.entries)
}

// ParseRevocations reads revocation file text (see above); name names the
// file in errors.
func ParseRevocations(name string, b []byte) (*Revocations, error) {
	r := &Revocations{}
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		var e Revocation
		var hasPrefix bool
		for _, f := range strings.Fields(line) {
			k, v, ok := strings.Cut(f, "=")
			if !ok || v == "" {
				return nil, fmt.Errorf("revocation file %s:%d: %q is not KEY=VALUE", name, i+1, f)
			}
			var err error
			switch k {
			case "jti":
				e.ID = v
			case "prefix":
				e.Prefix, hasPrefix = bpath.Clean(v), true
			case "issued-before":
				e.IssuedBefore, err = time.Parse(time.RFC3339, v)
			case "until":
				e.Until, err = time.Parse(time.RFC3339, v)
			default:
				return nil, fmt.Errorf("revocation file %s:%d: unknown key %q (want jti, prefix, issued-before, until)", name, i+1, k)
			}
			if err != nil {
				return nil, fmt.Errorf("revocation file %s:%d: %s=%q is not an RFC 3339 time such as 2026-12-07T12:00:00Z", name, i+1, k, v)
			}
		}
		switch {
		case (e.ID == "") == !hasPrefix:
			return nil, fmt.Errorf("revocation file %s:%d: want exactly one of jti= or prefix=", name, i+1)
		case hasPrefix && e.Prefix == "":
			return nil, fmt.Errorf("revocation file %s:%d: prefix= names every path; want a broadcast path prefix", name, i+1)
		case hasPrefix && e.IssuedBefore.IsZero():
			return nil, fmt.Errorf("revocation file %s:%d: prefix= needs issued-before=RFC3339", name, i+1)
		case e.Until.IsZero():
			return nil, fmt.Errorf("revocation file %s:%d: until=RFC3339 is missing", name, i+1)
		}
		r.entries = append(r.entries, e)
	}
	return r, nil
}

// LoadRevocations reads a revocation file; a file that does not exist
// revokes nothing.
func LoadRevocations(file string) (*Revocations, error) {
	b, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return &Revocations{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("revocation file: %w", err)
	}
	return ParseRevocations(file, b)
}

// Revokes reports whether an entry still counting at now names the
// token c.
func (r *Revocations) Revokes(c *Claims, now time.Time) bool {
	if r == nil || c == nil {
		return false
	}
	for _, e := range r.entries {
		if !now.Before(e.Until) {
			continue
		}
		if e.ID != "" {
			if c.ID == e.ID {
				return true
			}
			continue
		}
		if c.IssuedAt > e.IssuedBefore.Unix() {
			continue
		}
		for _, grants := range [][]string{c.Put, c.Get} {
			for _, g := range grants {
				if bpath.HasPrefix(e.Prefix, bpath.Clean(g)) {
					return true
				}
			}
		}
	}
	return false
}

// NewTokenID returns a fresh token id: 16 random bytes, base64url.
func NewTokenID() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("token id: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// revoked reports whether the server's revocations name perms' token.
func (s *Server) revoked(perms Permissions) bool {
	if perms.token == nil {
		return false
	}
	return s.revocations.Load().Revokes(perms.token, s.clock())
}

// clock is the time tokens are judged by: the authenticator's.
func (s *Server) clock() time.Time {
	if s.auth != nil {
		return s.auth.now()
	}
	return time.Now()
}

// SetRevocations makes r the server's revocations: sessions whose token
// it names are closed now (code unauthorized, reason "token revoked"),
// and new ones refused. It returns how many it closed.
func (s *Server) SetRevocations(r *Revocations) int {
	s.revocations.Store(r)
	s.mu.Lock()
	var doomed []*session
	for sess := range s.sessions {
		if s.revoked(sess.perms) {
			doomed = append(doomed, sess)
		}
	}
	s.mu.Unlock()
	for _, sess := range doomed {
		sess.closeWith(codeUnauthorized, reasonRevoked)
	}
	return len(doomed)
}

// closeWith ends the session with code and reason: the first close is the
// one the peer sees.
func (sess *session) closeWith(code uint64, reason string) {
	_ = sess.t.CloseWithError(code, reason)
	sess.cancel()
}

// RunRevocations watches file until ctx ends: it is read every poll (<= 0
// means DefaultRevocationPoll; the file is small), and when its text
// changed SetRevocations applies it.
// A file that does not parse leaves the previous revocations in force,
// logged as an error; a file removed revokes nothing.
func (s *Server) RunRevocations(ctx context.Context, file string, poll time.Duration) {
	if poll <= 0 {
		poll = DefaultRevocationPoll
	}
	var last []byte
	var loaded bool
	check := func() {
		b, err := os.ReadFile(file)
		if errors.Is(err, os.ErrNotExist) {
			b, err = nil, nil
		}
		if err != nil {
			s.logger.Error("revocation file", "file", file, "err", err)
			return
		}
		if loaded && bytes.Equal(b, last) {
			return
		}
		r, err := ParseRevocations(file, b)
		if err != nil {
			s.logger.Error("revocation file: keeping the previous revocations", "err", err)
			last, loaded = b, true
			return
		}
		last, loaded = b, true
		if n := s.SetRevocations(r); n > 0 || r.Len() > 0 {
			s.logger.Info("revocations loaded", "file", file, "entries", r.Len(), "sessions_closed", n)
		}
	}
	check()
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			check()
		}
	}
}

// TokenClaims reads a token's claims without verifying it: to show or
// revoke a token by its id (jti), never to trust it.
func TokenClaims(tok string) (Claims, error) {
	parts := strings.Split(strings.TrimSpace(tok), ".")
	if len(parts) != 3 {
		return Claims{}, errors.New("token: not three dot-separated parts")
	}
	pb, err := b64.DecodeString(parts[1])
	if err != nil {
		return Claims{}, errors.New("token: claims are not base64url")
	}
	var c Claims
	if err := json.Unmarshal(pb, &c); err != nil {
		return Claims{}, errors.New("token: claims are not JSON")
	}
	return c, nil
}
