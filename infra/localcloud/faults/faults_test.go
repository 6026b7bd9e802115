package faults

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// example is the package comment's file.
const example = `{
  "version": 1,
  "unavailable":  [{"shape": "cx23", "location": "fsn1", "count": 2}],
  "rate_limited": {"requests": 3, "retry_after_seconds": 2},
  "hang_actions": [{"name": "demo-fsn-1"}],
  "no_address":   [{"shape": "cx33"}]
}`

func TestParse(t *testing.T) {
	f, err := Parse([]byte(example))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Unavailable) != 1 || f.Unavailable[0] != (Unavailable{Rule{Shape: "cx23", Location: "fsn1"}, 2}) ||
		*f.RateLimited != (RateLimited{3, 2}) || len(f.HangActions) != 1 || f.HangActions[0].Name != "demo-fsn-1" ||
		len(f.NoAddress) != 1 || f.NoAddress[0].Shape != "cx33" {
		t.Errorf("the example read as %+v", f)
	}
	if got, want := f.String(), "1 unavailable, rate limited (3 requests, retry after 2s), 1 hang_actions, 1 no_address"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	for _, tc := range []struct{ name, data, want string }{
		{"empty", "", `empty: want a JSON object with "version": 1`},
		{"not JSON", "version: 1", "not JSON: invalid character 'v'"},
		{"no version", `{}`, "version: missing, want 1"},
		{"version 2", `{"version": 2}`, "version: 2, want 1"},
		{"unknown field", `{"version": 1, "hang": []}`, `unknown field "hang"`},
		{"unknown rule field", `{"version": 1, "no_address": [{"size": "c-2"}]}`, `unknown field "size"`},
		{"count a string", `{"version": 1, "unavailable": [{"count": "2"}]}`, "unavailable.count: a JSON string, want int"},
		{"negative count", `{"version": 1, "unavailable": [{}, {"count": -1}]}`, "unavailable[1].count: -1, want 0 (every create) or more"},
		{"no retry after", `{"version": 1, "rate_limited": {"requests": 1}}`, "rate_limited.retry_after_seconds: 0, want 1 to 3600"},
		{"retry after too long", `{"version": 1, "rate_limited": {"retry_after_seconds": 3601}}`, "rate_limited.retry_after_seconds: 3601, want 1 to 3600"},
		{"negative requests", `{"version": 1, "rate_limited": {"requests": -1, "retry_after_seconds": 1}}`, "rate_limited.requests: -1"},
		{"two objects", `{"version": 1} {"version": 1}`, "more after the JSON object"},
		{"an array", `[]`, "a JSON array, want an object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.data))
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("Parse(%q) = %v, want one line with %q", tc.data, err, tc.want)
			}
		})
	}
}

// logLines collects a File's log.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

func (l *logLines) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.lines
	l.lines = nil
	return out
}

func open(t *testing.T, f Faults) (*File, string, *logLines) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "faults.json")
	if err := Write(path, f); err != nil {
		t.Fatal(err)
	}
	log := &logLines{}
	file, err := Open(path, log.logf)
	if err != nil {
		t.Fatal(err)
	}
	return file, path, log
}

func TestRules(t *testing.T) {
	file, _, _ := open(t, Faults{
		Unavailable: []Unavailable{{Rule: Rule{Shape: "cx23", Location: "fsn1"}, Count: 2}, {Rule: Rule{Location: "hel1"}}},
		HangActions: []Rule{{Name: "demo-fsn-1"}},
		NoAddress:   []Rule{{Shape: "cx33", Location: "nbg1"}},
	})
	cx23fsn := Create{"demo-fsn-2", "cx23", "fsn1"}
	for i, want := range []bool{true, true, false} {
		if _, got := file.Unavailable(cx23fsn); got != want {
			t.Errorf("create %d of cx23 in fsn1: unavailable %v, want %v (count 2)", i+1, got, want)
		}
	}
	for _, tc := range []struct {
		c                       Create
		unavailable, hang, noIP bool
	}{
		{Create{"a", "cx23", "nbg1"}, false, false, false},
		{Create{"a", "cx33", "hel1"}, true, false, false},
		{Create{"a", "cpx22", "hel1"}, true, false, false},
		{Create{"demo-fsn-1", "cx23", "nbg1"}, false, true, false},
		{Create{"a", "cx33", "nbg1"}, false, false, true},
		{Create{"a", "cx33", "fsn1"}, false, false, false},
	} {
		_, u := file.Unavailable(tc.c)
		if u != tc.unavailable || file.Hang(tc.c) != tc.hang || file.NoAddress(tc.c) != tc.noIP {
			t.Errorf("%+v: unavailable %v, hang %v, no address %v; want %v, %v, %v", tc.c, u, file.Hang(tc.c), file.NoAddress(tc.c), tc.unavailable, tc.hang, tc.noIP)
		}
	}
	var none *File
	if _, u := none.Unavailable(cx23fsn); u || none.Hang(cx23fsn) || none.NoAddress(cx23fsn) {
		t.Error("a nil File injects a fault")
	}
	if _, limited := none.RateLimited(); limited {
		t.Error("a nil File rate-limits")
	}
}

func TestRateLimited(t *testing.T) {
	file, path, _ := open(t, Faults{RateLimited: &RateLimited{Requests: 2, RetryAfterSeconds: 3}})
	for i, want := range []bool{true, true, false, false} {
		wait, got := file.RateLimited()
		if got != want || got && wait != 3*time.Second {
			t.Errorf("request %d: limited %v after %v, want %v after 3s", i+1, got, wait, want)
		}
	}
	// Every request while set.
	if err := Write(path, Faults{RateLimited: &RateLimited{RetryAfterSeconds: 1}}); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if wait, got := file.RateLimited(); !got || wait != time.Second {
			t.Fatalf("request %d with requests 0: limited %v after %v, want every request after 1s", i+1, got, wait)
		}
	}
}

// TestReload: the file is read again when it changes, counts start again;
// a bad file is logged in one line naming the file and the field, and the
// faults read before stay; a removed file is no faults.
func TestReload(t *testing.T) {
	c := Create{"demo-fsn-1", "cx23", "fsn1"}
	file, path, log := open(t, Faults{Unavailable: []Unavailable{{Count: 1}}})
	if _, u := file.Unavailable(c); !u {
		t.Fatal("not refused")
	}
	if _, u := file.Unavailable(c); u {
		t.Fatal("refused past the count")
	}
	if l := log.take(); len(l) != 0 {
		t.Errorf("log with the file unchanged: %q", l)
	}
	// Rewritten (atomically): the count starts again.
	if err := Write(path, Faults{Unavailable: []Unavailable{{Count: 1}}, HangActions: []Rule{{}}}); err != nil {
		t.Fatal(err)
	}
	if _, u := file.Unavailable(c); !u || !file.Hang(c) {
		t.Fatal("the rewritten file was not read again")
	}
	if l := log.take(); len(l) != 1 || l[0] != "faults file "+path+": read: 1 unavailable, 1 hang_actions" {
		t.Errorf("log after a rewrite: %q", l)
	}
	// Rewritten in place with a mistake: the faults before stay.
	if err := os.WriteFile(path, []byte(`{"version": 1, "hang_actions": [{"shape": 7}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for range 2 { // asked twice: logged once
		if !file.Hang(c) {
			t.Error("a bad file cleared the faults")
		}
	}
	if l := log.take(); len(l) != 1 || !strings.HasPrefix(l[0], "faults file "+path+": hang_actions.shape: a JSON number, want string; keeping") {
		t.Errorf("log after a bad rewrite: %q, want one line naming the file and the field", l)
	}
	// Cleared.
	if err := Write(path, Faults{}); err != nil {
		t.Fatal(err)
	}
	if file.Hang(c) || file.Current().String() != "no faults" {
		t.Error("the cleared file was not read again")
	}
	// Removed: no faults; back: read.
	if err := Write(path, Faults{HangActions: []Rule{{}}}); err != nil {
		t.Fatal(err)
	}
	if !file.Hang(c) {
		t.Fatal("not hanging")
	}
	log.take()
	os.Remove(path)
	for range 2 { // asked twice: logged once
		if file.Hang(c) {
			t.Error("a removed file still injects")
		}
	}
	if l := log.take(); len(l) != 1 || !strings.Contains(l[0], "no such file or directory: no faults") {
		t.Errorf("log after removal: %q", l)
	}
	if err := Write(path, Faults{HangActions: []Rule{{}}}); err != nil {
		t.Fatal(err)
	}
	if !file.Hang(c) {
		t.Error("the file written again was not read")
	}
}

func TestOpenRefuses(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte(`{"version": 1, "unavailable": [{"count": -2}]}`), 0o644)
	for _, tc := range []struct{ path, want string }{
		{filepath.Join(dir, "missing.json"), "faults file " + filepath.Join(dir, "missing.json") + ": no such file or directory"},
		{bad, "faults file " + bad + ": unavailable[0].count: -2, want 0 (every create) or more"},
	} {
		if _, err := Open(tc.path, nil); err == nil || err.Error() != tc.want {
			t.Errorf("Open(%s) = %v, want %q", tc.path, err, tc.want)
		}
	}
	if err := Write(bad, Faults{RateLimited: &RateLimited{}}); err == nil || !strings.Contains(err.Error(), "rate_limited.retry_after_seconds") {
		t.Errorf("Write of a bad file: %v", err)
	}
}

// TestHold: a hung create is held until the rule goes, the server goes,
// or the context ends.
func TestHold(t *testing.T) {
	c := Create{"demo-fsn-1", "cx23", "fsn1"}
	never := func() bool { return false }
	if err := (*File)(nil).Hold(context.Background(), c, never); err != nil {
		t.Fatalf("nil File: %v", err)
	}
	file, path, _ := open(t, Faults{HangActions: []Rule{{Name: "demo-fsn-1"}}})
	if err := file.Hold(context.Background(), Create{Name: "demo-fsn-2"}, never); err != nil {
		t.Fatalf("another server: %v", err)
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 3*HoldPoll)
	defer cancel()
	if err := file.Hold(ctx, c, never); !errors.Is(err, context.DeadlineExceeded) || time.Since(start) < 3*HoldPoll {
		t.Fatalf("held until the context ended: %v after %v", err, time.Since(start))
	}
	var gone sync.Mutex
	isGone := false
	done := make(chan error, 1)
	go func() {
		done <- file.Hold(context.Background(), c, func() bool { gone.Lock(); defer gone.Unlock(); return isGone })
	}()
	gone.Lock()
	isGone = true
	gone.Unlock()
	select {
	case err := <-done:
		if !errors.Is(err, ErrGone) {
			t.Errorf("the server went: %v, want ErrGone", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Hold went on after the server went")
	}
	go func() { done <- file.Hold(context.Background(), c, never) }()
	select {
	case err := <-done:
		t.Fatalf("Hold returned %v with the rule in force", err)
	case <-time.After(2 * HoldPoll):
	}
	if err := Write(path, Faults{}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("the rule cleared: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Hold went on after the rule was cleared")
	}
	// A server deleted while held, its rule cleared after: no machine
	// (a new server of the name may be making one).
	if err := file.Hold(context.Background(), c, func() bool { return true }); !errors.Is(err, ErrGone) {
		t.Errorf("a server deleted, the rule cleared since: %v, want ErrGone", err)
	}
}
