package testutil

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeT records what a helper did to its test. Fatalf and Skipf end the
// helper with a panic that run recovers, as the real ones end the test.
type fakeT struct {
	testing.TB
	fatal, skip, errs []string
	cleanups          []func()
}

type stop struct{}

func (f *fakeT) Helper()                        {}
func (f *fakeT) Failed() bool                   { return len(f.fatal)+len(f.errs) > 0 }
func (f *fakeT) Cleanup(fn func())              { f.cleanups = append(f.cleanups, fn) }
func (f *fakeT) Errorf(format string, a ...any) { f.errs = append(f.errs, fmt.Sprintf(format, a...)) }
func (f *fakeT) Fatal(a ...any)                 { f.fatal = append(f.fatal, fmt.Sprint(a...)); panic(stop{}) }
func (f *fakeT) Fatalf(format string, a ...any) {
	f.fatal = append(f.fatal, fmt.Sprintf(format, a...))
	panic(stop{})
}
func (f *fakeT) Skipf(format string, a ...any) {
	f.skip = append(f.skip, fmt.Sprintf(format, a...))
	panic(stop{})
}
func (f *fakeT) run(fn func(testing.TB)) (same *fakeT) {
	same = f
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(stop); !ok {
				panic(r)
			}
		}
	}()
	fn(f)
	return
}

func TestSkipfSkipsHereAndFailsInCI(t *testing.T) {
	t.Setenv("CI", "")
	f := new(fakeT).run(func(tb testing.TB) { Skipf(tb, "no %s", "promtool") })
	if len(f.skip) != 1 || len(f.fatal) != 0 || f.skip[0] != "no promtool" {
		t.Errorf("without CI: skips %q, fatals %q; want one skip", f.skip, f.fatal)
	}
	t.Setenv("CI", "true")
	f = new(fakeT).run(func(tb testing.TB) { Skipf(tb, "no %s", "promtool") })
	if len(f.fatal) != 1 || len(f.skip) != 0 || !strings.Contains(f.fatal[0], "CI=true") {
		t.Errorf("CI=true: skips %q, fatals %q; want one failure naming CI=true", f.skip, f.fatal)
	}
}

func TestHelperProcess(t *testing.T) {
	t.Setenv("CI", "true")
	t.Setenv("TESTUTIL_HELPER_X", "")
	f := new(fakeT).run(func(tb testing.TB) { HelperProcess(tb, "TESTUTIL_HELPER_X", "TestParent") })
	if len(f.skip) != 1 || len(f.fatal) != 0 || !strings.Contains(f.skip[0], "TestParent") {
		t.Errorf("unset, CI=true: skips %q, fatals %q; want one skip naming the parent", f.skip, f.fatal)
	}
	t.Setenv("TESTUTIL_HELPER_X", "url")
	var got string
	f = new(fakeT).run(func(tb testing.TB) { got = HelperProcess(tb, "TESTUTIL_HELPER_X", "TestParent") })
	if got != "url" || len(f.skip)+len(f.fatal) != 0 {
		t.Errorf("set: got %q, skips %q, fatals %q; want its value and the test to go on", got, f.skip, f.fatal)
	}
}

func TestRequire(t *testing.T) {
	t.Setenv("CI", "true")
	var got string
	f := new(fakeT).run(func(tb testing.TB) { got = Require(tb, "go", "golang") })
	if got == "" || f.Failed() {
		t.Errorf("Require(go) = %q, fatals %q", got, f.fatal)
	}
	f = new(fakeT).run(func(tb testing.TB) { Require(tb, "no-such-tool-relayfleet", "no-such-package") })
	if len(f.fatal) != 1 || !strings.Contains(f.fatal[0], "apt-get install no-such-package") {
		t.Errorf("missing tool under CI=true: fatals %q, want one naming the package", f.fatal)
	}
}

func TestWaitFor(t *testing.T) {
	n := 0
	f := new(fakeT).run(func(tb testing.TB) { WaitFor(tb, time.Minute, "three polls", func() bool { n++; return n == 3 }) })
	if f.Failed() || n != 3 {
		t.Errorf("cond true on the third poll: polled %d times, fatals %q", n, f.fatal)
	}
	f = new(fakeT).run(func(tb testing.TB) { WaitFor(tb, 30*time.Millisecond, "never", func() bool { return false }) })
	if len(f.fatal) != 1 || !strings.Contains(f.fatal[0], "waiting for never") {
		t.Errorf("cond never true: fatals %q, want one naming what it waited for", f.fatal)
	}
}

func TestPoll(t *testing.T) {
	if Poll(30*time.Millisecond, func() bool { return false }) {
		t.Error("Poll of a cond never true = true")
	}
	n := 0
	if !Poll(time.Minute, func() bool { n++; return n == 2 }) || n != 2 {
		t.Errorf("Poll of a cond true on the second call: polled %d times", n)
	}
}

func TestPollEvery(t *testing.T) {
	// Asked at most once per interval: 3 calls in a 250 ms limit at 100 ms.
	n := 0
	if PollEvery(250*time.Millisecond, 100*time.Millisecond, func() bool { n++; return false }) || n > 4 || n < 2 {
		t.Errorf("PollEvery 250ms every 100ms of a cond never true: polled %d times, want 3 or so", n)
	}
}

func TestGolden(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "out.golden")
	f := new(fakeT).run(func(tb testing.TB) { Golden(tb, path, []byte("a\n")) })
	if len(f.fatal) != 1 || !strings.Contains(f.fatal[0], "-update") {
		t.Errorf("missing golden file: fatals %q, want one naming -update", f.fatal)
	}
	t.Setenv("UPDATE_GOLDEN", "1")
	if f := new(fakeT).run(func(tb testing.TB) { Golden(tb, path, []byte("a\n")) }); f.Failed() {
		t.Fatalf("update: %q %q", f.fatal, f.errs)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "a\n" {
		t.Fatalf("update wrote %q, %v", b, err)
	}
	t.Setenv("UPDATE_GOLDEN", "")
	if f := new(fakeT).run(func(tb testing.TB) { Golden(tb, path, []byte("a\n")) }); f.Failed() {
		t.Errorf("same bytes: %q %q", f.fatal, f.errs)
	}
	if f := new(fakeT).run(func(tb testing.TB) { Golden(tb, path, []byte("b\n")) }); len(f.errs) != 1 {
		t.Errorf("different bytes: errors %q, want one", f.errs)
	}
}

func TestWriteFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	if f := new(fakeT).run(func(tb testing.TB) { WriteFile(tb, path, []byte("x"), 0o600) }); f.Failed() {
		t.Fatalf("WriteFile: %q", f.fatal)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "x" {
		t.Fatalf("wrote %q, %v", b, err)
	}
	f := new(fakeT).run(func(tb testing.TB) { WriteFile(tb, filepath.Join(path, "under-a-file"), nil, 0o600) })
	if len(f.fatal) != 1 {
		t.Errorf("WriteFile under a file: fatals %q, want one", f.fatal)
	}
}

func TestNoLeaks(t *testing.T) {
	defer func(d time.Duration) { leakWait = d }(leakWait)
	leakWait = 100 * time.Millisecond

	f := new(fakeT)
	NoLeaks(f)
	release := make(chan struct{})
	go func() { <-release }() // the leak
	for _, fn := range f.cleanups {
		fn()
	}
	close(release)
	if len(f.errs) != 1 || !strings.Contains(f.errs[0], "goroutines left behind") {
		t.Errorf("a goroutine left running: errors %q, want one", f.errs)
	}

	leakWait = 30 * time.Second
	f = new(fakeT)
	NoLeaks(f)
	done := make(chan struct{})
	go func() { time.Sleep(50 * time.Millisecond); close(done) }() // ends on its own
	for _, fn := range f.cleanups {
		fn()
	}
	<-done
	if len(f.errs) != 0 {
		t.Errorf("a goroutine that ends: errors %q, want none", f.errs)
	}
}
