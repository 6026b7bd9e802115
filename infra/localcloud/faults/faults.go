// Package faults is what a test tells a local cloud (infra/localcloud/hcloud,
// infra/localcloud/digitalocean) to get wrong, while a fleet command runs
// against it: a JSON file that the test writes, and rewrites to inject or
// clear faults, and that the cloud reads again whenever it changes (one
// stat per question asked of it).
//
// The file (every field but version may be left out):
//
//	{
//	  "version": 1,
//	  "unavailable":  [{"shape": "cx23", "location": "fsn1", "count": 2}],
//	  "rate_limited": {"requests": 3, "retry_after_seconds": 2},
//	  "hang_actions": [{"name": "demo-fsn-1"}],
//	  "no_address":   [{"shape": "cx33"}]
//	}
//
// Its fields:
//
//   - unavailable: a server create whose shape (server type, size slug) and
//     location (location, region) a rule matches is refused as the cloud
//     refuses one it has no capacity for. count, when above 0, refuses only
//     that many creates; then the rule is spent.
//   - rate_limited: requests answered 429 with Retry-After:
//     retry_after_seconds (1 to 3600) and the provider's rate-limit headers;
//     the next requests (counted from when the file was read), or every
//     request while it is set when requests is 0.
//   - hang_actions: the create of a server a rule matches stays in progress
//     (its actions "running", the server not running) while a rule matches
//     it: clearing the rule lets it boot; deleting the server ends it.
//   - no_address: a server a rule matches when it is created never shows a
//     public IPv4 address, though it runs.
//
// A rule ({"name", "shape", "location"}) matches a create when each field
// it gives is the create's; a field left out or "" matches any, so {}
// matches every create.
//
// The counts (count, requests) start again each time the file is read.
// A file that cannot be read or parsed is refused: at Open with the error,
// later with one log line naming the file and the field, keeping the faults
// last read. A file removed while the cloud runs means no faults. Write the
// file atomically (Write does) so that the cloud never reads it half
// written.
package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/relayfleet/relayfleet/internal/atomicfile"
)

// Version is the version a faults file must say it is.
const Version = 1

// Faults is what a faults file holds.
type Faults struct {
	Version     int           `json:"version"`
	Unavailable []Unavailable `json:"unavailable,omitempty"`
	RateLimited *RateLimited  `json:"rate_limited,omitempty"`
	HangActions []Rule        `json:"hang_actions,omitempty"`
	NoAddress   []Rule        `json:"no_address,omitempty"`
}

// Rule says which server creates a fault applies to: each field given must
// be the create's; "" matches any.
type Rule struct {
	Name     string `json:"name,omitempty"`     // the server's (droplet's) name
	Shape    string `json:"shape,omitempty"`    // server type / size slug
	Location string `json:"location,omitempty"` // location / region
}

// Unavailable is a rule of creates refused for want of capacity.
type Unavailable struct {
	Rule
	// Count, when above 0, is how many creates the rule refuses; 0 refuses
	// every one.
	Count int `json:"count,omitempty"`
}

// RateLimited answers requests 429.
type RateLimited struct {
	// Requests is how many requests are answered 429; 0 answers every
	// request while the fault is set.
	Requests int `json:"requests,omitempty"`
	// RetryAfterSeconds is the Retry-After header's value: 1 to 3600.
	RetryAfterSeconds int `json:"retry_after_seconds"`
}

// MaxRetryAfter is the longest Retry-After a faults file may ask for.
const MaxRetryAfter = 3600

// Create is a server create as the rules see it.
type Create struct {
	Name, Shape, Location string
}

func (r Rule) matches(c Create) bool {
	return (r.Name == "" || r.Name == c.Name) && (r.Shape == "" || r.Shape == c.Shape) && (r.Location == "" || r.Location == c.Location)
}

// Parse reads a faults file's contents. The error names the field that is
// wrong, in one line.
func Parse(data []byte) (Faults, error) {
	var f Faults
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return Faults{}, decodeError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Faults{}, errors.New("more after the JSON object: want one object")
	}
	return f, f.Validate()
}

// decodeError is a JSON decoding error in one line, naming the field.
func decodeError(err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.Is(err, io.EOF):
		return fmt.Errorf("empty: want a JSON object with \"version\": %d", Version)
	case errors.As(err, &syn):
		return fmt.Errorf("not JSON: %v (at byte %d)", syn, syn.Offset)
	case errors.As(err, &typ) && typ.Field != "":
		return fmt.Errorf("%s: a JSON %s, want %s", typ.Field, typ.Value, typ.Type)
	case errors.As(err, &typ):
		return fmt.Errorf("a JSON %s, want an object", typ.Value)
	}
	return errors.New(strings.TrimPrefix(err.Error(), "json: "))
}

// Validate checks f: the version, and counts and waits in range. The
// error names the field.
func (f Faults) Validate() error {
	switch {
	case f.Version == 0:
		return fmt.Errorf("version: missing, want %d", Version)
	case f.Version != Version:
		return fmt.Errorf("version: %d, want %d", f.Version, Version)
	}
	for i, u := range f.Unavailable {
		if u.Count < 0 {
			return fmt.Errorf("unavailable[%d].count: %d, want 0 (every create) or more", i, u.Count)
		}
	}
	if r := f.RateLimited; r != nil {
		if r.Requests < 0 {
			return fmt.Errorf("rate_limited.requests: %d, want 0 (every request) or more", r.Requests)
		}
		if r.RetryAfterSeconds < 1 || r.RetryAfterSeconds > MaxRetryAfter {
			return fmt.Errorf("rate_limited.retry_after_seconds: %d, want 1 to %d", r.RetryAfterSeconds, MaxRetryAfter)
		}
	}
	return nil
}

// Write writes f to path atomically (mode 0644), for the cloud to read.
func Write(path string, f Faults) error {
	if f.Version == 0 {
		f.Version = Version
	}
	if err := f.Validate(); err != nil {
		return fmt.Errorf("faults file %s: %w", path, err)
	}
	data, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(path, append(data, '\n'), 0o644)
}

// File is a faults file as a local cloud reads it: each method looks at
// the file first (one stat) and reads it again when it changed. A nil
// *File injects nothing. Its methods are safe for concurrent use.
type File struct {
	path string
	logf func(format string, args ...any)

	mu     sync.Mutex
	seen   os.FileInfo // the file as last read (good or bad); nil: missing
	cur    Faults      // the faults last read good
	spent  []int       // per rule of cur.Unavailable: creates refused
	served int         // requests answered 429 under cur.RateLimited
}

// Open reads the faults file at path. A missing or bad file is an error
// naming it. logf (nil: none) gets one line each time the file is read
// again, good or bad.
func Open(path string, logf func(format string, args ...any)) (*File, error) {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("faults file %s: %w", path, osErr(err))
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("faults file %s: %w", path, osErr(err))
	}
	cur, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("faults file %s: %w", path, err)
	}
	f := &File{path: path, logf: logf, seen: st}
	f.set(cur)
	return f, nil
}

// osErr is err without the path, which the callers name.
func osErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// Path is the file's path.
func (f *File) Path() string { return f.path }

func (f *File) set(cur Faults) {
	f.cur, f.spent, f.served = cur, make([]int, len(cur.Unavailable)), 0
}

// changed reports whether st is another version of the file than seen.
func changed(seen, st os.FileInfo) bool {
	return !os.SameFile(seen, st) || !seen.ModTime().Equal(st.ModTime()) || seen.Size() != st.Size()
}

// refresh reads the file again if it changed since it was last read. With
// f.mu held.
func (f *File) refresh() {
	st, err := os.Stat(f.path)
	if err != nil {
		if f.seen != nil {
			f.seen = nil
			f.set(Faults{Version: Version})
			f.logf("faults file %s: %v: no faults", f.path, osErr(err))
		}
		return
	}
	if f.seen != nil && !changed(f.seen, st) {
		return
	}
	f.seen = st
	data, err := os.ReadFile(f.path)
	if err != nil {
		err = osErr(err)
	} else {
		var cur Faults
		if cur, err = Parse(data); err == nil {
			f.set(cur)
			f.logf("faults file %s: read: %s", f.path, cur)
			return
		}
	}
	f.logf("faults file %s: %v; keeping the faults read before (%s)", f.path, err, f.cur)
}

// String sums f up in one line, for the log.
func (f Faults) String() string {
	var parts []string
	if n := len(f.Unavailable); n > 0 {
		parts = append(parts, fmt.Sprintf("%d unavailable", n))
	}
	if r := f.RateLimited; r != nil {
		n := "every request"
		if r.Requests > 0 {
			n = fmt.Sprintf("%d requests", r.Requests)
		}
		parts = append(parts, fmt.Sprintf("rate limited (%s, retry after %ds)", n, r.RetryAfterSeconds))
	}
	if n := len(f.HangActions); n > 0 {
		parts = append(parts, fmt.Sprintf("%d hang_actions", n))
	}
	if n := len(f.NoAddress); n > 0 {
		parts = append(parts, fmt.Sprintf("%d no_address", n))
	}
	if len(parts) == 0 {
		return "no faults"
	}
	return strings.Join(parts, ", ")
}

// Current returns the faults in force, reading the file again if it
// changed.
func (f *File) Current() Faults {
	if f == nil {
		return Faults{Version: Version}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refresh()
	return f.cur
}

// RateLimited reports whether this request is to be answered 429, and
// the Retry-After to send; it counts the request against rate_limited's
// requests.
func (f *File) RateLimited() (retryAfter time.Duration, limited bool) {
	if f == nil {
		return 0, false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refresh()
	r := f.cur.RateLimited
	if r == nil || r.Requests > 0 && f.served >= r.Requests {
		return 0, false
	}
	f.served++
	return time.Duration(r.RetryAfterSeconds) * time.Second, true
}

// Unavailable reports whether the create is to be refused for want of
// capacity, and the rule that refuses it; it counts the refusal against
// the rule's count.
func (f *File) Unavailable(c Create) (Unavailable, bool) {
	if f == nil {
		return Unavailable{}, false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refresh()
	for i, u := range f.cur.Unavailable {
		if u.matches(c) && (u.Count == 0 || f.spent[i] < u.Count) {
			f.spent[i]++
			return u, true
		}
	}
	return Unavailable{}, false
}

func (f *File) any(rules func(Faults) []Rule, c Create) bool {
	if f == nil {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refresh()
	for _, r := range rules(f.cur) {
		if r.matches(c) {
			return true
		}
	}
	return false
}

// Hang reports whether the create is to stay in progress now.
func (f *File) Hang(c Create) bool {
	return f.any(func(x Faults) []Rule { return x.HangActions }, c)
}

// NoAddress reports whether the server created is never to show a public
// IPv4 address.
func (f *File) NoAddress(c Create) bool {
	return f.any(func(x Faults) []Rule { return x.NoAddress }, c)
}

// HoldPoll is how often Hold looks at the file again.
const HoldPoll = 100 * time.Millisecond

// ErrGone is Hold's error when the server went while it was held.
var ErrGone = errors.New("deleted while its create was held by the faults file")

// Hold returns once the create is no longer to hang (at once when it is
// not): nil then; ErrGone if gone reports the server deleted first, or
// ctx's error if it ends first. gone is called without f's lock.
func (f *File) Hold(ctx context.Context, c Create, gone func() bool) error {
	t := time.NewTicker(HoldPoll)
	defer t.Stop()
	for f.Hang(c) {
		if gone() {
			return ErrGone
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	// A server deleted while it was held, its rule cleared since, gets no
	// machine either: a new server of its name may be booting one.
	if gone() {
		return ErrGone
	}
	return nil
}
