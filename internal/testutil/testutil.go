// Package testutil is the tests' plumbing, for every package of the
// module: skips that fail under CI=true (Skipf, Require; Short and
// HelperProcess skip there too, for a test another step runs), polling
// with a deadline instead of sleeping (WaitFor), golden files rewritten by
// -update (Golden), goroutine-leak checks with go.uber.org/goleak
// (NoLeaks), and child processes in the background that end with the test
// and die with the test binary (Start).
//
// It imports nothing else of the module, so the relay's own tests may use
// it too (internal/archtest: relay imports only such internal leaves).
// Only _test.go files import it (internal/archtest holds that line).
// SyncBuffer is a buffer a child process writes while the test reads it.
package testutil

import (
	"bytes"
	"flag"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// leakWait is how long NoLeaks waits for goroutines to end.
var leakWait = 30 * time.Second

var update = flag.Bool("update", false, "rewrite the golden files (testutil.Golden) instead of comparing with them")

// CI reports whether the tests run in CI (CI=true), where a test that
// cannot run is a failure rather than a skip.
func CI() bool { return os.Getenv("CI") == "true" }

// Skipf skips the test because something it needs is missing here: a tool,
// a file in /proc, root. Under CI=true it fails the test instead, so that
// CI never passes with a test that did not run.
func Skipf(t testing.TB, format string, args ...any) {
	t.Helper()
	if CI() {
		t.Fatalf("CI=true makes this skip a failure: "+format, args...)
	}
	t.Skipf(format, args...)
}

// Require returns the path of tool on PATH. When it is missing it skips
// the test (fails it under CI=true), naming the Debian package that holds
// it; scripts/deps.sh installs it for make test.
func Require(t testing.TB, tool, debianPackage string) string {
	t.Helper()
	p, err := exec.LookPath(tool)
	if err != nil {
		Skipf(t, "%s is missing (apt-get install %s; make test installs it as root)", tool, debianPackage)
	}
	return p
}

// Short skips a slow test under -short; how names the command that runs
// it (make test-long runs every such test, and make test runs make
// test-long when CI=true). Unlike Skipf it is a skip under CI=true too: CI
// runs the test in that other step.
func Short(t testing.TB, how string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("-short: %s runs it", how)
	}
}

// HelperProcess is the first call of a test that is only another test's
// child process (the parent runs the test binary again with env set, as
// os/exec's own tests do): it returns env's value, and when env is unset
// (go test running the test directly) it skips the test, under CI=true
// too, since parent runs it there. Tests call no t.Skip of their own
// (internal/archtest holds that line): Skipf, Short and HelperProcess
// are the ways to skip.
func HelperProcess(t testing.TB, env, parent string) string {
	t.Helper()
	v := os.Getenv(env)
	if v == "" {
		t.Skipf("%s is unset: a child process of %s, run by it", env, parent)
	}
	return v
}

// WaitFor polls cond every 10 ms until it holds, and fails the test,
// naming what it waited for, when limit passes first. It is the way to
// wait for something to happen; time.Sleep only paces load.
func WaitFor(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Poll(limit, cond) {
		t.Fatalf("timed out after %v waiting for %s", limit, what)
	}
}

// WaitForEvery is WaitFor for a cond that costs something (a command in
// a lab box): it asks every interval.
func WaitForEvery(t testing.TB, limit, every time.Duration, what string, cond func() bool) {
	t.Helper()
	if !PollEvery(limit, every, cond) {
		t.Fatalf("timed out after %v waiting for %s", limit, what)
	}
}

// Poll polls cond every 10 ms until it holds (true) or limit passes
// (false): WaitFor for a caller whose failure message needs what it saw.
func Poll(limit time.Duration, cond func() bool) bool {
	return PollEvery(limit, 10*time.Millisecond, cond)
}

// PollEvery is Poll for a cond that costs something (a command in a lab
// box, a request to every relay process): it asks every interval.
func PollEvery(limit, every time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(every)
	}
	return true
}

// WriteFile writes a test's input file, failing the test when it cannot:
// os.WriteFile whose error set-up code must not drop.
func WriteFile(t testing.TB, path string, data []byte, perm os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, data, perm); err != nil {
		t.Fatal(err)
	}
}

// Updating reports whether golden files are being rewritten: go test
// -update, or UPDATE_GOLDEN=1 (make golden) for several packages at once.
func Updating() bool { return *update || os.Getenv("UPDATE_GOLDEN") != "" }

// Golden compares got with the golden file at path (relative to the
// package, usually testdata/...). With -update or UPDATE_GOLDEN=1 it
// writes got there instead, creating the folder.
func Golden(t testing.TB, path string, got []byte) {
	t.Helper()
	if Updating() {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -update, or make golden, creates it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("output differs from %s (go test -update, or make golden, rewrites it: review the diff):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

// NoLeaks checks, when the test and its cleanups are done, that every
// goroutine started since the call has ended: call it first in a test.
// Goroutines that end late (QUIC connections closing, timers) get up to
// 30 s. Tests that call it must not be parallel: a parallel test's
// goroutines would count as leaks.
func NoLeaks(t testing.TB, opts ...goleak.Option) {
	t.Helper()
	opts = append([]goleak.Option{goleak.IgnoreCurrent()}, opts...)
	t.Cleanup(func() {
		t.Helper()
		if t.Failed() {
			return // the failure says more than the goroutines it stranded
		}
		// goleak.Find retries for about a second; give slow endings longer.
		deadline := time.Now().Add(leakWait)
		for {
			err := goleak.Find(opts...)
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("goroutines left behind: %v", err)
				return
			}
		}
	})
}

// FreePort returns a port number free on both UDP and TCP loopback right
// now (a relay listens on both: QUIC, and HTTP for /stats).
func FreePort(t testing.TB) string {
	t.Helper()
	for i := 0; i < 20; i++ {
		u, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		p := u.LocalAddr().(*net.UDPAddr).Port
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		u.Close()
		if err == nil {
			l.Close()
			return strconv.Itoa(p)
		}
	}
	t.Fatal("no free port")
	return ""
}
