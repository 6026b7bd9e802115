package provision

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/relayfleet/relayfleet/units"
)

// Revocation is one entry of the fleet's revocation list, the file every
// relay of the fleet watches (relay serve --revocation-file,
// units.RevocationFile; the relay's package reads the same format): a
// token id (jti), or a path prefix with the time before which tokens
// granting anything at or below it were issued. Until is when the entry
// may go: the tokens it names have expired by then.
type Revocation struct {
	ID, Prefix   string
	IssuedBefore time.Time
	Until        time.Time
}

// String is the entry's line in the file.
func (r Revocation) String() string {
	until := " until=" + r.Until.UTC().Format(time.RFC3339)
	if r.ID != "" {
		return "jti=" + r.ID + until
	}
	return "prefix=" + r.Prefix + " issued-before=" + r.IssuedBefore.UTC().Format(time.RFC3339) + until
}

// ParseRevocations reads revocation list text: one entry a line,
// "jti=ID until=T" or "prefix=P issued-before=T until=T" (RFC 3339
// times); blank lines and '#' lines are skipped.
func ParseRevocations(text string) ([]Revocation, error) {
	var rs []Revocation
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		var r Revocation
		for _, f := range strings.Fields(line) {
			k, v, _ := strings.Cut(f, "=")
			var err error
			switch k {
			case "jti":
				r.ID = v
			case "prefix":
				r.Prefix = v
			case "issued-before":
				r.IssuedBefore, err = time.Parse(time.RFC3339, v)
			case "until":
				r.Until, err = time.Parse(time.RFC3339, v)
			default:
				return nil, fmt.Errorf("revocation list line %d: unknown key %q", i+1, k)
			}
			if err != nil {
				return nil, fmt.Errorf("revocation list line %d: %s=%q is not an RFC 3339 time", i+1, k, v)
			}
		}
		if (r.ID == "") == (r.Prefix == "") || r.Until.IsZero() || r.Prefix != "" && r.IssuedBefore.IsZero() {
			return nil, fmt.Errorf("revocation list line %d: want jti=ID until=T or prefix=P issued-before=T until=T", i+1)
		}
		rs = append(rs, r)
	}
	return rs, nil
}

// FormatRevocations writes the list as the relays read it.
func FormatRevocations(rs []Revocation) string {
	var b strings.Builder
	b.WriteString("# relayfleet revocation list, written by fleet token revoke: the relays close and refuse the sessions of these tokens\n")
	for _, r := range rs {
		b.WriteString(r.String() + "\n")
	}
	return b.String()
}

// AddRevocation parses the list text, drops the entries whose until has
// passed at now (their tokens can no longer verify), and appends r
// unless an entry the same but for a later until is there.
func AddRevocation(text string, r Revocation, now time.Time) ([]Revocation, error) {
	old, err := ParseRevocations(text)
	if err != nil {
		return nil, err
	}
	var rs []Revocation
	for _, o := range old {
		if !now.Before(o.Until) {
			continue
		}
		if o.ID == r.ID && o.Prefix == r.Prefix && o.IssuedBefore.Equal(r.IssuedBefore) {
			r.Until = maxTime(r.Until, o.Until)
			continue
		}
		rs = append(rs, o)
	}
	return append(rs, r), nil
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// PushRevocations writes the list to path (units.RevocationFile when
// empty) on every target, parallel at a time (WriteFile: atomic,
// mode 0644, nothing done where it is there already); the relays there
// read it within a second. done is called once per host with its error.
// It returns the hosts' errors joined.
func PushRevocations(ctx context.Context, targets []Target, list []byte, path string, parallel int, done func(host string, err error)) error {
	if path == "" {
		path = units.RevocationFile
	}
	sem := make(chan struct{}, max(parallel, 1))
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for _, t := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			_, err := WriteFile(ctx, t.Run, path, list, 0o644)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", t.Host, err))
			}
			if done != nil {
				done(t.Host.String(), err)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
